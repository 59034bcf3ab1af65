"""Sluice's built-in PyTorch models for the generic Python worker.

Each module defines a TritonPythonModel with Triton's Python-backend
interface (initialize(args), execute(requests), finalize()) written against
triton_python_backend_utils like any user model.py. The worker loads one of
them instead of a user model.py when config.pbtxt names the "pytorch"
backend (or the "pytorch_libtorch" platform):

  torchscript  <version>/model.pt, loaded with torch.jit.load, Triton's
               pytorch-backend naming rules (INPUT__0 / OUTPUT__0, forward
               argument names, or config order)
  state_dict   <version>/model.py (the nn.Module class), model.pth (a
               state_dict, loaded with weights_only=True) and
               model_config.json (model_class, init_args, input_shape,
               version, git_commit)

Importing this package imports nothing heavy: torch is imported by the
modules themselves.
"""
