"""TorchScript models (<version>/model.pt) as a built-in TritonPythonModel.

The model is loaded with torch.jit.load on the CPU and run under
torch.inference_mode. Inputs and outputs follow the rules of Triton's
pytorch backend:

Inputs, in this order of preference:
  1. every config input name is an argument of forward(): each input goes
     to the argument of its name;
  2. every config input name is <name>__<index> (INPUT__0, INPUT__1, ...):
     input <index> of forward();
  3. otherwise the config order is forward()'s argument order.
  A forward() whose only argument is a Dict[str, Tensor] gets every input
  in one dictionary keyed by its config name.
Outputs:
  1. every config output name is <name>__<index>: element <index> of what
     forward() returns;
  2. otherwise the config order.
  forward() may return a Tensor, a tuple or list of Tensors, a List[str]
  (a TYPE_STRING output), or a Dict[str, Tensor] keyed by output name.

TYPE_STRING tensors are 1-D lists of str in the model (with the batch
dimension counted), as in Triton.

When max_batch_size > 0 the requests of one execute() call are concatenated
along dimension 0, run once and split back per request; requests whose
inputs cannot be concatenated (different trailing shapes) run in separate
groups. With max_batch_size 0 each request runs alone.

Config parameters read (string values, as in Triton):
  INTRA_OP_THREAD_COUNT (or intra_op_thread_count)  torch threads; default
                               OMP_NUM_THREADS (set per worker by the server), else 1
  INTER_OP_THREAD_COUNT                              inter-op threads, default 1
  DISABLE_OPTIMIZED_EXECUTION  "true" turns off the graph executor's optimizations
  INFERENCE_MODE               "false" runs under torch.no_grad instead
  ENABLE_JIT_PROFILING, ENABLE_JIT_EXECUTOR          "false" turns them off

The execution helpers here (ModelIO, run_requests) are shared with the
state_dict built-in.
"""
import json
import os
import re
import warnings

import numpy as np
import torch

import triton_python_backend_utils as pb_utils
from sluice_builtin.metadata import ModelLoadError  # noqa: F401 - re-exported for state_dict and tests

