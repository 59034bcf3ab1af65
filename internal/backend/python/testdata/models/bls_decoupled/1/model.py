"""A decoupled BLS request, as Triton's bls_decoupled example makes it:
sends IN to the model MODEL_NAME names with exec(decoupled=True) (or,
with the request parameter "async": true, twice at once with
async_exec(decoupled=True), counting both) and answers with the sum of
the responses' OUT, how many responses came and how many of them had no
outputs; an error response becomes this request's error."""

import asyncio
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            name = pb_utils.get_input_tensor_by_name(request, "MODEL_NAME").as_numpy()[0].decode()
            call = pb_utils.InferenceRequest(
                model_name=name,
                requested_output_names=["OUT"],
                inputs=[pb_utils.get_input_tensor_by_name(request, "IN")],
            )
            if json.loads(request.parameters()).get("async"):
                streams = await asyncio.gather(call.async_exec(decoupled=True), call.async_exec(decoupled=True))
            else:
                streams = [call.exec(decoupled=True)]
            total, count, empty, err = 0, 0, 0, None
            for stream in streams:
                for resp in stream:
                    count += 1
                    if resp.has_error():
                        err = resp.error().message()
                        continue
                    if len(resp.output_tensors()) == 0:
                        empty += 1
                        continue
                    total += int(pb_utils.get_output_tensor_by_name(resp, "OUT").as_numpy()[0])
            if err is not None:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("BLS: %s (after %d responses)" % (err, count))))
                continue
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("SUM", np.array([total], dtype=np.int32)),
                pb_utils.Tensor("RESPONSES", np.array([count], dtype=np.int32)),
                pb_utils.Tensor("EMPTY", np.array([empty], dtype=np.int32)),
            ]))
        return responses
