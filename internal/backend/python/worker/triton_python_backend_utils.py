"""Sluice's implementation of the triton_python_backend_utils module.

Model files written for Triton's Python backend import this module as
``pb_utils`` and use it unchanged under Sluice. It is written from the
published interface of Triton's module (names, arguments and meaning);
what Sluice does not support raises TritonModelException with a message
that says so:

- streaming BLS requests (InferenceRequest.stream_exec) and the model
  loading API (load_model, unload_model, is_model_ready);
- GPU tensors: every tensor is a CPU numpy array.

Business Logic Scripting (exec / async_exec, also decoupled=True), custom
metrics (MetricFamily) and decoupled mode (get_response_sender) work as
in Triton.
"""

import json
import re
import threading
import struct
import sys

import numpy as np

# TRITONSERVER_DataType codes, as Triton numbers them.
TRITONSERVER_TYPE_INVALID = 0
TRITONSERVER_TYPE_BOOL = 1
TRITONSERVER_TYPE_UINT8 = 2
TRITONSERVER_TYPE_UINT16 = 3
TRITONSERVER_TYPE_UINT32 = 4
TRITONSERVER_TYPE_UINT64 = 5
TRITONSERVER_TYPE_INT8 = 6
TRITONSERVER_TYPE_INT16 = 7
TRITONSERVER_TYPE_INT32 = 8
TRITONSERVER_TYPE_INT64 = 9
TRITONSERVER_TYPE_FP16 = 10
TRITONSERVER_TYPE_FP32 = 11
TRITONSERVER_TYPE_FP64 = 12
TRITONSERVER_TYPE_BYTES = 13
TRITONSERVER_TYPE_BF16 = 14

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1

_CODE_TO_NUMPY = {
    TRITONSERVER_TYPE_BOOL: np.bool_,
    TRITONSERVER_TYPE_UINT8: np.uint8,
    TRITONSERVER_TYPE_UINT16: np.uint16,
    TRITONSERVER_TYPE_UINT32: np.uint32,
    TRITONSERVER_TYPE_UINT64: np.uint64,
    TRITONSERVER_TYPE_INT8: np.int8,
    TRITONSERVER_TYPE_INT16: np.int16,
    TRITONSERVER_TYPE_INT32: np.int32,
    TRITONSERVER_TYPE_INT64: np.int64,
    TRITONSERVER_TYPE_FP16: np.float16,
    TRITONSERVER_TYPE_FP32: np.float32,
    TRITONSERVER_TYPE_FP64: np.float64,
    TRITONSERVER_TYPE_BYTES: np.object_,
}

# Keyed by numpy's one-character type codes, which identify a dtype
# regardless of byte order.
_NUMPY_CHAR_TO_CODE = {
    "?": TRITONSERVER_TYPE_BOOL,
    "B": TRITONSERVER_TYPE_UINT8,
    "H": TRITONSERVER_TYPE_UINT16,
    "I": TRITONSERVER_TYPE_UINT32,
    "L": TRITONSERVER_TYPE_UINT64,
    "Q": TRITONSERVER_TYPE_UINT64,
    "b": TRITONSERVER_TYPE_INT8,
    "h": TRITONSERVER_TYPE_INT16,
    "i": TRITONSERVER_TYPE_INT32,
    "l": TRITONSERVER_TYPE_INT64,
    "q": TRITONSERVER_TYPE_INT64,
    "e": TRITONSERVER_TYPE_FP16,
    "f": TRITONSERVER_TYPE_FP32,
    "d": TRITONSERVER_TYPE_FP64,
    "O": TRITONSERVER_TYPE_BYTES,
    "S": TRITONSERVER_TYPE_BYTES,
    "U": TRITONSERVER_TYPE_BYTES,
}

TRITON_STRING_TO_NUMPY = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

_U32 = struct.Struct("<I")


def triton_to_numpy_type(data_type):
    """Numpy type of a TRITONSERVER_DataType code (None when unknown)."""
    return _CODE_TO_NUMPY.get(data_type)


def numpy_to_triton_type(data_type):
    """TRITONSERVER_DataType code of a numpy dtype or type (None when
    there is none)."""
    try:
        return _NUMPY_CHAR_TO_CODE.get(np.dtype(data_type).char)
    except TypeError:
        return None


