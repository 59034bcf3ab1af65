"""A Python-backend stand-in for Triton's C++ `identity` test backend.

Triton's QA repositories use that backend (shipped in Triton's image, not
buildable here) for ensemble "nop" steps and `custom_*` models. Each
configured input is copied to the output at the same position; an input a
request leaves out gives no output; the model parameter `execute_delay_ms`
delays each execution as Triton's backend does. tritonserver.sh copies this
file into each such model and changes its backend to "python".
"""

import json
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.inputs = [i["name"] for i in config.get("input", [])]
        self.outputs = [o["name"] for o in config.get("output", [])]
        params = config.get("parameters", {})
        delay = params.get("execute_delay_ms", {}).get("string_value", "0")
        self.delay_s = int(delay or 0) / 1000.0

    def execute(self, requests):
        if self.delay_s:
            time.sleep(self.delay_s)
        responses = []
        for request in requests:
            tensors = []
            for i, name in enumerate(self.inputs):
                if i >= len(self.outputs):
                    break
                t = pb_utils.get_input_tensor_by_name(request, name)
                if t is None:
                    continue
                tensors.append(pb_utils.Tensor(self.outputs[i], t.as_numpy()))
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses
