#!/usr/bin/python3
"""Regenerate Sluice's example models, reference outputs and request bodies.

Run from the repository root with Debian's interpreter (it has python3-torch,
python3-onnx and python3-sklearn; a pyenv python usually does not):

    /usr/bin/python3 scripts/make_models.py

Everything is seeded and trained for a fixed number of steps on one thread,
so a rerun on the same machine writes the same weights. It writes:

  examples/models/simple/        INT32 sum and difference (Triton's classic "simple")
  examples/models/parcel_eta/    FP32 MLP, versions 1 and 2 with different weights,
                                 each with model_config.json and SHA256SUMS
  examples/models/digits/        small CNN on scikit-learn's bundled 8x8 digits
  examples/models/route_ranker/  compute-bound FP32 scorer (a deep MLP whose hidden
                                 layers share one weight matrix, kept in FP16 on disk)
                                 for dynamic batching: about 1 ms a request at batch 1
  examples/reference/            PyTorch outputs for parcel_eta, route_ranker and the
                                 held-out digits
  examples/requests/             KServe v2 JSON and binary-extension request bodies
  examples/torchscript/          TorchScript parcel_eta (version 2 weights) for the
                                 Flask benchmark peer
  internal/backend/onnxruntime/testdata/
                                 tiny graphs built with onnx.helper that exercise the
                                 backend's data type conversions

Environment: ETA_STEPS_V1, ETA_STEPS_V2, DIGITS_EPOCHS, RANKER_STEPS override
training length. Arguments name the models to build (simple, parcel_eta,
digits, route_ranker, backend_testdata); none builds them all.
"""
import hashlib
import json
import os
import sys
import time

import numpy as np
import onnx
import torch
import torch.nn as nn
from onnx import TensorProto, helper, numpy_helper
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "examples", "models")
REFERENCE = os.path.join(ROOT, "examples", "reference")
REQUESTS = os.path.join(ROOT, "examples", "requests")
TORCHSCRIPT = os.path.join(ROOT, "examples", "torchscript")
BACKEND_TESTDATA = os.path.join(ROOT, "internal", "backend", "onnxruntime", "testdata")

OPSET = 14
MAX_ONNX_BYTES = 2 * 1024 * 1024


