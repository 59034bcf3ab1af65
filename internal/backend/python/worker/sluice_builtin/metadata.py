"""model_config.json of the state_dict flow: reading and field checks.

Imports nothing beyond the standard library, so `sluice repo check` can
report field problems where torch is not installed.
"""
import json

CONFIG_FILE = "model_config.json"


class ModelLoadError(Exception):
    """A model that cannot be served; the message says why and where."""


def read_model_config(path):
    """model_config.json, with its fields' types checked."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise ModelLoadError(f"{path} is missing (the state_dict flow needs model_class, init_args and input_shape there)") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ModelLoadError(f"{path}:{e.lineno}:{e.colno}: {e.msg}") from None
    problems = config_problems(doc)
    if problems:
        raise ModelLoadError(f"{path}: " + "; ".join(problems))
    return doc


def config_problems(doc):
    """What is wrong with a decoded model_config.json, as messages."""
    if not isinstance(doc, dict):
        return [f"want a JSON object, got {_json_type(doc)}"]
    ps = []
    mc = doc.get("model_class")
    if mc is None:
        ps.append("model_class is missing (the name of the nn.Module class in model.py)")
    elif not isinstance(mc, str) or not mc.isidentifier():
        ps.append(f"model_class must be a class name string, got {json.dumps(mc)}")
    ia = doc.get("init_args", {})
    if not isinstance(ia, (dict, list)):
        ps.append(f"init_args must be an object (keyword arguments) or an array (positional), got {_json_type(ia)}")
    if "input_shape" not in doc:
        ps.append("input_shape is missing (the model's input shape, checked against config.pbtxt)")
    else:
        msg = _shape_problem(doc["input_shape"])
        if msg:
            ps.append(msg)
    for k in ("version", "git_commit"):
        if k in doc and not isinstance(doc[k], str):
            ps.append(f"{k} must be a string, got {_json_type(doc[k])}")
    return ps


def _json_type(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "an array"
    return "an object"


def is_shape(v):
    return isinstance(v, list) and all(d is None or (isinstance(d, int) and not isinstance(d, bool) and d >= -1) for d in v)


def _shape_problem(s):
    if is_shape(s):
        return None
    if isinstance(s, list) and s and all(is_shape(x) for x in s):
        return None
    if isinstance(s, dict) and s and all(isinstance(k, str) and is_shape(v) for k, v in s.items()):
        return None
    return ("input_shape must be a shape (array of ints, -1 or null for any size), an array of shapes "
            f"(one per input) or an object of shapes by input name, got {json.dumps(s)}")
