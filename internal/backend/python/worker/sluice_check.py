"""Offline checks of Python and PyTorch model versions for `sluice repo check`.

Usage: python3 sluice_check.py < request.json

The request is a JSON object:

  {"kind": "python" | "torchscript" | "state_dict" | "",   "" = pick from the files
   "version_dir": "<model>/<version>",
   "model_config": {... the model configuration, Triton's JSON names ...}}

The answer on stdout is {"problems": [{"file", "line", "col", "msg"}, ...]}
(line and col 0 when unknown). The exit status is 0 whenever the answer was
written, problems or not.

What is checked, without serving the model:
  python       model.py compiles (a syntax error with its file:line:col) and
               defines a class TritonPythonModel with an execute method; the
               file is parsed, never run
  torchscript  torch.jit.load reads model.pt, and forward()'s arguments fit
               the config's inputs under Triton's naming rules
  state_dict   model_config.json parses and its fields have the right types
               (at their line), model.py compiles and defines model_class,
               the class can be built with init_args, model.pth is a
               state_dict (not a pickled model) whose keys and shapes match
               the class's parameters, input_shape matches the config, and a
               warm-up batch's outputs match the config
"""
import ast
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)  # sluice_builtin and triton_python_backend_utils


class Problems:
    def __init__(self):
        self.items = []

    def add(self, file, msg, line=0, col=0):
        self.items.append({"file": file, "line": int(line or 0), "col": int(col or 0), "msg": msg})


def pick_kind(vdir, cfg):
    backend = cfg.get("backend", "")
    platform = cfg.get("platform", "")
    if backend == "python":
        return "python"
    if backend == "pytorch" or platform == "pytorch_libtorch":
        default = cfg.get("default_model_filename") or cfg.get("defaultModelFilename") or ""
        if default.endswith(".pt") or os.path.exists(os.path.join(vdir, "model.pt")):
            return "torchscript"
        if os.path.exists(os.path.join(vdir, "model.pth")) or os.path.exists(os.path.join(vdir, "model_config.json")):
            return "state_dict"
        return "torchscript"
    return "python"


def parse_python(path, ps):
    """model.py's AST, or None after reporting why not."""
    try:
        with open(path, "rb") as f:
            src = f.read()
    except FileNotFoundError:
        ps.add(path, "model file is missing")
        return None
    except OSError as e:
        ps.add(path, f"read: {e.strerror}")
        return None
    try:
        return ast.parse(src, filename=path)
    except SyntaxError as e:
        ps.add(path, f"syntax error: {e.msg}", e.lineno or 0, e.offset or 0)
    except ValueError as e:  # null bytes
        ps.add(path, f"not Python source: {e}")
    return None


def top_level_class(tree, name):
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    return None


def check_python(vdir, cfg, ps):
    path = os.path.join(vdir, cfg.get("default_model_filename") or "model.py")
    tree = parse_python(path, ps)
    if tree is None:
        return
    cls = top_level_class(tree, "TritonPythonModel")
    if cls is None:
        assigned = any(isinstance(n, (ast.Assign, ast.ImportFrom, ast.Import)) and
                       "TritonPythonModel" in ast.dump(n) for n in tree.body)
        if not assigned:
            ps.add(path, "defines no class TritonPythonModel (Triton's Python backend contract)", 1, 1)
        return
    methods = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if "execute" not in methods and not cls.bases:
        ps.add(path, "class TritonPythonModel has no execute(self, requests) method", cls.lineno, cls.col_offset + 1)
    check_unsupported(tree, cfg, path, ps)


# What the server refuses when a model calls it: the attribute or function
# name, and why.
UNSUPPORTED_CALLS = {
    "stream_exec": "streaming BLS requests (stream_exec) are not supported by Sluice's Python backend",
    "load_model": "the model loading API (load_model) is not supported by Sluice's Python backend",
    "unload_model": "the model loading API (unload_model) is not supported by Sluice's Python backend",
    "is_model_ready": "the model loading API (is_model_ready) is not supported by Sluice's Python backend",
}


def check_unsupported(tree, cfg, path, ps):
    """Reports calls the server would refuse when the model makes them:
    the constructs Sluice's Python backend does not support and a response
    sender in a model that is not decoupled."""
    decoupled = bool((cfg.get("model_transaction_policy") or {}).get("decoupled"))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        where = (node.lineno, node.col_offset + 1)
        if name in UNSUPPORTED_CALLS:
            ps.add(path, UNSUPPORTED_CALLS[name], *where)
        elif name == "get_response_sender" and not decoupled:
            ps.add(path, "get_response_sender() needs a decoupled model: set model_transaction_policy { decoupled: true }", *where)


def import_torch(path, ps):
    try:
        import torch  # noqa: F401
    except ImportError:
        ps.add(path, f"cannot check: torch is not installed for {sys.executable} (install the Debian package python3-torch)")
        return False
    return True


