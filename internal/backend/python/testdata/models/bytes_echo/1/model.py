# Upper-cases each BYTES element of INPUT0 into OUTPUT0 and returns the
# element lengths as LENGTH (INT32).
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            up = np.array([bytes(v).upper() for v in x.reshape(-1)], dtype=np.object_).reshape(x.shape)
            lengths = np.array([len(v) for v in x.reshape(-1)], dtype=np.int32).reshape(x.shape)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", up), pb_utils.Tensor("LENGTH", lengths)]))
        return responses