def write_text(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def write_json(path, obj, indent=None):
    sep = (",", ":") if indent is None else (",", ": ")
    write_text(path, json.dumps(obj, indent=indent, separators=sep) + "\n")


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def check_onnx(path, want_types=None):
    """Run onnx.checker, enforce the size budget and report the graph."""
    m = onnx.load(path)
    onnx.checker.check_model(m)
    size = os.path.getsize(path)
    if size > MAX_ONNX_BYTES:
        raise SystemExit(f"{path}: {size} bytes is over the {MAX_ONNX_BYTES} byte budget")
    if want_types:
        for vi in list(m.graph.input) + list(m.graph.output):
            got = vi.type.tensor_type.elem_type
            want = want_types[vi.name]
            if got != want:
                raise SystemExit(f"{path}: {vi.name} has element type "
                                 f"{TensorProto.DataType.Name(got)}, want "
                                 f"{TensorProto.DataType.Name(want)}")
    ops = sorted({n.op_type for n in m.graph.node})
    rel = os.path.relpath(path, ROOT)
    print(f"  {rel}: opset {m.opset_import[0].version}, {size} bytes, ops {ops}")


def export(model, args, path, inputs, outputs):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    model.eval()
    torch.onnx.export(
        model, args, path, opset_version=OPSET,
        input_names=inputs, output_names=outputs,
        dynamic_axes={n: {0: "batch"} for n in inputs + outputs},
        do_constant_folding=True)


def config_tensor(name, type_, dims):
    return (f'  {{ name: "{name}" data_type: {type_} '
            f'dims: [ {", ".join(str(d) for d in dims)} ] }}')


def write_config(model, header, max_batch, inputs, outputs, extra=()):
    """Write a hand-shaped Triton config.pbtxt; extra lines go after the outputs."""
    lines = [f'name: "{model}"', header, f"max_batch_size: {max_batch}",
             "input ["]
    lines.append(",\n".join(config_tensor(*t) for t in inputs))
    lines += ["]", "output ["]
    lines.append(",\n".join(config_tensor(*t) for t in outputs))
    lines += ["]", *extra,
              "instance_group [ { kind: KIND_CPU count: 1 } ]",
              "parameters {",
              '  key: "intra_op_thread_count"',
              '  value: { string_value: "1" }',
              "}"]
    write_text(os.path.join(MODELS, model, "config.pbtxt"), "\n".join(lines) + "\n")


def binary_request(path, tensors, outputs):
    """Write a binary-tensor-extension body and its header length.

    tensors: list of (name, datatype, shape, numpy array). The JSON header
    names each input with binary_data_size; the raw little-endian data follow
    in the same order.
    """
    header = {
        "inputs": [{"name": n, "shape": list(s), "datatype": dt,
                    "parameters": {"binary_data_size": int(a.nbytes)}}
                   for n, dt, s, a in tensors],
        "outputs": [{"name": n} for n in outputs],
        "parameters": {"binary_data_output": True},
    }
    head = json.dumps(header, separators=(",", ":")).encode()
    body = head + b"".join(a.astype(a.dtype.newbyteorder("<")).tobytes()
                           for _, _, _, a in tensors)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(body)
    write_text(path + ".header-length", f"{len(head)}\n")


def json_values(a):
    """Tensor values for JSON; FP32 as the shortest text that reads back exactly."""
    if a.dtype == np.float32:
        return [float(str(x)) for x in a.reshape(-1)]
    return a.reshape(-1).tolist()


def json_request(path, tensors):
    body = {"inputs": [{"name": n, "shape": list(s), "datatype": dt,
                        "data": json_values(a)}
                       for n, dt, s, a in tensors]}
    write_json(path, body)


# --------------------------------------------------------------------------
# simple: Triton's classic add/sub model, INT32 in and out.

class AddSub(nn.Module):
    def forward(self, a, b):
        return a + b, a - b


def make_simple():
    print("simple")
    inputs, outputs = ["INPUT0", "INPUT1"], ["OUTPUT0", "OUTPUT1"]
    a = torch.arange(32, dtype=torch.int32).reshape(2, 16)
    b = torch.ones(2, 16, dtype=torch.int32)
    path = os.path.join(MODELS, "simple", "1", "model.onnx")
    export(AddSub(), (a, b), path, inputs, outputs)
    check_onnx(path, {n: TensorProto.INT32 for n in inputs + outputs})
    write_config("simple", 'platform: "onnxruntime_onnx"', 8,
                 [(n, "TYPE_INT32", [16]) for n in inputs],
                 [(n, "TYPE_INT32", [16]) for n in outputs])

    in0 = np.arange(1, 17, dtype=np.int32).reshape(1, 16)
    in1 = np.ones((1, 16), dtype=np.int32)
    tensors = [("INPUT0", "INT32", [1, 16], in0), ("INPUT1", "INT32", [1, 16], in1)]
    json_request(os.path.join(REQUESTS, "simple.json"), tensors)
    binary_request(os.path.join(REQUESTS, "simple.bin"), tensors, outputs)


# --------------------------------------------------------------------------
# parcel_eta: a tabular MLP with three feature groups and two heads.

ETA_INPUTS = [("user_features", 128), ("package_features", 64), ("route_features", 32)]
ETA_OUTPUTS = ["eta_prediction", "confidence_score"]


class ParcelETA(nn.Module):
    """Per-group encoders, a shared trunk, an ETA head and a confidence head."""

    def __init__(self):
        super().__init__()
        self.user = nn.Sequential(nn.Linear(128, 128), nn.ReLU())
        self.package = nn.Sequential(nn.Linear(64, 64), nn.ReLU())
        self.route = nn.Sequential(nn.Linear(32, 32), nn.ReLU())
        self.trunk = nn.Sequential(
            nn.Linear(224, 512), nn.ReLU(),
            nn.Linear(512, 256), nn.ReLU(),
            nn.Linear(256, 128), nn.ReLU())
        self.eta = nn.Linear(128, 1)
        self.confidence = nn.Linear(128, 1)

    def forward(self, user_features, package_features, route_features):
        h = torch.cat([self.user(user_features), self.package(package_features),
                       self.route(route_features)], dim=1)
        h = self.trunk(h)
        return torch.relu(self.eta(h)), torch.sigmoid(self.confidence(h))


def synthetic_parcels(n, gen):
    u = torch.randn(n, 128, generator=gen)
    p = torch.randn(n, 64, generator=gen)
    r = torch.randn(n, 32, generator=gen)
    # Invented ground truth in hours: route length, package weight, a user effect.
    eta = (2.0 + 0.5 * r[:, :8].abs().sum(1) + 0.2 * p[:, :4].sum(1)
           + 0.3 * u[:, 0]).clamp(min=0.1).unsqueeze(1)
    return u, p, r, eta


def train_parcel_eta(seed, steps):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = ParcelETA()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    t0 = time.time()
    for _ in range(steps):
        u, p, r, y = synthetic_parcels(256, gen)
        eta, conf = model(u, p, r)
        err = (eta - y).abs()
        # The confidence head learns P(error < 0.5 h).
        loss = err.mean() + nn.functional.binary_cross_entropy(
            conf, (err.detach() < 0.5).float())
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"  trained {steps} steps (seed {seed}) in {time.time() - t0:.1f}s, "
          f"last loss {loss.item():.3f}")
    return model.eval()


