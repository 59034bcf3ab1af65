#!/usr/bin/python3
"""Build the release-safety scenario model: parcel_eta_regional.

Run from the repository root with Debian's interpreter (python3-onnx and
python3-numpy; no torch needed):

    /usr/bin/python3 scripts/make_regional_model.py

It writes test/integration/testdata/models/parcel_eta_regional/:

  config.pbtxt   examples/models/parcel_eta/config.pbtxt with the model's name
  1/             examples/models/parcel_eta/1 copied byte for byte (model.onnx,
                 model_config.json, SHA256SUMS): the stable version
  2/             the same graph made deliberately worse for long routes: the
                 candidate version of the scenario

Version 2 is version 1's graph with a few nodes added after its two heads
(ONNX graph surgery, no retraining):

    long             = route_features[:, 0:1] > LONG_ROUTE_KM   # distance_km
    eta_prediction   = eta_prediction_v1   * where(long, 1.6, 1.0)
    confidence_score = confidence_score_v1 * where(long, 0.5, 1.0)

Multiplying by 1.0 is exact in IEEE arithmetic, so on routes up to
LONG_ROUTE_KM version 2 answers bit for bit like version 1; on longer routes
its ETA is 60 % higher and its confidence halved. route_features[0] is
route_features:distance_km (the first feature of the route_features input in
examples/parcel-eta/sluice.yaml).

The threshold comes from the example's synthetic data: the generator
(examples/parcel-eta/features/gen, genRoutes) draws each route's distance as
2 + exp(2 + 0.7 N(0,1)) km, median about 9.4 km, and 15 km is about its 79th
percentile (P(N(0,1) > (ln 13 - 2) / 0.7) = 0.21): about a fifth of the
routes are "long". The integration test (test/integration/release_test.go)
reads each route's distance from the feature server and sends the long ones
with "x-region: sa", the others with "eu" or "us": that is how the scenario
makes one region's inputs differ, and why the regression shows in one
region only.

The output is reproducible: the same version 1 file and onnx version write
the same bytes. Everything is checked with onnx.checker and the size budget.
"""
import hashlib
import json
import os
import shutil

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "examples", "models", "parcel_eta")
DST = os.path.join(ROOT, "test", "integration", "testdata", "models", "parcel_eta_regional")

