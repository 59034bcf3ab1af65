// Package python runs Triton Python-backend models (config.pbtxt backend
// "python", a model.py defining TritonPythonModel) and, through built-in
// TritonPythonModel implementations, PyTorch models (backend "pytorch",
// platform "pytorch_libtorch": TorchScript model.pt, or a state_dict with
// its nn.Module class). Each model instance is one worker process running
// the system's Python 3 with Debian's numpy and torch.
//
// # Worker files
//
// The worker's Python files (sluice_worker.py, Sluice's own
// triton_python_backend_utils.py and the sluice_builtin package) are
// embedded in the binary and written once per process, at the first load,
// into a private temporary folder (mode 0700) that Backend.Close removes.
// Workers import them from there like any module, so tracebacks name real
// files and lines, and user models import triton_python_backend_utils
// unchanged. Workers run with -B: no .pyc files land in model folders,
// whose content poll mode fingerprints.
//
// # Protocol
//
// Sluice and a worker share a Unix stream socket created with socketpair
// and passed as file descriptor 3. Every message is a frame: a 16-byte
// header (u32 frame size, u8 operation, three zero bytes, u64 request id;
// little-endian) and a payload. Execute payloads are binary (frame.go):
// per request its output names and input tensors, each tensor as name,
// Triton data type code, shape, byte length and raw bytes in KServe's
// layout, the bytes 8-aligned so the worker maps numpy arrays onto the
// received buffer. Responses come back the same way, with a per-request
// error (message and TritonError code) instead of tensors where the model
// answered one. Only control messages (load, whole-call errors, log lines)
// carry JSON. Requests carry ids, so several goroutines may call one
// worker; the worker answers in order, one call at a time. The decoder of
// what a worker sends checks every count and size against the bytes it
// has before allocating (FuzzDecodeResponses).
//
// Measured with BenchmarkExecute (a model returning its input, FP32 [1,8],
// on the 2-core development machine): about 45 µs per call round trip, of
// which about 15 µs is the worker's Python (decoding into numpy, the
// request and response objects, encoding). The rest is two socket hops and
// their wake-ups, which shared memory would only trade for polling; the
// framing is not the bottleneck, so there is no shared memory.
//
// # Supervision
//
// Instance supervises its worker: an idle worker that does not answer a
// ping is killed; a worker that dies fails its in-flight requests with
// reason worker_crashed (503) and is restarted after an exponential
// back-off; after Options.RestartLimit quick deaths in a row the instance
// stays down, says why through backend.HealthReporter (the repository
// index shows it) and logs a warning. While an instance has no worker, its
// requests run on a sibling instance's (the instances of one load of a
// version, told apart by backend.LoadOptions.LoadID), so the version keeps
// serving. Close calls finalize(), then sends SIGTERM and SIGKILL after
// grace periods, and returns once the process is gone.
//
// # Requests
//
// Instance implements batch.RequestExecutor: a batch of requests from the
// dynamic batcher reaches execute(requests) as separate InferenceRequest
// objects in one call, and a TritonError in one response fails only that
// request (400 unless its code says otherwise, reason model_error). An
// exception in execute fails the whole call (500, model_exception).
//
// Python models have no model file to read a signature from: Backend and
// PyTorch implement backend.ConfigSigner and serve the inputs and outputs
// config.pbtxt declares, which it must list.
package python