def triton_string_to_numpy(triton_type_string):
    """Numpy type of a configuration data type such as "TYPE_FP32"."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def serialize_byte_tensor(input_tensor):
    """Flattens a tensor of bytes (or str, encoded as UTF-8) into Triton's
    layout: each element as a little-endian u32 length and its bytes, in C
    order. Returns a 1-D uint8 array, or None for an array that holds no
    bytes-like elements."""
    if input_tensor.size == 0:
        return np.empty([0], dtype=np.uint8)
    if input_tensor.dtype.kind not in "OSU":
        return None
    parts = []
    for obj in input_tensor.flat if input_tensor.flags.c_contiguous else np.ascontiguousarray(input_tensor).flat:
        if isinstance(obj, (bytes, bytearray, memoryview)):
            s = bytes(obj)
        elif isinstance(obj, str):
            s = obj.encode("utf-8")
        else:
            s = str(obj).encode("utf-8")
        parts.append(_U32.pack(len(s)))
        parts.append(s)
    return np.frombuffer(b"".join(parts), dtype=np.uint8)


def deserialize_bytes_tensor(encoded_tensor):
    """Reads Triton's length-prefixed layout back into a 1-D object array
    of bytes."""
    buf = memoryview(encoded_tensor).cast("B")
    out = []
    off, end = 0, len(buf)
    while off < end:
        if end - off < 4:
            raise TritonModelException("truncated BYTES length prefix")
        (n,) = _U32.unpack_from(buf, off)
        off += 4
        if n > end - off:
            raise TritonModelException("BYTES element overruns the buffer")
        out.append(bytes(buf[off : off + n]))
        off += n
    arr = np.empty(len(out), dtype=np.object_)
    arr[:] = out
    return arr


class TritonError:
    """An error a model returns for one request
    (InferenceResponse(error=TritonError(...))). Without a code, Sluice
    answers the request with 400 and the message; INTERNAL and UNKNOWN
    answer 500, NOT_FOUND 404, UNAVAILABLE and CANCELLED 503, UNSUPPORTED
    400 (gRPC Unimplemented), ALREADY_EXISTS 409."""

    UNKNOWN = 1
    INTERNAL = 2
    NOT_FOUND = 3
    INVALID_ARG = 4
    UNAVAILABLE = 5
    UNSUPPORTED = 6
    ALREADY_EXISTS = 7
    CANCELLED = 8

    def __init__(self, msg, code=None):
        self._msg = msg
        self._code = code

    def __str__(self):
        return "" if self._msg is None else str(self._msg)

    def __repr__(self):
        return "TritonError(%r)" % (self._msg,)

    def message(self):
        """The error message."""
        return self._msg

    def code(self):
        """The error code, or None when none was given."""
        return self._code


class TritonModelException(Exception):
    """Raised by this module when a model asks for something that cannot
    be done; a model may raise it too."""

    def __init__(self, msg):
        super().__init__(msg)
        self._msg = msg

    def message(self):
        """The exception message."""
        return self._msg


class Tensor:
    """A named tensor: a numpy array with Triton's data type. BYTES
    tensors are object arrays of bytes."""

    def __init__(self, name, numpy_array, triton_dtype=None):
        if not isinstance(numpy_array, np.ndarray):
            numpy_array = np.asarray(numpy_array)
        if numpy_array.dtype == np.void:
            raise TritonModelException(
                "tensor '%s': numpy dtype %s is not supported; use np.object_ for bytes" % (name, numpy_array.dtype)
            )
        if triton_dtype is not None:
            np_type = triton_to_numpy_type(triton_dtype)
            if np_type is None:
                raise TritonModelException("tensor '%s': unsupported data type code %r" % (name, triton_dtype))
            if numpy_array.dtype != np_type and np_type is not np.object_:
                numpy_array = numpy_array.view(np_type)
        else:
            triton_dtype = numpy_to_triton_type(numpy_array.dtype)
            if triton_dtype is None:
                raise TritonModelException("tensor '%s': numpy dtype %s has no Triton data type" % (name, numpy_array.dtype))
        self._name = name
        self._array = numpy_array
        self._dtype = triton_dtype

    @classmethod
    def _wrap(cls, name, numpy_array, triton_dtype):
        """A Tensor of an array already known to match triton_dtype."""
        t = cls.__new__(cls)
        t._name = name
        t._array = numpy_array
        t._dtype = triton_dtype
        return t

    def __repr__(self):
        return "Tensor(%r, shape=%s, dtype=%s)" % (self._name, list(self._array.shape), self._array.dtype)

    def name(self):
        """The tensor's name."""
        return self._name

    def as_numpy(self):
        """The tensor's data as a numpy array."""
        return self._array

    def triton_dtype(self):
        """The TRITONSERVER_DataType code."""
        return self._dtype

    def shape(self):
        """The tensor's shape, as a list."""
        return list(self._array.shape)

    def is_cpu(self):
        """Always True: Sluice's Python models run on the CPU."""
        return True

    def to_dlpack(self):
        """A DLPack capsule of the array (numpy's __dlpack__)."""
        if self._array.dtype == np.object_:
            raise TritonModelException("tensor '%s': BYTES tensors cannot be shared through DLPack" % self._name)
        return self._array.__dlpack__()

    @staticmethod
    def from_dlpack(name, dlpack_obj):
        """A Tensor from an object that supports DLPack (a torch tensor, a
        numpy array) or a DLPack capsule (converted through torch)."""
        if hasattr(dlpack_obj, "__dlpack__"):
            return Tensor(name, np.from_dlpack(dlpack_obj))
        try:
            from torch.utils import dlpack as torch_dlpack  # noqa: PLC0415 - optional
        except ImportError as e:
            raise TritonModelException("tensor '%s': a DLPack capsule needs torch to be read" % name) from e
        return Tensor(name, torch_dlpack.from_dlpack(dlpack_obj).cpu().numpy())


