#!/usr/bin/python3
"""Write the example ensemble: digits_preprocess and digits_pipeline.

Run from the repository root with Debian's interpreter (python3-torch and
python3-onnx):

    /usr/bin/python3 scripts/make_ensemble_example.py

It is separate from make_models.py so that the trained models' files stay
byte-identical. It writes:

  examples/models/digits_preprocess/  UINT8 pixels[64] (0..16) -> FP32 image[1,8,8] = pixels / 16
  examples/models/digits_pipeline/    ensemble: digits_preprocess -> digits
  examples/requests/digits_pipeline.json
                                      the first held-out digit as a request

The preprocessing model has no weights, so the output is the same on every
run.
"""
import json
import os

import onnx
import torch
import torch.nn as nn
from onnx import TensorProto

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "examples", "models")
REFERENCE = os.path.join(ROOT, "examples", "reference")
REQUESTS = os.path.join(ROOT, "examples", "requests")
OPSET = 14


class Preprocess(nn.Module):
    """Scale 0..16 pixel intensities to 0..1 and lay them out as 1x8x8."""

    def forward(self, pixels):
        return (pixels.to(torch.float32) / 16.0).reshape(-1, 1, 8, 8)


def write_text(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def main():
    torch.manual_seed(0)
    path = os.path.join(MODELS, "digits_preprocess", "1", "model.onnx")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    model = Preprocess().eval()
    example = torch.zeros(2, 64, dtype=torch.uint8)
    torch.onnx.export(
        model, (example,), path, opset_version=OPSET,
        input_names=["pixels"], output_names=["image"],
        dynamic_axes={"pixels": {0: "batch"}, "image": {0: "batch"}},
        do_constant_folding=True)

    m = onnx.load(path)
    onnx.checker.check_model(m)
    types = {vi.name: vi.type.tensor_type.elem_type for vi in list(m.graph.input) + list(m.graph.output)}
    if types != {"pixels": TensorProto.UINT8, "image": TensorProto.FLOAT}:
        raise SystemExit(f"{path}: unexpected tensor types {types}")
    got = model(torch.tensor([[16] * 64, [8] * 64], dtype=torch.uint8))
    if got.shape != (2, 1, 8, 8) or float(got[0, 0, 0, 0]) != 1.0 or float(got[1, 0, 7, 7]) != 0.5:
        raise SystemExit("preprocess check failed")
    print(f"  {os.path.relpath(path, ROOT)}: opset {m.opset_import[0].version}, "
          f"{os.path.getsize(path)} bytes, ops {sorted({n.op_type for n in m.graph.node})}")

    write_text(os.path.join(MODELS, "digits_preprocess", "config.pbtxt"), """\
name: "digits_preprocess"
platform: "onnxruntime_onnx"
max_batch_size: 64
input [
  { name: "pixels" data_type: TYPE_UINT8 dims: [ 64 ] }
]
output [
  { name: "image" data_type: TYPE_FP32 dims: [ 1, 8, 8 ] }
]
instance_group [ { kind: KIND_CPU count: 1 } ]
parameters {
  key: "intra_op_thread_count"
  value: { string_value: "1" }
}
""")

    write_text(os.path.join(MODELS, "digits_pipeline", "config.pbtxt"), """\
# Raw 8x8 digit pixels (0..16, as scikit-learn ships them) in, logits out:
# digits_preprocess scales and reshapes them, digits classifies.
name: "digits_pipeline"
platform: "ensemble"
max_batch_size: 64
input [
  { name: "pixels" data_type: TYPE_UINT8 dims: [ 64 ] }
]
output [
  { name: "logits" data_type: TYPE_FP32 dims: [ 10 ] }
]
ensemble_scheduling {
  step [
    {
      model_name: "digits_preprocess"
      model_version: -1
      input_map { key: "pixels" value: "pixels" }
      output_map { key: "image" value: "image" }
    },
    {
      model_name: "digits"
      model_version: -1
      input_map { key: "input" value: "image" }
      output_map { key: "logits" value: "logits" }
    }
  ]
}
""")
    # Triton wants a version folder even for an ensemble; it stays empty.
    keep = os.path.join(MODELS, "digits_pipeline", "1", ".gitkeep")
    write_text(keep, "")

    with open(os.path.join(REFERENCE, "digits_test.json"), encoding="utf-8") as f:
        ref = json.load(f)
    pixels = [int(round(v * 16)) for v in ref["images"][0]]
    req = {"inputs": [{"name": "pixels", "shape": [1, 64], "datatype": "UINT8", "data": pixels}]}
    write_text(os.path.join(REQUESTS, "digits_pipeline.json"),
               json.dumps(req, separators=(",", ":")) + "\n")
    print("  examples/models/digits_pipeline/config.pbtxt, examples/requests/digits_pipeline.json")


if __name__ == "__main__":
    main()