# Config data types PyTorch can hold, as numpy types. TYPE_STRING is a list
# of str in the model and a numpy object array of bytes outside.
NP_TYPES = {
    "TYPE_BOOL": np.bool_,
    "TYPE_UINT8": np.uint8,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

# KServe datatype names, for messages.
_KSERVE = {
    "TYPE_BOOL": "BOOL", "TYPE_UINT8": "UINT8", "TYPE_INT8": "INT8",
    "TYPE_INT16": "INT16", "TYPE_INT32": "INT32", "TYPE_INT64": "INT64",
    "TYPE_FP16": "FP16", "TYPE_FP32": "FP32", "TYPE_FP64": "FP64",
    "TYPE_STRING": "BYTES",
}

_NAMED_INDEX = re.compile(r"^.*__(\d+)$")

# torch.from_numpy warns once per process about read-only arrays (the
# worker may hand out views of shared memory). The model never writes to
# its inputs under inference_mode, so the warning is noise.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")


_interop_set = False  # set_num_interop_threads has been called


def field(d, snake, default=None):
    """d[snake], also accepting protojson's lowerCamelCase spelling."""
    if snake in d:
        return d[snake]
    parts = snake.split("_")
    camel = parts[0] + "".join(p.title() for p in parts[1:])
    return d.get(camel, default)


def config_dims(t):
    """A config tensor's dims as ints (protojson writes int64 as strings)."""
    return [int(d) for d in field(t, "dims", []) or []]


def parameters(cfg):
    """config.pbtxt's parameters as a dict of strings."""
    out = {}
    for k, v in (field(cfg, "parameters", {}) or {}).items():
        if isinstance(v, dict):
            out[k] = str(field(v, "string_value", ""))
        else:
            out[k] = str(v)
    return out


def flag(params, key, default):
    v = params.get(key)
    if v is None or v == "":
        return default
    return v.strip().lower() in ("1", "true", "yes", "on")


def apply_thread_parameters(params):
    """Set torch's thread counts from the config.

    Intra-op threads: the parameter INTRA_OP_THREAD_COUNT when set; else
    what OMP_NUM_THREADS says (the server gives each worker its share of
    the cores there, and torch reads it at import); else 1. Inter-op
    threads: INTER_OP_THREAD_COUNT, default 1 (only TorchScript's fork()
    uses them).
    """
    intra = params.get("INTRA_OP_THREAD_COUNT") or params.get("intra_op_thread_count")
    if intra is None and not os.environ.get("OMP_NUM_THREADS"):
        intra = "1"
    if intra is not None:
        try:
            n = int(intra)
        except ValueError:
            raise ModelLoadError(f"parameter INTRA_OP_THREAD_COUNT {intra!r} is not an integer") from None
        if n > 0:
            torch.set_num_threads(n)
    inter = params.get("INTER_OP_THREAD_COUNT") or params.get("inter_op_thread_count") or "1"
    try:
        m = int(inter)
    except ValueError:
        raise ModelLoadError(f"parameter INTER_OP_THREAD_COUNT {inter!r} is not an integer") from None
    global _interop_set
    if m > 0 and not _interop_set and torch.get_num_interop_threads() != m:
        # A second call aborts the process (a c10::Error thrown past
        # Python), so set it once, before the first forward().
        _interop_set = True
        torch.set_num_interop_threads(m)


def version_dir(args):
    return os.path.join(args["model_repository"], str(args["model_version"]))


class TensorSpec:
    """One config input or output."""

    def __init__(self, t, kind):
        self.name = field(t, "name", "")
        self.data_type = field(t, "data_type", "TYPE_INVALID")
        if isinstance(self.data_type, int):
            raise ModelLoadError(f"{kind} '{self.name}': data_type must be a name such as TYPE_FP32, got {self.data_type}")
        self.dims = config_dims(t)
        reshape = field(t, "reshape")
        if reshape is not None:
            raise ModelLoadError(f"{kind} '{self.name}': reshape is not supported by the pytorch backend in Sluice")
        if self.data_type not in NP_TYPES:
            raise ModelLoadError(
                f"{kind} '{self.name}': data type {self.data_type} is not supported by PyTorch "
                f"(supported: {', '.join(sorted(NP_TYPES))})")
        self.np_type = NP_TYPES[self.data_type]

    @property
    def is_string(self):
        return self.data_type == "TYPE_STRING"


def _named_index(names):
    """The indices of <name>__<index> names, or None if one does not follow it."""
    out = []
    for n in names:
        m = _NAMED_INDEX.match(n)
        if not m:
            return None
        out.append(int(m.group(1)))
    return out


class ModelIO:
    """How config inputs and outputs map to a forward() call.

    arg_names are forward()'s argument names after self, or None when they
    are unknown. dict_input says forward() takes one Dict[str, Tensor].
    """

    def __init__(self, cfg, model_name, arg_names, dict_input=False):
        self.model_name = model_name
        self.max_batch_size = int(field(cfg, "max_batch_size", 0) or 0)
        self.batching = self.max_batch_size > 0
        self.inputs = [TensorSpec(t, "input") for t in field(cfg, "input", []) or []]
        self.outputs = [TensorSpec(t, "output") for t in field(cfg, "output", []) or []]
        if not self.inputs:
            raise ModelLoadError("config.pbtxt lists no input; the pytorch backend needs every input named with its data_type and dims")
        if not self.outputs:
            raise ModelLoadError("config.pbtxt lists no output; the pytorch backend needs every output named with its data_type and dims")
        for spec in self.inputs + self.outputs:
            if spec.is_string and len(spec.dims) + (1 if self.batching else 0) > 1:
                raise ModelLoadError(
                    f"'{spec.name}' is TYPE_STRING with dims {spec.dims}: PyTorch takes strings as a "
                    "1-D List[str], so only one dimension (the batch dimension counts) is supported")
        self.dict_input = dict_input
        self.input_index = self._map_inputs(arg_names)
        names = [o.name for o in self.outputs]
        idx = _named_index(names)
        self.output_index = idx if idx is not None else list(range(len(names)))
        if len(set(self.output_index)) != len(self.output_index):
            raise ModelLoadError(f"outputs {names} name the same <name>__<index> twice")

    def _map_inputs(self, arg_names):
        names = [i.name for i in self.inputs]
        if self.dict_input:
            return None
        if arg_names is not None:
            if len(arg_names) != len(names):
                raise ModelLoadError(
                    f"config.pbtxt has {len(names)} input(s) {names}, the model's forward() takes "
                    f"{len(arg_names)} {arg_names}")
            if all(n in arg_names for n in names):
                return [arg_names.index(n) for n in names]
        idx = _named_index(names)
        if idx is not None:
            if sorted(idx) != list(range(len(names))):
                raise ModelLoadError(
                    f"inputs {names} follow <name>__<index> but their indices are not 0..{len(names) - 1}")
            return idx
        return list(range(len(names)))

    def forward_args(self, tensors):
        """Arrange tensors (config input order) as forward()'s arguments."""
        if self.dict_input:
            return [{s.name: t for s, t in zip(self.inputs, tensors)}]
        args = [None] * len(tensors)
        for i, t in zip(self.input_index, tensors):
            args[i] = t
        return args

    def output_values(self, result):
        """The model's outputs in config output order."""
        if isinstance(result, dict):
            missing = [o.name for o in self.outputs if o.name not in result]
            if missing:
                raise ValueError(f"the model returned a dict without output(s) {missing} (it has {sorted(result)})")
            return [result[o.name] for o in self.outputs]
        if isinstance(result, torch.Tensor) or _is_str_list(result):
            seq = [result]
        elif isinstance(result, (tuple, list)):
            seq = list(result)
        else:
            raise ValueError(
                f"the model returned {type(result).__name__}; want a Tensor, a List[str], "
                "a tuple or list of those, or a dict keyed by output name")
        out = []
        for o, i in zip(self.outputs, self.output_index):
            if i >= len(seq):
                raise ValueError(
                    f"output '{o.name}' is the model's output {i}, but the model returned {len(seq)} output(s)")
            out.append(seq[i])
        return out


def _is_str_list(v):
    return isinstance(v, list) and all(isinstance(s, str) for s in v) and (len(v) > 0)


def _error_response(msg):
    return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(msg))


