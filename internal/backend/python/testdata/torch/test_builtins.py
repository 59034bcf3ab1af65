"""Tests of the built-in PyTorch models (sluice_builtin), without the server.

Run with Debian's interpreter from the repository root:

    /usr/bin/python3 -m unittest discover -s internal/backend/python/testdata/torch -v

The worker folder comes first on sys.path, so its triton_python_backend_utils
is the one under test when it exists; the stand-in next to this file is used
otherwise. Models are built in temporary folders.
"""
import json
import os
import shutil
import sys
import tempfile
import textwrap
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.normpath(os.path.join(HERE, "..", "..", "worker"))
sys.path.insert(0, WORKER)
if not os.path.exists(os.path.join(WORKER, "triton_python_backend_utils.py")):
    sys.path.insert(1, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import triton_python_backend_utils as pb_utils  # noqa: E402
from sluice_builtin import state_dict, torchscript  # noqa: E402


def tensor(name, dtype, dims):
    return {"name": name, "data_type": dtype, "dims": dims}


def config(name, inputs, outputs, max_batch_size=8, **extra):
    c = {"name": name, "max_batch_size": max_batch_size, "input": inputs, "output": outputs}
    c.update(extra)
    return c


def request(**inputs):
    return pb_utils.InferenceRequest(
        model_name="m", inputs=[pb_utils.Tensor(k, v) for k, v in inputs.items()], requested_output_names=[])


def out(resp, name):
    if resp.has_error():
        raise AssertionError(f"response error: {resp.error().message()}")
    for t in resp.output_tensors():
        if t.name() == name:
            return t.as_numpy()
    raise AssertionError(f"no output {name} in {[t.name() for t in resp.output_tensors()]}")


def error_of(resp):
    if not resp.has_error():
        raise AssertionError("response has no error")
    return resp.error().message()


class Repo:
    """A temporary model folder with version 1."""

    def __init__(self, test):
        self.dir = tempfile.mkdtemp(prefix="sluice-builtin-")
        test.addCleanup(shutil.rmtree, self.dir)
        self.vdir = os.path.join(self.dir, "1")
        os.makedirs(self.vdir)

    def path(self, name):
        return os.path.join(self.vdir, name)

    def write(self, name, text):
        with open(self.path(name), "w", encoding="utf-8") as f:
            f.write(textwrap.dedent(text))

    def args(self, cfg):
        return {
            "model_config": json.dumps(cfg), "model_instance_kind": "CPU", "model_instance_name": "m_0",
            "model_instance_device_id": "0", "model_repository": self.dir, "model_version": "1",
            "model_name": cfg["name"],
        }


# TorchScript models used below.

class AddSub(torch.nn.Module):
    def forward(self, a, b):
        return a + b, a - b


class Swapped(torch.nn.Module):
    """Arguments named like config inputs but in another order."""

    def forward(self, second, first):
        return first - second


class RowsSeen(torch.nn.Module):
    """Each row gets the batch size the model saw, so tests see batching."""

    def forward(self, x):
        return x + 0, torch.full_like(x[:, :1], float(x.size(0)))


class DictIn(torch.nn.Module):
    def forward(self, d: dict[str, torch.Tensor]):
        return d["x"] * 2 + d["y"]


class Upper(torch.nn.Module):
    def forward(self, words: list[str]) -> list[str]:
        return [w.upper() for w in words]


class ReturnsDict(torch.nn.Module):
    def forward(self, x):
        return {"double": x * 2, "half": x / 2}


def save_script(module, path):
    torch.jit.script(module).save(path)


def load_ts(test, module, cfg):
    repo = Repo(test)
    save_script(module, repo.path("model.pt"))
    m = torchscript.TritonPythonModel()
    m.initialize(repo.args(cfg))
    return m


class TorchScriptTest(unittest.TestCase):
    def test_named_index_batched(self):
        cfg = config("addsub", [tensor("INPUT__0", "TYPE_FP32", [4]), tensor("INPUT__1", "TYPE_FP32", [4])],
                     [tensor("OUTPUT__0", "TYPE_FP32", [4]), tensor("OUTPUT__1", "TYPE_FP32", [4])])
        m = load_ts(self, AddSub(), cfg)
        a1, b1 = np.arange(4, dtype=np.float32).reshape(1, 4), np.ones((1, 4), np.float32)
        a2, b2 = np.full((2, 4), 10, np.float32), np.full((2, 4), 3, np.float32)
        r = m.execute([request(INPUT__0=a1, INPUT__1=b1), request(INPUT__0=a2, INPUT__1=b2)])
        self.assertEqual(len(r), 2)
        np.testing.assert_array_equal(out(r[0], "OUTPUT__0"), a1 + b1)
        np.testing.assert_array_equal(out(r[0], "OUTPUT__1"), a1 - b1)
        np.testing.assert_array_equal(out(r[1], "OUTPUT__0"), a2 + b2)
        np.testing.assert_array_equal(out(r[1], "OUTPUT__1"), a2 - b2)

    def test_output_index_from_names(self):
        # Config lists OUTPUT__1 first: the index, not the order, picks the value.
        cfg = config("addsub", [tensor("INPUT__0", "TYPE_INT32", [2]), tensor("INPUT__1", "TYPE_INT32", [2])],
                     [tensor("DIFF__1", "TYPE_INT32", [2]), tensor("SUM__0", "TYPE_INT32", [2])])
        m = load_ts(self, AddSub(), cfg)
        a, b = np.array([[5, 7]], np.int32), np.array([[1, 2]], np.int32)
        r = m.execute([request(INPUT__0=a, INPUT__1=b)])
        np.testing.assert_array_equal(out(r[0], "SUM__0"), a + b)
        np.testing.assert_array_equal(out(r[0], "DIFF__1"), a - b)

    def test_forward_argument_names(self):
        cfg = config("swapped", [tensor("first", "TYPE_FP32", [1]), tensor("second", "TYPE_FP32", [1])],
                     [tensor("y", "TYPE_FP32", [1])])
        m = load_ts(self, Swapped(), cfg)
        r = m.execute([request(first=np.array([[10]], np.float32), second=np.array([[3]], np.float32))])
        np.testing.assert_array_equal(out(r[0], "y"), [[7]])

    def test_strict_config_order(self):
        cfg = config("swapped", [tensor("p", "TYPE_FP32", [1]), tensor("q", "TYPE_FP32", [1])],
                     [tensor("y", "TYPE_FP32", [1])])
        m = load_ts(self, Swapped(), cfg)
        # p -> second, q -> first: y = q - p.
        r = m.execute([request(p=np.array([[10]], np.float32), q=np.array([[3]], np.float32))])
        np.testing.assert_array_equal(out(r[0], "y"), [[-7]])

    def test_requests_run_as_one_batch(self):
        cfg = config("rows", [tensor("INPUT__0", "TYPE_FP32", [3])],
                     [tensor("OUTPUT__0", "TYPE_FP32", [3]), tensor("OUTPUT__1", "TYPE_FP32", [1])])
        m = load_ts(self, RowsSeen(), cfg)
        reqs = [request(INPUT__0=np.full((n, 3), n, np.float32)) for n in (1, 2, 3)]
        r = m.execute(reqs)
        for n, resp in zip((1, 2, 3), r):
            np.testing.assert_array_equal(out(resp, "OUTPUT__0"), np.full((n, 3), n, np.float32))
            np.testing.assert_array_equal(out(resp, "OUTPUT__1"), np.full((n, 1), 6, np.float32))

    def test_batches_split_at_max_batch_size(self):
        cfg = config("rows", [tensor("INPUT__0", "TYPE_FP32", [3])],
                     [tensor("OUTPUT__0", "TYPE_FP32", [3]), tensor("OUTPUT__1", "TYPE_FP32", [1])], max_batch_size=4)
        m = load_ts(self, RowsSeen(), cfg)
        r = m.execute([request(INPUT__0=np.zeros((3, 3), np.float32)) for _ in range(2)])
        for resp in r:
            np.testing.assert_array_equal(out(resp, "OUTPUT__1"), np.full((3, 1), 3, np.float32))
        r = m.execute([request(INPUT__0=np.zeros((5, 3), np.float32))])
        self.assertIn("exceeds max_batch_size 4", error_of(r[0]))

    def test_different_shapes_run_apart(self):
        cfg = config("rows", [tensor("INPUT__0", "TYPE_FP32", [-1])],
                     [tensor("OUTPUT__0", "TYPE_FP32", [-1]), tensor("OUTPUT__1", "TYPE_FP32", [1])])
        m = load_ts(self, RowsSeen(), cfg)
        r = m.execute([request(INPUT__0=np.ones((1, 2), np.float32)), request(INPUT__0=np.ones((2, 5), np.float32)),
                       request(INPUT__0=np.ones((1, 2), np.float32))])
        np.testing.assert_array_equal(out(r[0], "OUTPUT__1"), [[2]])
        np.testing.assert_array_equal(out(r[1], "OUTPUT__1"), [[2], [2]])
        np.testing.assert_array_equal(out(r[2], "OUTPUT__1"), [[2]])
        self.assertEqual(out(r[1], "OUTPUT__0").shape, (2, 5))

    def test_no_batching_runs_each_request_alone(self):
        cfg = config("rows", [tensor("INPUT__0", "TYPE_FP32", [2, 3])],
                     [tensor("OUTPUT__0", "TYPE_FP32", [2, 3]), tensor("OUTPUT__1", "TYPE_FP32", [2, 1])],
                     max_batch_size=0)
        m = load_ts(self, RowsSeen(), cfg)
        r = m.execute([request(INPUT__0=np.zeros((2, 3), np.float32)) for _ in range(3)])
        for resp in r:
            np.testing.assert_array_equal(out(resp, "OUTPUT__1"), [[2], [2]])

    def test_dict_input(self):
        cfg = config("dict", [tensor("x", "TYPE_FP32", [2]), tensor("y", "TYPE_FP32", [2])],
                     [tensor("OUTPUT__0", "TYPE_FP32", [2])])
        m = load_ts(self, DictIn(), cfg)
        r = m.execute([request(x=np.array([[1, 2]], np.float32), y=np.array([[10, 20]], np.float32))])
        np.testing.assert_array_equal(out(r[0], "OUTPUT__0"), [[12, 24]])

    def test_dict_output(self):
        cfg = config("dictout", [tensor("x", "TYPE_FP32", [1])],
                     [tensor("half", "TYPE_FP32", [1]), tensor("double", "TYPE_FP32", [1])])
        m = load_ts(self, ReturnsDict(), cfg)
        r = m.execute([request(x=np.array([[4]], np.float32))])
        np.testing.assert_array_equal(out(r[0], "half"), [[2]])
        np.testing.assert_array_equal(out(r[0], "double"), [[8]])

    def test_strings(self):
        cfg = config("upper", [tensor("INPUT__0", "TYPE_STRING", [])], [tensor("OUTPUT__0", "TYPE_STRING", [])],
                     max_batch_size=4)
        m = load_ts(self, Upper(), cfg)
        r = m.execute([request(INPUT__0=np.array([b"ab", b"c"], dtype=object)),
                       request(INPUT__0=np.array(["d\u00e9".encode()], dtype=object))])
        self.assertEqual(list(out(r[0], "OUTPUT__0")), [b"AB", b"C"])
        self.assertEqual(list(out(r[1], "OUTPUT__0")), ["D\u00e9".encode()])  # TorchScript's upper() is ASCII-only

    def test_bad_requests_fail_alone(self):
        cfg = config("addsub", [tensor("INPUT__0", "TYPE_FP32", [4]), tensor("INPUT__1", "TYPE_FP32", [4])],
                     [tensor("OUTPUT__0", "TYPE_FP32", [4]), tensor("OUTPUT__1", "TYPE_FP32", [4])])
        m = load_ts(self, AddSub(), cfg)
        good = request(INPUT__0=np.ones((1, 4), np.float32), INPUT__1=np.ones((1, 4), np.float32))
        wrong_type = request(INPUT__0=np.ones((1, 4), np.float64), INPUT__1=np.ones((1, 4), np.float32))
        missing = request(INPUT__0=np.ones((1, 4), np.float32))
        r = m.execute([wrong_type, good, missing])
        self.assertIn("INPUT__0", error_of(r[0]))
        self.assertIn("FP32", error_of(r[0]))
        np.testing.assert_array_equal(out(r[1], "OUTPUT__0"), np.full((1, 4), 2, np.float32))
        self.assertIn("input 'INPUT__1' is missing", error_of(r[2]))

    def test_model_error_reported_per_request(self):
        cfg = config("addsub", [tensor("INPUT__0", "TYPE_FP32", [-1]), tensor("INPUT__1", "TYPE_FP32", [-1])],
                     [tensor("OUTPUT__0", "TYPE_FP32", [-1]), tensor("OUTPUT__1", "TYPE_FP32", [-1])])
        m = load_ts(self, AddSub(), cfg)
        r = m.execute([request(INPUT__0=np.ones((1, 3), np.float32), INPUT__1=np.ones((1, 4), np.float32))])
        self.assertIn("PyTorch execute failure", error_of(r[0]))

    def test_output_type_mismatch(self):
        cfg = config("addsub", [tensor("INPUT__0", "TYPE_FP32", [1]), tensor("INPUT__1", "TYPE_FP32", [1])],
                     [tensor("OUTPUT__0", "TYPE_INT64", [1]), tensor("OUTPUT__1", "TYPE_FP32", [1])])
        m = load_ts(self, AddSub(), cfg)
        r = m.execute([request(INPUT__0=np.ones((1, 1), np.float32), INPUT__1=np.ones((1, 1), np.float32))])
        self.assertIn("output 'OUTPUT__0'", error_of(r[0]))
        self.assertIn("TYPE_INT64", error_of(r[0]))

    def test_load_errors(self):
        cfg2 = config("addsub", [tensor("INPUT__0", "TYPE_FP32", [4])], [tensor("OUTPUT__0", "TYPE_FP32", [4])])
        cases = [
            ("missing", None, cfg2, "is missing"),
            ("garbage", b"not a zip", cfg2, "not a TorchScript archive"),
            ("arity", AddSub(), cfg2, "config.pbtxt has 1 input(s) ['INPUT__0'], the model's forward() takes 2"),
            ("uint16", AddSub(), config("u", [tensor("INPUT__0", "TYPE_UINT16", [1]), tensor("INPUT__1", "TYPE_FP32", [1])],
                                         [tensor("OUTPUT__0", "TYPE_FP32", [1])]), "TYPE_UINT16 is not supported"),
            ("2d strings", Upper(), config("s", [tensor("INPUT__0", "TYPE_STRING", [2])],
                                            [tensor("OUTPUT__0", "TYPE_STRING", [-1])]), "1-D List[str]"),
        ]
        for name, content, cfg, want in cases:
            with self.subTest(name):
                repo = Repo(self)
                if isinstance(content, bytes):
                    with open(repo.path("model.pt"), "wb") as f:
                        f.write(content)
                elif content is not None:
                    save_script(content, repo.path("model.pt"))
                m = torchscript.TritonPythonModel()
                with self.assertRaises(torchscript.ModelLoadError) as cm:
                    m.initialize(repo.args(cfg))
                self.assertIn(want, str(cm.exception))

    def test_protojson_spelling(self):
        # camelCase keys and int64 dims as strings, as protojson writes them.
        cfg = {"name": "addsub", "maxBatchSize": 8,
               "input": [{"name": "INPUT__0", "dataType": "TYPE_FP32", "dims": ["2"]},
                         {"name": "INPUT__1", "dataType": "TYPE_FP32", "dims": ["2"]}],
               "output": [{"name": "OUTPUT__0", "dataType": "TYPE_FP32", "dims": ["2"]},
                          {"name": "OUTPUT__1", "dataType": "TYPE_FP32", "dims": ["2"]}],
               "parameters": {"INTRA_OP_THREAD_COUNT": {"stringValue": "1"}}}
        m = load_ts(self, AddSub(), cfg)
        r = m.execute([request(INPUT__0=np.ones((2, 2), np.float32), INPUT__1=np.ones((2, 2), np.float32))])
        np.testing.assert_array_equal(out(r[0], "OUTPUT__0"), np.full((2, 2), 2, np.float32))


MLP_PY = """
import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, n_in, hidden=4):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, 1)

    def forward(self, features):
        return self.head(self.body(features))
"""


class StateDictTest(unittest.TestCase):
    def setUp(self):
        self.cfg = config("mlp", [tensor("features", "TYPE_FP32", [3])], [tensor("score", "TYPE_FP32", [1])])

    def repo(self, meta=None, weights="good", code=MLP_PY):
        repo = Repo(self)
        repo.write("model.py", code)
        if meta is None:
            meta = {"model_class": "MLP", "init_args": {"n_in": 3}, "input_shape": [-1, 3],
                    "version": "1.0.0", "git_commit": "a" * 40}
        if meta is not False:
            repo.write("model_config.json", json.dumps(meta, indent=2))
        # A real module, so torch.save(model) can pickle the class by name.
        mlp = types.ModuleType("sluice_test_mlp")
        exec(compile(textwrap.dedent(MLP_PY), "mlp", "exec"), mlp.__dict__)
        sys.modules[mlp.__name__] = mlp
        ns = mlp.__dict__
        torch.manual_seed(0)
        self.reference = ns["MLP"](3).eval()
        if weights == "good":
            torch.save(self.reference.state_dict(), repo.path("model.pth"))
        elif weights == "pickle":
            torch.save(self.reference, repo.path("model.pth"))
        elif weights == "wider":
            torch.save(ns["MLP"](3, hidden=5).state_dict(), repo.path("model.pth"))
        elif weights == "renamed":
            sd = self.reference.state_dict()
            sd["extra.weight"] = sd.pop("head.weight")
            torch.save(sd, repo.path("model.pth"))
        elif weights == "checkpoint":
            torch.save({"model": self.reference.state_dict(), "epoch": torch.tensor(3)}, repo.path("model.pth"))
        return repo

    def load(self, repo, cfg=None):
        m = state_dict.TritonPythonModel()
        m.initialize(repo.args(cfg or self.cfg))
        return m

    def load_error(self, repo, cfg=None):
        with self.assertRaises(torchscript.ModelLoadError) as cm:
            self.load(repo, cfg)
        return str(cm.exception)

    def test_serves_like_the_module(self):
        m = self.load(self.repo())
        x1 = np.random.default_rng(1).standard_normal((1, 3)).astype(np.float32)
        x2 = np.random.default_rng(2).standard_normal((3, 3)).astype(np.float32)
        r = m.execute([request(features=x1), request(features=x2)])
        with torch.no_grad():
            for x, resp in ((x1, r[0]), (x2, r[1])):
                np.testing.assert_allclose(out(resp, "score"), self.reference(torch.from_numpy(x)).numpy(), rtol=0, atol=1e-6)

    def test_full_pickle_refused(self):
        msg = self.load_error(self.repo(weights="pickle"))
        self.assertIn("model.pth holds a pickled model object, not a state_dict: save model.state_dict()", msg)

    def test_checkpoint_dict_refused(self):
        msg = self.load_error(self.repo(weights="checkpoint"))
        self.assertIn("not a state_dict", msg)

    def test_keys_listed(self):
        msg = self.load_error(self.repo(weights="renamed"))
        self.assertIn("missing keys [head.weight]", msg)
        self.assertIn("unexpected keys [extra.weight]", msg)
        msg = self.load_error(self.repo(weights="wider"))
        self.assertIn("shape mismatches", msg)
        self.assertIn("body.0.weight: file [5, 3], model [4, 3]", msg)

    def test_input_shape_mismatch(self):
        meta = {"model_class": "MLP", "init_args": {"n_in": 3}, "input_shape": [1, 4]}
        msg = self.load_error(self.repo(meta=meta))
        self.assertIn("input_shape [1, 4] for input 'features' does not match config.pbtxt dims [3]", msg)

    def test_input_shape_forms(self):
        for shape in ([3], [1, 3], [None, 3], [[-1, 3]], {"features": [3]}):
            with self.subTest(shape=shape):
                self.load(self.repo(meta={"model_class": "MLP", "init_args": [3], "input_shape": shape}))

    def test_output_dims_checked_at_warm_up(self):
        cfg = config("mlp", [tensor("features", "TYPE_FP32", [3])], [tensor("score", "TYPE_FP32", [2])])
        msg = self.load_error(self.repo(), cfg)
        self.assertIn("output 'score' has shape [1, 1], config.pbtxt says dims [2]", msg)

    def test_config_fields(self):
        cases = [
            ({"init_args": {}, "input_shape": [3]}, "model_class is missing"),
            ({"model_class": "MLP", "init_args": {"n_in": 3}}, "input_shape is missing"),
            ({"model_class": 7, "input_shape": [3]}, "model_class must be a class name string"),
            ({"model_class": "MLP", "init_args": "n_in=3", "input_shape": [3]}, "init_args must be an object"),
            ({"model_class": "MLP", "init_args": [3], "input_shape": "3"}, "input_shape must be a shape"),
            ({"model_class": "MLP", "init_args": [3], "input_shape": [3], "git_commit": 12}, "git_commit must be a string"),
            ({"model_class": "Nope", "init_args": [3], "input_shape": [3]}, "defines no class Nope"),
            ({"model_class": "MLP", "init_args": {"width": 3}, "input_shape": [3]}, "MLP(width=3) failed"),
        ]
        for meta, want in cases:
            with self.subTest(want):
                self.assertIn(want, self.load_error(self.repo(meta=meta)))
        self.assertIn("model_config.json is missing", self.load_error(self.repo(meta=False)))

    def test_syntax_error_located(self):
        repo = self.repo(code=MLP_PY.replace("def forward(self, features):", "def forward(self, features)"))
        msg = self.load_error(repo)
        self.assertRegex(msg, r"model\.py:12:\d+: syntax error")

    def test_import_error_located(self):
        repo = self.repo(code=MLP_PY + "\nraise ValueError('boom')\n")
        msg = self.load_error(repo)
        self.assertRegex(msg, r"model\.py:15: ValueError: boom")


def run_check(vdir, cfg, kind=""):
    """sluice_check.py's answer for one version folder."""
    import subprocess

    req = json.dumps({"kind": kind, "version_dir": vdir, "model_config": cfg})
    p = subprocess.run([sys.executable, os.path.join(WORKER, "sluice_check.py")], input=req.encode(),
                       capture_output=True, timeout=120, check=False)
    if p.returncode != 0:
        raise AssertionError(f"sluice_check.py exited {p.returncode}: {p.stderr.decode()}")
    return json.loads(p.stdout)


def located(problems):
    return [f"{os.path.basename(p['file'])}:{p['line']}:{p['col']}: {p['msg']}" for p in problems]


class CheckTest(unittest.TestCase):
    """sluice_check.py, the script behind `sluice repo check` for these models."""

    def test_python_model(self):
        cases = [
            ("good", "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n", []),
            ("syntax", "import numpy\n\nclass TritonPythonModel:\n    def execute(self, requests)\n        return []\n",
             ["model.py:4:32: syntax error: expected ':'"]),
            ("no class", "class Model:\n    pass\n", ["model.py:1:1: defines no class TritonPythonModel"]),
            ("no execute", "class TritonPythonModel:\n    def initialize(self, args):\n        pass\n",
             ["model.py:1:1: class TritonPythonModel has no execute(self, requests) method"]),
        ]
        for name, code, want in cases:
            with self.subTest(name):
                repo = Repo(self)
                repo.write("model.py", code)
                got = located(run_check(repo.vdir, {"name": "m", "backend": "python"})["problems"])
                self.assertEqual(len(got), len(want), got)
                for g, w in zip(got, want):
                    self.assertTrue(g.startswith(w), f"{g!r} does not start with {w!r}")

    def test_torchscript(self):
        cfg = config("addsub", [tensor("INPUT__0", "TYPE_FP32", [4]), tensor("INPUT__1", "TYPE_FP32", [4])],
                     [tensor("OUTPUT__0", "TYPE_FP32", [4])], backend="pytorch")
        repo = Repo(self)
        save_script(AddSub(), repo.path("model.pt"))
        ans = run_check(repo.vdir, cfg)
        self.assertEqual(ans["kind"], "torchscript")
        self.assertEqual(ans["problems"], [])
        cfg["input"] = cfg["input"][:1]
        self.assertIn("the model's forward() takes 2", located(run_check(repo.vdir, cfg)["problems"])[0])
        with open(repo.path("model.pt"), "wb") as f:
            f.write(b"junk")
        self.assertIn("not a TorchScript archive", located(run_check(repo.vdir, cfg)["problems"])[0])

    def test_state_dict(self):
        cfg = config("mlp", [tensor("features", "TYPE_FP32", [3])], [tensor("score", "TYPE_FP32", [1])],
                     backend="pytorch")
        sdt = StateDictTest("test_serves_like_the_module")
        sdt.setUp()
        try:
            good = sdt.repo()
            ans = run_check(good.vdir, cfg)
            self.assertEqual((ans["kind"], ans["problems"]), ("state_dict", []))

            got = located(run_check(sdt.repo(weights="renamed").vdir, cfg)["problems"])
            self.assertEqual(len(got), 1, got)
            self.assertRegex(got[0], r"^model\.py:6:1: class MLP's parameters do not match model\.pth: "
                                     r"missing keys \[head\.weight\]; unexpected keys \[extra\.weight\]")

            got = located(run_check(sdt.repo(weights="pickle").vdir, cfg)["problems"])
            self.assertIn("model.pth holds a pickled model object, not a state_dict", got[0])

            broken = sdt.repo(code=MLP_PY.replace("nn.ReLU())", "nn.ReLU()"))
            got = located(run_check(broken.vdir, cfg)["problems"])
            self.assertEqual(len(got), 1, got)
            self.assertRegex(got[0], r"^model\.py:9:\d+: syntax error")

            # json.dumps(indent=2) puts each list item on its own line:
            # model_class is on line 2, init_args 3-5, input_shape 6-9.
            meta = {"model_class": "MLP", "init_args": {"n_in": 3}, "input_shape": [1, 4], "git_commit": 5}
            got = located(run_check(sdt.repo(meta=meta).vdir, cfg)["problems"])
            self.assertEqual(got, ["model_config.json:10:3: git_commit must be a string, got a number"])
            del meta["git_commit"]
            got = located(run_check(sdt.repo(meta=meta).vdir, cfg)["problems"])
            self.assertEqual(len(got), 1, got)
            self.assertRegex(got[0], r"^model_config\.json:6:3: model_config.json input_shape \[1, 4\] for input "
                                     r"'features' does not match config.pbtxt dims \[3\]")
            meta = {"model_class": "Nope", "init_args": {}, "input_shape": [3]}
            got = located(run_check(sdt.repo(meta=meta).vdir, cfg)["problems"])
            self.assertEqual(got, ["model_config.json:2:3: model_class Nope: model.py defines no such class"])
        finally:
            sdt.doCleanups()


if __name__ == "__main__":
    unittest.main()
