"""A Python-backend stand-in for Triton's C++ `implicit_state` test backend.

Triton's QA directory L0_implicit_state serves five models of that backend
(shipped in Triton's image, not buildable here). The C++ backend drives
Triton's backend state API (TRITONBACKEND_StateNew/StateBuffer/
StateUpdate); a Python model has no such API: in Sluice an implicit state
is an input (`input_name`) the sequence batcher fills and an output
(`output_name`) the model returns to update it. This stand-in maps each of
the backend's TEST_CASE values onto that:

  0  asks for a state named "undefined_state" (the backend's
     StateNew("undefined_state")): it returns an output of that name;
  1  OUTPUT = INPUT + INPUT_STATE, the state not updated (the backend
     writes a state buffer but never calls StateUpdate): OUTPUT_STATE is
     returned unchanged;
  2  the single-buffer case: the backend allocates the state buffer and
     answers no output: the stand-in returns only the state, unchanged;
  3  growable memory: the state grows by 1 MiB per request, each new block
     filled with the request's index (Triton's backend needs GPU memory
     for it and refuses otherwise).

tritonserver.sh copies this file into each such model and changes its
backend to "python".
"""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.index = 0
        self.grown = None

    def execute(self, requests):
        responses = []
        for request in requests:
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy()
            x = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            case = int(pb_utils.get_input_tensor_by_name(request, "TEST_CASE").as_numpy().reshape(-1)[0])
            state = pb_utils.get_input_tensor_by_name(request, "INPUT_STATE")
            if start.reshape(-1)[0] == 1:
                self.index = 0
                self.grown = None
            tensors = []
            if case == 0:
                tensors.append(pb_utils.Tensor("undefined_state", np.zeros([1], dtype=np.int32)))
            elif case == 1:
                s = state.as_numpy()
                tensors.append(pb_utils.Tensor("OUTPUT", (x + s.reshape(-1)[0]).astype(np.int32)))
                tensors.append(pb_utils.Tensor("OUTPUT_STATE", s))
            elif case == 2:
                tensors.append(pb_utils.Tensor("OUTPUT_STATE", state.as_numpy()))
            elif case == 3:
                block = np.full([1024 * 1024], self.index, dtype=np.int8)
                self.grown = block if self.grown is None else np.concatenate([self.grown, block])
                tensors.append(pb_utils.Tensor("OUTPUT_STATE", self.grown))
            self.index += 1
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses
