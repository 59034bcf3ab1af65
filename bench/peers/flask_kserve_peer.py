#!/usr/bin/python3
"""Baseline peer: the "Flask + gunicorn + PyTorch" server that model servers are
usually compared against, speaking just enough of the KServe v2 JSON protocol
(POST /v2/models/<name>/infer, GET /v2/health/ready) for the same load generator
to drive it and Sluice side by side.

It serves one TorchScript module. Inputs are fed to forward() positionally, in
the order given by --inputs; outputs are named by --outputs in the order
forward() returns them. Everything is FP32.

Run (Debian packages python3-flask, gunicorn, python3-torch):

  PEER_MODEL=path/to/model.torchscript.pt \
  PEER_NAME=parcel_eta \
  PEER_INPUTS=user_features,package_features,route_features \
  PEER_OUTPUTS=eta_prediction,confidence_score \
  gunicorn -w 2 --threads 1 -b 127.0.0.1:8500 \
      --chdir bench/peers 'flask_kserve_peer:app'

Workers: use as many as the machine has cores (each loads its own copy of the
model, as real deployments of this pattern do). torch threads per worker: 1.
"""
import os

import torch
from flask import Flask, jsonify, request

torch.set_num_threads(int(os.environ.get("PEER_TORCH_THREADS", "1")))

MODEL_PATH = os.environ.get("PEER_MODEL", "")
MODEL_NAME = os.environ.get("PEER_NAME", "model")
INPUTS = [s for s in os.environ.get("PEER_INPUTS", "").split(",") if s]
OUTPUTS = [s for s in os.environ.get("PEER_OUTPUTS", "").split(",") if s]

app = Flask(__name__)
_model = None


def model():
    global _model
    if _model is None:
        if not MODEL_PATH:
            raise RuntimeError("PEER_MODEL is not set")
        _model = torch.jit.load(MODEL_PATH)
        _model.eval()
    return _model


@app.get("/v2/health/ready")
def ready():
    model()
    return "", 200


@app.post("/v2/models/<name>/infer")
def infer(name):
    if name != MODEL_NAME:
        return jsonify(error=f"unknown model '{name}'"), 404
    body = request.get_json(force=True, silent=True)
    if not isinstance(body, dict) or "inputs" not in body:
        return jsonify(error="body must be a JSON object with 'inputs'"), 400
    by_name = {t.get("name"): t for t in body["inputs"]}
    args = []
    for n in INPUTS:
        t = by_name.get(n)
        if t is None:
            return jsonify(error=f"missing input '{n}'"), 400
        try:
            args.append(torch.tensor(t["data"], dtype=torch.float32).reshape(t["shape"]))
        except Exception as e:  # noqa: BLE001 - report any decoding problem
            return jsonify(error=f"input '{n}': {e}"), 400
    with torch.inference_mode():
        out = model()(*args)
    if not isinstance(out, (tuple, list)):
        out = (out,)
    outputs = [
        {"name": n, "datatype": "FP32", "shape": list(o.shape), "data": o.reshape(-1).tolist()}
        for n, o in zip(OUTPUTS, out)
    ]
    return jsonify(model_name=MODEL_NAME, id=body.get("id", ""), outputs=outputs)
