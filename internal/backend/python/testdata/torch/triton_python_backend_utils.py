"""A minimal stand-in for triton_python_backend_utils, for test_builtins.py.

test_builtins.py imports the worker's real module when it can; this copy
only lets the built-ins be tested on their own. It holds the few names the
built-ins use, with Triton's signatures.
"""
import numpy as np


class TritonError(Exception):
    def __init__(self, msg, code=None):
        super().__init__(msg)
        self._msg = msg

    def message(self):
        return self._msg


class Tensor:
    def __init__(self, name, array):
        self._name = name
        self._a = np.asarray(array)

    def name(self):
        return self._name

    def as_numpy(self):
        return self._a


class InferenceRequest:
    def __init__(self, inputs, requested_output_names=None, model_name="", request_id=""):
        self._inputs = list(inputs)
        self._wanted = list(requested_output_names or [])

    def inputs(self):
        return self._inputs

    def requested_output_names(self):
        return self._wanted


class InferenceResponse:
    def __init__(self, output_tensors=None, error=None):
        self._outs = list(output_tensors or [])
        self._error = error

    def output_tensors(self):
        return self._outs

    def has_error(self):
        return self._error is not None

    def error(self):
        return self._error


def get_input_tensor_by_name(request, name):
    for t in request.inputs():
        if t.name() == name:
            return t
    return None


def get_output_tensor_by_name(response, name):
    for t in response.output_tensors():
        if t.name() == name:
            return t
    return None