# Set by the worker: _bls_exec(request, decoupled=False) sends a BLS request
# and returns its response (decoupled: an iterator over its responses).
_bls_exec = None


def _unsupported(what):
    raise TritonModelException("%s is not supported by Sluice's Python backend" % what)


def _str(v):
    """v, or v decoded as UTF-8 when it is bytes."""
    return v.decode("utf-8") if isinstance(v, bytes) else v


class InferenceRequest:
    """One request in the list execute() receives. Models may also build
    one to call another model the server serves (Business Logic
    Scripting): exec() and async_exec()."""

    def __init__(self, model_name=None, requested_output_names=None, inputs=None, request_id="",
                 correlation_id=0, flags=0, timeout=0, parameters=None, model_version=-1, priority=0, **_):
        # Names may be bytes, as a TYPE_STRING input's elements are (Triton
        # takes them as strings: its bls example passes one as model_name).
        self._model_name = _str(model_name)
        self._inputs = list(inputs or [])
        self._outputs = [_str(n) for n in requested_output_names or []]
        self._request_id = _str(request_id)
        self._correlation_id = correlation_id
        self._flags = flags
        self._timeout = timeout
        self._parameters = parameters if isinstance(parameters, str) else json.dumps(parameters or {})
        self._model_version = model_version
        self._priority = priority
        self._sender = None

    @classmethod
    def _received(cls, inputs, requested_output_names, parameters="{}", sender=None):
        r = cls.__new__(cls)
        r._sender = sender
        r._model_name = None
        r._inputs = inputs
        r._outputs = requested_output_names
        r._request_id = ""
        r._correlation_id = 0
        r._flags = 0
        r._timeout = 0
        r._parameters = parameters
        r._model_version = -1
        r._priority = 0
        return r

    def inputs(self):
        """The input Tensors, in the configuration's input order."""
        return self._inputs

    def requested_output_names(self):
        """The names of the outputs the client asked for."""
        return self._outputs

    def request_id(self):
        """The request id; Sluice does not pass it to models ("")."""
        return self._request_id

    def correlation_id(self):
        """The sequence correlation id; 0 (Sluice has no sequence batching)."""
        return self._correlation_id

    def flags(self):
        """The request flags; 0."""
        return self._flags

    def timeout(self):
        """The request timeout in microseconds; 0."""
        return self._timeout

    def parameters(self):
        """The request parameters as a JSON string: the client's (but the
        ones the server consumes: sequence_id, sequence_start, sequence_end,
        priority, timeout) and the headers --http-header-forward-pattern /
        --grpc-header-forward-pattern forward; "{}" when there are none."""
        return self._parameters

    def is_cancelled(self):
        """False: a request whose client gave up is still answered."""
        return False

    def get_response_sender(self):
        """The InferenceResponseSender of a request to a decoupled model
        (model_transaction_policy { decoupled: true })."""
        if self._sender is None:
            raise TritonModelException(
                "get_response_sender() needs a decoupled model: set model_transaction_policy { decoupled: true } "
                "in config.pbtxt (a model that is not decoupled returns one InferenceResponse per request from execute)")
        return self._sender

    def exec(self, decoupled=False):
        """Business Logic Scripting: runs this request on the model it
        names (any model the server serves) and returns its
        InferenceResponse; a failure is the response's error().
        decoupled=True: returns an iterator over the request's responses
        (any number, from a decoupled model; the one of any other model),
        yielded as they come; the final flag without a response is a
        last response without outputs, as in Triton."""
        if _bls_exec is None:
            raise TritonModelException("BLS requests can only be made from a model the server runs")
        if not self._model_name:
            raise TritonModelException("InferenceRequest needs a model_name to be executed")
        if decoupled:
            return _bls_exec(self, True)
        return _bls_exec(self)

    async def async_exec(self, decoupled=False):
        """exec() as a coroutine: several may run at once (asyncio.gather).
        decoupled=True: the iterator over the responses, as exec()'s."""
        import asyncio  # noqa: PLC0415 - only models that await need it

        return await asyncio.get_running_loop().run_in_executor(None, self.exec, decoupled)

    def stream_exec(self, *_, **__):
        _unsupported("a streaming BLS request (InferenceRequest.stream_exec)")