def check_torchscript(vdir, cfg, ps):
    default = cfg.get("default_model_filename") or cfg.get("defaultModelFilename") or ""
    path = os.path.join(vdir, default if default.endswith((".pt", ".pts", ".torchscript")) else "model.pt")
    if not os.path.exists(path):
        ps.add(path, "model file is missing")
        return
    if not import_torch(path, ps):
        return
    import torch

    from sluice_builtin import torchscript as ts

    try:
        module = torch.jit.load(path, map_location="cpu")
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        ps.add(path, f"not a TorchScript archive torch.jit.load can read: {first}")
        return
    try:
        names, dict_input = ts._schema_args(module)
        ts.ModelIO(cfg, cfg.get("name", ""), names, dict_input)
    except ts.ModelLoadError as e:
        ps.add(path, str(e))


def key_position(text, key):
    """Line and column of "key": in a JSON text, or (0, 0)."""
    m = re.search(r'"%s"\s*:' % re.escape(key), text)
    if not m:
        return 0, 0
    line = text.count("\n", 0, m.start()) + 1
    col = m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
    return line, col


# Which model_config.json field each problem message is about.
_FIELDS = ("model_class", "init_args", "input_shape", "version", "git_commit")


def check_state_dict(vdir, cfg, ps):
    meta_path = os.path.join(vdir, "model_config.json")
    code_path = os.path.join(vdir, "model.py")
    try:
        with open(meta_path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        ps.add(meta_path, "model_config.json is missing (the state_dict flow needs model_class, init_args and input_shape)")
        parse_python(code_path, ps)
        return
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as e:
        ps.add(meta_path, e.msg, e.lineno, e.colno)
        parse_python(code_path, ps)
        return
    from sluice_builtin.metadata import config_problems  # no torch needed

    field_problems = config_problems(meta)
    for msg in field_problems:
        key = next((k for k in _FIELDS if msg.startswith(k)), None)
        line, col = key_position(text, key) if key else (1, 1)
        ps.add(meta_path, msg, line or 1, col or 1)
    tree = parse_python(code_path, ps)
    if field_problems or tree is None:
        return
    cls_node = top_level_class(tree, meta["model_class"])
    if cls_node is None:
        line, col = key_position(text, "model_class")
        ps.add(meta_path, f"model_class {meta['model_class']}: model.py defines no such class", line, col)
        return
    weights = os.path.join(vdir, "model.pth")
    if not os.path.exists(weights):
        ps.add(weights, "model file is missing (the state_dict: torch.save(model.state_dict(), 'model.pth'))")
        return
    if not import_torch(weights, ps):
        return
    from sluice_builtin import state_dict as sd
    from sluice_builtin import torchscript as ts

    if vdir not in sys.path:
        sys.path.insert(0, vdir)
    try:
        user = sd.import_model_file(code_path, "sluice_check_model")
        cls = sd.model_class(user, code_path, meta["model_class"])
        module = sd.instantiate(cls, meta.get("init_args", {}), code_path)
    except ts.ModelLoadError as e:
        ps.add(code_path, str(e), cls_node.lineno, cls_node.col_offset + 1)
        return
    except Exception as e:  # running model.py's top level failed
        ps.add(code_path, f"import failed: {type(e).__name__}: {e}", _line_in(e, code_path) or 1, 1)
        return
    try:
        state = sd.load_weights(weights)
    except ts.ModelLoadError as e:
        ps.add(weights, str(e))
        return
    mismatch = sd.state_dict_problems(module, state)
    if mismatch:
        ps.add(code_path, f"class {meta['model_class']}'s parameters do not match model.pth: " + "; ".join(mismatch),
               cls_node.lineno, cls_node.col_offset + 1)
        return
    module.load_state_dict(state, strict=True)
    module.eval()
    try:
        io = ts.ModelIO(cfg, cfg.get("name", ""), sd.forward_arg_names(module))
    except ts.ModelLoadError as e:
        ps.add(code_path, str(e), cls_node.lineno, cls_node.col_offset + 1)
        return
    try:
        sd.check_input_shapes(meta["input_shape"], io)
    except ts.ModelLoadError as e:
        line, col = key_position(text, "input_shape")
        ps.add(meta_path, str(e), line, col)
        return
    import torch

    try:
        sd.warm_up(io, module, torch.inference_mode)
    except ts.ModelLoadError as e:
        ps.add(code_path, str(e), cls_node.lineno, cls_node.col_offset + 1)


def _line_in(e, path):
    import traceback

    line = None
    for fr in traceback.extract_tb(e.__traceback__):
        if os.path.abspath(fr.filename) == os.path.abspath(path):
            line = fr.lineno
    return line


def main():
    req = json.load(sys.stdin)
    vdir = req["version_dir"]
    cfg = req.get("model_config") or {}
    kind = req.get("kind") or pick_kind(vdir, cfg)
    ps = Problems()
    check = {"python": check_python, "torchscript": check_torchscript, "state_dict": check_state_dict}.get(kind)
    if check is None:
        ps.add(vdir, f"unknown check kind {kind!r}")
    else:
        check(vdir, cfg, ps)
    json.dump({"kind": kind, "problems": ps.items}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
