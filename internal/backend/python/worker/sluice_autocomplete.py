"""Runs a Python model's TritonPythonModel.auto_complete_config at load.

Usage: python3 sluice_autocomplete.py < request.json

The request is {"model_file": "<version>/model.py", "model_config": {...}},
the configuration so far in Triton's JSON names. The answer on stdout is

  {"defined": false}                      the class has no auto_complete_config
  {"defined": true, "model_config": {...}} the completed configuration
  {"error": "...", "traceback": "..."}    importing model.py or the call failed

and the exit status is 0 whenever an answer was written. model.py is
imported as the worker imports it (its folder on sys.path, module name
"model"), so its top-level code runs here too.
"""
import importlib.util
import json
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)  # triton_python_backend_utils


def where(exc, path):
    """" (model.py:LINE)" for the deepest frame in path, or ""."""
    line = None
    for fr in traceback.extract_tb(exc.__traceback__):
        if os.path.abspath(fr.filename) == os.path.abspath(path):
            line = fr.lineno
    return "" if line is None else " (%s:%d)" % (os.path.basename(path), line)


def complete(req):
    path = req["model_file"]
    cfg = req.get("model_config") or {}
    vdir = os.path.dirname(os.path.abspath(path))
    if vdir not in sys.path:
        sys.path.insert(0, vdir)
    try:
        import triton_python_backend_utils as pb  # noqa: PLC0415

        spec = importlib.util.spec_from_file_location("model", path)
        if spec is None or spec.loader is None:
            return {"error": "cannot load %s as a Python module" % path}
        module = importlib.util.module_from_spec(spec)
        sys.modules["model"] = module
        spec.loader.exec_module(module)
    except BaseException as e:  # noqa: BLE001 - everything a model does wrong is reported
        return {"error": "import %s: %s: %s%s" % (os.path.basename(path), type(e).__name__, e, where(e, path)),
                "traceback": traceback.format_exc()}
    cls = getattr(module, "TritonPythonModel", None)
    fn = getattr(cls, "auto_complete_config", None) if cls is not None else None
    if fn is None:
        return {"defined": False}
    try:
        got = fn(pb.ModelConfig(cfg))
    except BaseException as e:  # noqa: BLE001
        return {"error": "%s: %s%s" % (type(e).__name__, e, where(e, path)), "traceback": traceback.format_exc()}
    if not isinstance(got, pb.ModelConfig):
        return {"error": "auto_complete_config returned %s; it must return the ModelConfig it was given" % type(got).__name__}
    return {"defined": True, "model_config": got.as_dict()}


def main():
    req = json.load(sys.stdin)
    # What model code prints goes to stderr: stdout carries the answer only.
    out, sys.stdout = sys.stdout, sys.stderr
    ans = complete(req)
    json.dump(ans, out)
    out.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
