"""Answers each request with its parameters: PARAMS is the JSON string
request.parameters() returns. The configuration comes from
auto_complete_config when config.pbtxt leaves the tensors out."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        have = {t["name"] for t in config.as_dict()["input"]}
        if "INPUT0" not in have:
            config.add_input({"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [1]})
        config.add_output({"name": "PARAMS", "data_type": "TYPE_STRING", "dims": [1]})
        config.set_max_batch_size(0)
        return config

    def execute(self, requests):
        out = []
        for r in requests:
            params = r.parameters()
            json.loads(params)  # must be a JSON object
            t = pb_utils.Tensor("PARAMS", np.array([params], dtype=object))
            out.append(pb_utils.InferenceResponse(output_tensors=[t]))
        return out