def _request_inputs(io, request):
    """The request's inputs as numpy arrays in config order, checked."""
    arrays = []
    for spec in io.inputs:
        t = pb_utils.get_input_tensor_by_name(request, spec.name)
        if t is None:
            raise ValueError(f"input '{spec.name}' is missing")
        a = t.as_numpy()
        if spec.is_string:
            if a.dtype != np.object_ and a.dtype.kind not in ("S", "U"):
                raise ValueError(f"input '{spec.name}' is {a.dtype}, config says {spec.data_type}")
        elif a.dtype != spec.np_type:
            raise ValueError(
                f"input '{spec.name}' has datatype {a.dtype}, config says {_KSERVE[spec.data_type]} ({spec.data_type})")
        if io.batching and a.ndim == 0:
            raise ValueError(f"input '{spec.name}' has no batch dimension (max_batch_size is {io.max_batch_size})")
        arrays.append(a)
    if io.batching:
        sizes = {a.shape[0] for a in arrays}
        if len(sizes) != 1:
            raise ValueError(f"inputs have different batch sizes {sorted(sizes)}")
    return arrays


def _to_model(spec, a):
    """A numpy input as the model's value, without a copy where possible."""
    if spec.is_string:
        return [s.decode("utf-8") if isinstance(s, (bytes, bytearray)) else str(s) for s in a.reshape(-1)]
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    return torch.from_numpy(a)


def _from_model(spec, v):
    """A model output as a numpy array of the config's type."""
    if spec.is_string:
        if not isinstance(v, list):
            raise ValueError(f"output '{spec.name}' is TYPE_STRING, the model returned {type(v).__name__}, want List[str]")
        return np.array([s.encode("utf-8") for s in v], dtype=np.object_)
    if not isinstance(v, torch.Tensor):
        raise ValueError(f"output '{spec.name}': the model returned {type(v).__name__}, want a Tensor")
    v = v.detach()
    if v.device.type != "cpu":
        v = v.cpu()
    a = v.contiguous().numpy()
    if a.dtype != spec.np_type:
        raise ValueError(
            f"output '{spec.name}': the model returned {a.dtype}, config says {spec.data_type}")
    return a


def check_output_dims(spec, a, batching, batch=None):
    """Raise unless a's shape fits the config dims (-1 matches anything)."""
    shape = list(a.shape) if hasattr(a, "shape") else [len(a)]
    want = ([batch if batch is not None else -1] if batching else []) + spec.dims
    ok = len(shape) == len(want) and all(w == -1 or w == s for w, s in zip(want, shape))
    if not ok:
        raise ValueError(
            f"output '{spec.name}' has shape {shape}, config.pbtxt says dims {spec.dims}"
            + (" after the batch dimension" if batching else ""))


def _groups(io, per_request):
    """Lists of request indices that run as one forward() call.

    Without batching each request runs alone. With batching, requests whose
    inputs have the same trailing shapes and types run together, in chunks
    of at most max_batch_size rows (the scheduler never forms a bigger
    batch, but a direct caller could).
    """
    if not io.batching:
        return [[i] for i in per_request]
    by_shape = {}
    for i, arrays in per_request.items():
        key = tuple((a.shape[1:], a.dtype.str) for a in arrays)
        by_shape.setdefault(key, []).append(i)
    groups = []
    for idx in by_shape.values():
        cur, rows = [], 0
        for i in idx:
            n = per_request[i][0].shape[0]
            if cur and rows + n > io.max_batch_size:
                groups.append(cur)
                cur, rows = [], 0
            cur.append(i)
            rows += n
        groups.append(cur)
    return groups


