"""A Python-backend stand-in for Triton's C++ `dyna_sequence` test backend.

Triton's QA directories (L0_http's simple_string_dyna_sequence, the
custom_dyna_sequence models) use that backend, which Triton's image ships
and which cannot be built here. Its contract, from the backend's own
description: an INT32 accumulator per correlation ID; with READY=1 and
START=1 the accumulator becomes the sum of INPUT's elements, with READY=1
and START=0 they are added to it; with END=1 the correlation ID itself is
added (and the accumulator dropped after the answer); OUTPUT has INPUT's
shape with the accumulator in every element. A CORRID control of type
TYPE_STRING must hold decimal digits. The model parameter
`execute_delay_ms` delays each execution. tritonserver.sh copies this file
into each such model and changes its backend to "python".
"""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def _scalar(request, name, row):
    t = pb_utils.get_input_tensor_by_name(request, name)
    if t is None:
        return 0
    v = t.as_numpy().reshape(-1)
    return v[min(row, v.size - 1)]


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.batching = int(config.get("max_batch_size", 0)) > 0
        params = config.get("parameters", {})
        delay = params.get("execute_delay_ms", {}).get("string_value", "0")
        self.delay_s = int(delay or 0) / 1000.0
        self.acc = {}

    def _corrid(self, request, row):
        v = _scalar(request, "CORRID", row)
        if isinstance(v, (bytes, np.bytes_, str)):
            s = v.decode() if isinstance(v, (bytes, np.bytes_)) else v
            try:
                return int(s)
            except ValueError:
                raise pb_utils.TritonError(
                    "dyna sequence backend expects correlation ID to be decodable into an integer"
                )
        return int(v)

    def execute(self, requests):
        if self.delay_s:
            time.sleep(self.delay_s)
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            rows = x.shape[0] if self.batching else 1
            out = np.zeros(x.shape, dtype=np.int32)
            try:
                seen = set()
                for r in range(rows):
                    vals = x[r] if self.batching else x
                    corrid = self._corrid(request, r)
                    if corrid in seen:
                        raise pb_utils.TritonError(
                            "Execute() called with batch containing multiple inferences requests for the same Correlation ID"
                        )
                    seen.add(corrid)
                    if _scalar(request, "READY", r) == 0:
                        continue
                    total = int(np.sum(vals, dtype=np.int64))
                    if _scalar(request, "START", r) != 0:
                        self.acc[corrid] = total
                    else:
                        self.acc[corrid] = self.acc.get(corrid, 0) + total
                    end = _scalar(request, "END", r) != 0
                    if end:
                        self.acc[corrid] += corrid
                    value = np.int32(np.int64(self.acc[corrid]).astype(np.int32))
                    if end:
                        del self.acc[corrid]
                    if self.batching:
                        out[r, ...] = value
                    else:
                        out[...] = value
            except pb_utils.TritonError as e:
                responses.append(pb_utils.InferenceResponse(error=e))
                continue
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT", out)])
            )
        return responses
