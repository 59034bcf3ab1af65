"""The state_dict flow as a built-in TritonPythonModel.

A version folder holds:

  model.py           defines the torch.nn.Module class
  model.pth          that module's state_dict, and nothing else (torch.save(
                     model.state_dict(), "model.pth")); a pickled model object
                     (torch.save(model)) is refused
  model_config.json  {"model_class": "ParcelETA", "init_args": {...},
                      "input_shape": [...], "version": "...", "git_commit": "..."}

Loading imports model.py, instantiates model_class with init_args (an
object is passed as keyword arguments, an array as positional ones), loads
the weights with torch.load(weights_only=True) and a strict
load_state_dict, checks input_shape against config.pbtxt's dims, switches
to eval mode and runs one warm-up batch of zeros whose outputs are checked
against config.pbtxt's outputs. The git commit is checked by the server
before the worker starts.

input_shape is one shape per config input: a list of ints when the model
has one input, a list of lists (config order) or an object keyed by input
name when it has several. A shape may include the batch dimension first
(any value) when max_batch_size > 0; -1 or null matches any size.

Inputs reach forward() by name when every config input name is one of its
parameters, else by <name>__<index>, else in config order; outputs as in
the TorchScript built-in (a Tensor, a tuple, or a dict keyed by name).
"""
import importlib.util
import inspect
import json
import os
import pickle
import sys
import zipfile

import numpy as np
import torch

from sluice_builtin.metadata import CONFIG_FILE, is_shape, read_model_config
from sluice_builtin.torchscript import (
    ModelIO,
    ModelLoadError,
    apply_thread_parameters,
    check_output_dims,
    field,
    grad_guard_for,
    model_filename,
    parameters,
    run_requests,
    version_dir,
)

CODE_FILE = "model.py"


def shapes_by_input(input_shape, io):
    """input_shape as {input name: shape}."""
    names = [i.name for i in io.inputs]
    if isinstance(input_shape, dict):
        unknown = sorted(set(input_shape) - set(names))
        missing = [n for n in names if n not in input_shape]
        if unknown or missing:
            raise ModelLoadError(
                f"input_shape names inputs {sorted(input_shape)}, config.pbtxt has {names}"
                + (f" (unknown: {unknown})" if unknown else "") + (f" (missing: {missing})" if missing else ""))
        return dict(input_shape)
    if is_shape(input_shape) and not (input_shape and all(isinstance(x, list) for x in input_shape)):
        if len(names) != 1:
            raise ModelLoadError(
                f"input_shape {json.dumps(input_shape)} is one shape, config.pbtxt has {len(names)} inputs {names}: "
                "give one shape per input (an array of arrays in config order, or an object by input name)")
        return {names[0]: input_shape}
    if len(input_shape) != len(names):
        raise ModelLoadError(f"input_shape has {len(input_shape)} shapes, config.pbtxt has {len(names)} inputs {names}")
    return dict(zip(names, input_shape))


def check_input_shapes(input_shape, io):
    """Refuse an input_shape that contradicts config.pbtxt's dims."""
    shapes = shapes_by_input(input_shape, io)
    for spec in io.inputs:
        got = list(shapes[spec.name])
        shape = got
        if io.batching and len(got) == len(spec.dims) + 1:
            shape = got[1:]  # the batch dimension, any size
        ok = len(shape) == len(spec.dims) and all(
            s is None or s == -1 or d == -1 or s == d for s, d in zip(shape, spec.dims))
        if not ok:
            raise ModelLoadError(
                f"model_config.json input_shape {got} for input '{spec.name}' does not match config.pbtxt "
                f"dims {spec.dims}" + (f" (max_batch_size {io.max_batch_size}: the batch dimension may come first)"
                                        if io.batching else ""))


def import_model_file(path, name):
    """Import model.py from its version folder under a private name."""
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # model.py may import its neighbours
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def model_class(module, path, class_name):
    cls = getattr(module, class_name, None)
    if cls is None:
        classes = sorted(n for n, v in vars(module).items()
                         if inspect.isclass(v) and issubclass(v, torch.nn.Module) and v.__module__ == module.__name__)
        raise ModelLoadError(f"{path} defines no class {class_name} (model_class in {CONFIG_FILE}); nn.Module classes there: {classes}")
    if not (inspect.isclass(cls) and issubclass(cls, torch.nn.Module)):
        raise ModelLoadError(f"{class_name} in {path} is not a torch.nn.Module class")
    return cls


def instantiate(cls, init_args, path):
    try:
        if isinstance(init_args, dict):
            return cls(**init_args)
        return cls(*init_args)
    except Exception as e:
        raise ModelLoadError(
            f"{cls.__name__}({_args_text(init_args)}) failed{_where(e, path)}: {type(e).__name__}: {e}") from None


def _args_text(init_args):
    if isinstance(init_args, dict):
        return ", ".join(f"{k}={v!r}" for k, v in init_args.items())
    return ", ".join(repr(v) for v in init_args)