NAME = "parcel_eta_regional"
LONG_ROUTE_KM = 15.0
ETA_FACTOR = 1.6
CONFIDENCE_FACTOR = 0.5
MAX_ONNX_BYTES = 2 * 1024 * 1024


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def write_text(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def const(name, value, dtype):
    return numpy_helper.from_array(np.array(value, dtype=dtype), name)


def worsen(model):
    """Return a copy of model whose heads are scaled on long routes."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    outputs = {o.name for o in g.output}
    for want in ("eta_prediction", "confidence_score"):
        if want not in outputs:
            raise SystemExit(f"{SRC}/1/model.onnx has no output {want}")
    if "route_features" not in {i.name for i in g.input}:
        raise SystemExit(f"{SRC}/1/model.onnx has no input route_features")
    existing = {n for node in g.node for n in node.output} | {i.name for i in g.initializer}
    for n in ("regional/distance_km", "regional/long"):
        if n in existing:
            raise SystemExit(f"{n} already exists in the graph")

    # The heads now write *_v1; the added nodes write the graph outputs.
    for node in g.node:
        for i, out in enumerate(node.output):
            if out in ("eta_prediction", "confidence_score"):
                node.output[i] = out + "_v1"

    g.initializer.extend([
        const("regional/starts", [0], np.int64),
        const("regional/ends", [1], np.int64),
        const("regional/axes", [1], np.int64),
        const("regional/threshold_km", LONG_ROUTE_KM, np.float32),
        const("regional/one", 1.0, np.float32),
        const("regional/eta_factor", ETA_FACTOR, np.float32),
        const("regional/confidence_factor", CONFIDENCE_FACTOR, np.float32),
    ])
    g.node.extend([
        helper.make_node("Slice", ["route_features", "regional/starts", "regional/ends", "regional/axes"],
                         ["regional/distance_km"], name="regional/Slice"),
        helper.make_node("Greater", ["regional/distance_km", "regional/threshold_km"],
                         ["regional/long"], name="regional/Greater"),
        helper.make_node("Where", ["regional/long", "regional/eta_factor", "regional/one"],
                         ["regional/eta_scale"], name="regional/WhereEta"),
        helper.make_node("Where", ["regional/long", "regional/confidence_factor", "regional/one"],
                         ["regional/confidence_scale"], name="regional/WhereConfidence"),
        helper.make_node("Mul", ["eta_prediction_v1", "regional/eta_scale"],
                         ["eta_prediction"], name="regional/MulEta"),
        helper.make_node("Mul", ["confidence_score_v1", "regional/confidence_scale"],
                         ["confidence_score"], name="regional/MulConfidence"),
    ])
    m.doc_string = (f"parcel_eta v1 made worse for long routes (distance_km > {LONG_ROUTE_KM:g}): "
                    f"eta_prediction x {ETA_FACTOR:g}, confidence_score x {CONFIDENCE_FACTOR:g}; "
                    "scripts/make_regional_model.py")
    m.producer_name = "sluice make_regional_model.py"
    onnx.checker.check_model(m)
    return m


def check_size(path):
    size = os.path.getsize(path)
    if size > MAX_ONNX_BYTES:
        raise SystemExit(f"{path}: {size} bytes is over the {MAX_ONNX_BYTES} byte budget")
    print(f"  {os.path.relpath(path, ROOT)}: {size} bytes")


def main():
    src_model = os.path.join(SRC, "1", "model.onnx")
    if os.path.isdir(DST):
        shutil.rmtree(DST)

    # config.pbtxt: the example's, renamed.
    with open(os.path.join(SRC, "config.pbtxt"), encoding="utf-8") as f:
        config = f.read()
    if not config.startswith('name: "parcel_eta"\n'):
        raise SystemExit(f"{SRC}/config.pbtxt does not start with name: \"parcel_eta\"")
    config = config.replace('name: "parcel_eta"\n', (
        f'name: "{NAME}"\n'
        "# Generated by scripts/make_regional_model.py from examples/models/parcel_eta:\n"
        f"# version 1 is parcel_eta v1; version 2 is worse on routes over {LONG_ROUTE_KM:g} km.\n"), 1)
    config = config.replace(
        "# Both versions stay loaded: the gateway example sends 90 % to version 1 and\n"
        "# canaries version 2 (examples/parcel-eta/sluice.yaml).\n",
        "# Both versions stay loaded: the scenario shadows, or rolls out, version 2\n"
        "# beside version 1.\n")
    write_text(os.path.join(DST, "config.pbtxt"), config)

    # Version 1: a byte-for-byte copy (its manifest and provenance still hold).
    v1 = os.path.join(DST, "1")
    os.makedirs(v1)
    for name in ("model.onnx", "model_config.json", "SHA256SUMS"):
        shutil.copyfile(os.path.join(SRC, "1", name), os.path.join(v1, name))
    check_size(os.path.join(v1, "model.onnx"))

    # Version 2: the graph surgery.
    v2 = os.path.join(DST, "2")
    os.makedirs(v2)
    path = os.path.join(v2, "model.onnx")
    onnx.save(worsen(onnx.load(src_model)), path)
    check_size(path)
    digest = sha256_file(path)
    write_text(os.path.join(v2, "model_config.json"), json.dumps(
        {"version": f"2.0.0-regional-{digest[:7]}", "derived_from": "parcel_eta/1", "long_route_km": LONG_ROUTE_KM,
         "eta_factor": ETA_FACTOR, "confidence_factor": CONFIDENCE_FACTOR}, indent=2) + "\n")
    write_text(os.path.join(v2, "SHA256SUMS"), f"{digest}  model.onnx\n")
    ops = sorted({n.op_type for n in onnx.load(path).graph.node})
    print(f"  v2 ops {ops}; sha256 {digest}")


if __name__ == "__main__":
    main()