def run_requests(io, call, requests, grad_guard):
    """Run execute(requests) for a torch callable; one response per request.

    call takes forward()'s positional arguments. grad_guard is a context
    manager factory (torch.inference_mode or torch.no_grad).
    """
    responses = [None] * len(requests)
    per_request = {}
    for i, r in enumerate(requests):
        try:
            per_request[i] = _request_inputs(io, r)
        except ValueError as e:
            responses[i] = _error_response(f"{io.model_name}: {e}")
    for group in _groups(io, per_request):
        sizes = [per_request[i][0].shape[0] if io.batching else None for i in group]
        total = sum(sizes) if io.batching else None
        if io.batching and total > io.max_batch_size:
            responses[group[0]] = _error_response(
                f"{io.model_name}: batch size {total} exceeds max_batch_size {io.max_batch_size}")
            continue
        try:
            with grad_guard():
                tensors = []
                for k, spec in enumerate(io.inputs):
                    parts = [per_request[i][k] for i in group]
                    a = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
                    tensors.append(_to_model(spec, a))
                result = call(*io.forward_args(tensors))
                outs = [_from_model(spec, v) for spec, v in zip(io.outputs, io.output_values(result))]
        except Exception as e:  # the model's own error: report it on every request of the group
            msg = f"{io.model_name}: PyTorch execute failure: {type(e).__name__}: {e}".strip()
            for i in group:
                responses[i] = _error_response(msg)
            continue
        if io.batching:
            bad = [(spec.name, a.shape[0] if a.ndim else 0) for spec, a in zip(io.outputs, outs)
                   if a.ndim == 0 or a.shape[0] != total]
            if bad:
                msg = (f"{io.model_name}: output '{bad[0][0]}' has {bad[0][1]} rows for a batch of {total}; "
                       "with max_batch_size > 0 every output's first dimension is the batch")
                for i in group:
                    responses[i] = _error_response(msg)
                continue
        off = 0
        for i, n in zip(group, sizes):
            if io.batching:
                sl = [a[off:off + n] for a in outs]
                off += n
            else:
                sl = outs
            wanted = _requested(requests[i])
            responses[i] = pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor(spec.name, a) for spec, a in zip(io.outputs, sl)
                if not wanted or spec.name in wanted])
    return responses


def _requested(request):
    f = getattr(request, "requested_output_names", None)
    if f is None:
        return None
    try:
        names = f()
    except Exception:
        return None
    return set(names) if names else None


def grad_guard_for(params):
    return torch.inference_mode if flag(params, "INFERENCE_MODE", True) else torch.no_grad


def apply_jit_parameters(params):
    if flag(params, "DISABLE_OPTIMIZED_EXECUTION", False):
        torch._C._set_graph_executor_optimize(False)
    if not flag(params, "ENABLE_JIT_PROFILING", True):
        torch._C._jit_set_profiling_executor(False)
    if not flag(params, "ENABLE_JIT_EXECUTOR", True):
        torch._C._jit_set_profiling_mode(False)


def _schema_args(module):
    """forward()'s argument names after self, and whether it takes one dict."""
    try:
        schema = module.forward.schema
    except (AttributeError, RuntimeError):
        return None, False
    args = list(schema.arguments)
    if args and args[0].name == "self":
        args = args[1:]
    kinds = [str(a.type) for a in args]
    if len(args) == 1 and kinds[0].startswith("Dict["):
        return [args[0].name], True
    for a, k in zip(args, kinds):
        if k != "Tensor" and not k.startswith("List[") and not k.startswith("Optional[Tensor"):
            raise ModelLoadError(
                f"forward() argument '{a.name}' is {k}; only Tensor, List[str] or one Dict[str, Tensor] are supported")
    return [a.name for a in args], False


def model_filename(cfg, default, suffixes):
    f = field(cfg, "default_model_filename", "") or ""
    if f and f.endswith(suffixes):
        return f
    return default


class TritonPythonModel:
    """Serves a TorchScript model.pt with Triton's pytorch-backend conventions."""

    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        params = parameters(cfg)
        apply_thread_parameters(params)
        apply_jit_parameters(params)
        self.grad_guard = grad_guard_for(params)
        vdir = version_dir(args)
        path = os.path.join(vdir, model_filename(cfg, "model.pt", (".pt", ".pts", ".torchscript")))
        if not os.path.exists(path):
            raise ModelLoadError(f"TorchScript model {path} is missing")
        try:
            self.module = torch.jit.load(path, map_location="cpu")
        except Exception as e:
            raise ModelLoadError(
                f"{path} is not a TorchScript archive torch.jit.load can read ({type(e).__name__}: "
                f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}); save one with "
                "torch.jit.script(model).save() or torch.jit.trace(model, example).save()") from None
        self.module.eval()
        arg_names, dict_input = _schema_args(self.module)
        self.io = ModelIO(cfg, args.get("model_name", cfg.get("name", "")), arg_names, dict_input)

    def execute(self, requests):
        return run_requests(self.io, self.module, requests, self.grad_guard)

    def finalize(self):
        self.module = None