def load_weights(path):
    """model.pth as a state_dict; a pickled model object is refused."""
    try:
        sd = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ModelLoadError(f"{path} is missing (the state_dict: torch.save(model.state_dict(), 'model.pth'))") from None
    except pickle.UnpicklingError as e:
        raise ModelLoadError(
            f"{os.path.basename(path)} holds a pickled model object, not a state_dict: save model.state_dict() "
            f"(torch.save(model.state_dict(), '{os.path.basename(path)}')); weights-only load said: "
            f"{_last_line(e)}") from None
    except (RuntimeError, zipfile.BadZipFile, EOFError, ValueError) as e:
        raise ModelLoadError(f"{path} is not a file torch.load can read: {type(e).__name__}: {_last_line(e)}") from None
    if not isinstance(sd, dict):
        raise ModelLoadError(f"{os.path.basename(path)} holds a {type(sd).__name__}, not a state_dict: save model.state_dict()")
    bad = [k for k, v in sd.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
    if bad:
        nested = [k for k in bad if isinstance(sd.get(k), dict)]
        hint = (f" (it looks like a checkpoint holding {nested}: save only the model's state_dict)" if nested else "")
        raise ModelLoadError(
            f"{os.path.basename(path)} is a dict but not a state_dict: entries {sorted(map(str, bad))[:5]} are not tensors{hint}")
    return sd


def _last_line(e):
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else type(e).__name__


def state_dict_problems(module, sd):
    """Missing, unexpected and mis-shaped keys of sd for module."""
    want = module.state_dict()
    missing = [k for k in want if k not in sd]
    unexpected = [k for k in sd if k not in want]
    shapes = [f"{k}: file {list(sd[k].shape)}, model {list(want[k].shape)}"
              for k in want if k in sd and tuple(sd[k].shape) != tuple(want[k].shape)]
    ps = []
    if missing:
        ps.append(f"missing keys {_few(missing)}")
    if unexpected:
        ps.append(f"unexpected keys {_few(unexpected)}")
    if shapes:
        ps.append(f"shape mismatches {_few(shapes)}")
    return ps


def _few(keys, n=8):
    if len(keys) <= n:
        return "[" + ", ".join(keys) + "]"
    return "[" + ", ".join(keys[:n]) + f", ... {len(keys) - n} more]"


def forward_arg_names(module):
    """forward()'s parameter names after self, or None with *args/**kwargs."""
    try:
        sig = inspect.signature(module.forward)
    except (TypeError, ValueError):
        return None
    names = []
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            return None
        if p.kind == p.KEYWORD_ONLY:
            continue
        names.append(p.name)
    return names


def warm_up(io, module, grad_guard):
    """Run one batch of zeros and check the outputs against the config."""
    if any(s.is_string or any(d < 0 for d in s.dims) for s in io.inputs):
        return  # no shape to make zeros of; the first request is the warm-up
    lead = [1] if io.batching else []
    tensors = [torch.zeros(lead + s.dims, dtype=torch.from_numpy(np.zeros(0, s.np_type)).dtype) for s in io.inputs]
    try:
        with grad_guard():
            result = module(*io.forward_args(tensors))
            outs = io.output_values(result)
    except Exception as e:
        shapes = {s.name: lead + s.dims for s in io.inputs}
        raise ModelLoadError(f"warm-up forward() on zeros of shapes {shapes} failed: {type(e).__name__}: {e}") from None
    for spec, v in zip(io.outputs, outs):
        if spec.is_string:
            continue
        if not isinstance(v, torch.Tensor):
            raise ModelLoadError(f"output '{spec.name}': forward() returned {type(v).__name__}, want a Tensor")
        want = torch.from_numpy(np.zeros(0, spec.np_type)).dtype
        if v.dtype != want:
            raise ModelLoadError(f"output '{spec.name}': forward() returns {v.dtype}, config.pbtxt says {spec.data_type}")
        try:
            check_output_dims(spec, v, io.batching, 1 if io.batching else None)
        except ValueError as e:
            raise ModelLoadError(str(e)) from None


def load(args, cfg):
    """Build the module and its I/O mapping for a version folder."""
    vdir = version_dir(args)
    meta = read_model_config(os.path.join(vdir, CONFIG_FILE))
    code = os.path.join(vdir, CODE_FILE)
    if not os.path.exists(code):
        raise ModelLoadError(f"{code} is missing (it defines {meta['model_class']})")
    name = f"sluice_model_{args.get('model_name', 'model')}_{args.get('model_version', '0')}"
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    try:
        user = import_model_file(code, name)
    except SyntaxError as e:
        raise ModelLoadError(f"{e.filename}:{e.lineno}:{e.offset or 0}: syntax error: {e.msg}") from None
    except Exception as e:
        raise ModelLoadError(f"import {code} failed{_where(e, code)}: {type(e).__name__}: {e}") from None
    cls = model_class(user, code, meta["model_class"])
    module = instantiate(cls, meta.get("init_args", {}), code)
    weights = os.path.join(vdir, model_filename(cfg, "model.pth", (".pth",)))
    sd = load_weights(weights)
    ps = state_dict_problems(module, sd)
    if ps:
        raise ModelLoadError(
            f"{os.path.basename(weights)} does not fit {meta['model_class']}{_init_text(meta.get('init_args', {}))}: "
            + "; ".join(ps))
    module.load_state_dict(sd, strict=True)
    module.eval()
    io = ModelIO(cfg, args.get("model_name", cfg.get("name", "")), forward_arg_names(module))
    check_input_shapes(meta["input_shape"], io)
    return module, io, meta


def _where(e, path):
    """ at <path>:<line> of the deepest traceback frame in path, if any."""
    import traceback
    line = None
    for fr in traceback.extract_tb(e.__traceback__):
        if os.path.abspath(fr.filename) == os.path.abspath(path):
            line = fr.lineno
    return f" at {path}:{line}" if line else ""


def _init_text(init_args):
    return f"({_args_text(init_args)})"


class TritonPythonModel:
    """Serves model.py + model.pth + model_config.json."""

    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        params = parameters(cfg)
        apply_thread_parameters(params)
        self.grad_guard = grad_guard_for(params)
        self.module, self.io, self.meta = load(args, cfg)
        warm_up(self.io, self.module, self.grad_guard)

    def execute(self, requests):
        return run_requests(self.io, self.module, requests, self.grad_guard)

    def finalize(self):
        self.module = None
