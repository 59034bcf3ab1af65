# OUTPUT0 = 2 * INPUT0; REQUESTS is the number of requests of the
# execute() call the row rode in. Each call takes a few milliseconds, so
# that requests queue and the dynamic batcher groups them.
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.005)
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            n = np.full((x.shape[0], 1), len(requests), dtype=np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x * 2), pb_utils.Tensor("REQUESTS", n)]))
        return responses
