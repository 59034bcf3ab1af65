"""Stand-in for the ml_dtypes package, which Debian does not ship.

Triton's QA helpers (qa/common/test_util.py, gen_common.py) import it only
to name a bfloat16 NumPy type. This module gives a distinct two-byte
structured type under that name so those helpers import; nothing the
harness runs makes or checks BF16 tensors (ONNX BF16 models are not
generated), and a case that needed real bfloat16 arithmetic would fail
rather than pass.
"""

import numpy as np

bfloat16 = np.dtype([("bfloat16", "<u2")])
