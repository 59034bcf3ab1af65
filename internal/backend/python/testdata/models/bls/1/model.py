"""Business Logic Scripting, as Triton's bls example does it: runs the
request's INPUT0 and INPUT1 on the model MODEL_NAME names, with exec()
(or, with the request parameter "async": true, twice at once with
async_exec(), answering the first) and answers with its outputs; an error
of the call becomes this request's error, its message kept. With the
request parameter "bytes_name": true the model name goes to
InferenceRequest as the bytes the input holds, as Triton's bls sync example
passes it."""

import asyncio
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            params = json.loads(request.parameters())
            name = pb_utils.get_input_tensor_by_name(request, "MODEL_NAME").as_numpy()[0]
            if not params.get("bytes_name"):
                name = name.decode()
            call = pb_utils.InferenceRequest(
                model_name=name,
                requested_output_names=["OUTPUT0", "OUTPUT1"],
                inputs=[pb_utils.get_input_tensor_by_name(request, "INPUT0"), pb_utils.get_input_tensor_by_name(request, "INPUT1")],
            )
            if params.get("async"):
                resp, _ = await asyncio.gather(call.async_exec(), call.async_exec())
            else:
                resp = call.exec()
            if resp.has_error():
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("BLS: " + resp.error().message())))
                continue
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", pb_utils.get_output_tensor_by_name(resp, "OUTPUT0").as_numpy()),
                pb_utils.Tensor("OUTPUT1", pb_utils.get_output_tensor_by_name(resp, "OUTPUT1").as_numpy()),
            ]))
        return responses