def weights_sha1(model):
    h = hashlib.sha1()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().contiguous().numpy().astype("<f4").tobytes())
    return h.hexdigest()


def eta_tensors(gen, batch):
    return [torch.randn(batch, d, generator=gen) for _, d in ETA_INPUTS]


def make_parcel_eta():
    print("parcel_eta")
    versions = {
        1: (11, int(os.environ.get("ETA_STEPS_V1", "400"))),
        2: (22, int(os.environ.get("ETA_STEPS_V2", "800"))),
    }
    final = None
    for version, (seed, steps) in versions.items():
        model = train_parcel_eta(seed, steps)
        vdir = os.path.join(MODELS, "parcel_eta", str(version))
        path = os.path.join(vdir, "model.onnx")
        example = eta_tensors(torch.Generator().manual_seed(0), 2)
        export(model, tuple(example), path, [n for n, _ in ETA_INPUTS], ETA_OUTPUTS)
        check_onnx(path, {n: TensorProto.FLOAT for n in
                          [n for n, _ in ETA_INPUTS] + ETA_OUTPUTS})

        # Provenance: an invented commit id derived from the weights, so the
        # example is stable across regenerations on one machine.
        commit = weights_sha1(model)
        write_json(os.path.join(vdir, "model_config.json"),
                   {"version": f"{version}.0.0-{commit[:7]}", "git_commit": commit},
                   indent=2)
        write_text(os.path.join(vdir, "SHA256SUMS"), f"{sha256_file(path)}  model.onnx\n")

        ins = eta_tensors(torch.Generator().manual_seed(42), 4)
        with torch.no_grad():
            outs = model(*ins)
        write_json(os.path.join(REFERENCE, f"parcel_eta_v{version}.json"), {
            "model": "parcel_eta",
            "version": str(version),
            "inputs": [{"name": n, "datatype": "FP32", "shape": list(t.shape),
                        "data": t.reshape(-1).tolist()}
                       for (n, _), t in zip(ETA_INPUTS, ins)],
            "outputs": [{"name": n, "datatype": "FP32", "shape": list(t.shape),
                         "data": t.reshape(-1).tolist()}
                        for n, t in zip(ETA_OUTPUTS, outs)],
        })
        print(f"  v{version}: eta {[round(x, 4) for x in outs[0].reshape(-1).tolist()]}, "
              f"confidence {[round(x, 4) for x in outs[1].reshape(-1).tolist()]}")
        final = model

    write_config("parcel_eta", 'backend: "onnxruntime"', 128,
                 [(n, "TYPE_FP32", [d]) for n, d in ETA_INPUTS],
                 [(n, "TYPE_FP32", [1]) for n in ETA_OUTPUTS])

    # TorchScript copy of the served (latest) version for the Flask peer.
    os.makedirs(TORCHSCRIPT, exist_ok=True)
    traced = torch.jit.trace(final, tuple(eta_tensors(torch.Generator().manual_seed(0), 2)))
    ts_path = os.path.join(TORCHSCRIPT, "parcel_eta.pt")
    traced.save(ts_path)
    print(f"  {os.path.relpath(ts_path, ROOT)}: {os.path.getsize(ts_path)} bytes")

    # Request bodies: batch 2, rounded values so the JSON stays readable.
    gen = np.random.default_rng(7)
    tensors = [(n, "FP32", [2, d], np.round(gen.standard_normal((2, d)), 3).astype(np.float32))
               for n, d in ETA_INPUTS]
    json_request(os.path.join(REQUESTS, "parcel_eta.json"), tensors)
    binary_request(os.path.join(REQUESTS, "parcel_eta.bin"), tensors, ETA_OUTPUTS)


