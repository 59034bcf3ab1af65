# Returns INPUT0 as OUTPUT0, and the number of requests of the execute()
# call it rode in as BATCH (one row per request row), so that tests can
# see request boundaries. An input of -1 kills the worker, -2 makes the
# request fail with a TritonError, -3 sleeps two seconds first.
import os
import signal
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            if (x == -1).any():
                os.kill(os.getpid(), signal.SIGKILL)
            if (x == -3).any():
                time.sleep(2)
            if (x == -2).any():
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("negative two is not welcome")))
                continue
            n = np.full((x.shape[0], 1), len(requests), dtype=np.int32)
            out.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", x),
                pb_utils.Tensor("BATCH", n),
                pb_utils.Tensor("PID", np.full((x.shape[0], 1), os.getpid(), dtype=np.int64)),
            ]))
        return out