class InferenceResponseSender:
    """Sends the responses of one request to a decoupled model, from
    execute() or from any thread, also after execute() returned. The last
    send carries flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL (its response
    may be None); nothing can be sent after it."""

    def __init__(self, send):
        self._send = send
        self._closed = False
        self._lock = threading.Lock()

    def send(self, response=None, flags=0):
        if flags not in (0, TRITONSERVER_RESPONSE_COMPLETE_FINAL):
            raise TritonModelException("send: unknown flags %r (0 or TRITONSERVER_RESPONSE_COMPLETE_FINAL)" % (flags,))
        if response is None and flags != TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            raise TritonModelException("send: a response is needed unless flags is TRITONSERVER_RESPONSE_COMPLETE_FINAL")
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException("send: expected an InferenceResponse, got %s" % type(response).__name__)
        with self._lock:
            if self._closed:
                raise TritonModelException("Unable to send response. Response sender has been closed.")
            if flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL:
                self._closed = True
            self._send(response, flags)

    def is_cancelled(self):
        """False: a request whose client gave up is still answered."""
        return False


class InferenceResponse:
    """The answer to one request: output tensors, or an error."""

    def __init__(self, output_tensors=None, error=None, parameters=None):
        if output_tensors is None:
            output_tensors = []
        if not isinstance(output_tensors, (list, tuple)):
            raise TritonModelException('"output_tensors" must be a list.')
        self._output_tensors = list(output_tensors)
        self._error = error
        self._parameters = parameters if isinstance(parameters, str) else json.dumps(parameters or {})

    def output_tensors(self):
        """The output Tensors."""
        return self._output_tensors

    def has_error(self):
        """Whether the response carries an error."""
        return self._error is not None

    def error(self):
        """The TritonError, or None."""
        return self._error

    def parameters(self):
        """The response parameters as a JSON string (Sluice does not send
        them to the client)."""
        return self._parameters


def get_input_tensor_by_name(inference_request, name):
    """The input Tensor of the request named name, or None."""
    for t in inference_request.inputs():
        if t.name() == name:
            return t
    return None


def get_output_tensor_by_name(inference_response, name):
    """The output Tensor of the response named name, or None."""
    for t in inference_response.output_tensors():
        if t.name() == name:
            return t
    return None


def get_input_config_by_name(model_config, name):
    """The configuration of the input named name (a dict), or None."""
    for props in model_config.get("input", []):
        if props.get("name") == name:
            return props
    return None


def get_output_config_by_name(model_config, name):
    """The configuration of the output named name (a dict), or None."""
    for props in model_config.get("output", []):
        if props.get("name") == name:
            return props
    return None


def using_decoupled_model_transaction_policy(model_config):
    """Whether the configuration asks for decoupled mode (which Sluice
    refuses to load)."""
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


class LogLevel:
    """Levels of Logger.log."""

    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


def _stderr_sink(level, msg):
    sys.stderr.write("%s: %s\n" % (level, msg))


# The worker replaces this with a function that sends log lines to Sluice.
_log_sink = _stderr_sink


class Logger:
    """Writes to Sluice's log, with the model's name and version."""

    @staticmethod
    def log(msg, level=LogLevel.INFO):
        name = {LogLevel.INFO: "info", LogLevel.WARNING: "warn", LogLevel.ERROR: "error", LogLevel.VERBOSE: "debug"}
        _log_sink(name.get(level, "info"), str(msg))

    @staticmethod
    def log_info(msg):
        _log_sink("info", str(msg))

    @staticmethod
    def log_warn(msg):
        _log_sink("warn", str(msg))

    @staticmethod
    def log_error(msg):
        _log_sink("error", str(msg))

    @staticmethod
    def log_verbose(msg):
        _log_sink("debug", str(msg))