# --------------------------------------------------------------------------
# digits: a small CNN on scikit-learn's bundled 8x8 digits (no download).

class DigitsCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(),
                                  nn.Linear(64, 10))

    def forward(self, x):
        return self.head(self.features(x))


def make_digits():
    print("digits")
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None, :, :]
    y = d.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)

    torch.manual_seed(3)
    gen = torch.Generator().manual_seed(3)
    cnn = DigitsCNN()
    opt = torch.optim.Adam(cnn.parameters(), lr=2e-3)
    xtr_t, ytr_t = torch.from_numpy(xtr), torch.from_numpy(ytr)
    epochs = int(os.environ.get("DIGITS_EPOCHS", "30"))
    t0 = time.time()
    for _ in range(epochs):
        perm = torch.randperm(len(xtr_t), generator=gen)
        for i in range(0, len(perm), 64):
            idx = perm[i:i + 64]
            loss = nn.functional.cross_entropy(cnn(xtr_t[idx]), ytr_t[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    cnn.eval()
    with torch.no_grad():
        pred = cnn(torch.from_numpy(xte)).argmax(1).numpy()
    acc = float((pred == yte).mean())
    print(f"  trained {epochs} epochs in {time.time() - t0:.1f}s")
    print(f"  held-out accuracy (torch): {acc:.4f} ({int((pred == yte).sum())}/{len(yte)})")

    path = os.path.join(MODELS, "digits", "1", "model.onnx")
    export(cnn, (torch.from_numpy(xte[:2]),), path, ["input"], ["logits"])
    check_onnx(path, {"input": TensorProto.FLOAT, "logits": TensorProto.FLOAT})
    write_config("digits", 'platform: "onnxruntime_onnx"', 64,
                 [("input", "TYPE_FP32", [1, 8, 8])], [("logits", "TYPE_FP32", [10])])

    # Pixels are k/16, so every value is exact in JSON.
    write_json(os.path.join(REFERENCE, "digits_test.json"), {
        "image_shape": [1, 8, 8],
        "torch_accuracy": acc,
        "labels": yte.tolist(),
        "images": [img.reshape(-1).tolist() for img in xte],
    })
    json_request(os.path.join(REQUESTS, "digits.json"),
                 [("input", "FP32", [1, 1, 8, 8], xte[:1])])
    return acc


# --------------------------------------------------------------------------
# route_ranker: a compute-bound model, for dynamic batching.
#
# parcel_eta computes for ~27 us a request, less than a request costs the
# server around it, so batching it saves little. route_ranker computes for
# about a millisecond at batch 1 and several times less per row in a batch.
# Its 16 hidden layers share one 768x768 weight matrix (cross-layer sharing,
# as in ALBERT): 16 layers of compute from one layer's weights. At batch 1
# each layer streams the 2.4 MB matrix, more than a core's L2 on the
# machines we measure, so a lone request is bound by memory bandwidth and a
# batch reads the weights once for all its rows. The large matrices are
# stored as FP16 initializers (rounded before export, so nothing changes)
# with a Cast that ONNX Runtime folds at load: 1.6 MB on disk, FP32 at run
# time.

RANKER_FEATURES = 256
RANKER_WIDTH = 768
RANKER_DEPTH = 16


class RouteRanker(nn.Module):
    """Scores a candidate delivery route from 256 features."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(RANKER_FEATURES, RANKER_WIDTH)
        self.block = nn.Linear(RANKER_WIDTH, RANKER_WIDTH)
        self.head = nn.Linear(RANKER_WIDTH, 1)

    def forward(self, features):
        h = torch.relu(self.embed(features))
        for _ in range(RANKER_DEPTH):
            h = h + 0.1 * torch.relu(self.block(h))
        return self.head(h)


def synthetic_routes(n, gen):
    x = torch.randn(n, RANKER_FEATURES, generator=gen)
    # Invented ground truth: a saturating sum of a few features and one
    # interaction, so the network has something to learn.
    y = torch.tanh(x[:, :16].sum(1) / 4) + 0.5 * x[:, 16] * x[:, 17]
    return x, y.unsqueeze(1)


def store_half(path, min_elements=65536):
    """Keep the large FP32 initializers of an ONNX file as FP16 plus a Cast.

    Their values must already be FP16 values (the model rounds them before
    export), so the graph computes exactly what the exported one did."""
    m = onnx.load(path)
    g = m.graph
    casts, kept = [], []
    for init in g.initializer:
        arr = numpy_helper.to_array(init)
        if init.data_type != TensorProto.FLOAT or arr.size < min_elements:
            kept.append(init)
            continue
        half = arr.astype(np.float16)
        if not np.array_equal(half.astype(np.float32), arr):
            raise SystemExit(f"{path}: initializer {init.name} is not FP16-exact")
        kept.append(numpy_helper.from_array(half, init.name + "_fp16"))
        casts.append(helper.make_node("Cast", [init.name + "_fp16"], [init.name],
                                      to=TensorProto.FLOAT))
    del g.initializer[:]
    g.initializer.extend(kept)
    nodes = casts + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    onnx.save(m, path)


def make_route_ranker():
    print("route_ranker")
    torch.manual_seed(5)
    gen = torch.Generator().manual_seed(5)
    model = RouteRanker()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    steps = int(os.environ.get("RANKER_STEPS", "60"))
    t0 = time.time()
    for _ in range(steps):
        x, y = synthetic_routes(128, gen)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"  trained {steps} steps in {time.time() - t0:.1f}s, last loss {loss.item():.3f}")
    model.eval()
    with torch.no_grad():
        for lin in (model.embed, model.block):
            lin.weight.copy_(lin.weight.half().float())

    path = os.path.join(MODELS, "route_ranker", "1", "model.onnx")
    export(model, (torch.randn(2, RANKER_FEATURES, generator=torch.Generator().manual_seed(0)),),
           path, ["features"], ["score"])
    store_half(path)
    check_onnx(path, {"features": TensorProto.FLOAT, "score": TensorProto.FLOAT})
    write_config("route_ranker", 'backend: "onnxruntime"', 64,
                 [("features", "TYPE_FP32", [RANKER_FEATURES])],
                 [("score", "TYPE_FP32", [1])],
                 extra=["# Requests that queue while the instance computes run together as one",
                        "# batch; under load that forms batches without waiting for company.",
                        "dynamic_batching { max_queue_delay_microseconds: 0 }"])

    ins = torch.randn(4, RANKER_FEATURES, generator=torch.Generator().manual_seed(42))
    with torch.no_grad():
        outs = model(ins)
    write_json(os.path.join(REFERENCE, "route_ranker.json"), {
        "model": "route_ranker",
        "version": "1",
        "inputs": [{"name": "features", "datatype": "FP32", "shape": list(ins.shape),
                    "data": ins.reshape(-1).tolist()}],
        "outputs": [{"name": "score", "datatype": "FP32", "shape": list(outs.shape),
                     "data": outs.reshape(-1).tolist()}],
    })
    print(f"  scores {[round(x, 4) for x in outs.reshape(-1).tolist()]}")
    gen = np.random.default_rng(9)
    tensors = [("features", "FP32", [2, RANKER_FEATURES],
                np.round(gen.standard_normal((2, RANKER_FEATURES)), 3).astype(np.float32))]
    json_request(os.path.join(REQUESTS, "route_ranker.json"), tensors)


# --------------------------------------------------------------------------
# Backend test graphs, built by hand with onnx.helper.

def make_backend_testdata():
    print("backend testdata")
    os.makedirs(BACKEND_TESTDATA, exist_ok=True)
    # One input and output per data type the backend converts specially.
    # BOOL goes through Not so the test sees ORT read the normalised bytes.
    kinds = [("fp16", TensorProto.FLOAT16, "Identity"),
             ("bf16", TensorProto.BFLOAT16, "Identity"),
             ("fp64", TensorProto.DOUBLE, "Identity"),
             ("i8", TensorProto.INT8, "Identity"),
             ("u16", TensorProto.UINT16, "Identity"),
             ("u64", TensorProto.UINT64, "Identity"),
             ("str", TensorProto.STRING, "Identity"),
             ("bool", TensorProto.BOOL, "Not")]
    nodes, ins, outs = [], [], []
    for k, t, op in kinds:
        ins.append(helper.make_tensor_value_info(f"x_{k}", t, ["batch", 3]))
        outs.append(helper.make_tensor_value_info(f"y_{k}", t, ["batch", 3]))
        nodes.append(helper.make_node(op, [f"x_{k}"], [f"y_{k}"]))
    graph = helper.make_graph(nodes, "types", ins, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 7
    path = os.path.join(BACKEND_TESTDATA, "types.onnx")
    onnx.save(model, path)
    check_onnx(path)

    # A sequence output, which the backend must refuse with a clear error.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    seq = helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, [2])
    graph = helper.make_graph([helper.make_node("SequenceConstruct", ["x"], ["seq"])],
                              "sequence", [x], [seq])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 7
    path = os.path.join(BACKEND_TESTDATA, "sequence.onnx")
    onnx.save(model, path)
    check_onnx(path)


def main(argv):
    torch.set_num_threads(1)  # deterministic and polite on shared machines
    np.random.seed(0)
    print("torch", torch.__version__, "onnx", onnx.__version__)
    builders = {"simple": make_simple, "parcel_eta": make_parcel_eta, "digits": make_digits,
                "route_ranker": make_route_ranker, "backend_testdata": make_backend_testdata}
    unknown = [a for a in argv if a not in builders]
    if unknown:
        print(f"unknown model(s) {unknown}; known: {list(builders)}")
        return 2
    status = 0
    for name in argv or list(builders):
        acc = builders[name]()
        if name == "digits" and acc < 0.95:
            print(f"digits accuracy {acc:.4f} is below 0.95; train longer (DIGITS_EPOCHS)")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
