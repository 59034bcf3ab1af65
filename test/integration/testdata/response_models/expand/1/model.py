# Answers N float32 ones, N read from its 8-byte input: a response whose
# size the request names (issue 22's length-from-input model).
import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            n = int(pb_utils.get_input_tensor_by_name(r, "N").as_numpy().reshape(-1)[0])
            out.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUT", np.ones(n, dtype=np.float32))]))
        return out
