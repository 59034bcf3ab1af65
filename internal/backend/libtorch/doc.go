// Package libtorch runs TorchScript models (Triton platform
// pytorch_libtorch, backend pytorch, file model.pt) in the server's process
// with libtorch's C++ API, as Triton's PyTorch backend does: no Python
// interpreter, no worker process, no copy through a pipe.
//
// The server binary neither links libtorch nor needs its headers. A small
// C++ library, libsluice_torch.so (csrc/, compiled against Debian's
// libtorch-dev by scripts/build-torch-shim.sh, which scripts/setup.sh runs),
// wraps the C++ API in a few C functions; New opens it with dlopen. When
// the library is missing, fails to open, or the binary was built without
// cgo, the Backend hands every model to the fallback backend it was given
// (the Python worker's pytorch backend) and the server logs why once at
// start-up. Models the in-process path does not run also go to the
// fallback, with a load log line that says why: state_dict models
// (model.pth), models with TYPE_STRING inputs or outputs, forward()
// methods that take or return anything but tensors (a dictionary, a list
// of strings) or whose arguments the configuration's inputs do not map
// onto, and models whose config parameter SLUICE_PYTORCH_ENGINE is
// "python". Every load logs which engine runs the version.
//
// Inputs and outputs follow Triton's naming rules, the same as the Python
// worker's built-in TorchScript model: an input goes to the forward()
// argument of its name, else <name>__<index> to argument <index>, else
// config order; an output <name>__<index> is element <index> of what
// forward() returns (a tensor, or a tuple or list of tensors), else config
// order. Config parameters: INTRA_OP_THREAD_COUNT and
// INTER_OP_THREAD_COUNT (process-wide: the first load that sets them
// wins), DISABLE_OPTIMIZED_EXECUTION, INFERENCE_MODE (default true),
// ENABLE_JIT_EXECUTOR and ENABLE_JIT_PROFILING.
//
// An instance runs one forward() at a time, as a Triton model instance
// does; the batcher in front of it forms the batches, and instance_group
// counts add parallelism.
package libtorch