class MetricFamily:
    """A custom metric family, exported on Sluice's /metrics with the
    labels each Metric adds and the model's "model" and "version" labels
    (unless the Metric sets those):
    MetricFamily(name, description, kind=MetricFamily.COUNTER | GAUGE |
    HISTOGRAM), then family.Metric(labels={...}, buckets=[...])."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2

    _NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
    _RESERVED = ("sluice_", "nv_", "go_", "process_", "__")

    def __init__(self, name, description, kind):
        if not isinstance(name, str) or not self._NAME.match(name) or name.startswith(self._RESERVED):
            raise TritonModelException("MetricFamily: invalid name %r (letters, digits, _ and :; not starting with %s)"
                                       % (name, ", ".join(self._RESERVED)))
        if kind not in (self.COUNTER, self.GAUGE, self.HISTOGRAM):
            raise TritonModelException("MetricFamily: unknown kind %r (COUNTER, GAUGE or HISTOGRAM)" % (kind,))
        self._name = name
        self._kind = kind
        self._labels = None
        _metric_sink({"op": "family", "name": name, "description": str(description), "kind": kind})

    def Metric(self, labels=None, buckets=None):  # noqa: N802 - Triton's name
        """The metric of one label set (label names and values are
        strings; every metric of a family has the same label names)."""
        return Metric(self, labels or {}, buckets)


class Metric:
    """One label set of a MetricFamily."""

    def __init__(self, family, labels, buckets=None):
        if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
            raise TritonModelException("Metric: labels must be a dict of strings")
        for k in labels:
            if not MetricFamily._NAME.match(k) or k.startswith("__"):
                raise TritonModelException("Metric: invalid label name %r" % (k,))
        names = sorted(labels)
        if family._labels is None:
            family._labels = names
        elif family._labels != names:
            raise TritonModelException("Metric: label names %s differ from the family's %s" % (names, family._labels))
        if family._kind == MetricFamily.HISTOGRAM:
            if not buckets:
                raise TritonModelException("Metric: a HISTOGRAM metric needs buckets")
            buckets = sorted(float(b) for b in buckets)
        elif buckets is not None:
            raise TritonModelException("Metric: only a HISTOGRAM metric has buckets")
        self._family = family
        self._labels = dict(labels)
        self._value = 0.0
        self._send("metric", buckets=buckets)

    def _send(self, op, value=0.0, buckets=None):
        msg = {"op": op, "name": self._family._name, "labels": self._labels, "value": float(value)}
        if buckets is not None:
            msg["buckets"] = buckets
        _metric_sink(msg)

    def increment(self, value):
        """Adds value (a counter only goes up)."""
        kind = self._family._kind
        if kind == MetricFamily.HISTOGRAM:
            raise TritonModelException("Metric: increment() is not for a HISTOGRAM metric; use observe()")
        if kind == MetricFamily.COUNTER and value < 0:
            raise TritonModelException("Metric: a COUNTER cannot be incremented by a negative value")
        self._value += value
        self._send("add", value)

    def set(self, value):
        """Sets a GAUGE."""
        if self._family._kind != MetricFamily.GAUGE:
            raise TritonModelException("Metric: set() is only for a GAUGE metric")
        self._value = float(value)
        self._send("set", value)

    def observe(self, value):
        """Records one observation of a HISTOGRAM."""
        if self._family._kind != MetricFamily.HISTOGRAM:
            raise TritonModelException("Metric: observe() is only for a HISTOGRAM metric")
        self._send("observe", value)

    def value(self):
        """The value this model instance gave the metric."""
        if self._family._kind == MetricFamily.HISTOGRAM:
            raise TritonModelException("Metric: value() is not available for a HISTOGRAM metric")
        return self._value


def _no_metrics(_msg):
    pass


# Set by the worker: sends a custom metric change to Sluice.
_metric_sink = _no_metrics


class ModelConfig:
    """The configuration a model's auto_complete_config completes at load.

    Sluice builds it from the configuration so far (config.pbtxt with
    defaults applied, in Triton's JSON names); the model adds what is
    missing and returns it. Values the configuration already sets must
    agree with what the model adds."""

    _TENSOR_KEYS = ("name", "data_type", "dims")

    def __init__(self, model_config):
        cfg = json.loads(model_config) if isinstance(model_config, (str, bytes)) else dict(model_config or {})
        for key in ("input", "output", "model_warmup"):
            cfg.setdefault(key, [])
        cfg.setdefault("max_batch_size", 0)
        self._model_config = cfg

    def _name(self):
        return self._model_config.get("name", "")

    def as_dict(self):
        """The configuration as a dict (the object itself: edits stick)."""
        return self._model_config

    def set_max_batch_size(self, max_batch_size):
        """Sets max_batch_size; a different non-zero value in the
        configuration is an error."""
        if not isinstance(max_batch_size, int) or isinstance(max_batch_size, bool) or max_batch_size < 0:
            raise ValueError("set_max_batch_size for model '%s' needs a non-negative integer, got %r" % (self._name(), max_batch_size))
        have = self._model_config.get("max_batch_size", 0)
        if have not in (0, max_batch_size):
            raise ValueError("the configuration of model '%s' sets max_batch_size %d, but auto_complete_config sets %d"
                             % (self._name(), have, max_batch_size))
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self):
        """Turns on the dynamic batcher unless the configuration picked the
        sequence batcher (an error)."""
        if "sequence_batching" in self._model_config:
            raise ValueError("the configuration of model '%s' uses sequence_batching; auto_complete_config cannot set dynamic_batching"
                             % self._name())
        self._model_config.setdefault("dynamic_batching", {})

    def _add_tensor(self, kind, tensor):
        if not isinstance(tensor, dict):
            raise ValueError("add_%s for model '%s' needs a dict, got %s" % (kind, self._name(), type(tensor).__name__))
        for key in self._TENSOR_KEYS:
            if key not in tensor:
                raise ValueError("%s %r added by auto_complete_config of model '%s' has no '%s'"
                                 % (kind, tensor.get("name", ""), self._name(), key))
        for have in self._model_config[kind]:
            if have.get("name") != tensor["name"]:
                continue
            # The configuration names it already: fill in, never contradict.
            for key, value in tensor.items():
                cur = have.get(key)
                unset = cur in (None, "", [], "TYPE_INVALID")
                if unset:
                    have[key] = value
                elif key == "dims" and list(cur) != list(value):
                    raise ValueError("%s '%s' of model '%s': the configuration has dims %s, auto_complete_config %s"
                                     % (kind, tensor["name"], self._name(), list(cur), list(value)))
                elif key != "dims" and cur != value:
                    raise ValueError("%s '%s' of model '%s': the configuration has %s %s, auto_complete_config %s"
                                     % (kind, tensor["name"], self._name(), key, cur, value))
            return
        self._model_config[kind].append(dict(tensor))

    def add_input(self, input):  # noqa: A002 - Triton's parameter name
        """Adds an input (a dict with name, data_type, dims and optionally
        other ModelInput fields), or completes the one of that name."""
        self._add_tensor("input", input)

    def add_output(self, output):
        """Adds an output (a dict with name, data_type, dims), or completes
        the one of that name."""
        self._add_tensor("output", output)

    def add_model_warmup(self, model_warmup):
        """Adds a model_warmup entry (a dict in ModelWarmup's JSON names)."""
        if not isinstance(model_warmup, dict) or "name" not in model_warmup:
            raise ValueError("add_model_warmup for model '%s' needs a dict with a 'name'" % self._name())
        if any(w.get("name") == model_warmup["name"] for w in self._model_config["model_warmup"]):
            raise ValueError("model_warmup '%s' of model '%s' exists already" % (model_warmup["name"], self._name()))
        self._model_config["model_warmup"].append(dict(model_warmup))

    def set_model_transaction_policy(self, transaction_policy_dict):
        """Sets model_transaction_policy (Sluice refuses decoupled: true at
        load)."""
        if not isinstance(transaction_policy_dict, dict):
            raise ValueError("set_model_transaction_policy for model '%s' needs a dict" % self._name())
        policy = self._model_config.setdefault("model_transaction_policy", {})
        for key, value in transaction_policy_dict.items():
            if key != "decoupled":
                raise ValueError("model_transaction_policy of model '%s' has no field '%s'" % (self._name(), key))
            if key in policy and policy[key] != value:
                raise ValueError("the configuration of model '%s' sets model_transaction_policy %s %s, auto_complete_config %s"
                                 % (self._name(), key, policy[key], value))
            policy[key] = value


def load_model(*_, **__):
    _unsupported("the model loading API (load_model)")


def unload_model(*_, **__):
    _unsupported("the model loading API (unload_model)")


def is_model_ready(*_, **__):
    _unsupported("the model loading API (is_model_ready)")
