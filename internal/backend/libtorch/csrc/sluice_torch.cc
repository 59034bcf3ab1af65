// libsluice_torch.so: runs TorchScript models with libtorch's C++ API for
// package libtorch. scripts/build-torch-shim.sh compiles it; see
// sluice_torch.h for the interface.
#include "sluice_torch.h"

#include <torch/csrc/api/include/torch/version.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>
#include <ATen/Parallel.h>

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Model {
  torch::jit::Module module;
  std::vector<std::string> args, arg_types;
  std::string returns;
  bool optimized = true;
  bool inference = true;
};

struct Outputs {
  std::vector<at::Tensor> tensors;
  std::vector<std::vector<int64_t>> shapes;
};

std::once_flag intra_once, inter_once;

void set_err(char *err, size_t errlen, const std::string &msg) {
  if (err == nullptr || errlen == 0) return;
  std::string one = msg;
  for (char &c : one) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  std::strncpy(err, one.c_str(), errlen - 1);
  err[errlen - 1] = '\0';
}

std::string what(const std::exception &e) {
  if (auto *ce = dynamic_cast<const c10::Error *>(&e)) {
    return ce->what_without_backtrace();
  }
  return e.what();
}

bool to_scalar(int32_t dt, at::ScalarType *st) {
  switch (dt) {
    case ST_BOOL: *st = at::kBool; return true;
    case ST_UINT8: *st = at::kByte; return true;
    case ST_INT8: *st = at::kChar; return true;
    case ST_INT16: *st = at::kShort; return true;
    case ST_INT32: *st = at::kInt; return true;
    case ST_INT64: *st = at::kLong; return true;
    case ST_FP16: *st = at::kHalf; return true;
    case ST_FP32: *st = at::kFloat; return true;
    case ST_FP64: *st = at::kDouble; return true;
    case ST_BF16: *st = at::kBFloat16; return true;
  }
  return false;
}

int32_t from_scalar(at::ScalarType st) {
  switch (st) {
    case at::kBool: return ST_BOOL;
    case at::kByte: return ST_UINT8;
    case at::kChar: return ST_INT8;
    case at::kShort: return ST_INT16;
    case at::kInt: return ST_INT32;
    case at::kLong: return ST_INT64;
    case at::kHalf: return ST_FP16;
    case at::kFloat: return ST_FP32;
    case at::kDouble: return ST_FP64;
    case at::kBFloat16: return ST_BF16;
    default: return 0;
  }
}

// flatten appends the tensors of a forward() result: a tensor, or a
// (nested) tuple or list of tensors.
void flatten(const c10::IValue &v, std::vector<at::Tensor> *out) {
  if (v.isTensor()) {
    out->push_back(v.toTensor());
  } else if (v.isTuple()) {
    for (const auto &e : v.toTupleRef().elements()) flatten(e, out);
  } else if (v.isTensorList()) {
    for (const at::Tensor &t : v.toTensorVector()) out->push_back(t);
  } else if (v.isList()) {
    for (const c10::IValue &e : v.toListRef()) flatten(e, out);
  } else {
    throw std::runtime_error("forward() returned a " + v.tagKind() +
                             ", not a tensor or a tuple or list of tensors");
  }
}

}  // namespace

extern "C" {

int32_t st_abi(void) { return SLUICE_TORCH_ABI; }

const char *st_version(void) { return TORCH_VERSION; }

void *st_load(const char *path, const st_options *opts, char *err, size_t errlen) {
  try {
    if (opts->intra_op_threads > 0) {
      std::call_once(intra_once, [&] { at::set_num_threads(opts->intra_op_threads); });
    }
    if (opts->inter_op_threads > 0) {
      std::call_once(inter_once, [&] { at::set_num_interop_threads(opts->inter_op_threads); });
    }
    if (opts->jit_executor >= 0) torch::jit::getExecutorMode() = opts->jit_executor != 0;
    if (opts->jit_profiling >= 0) torch::jit::getProfilingMode() = opts->jit_profiling != 0;
    auto m = std::make_unique<Model>();
    m->module = torch::jit::load(path, c10::Device(c10::kCPU));
    m->module.eval();
    m->optimized = opts->optimized_execution != 0;
    m->inference = opts->inference_mode != 0;
    const auto &schema = m->module.get_method("forward").function().getSchema();
    const auto &args = schema.arguments();
    for (size_t i = 1; i < args.size(); i++) {
      m->args.push_back(args[i].name());
      m->arg_types.push_back(args[i].type()->str());
    }
    if (schema.returns().size() == 1) m->returns = schema.returns()[0].type()->str();
    return m.release();
  } catch (const std::exception &e) {
    set_err(err, errlen, what(e));
  } catch (...) {
    set_err(err, errlen, "unknown C++ exception");
  }
  return nullptr;
}

int32_t st_num_args(void *model) {
  return static_cast<int32_t>(static_cast<Model *>(model)->args.size());
}

const char *st_arg_name(void *model, int32_t i) {
  return static_cast<Model *>(model)->args.at(static_cast<size_t>(i)).c_str();
}

const char *st_arg_type(void *model, int32_t i) {
  return static_cast<Model *>(model)->arg_types.at(static_cast<size_t>(i)).c_str();
}

const char *st_return_type(void *model) { return static_cast<Model *>(model)->returns.c_str(); }

void *st_forward(void *model, const st_tensor *inputs, int32_t n, char *err, size_t errlen) {
  auto *m = static_cast<Model *>(model);
  try {
    std::vector<c10::IValue> args;
    args.reserve(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; i++) {
      at::ScalarType st;
      if (!to_scalar(inputs[i].dtype, &st)) {
        set_err(err, errlen, "input " + std::to_string(i) + ": unsupported element type");
        return nullptr;
      }
      std::vector<int64_t> shape(inputs[i].shape, inputs[i].shape + inputs[i].ndim);
      // from_blob borrows the caller's bytes; the model may keep no
      // reference past the call, so outputs that alias an input are
      // copied below.
      args.push_back(torch::from_blob(inputs[i].data, shape, torch::TensorOptions().dtype(st)));
    }
    torch::jit::GraphOptimizerEnabledGuard opt(m->optimized);
    c10::IValue result;
    if (m->inference) {
      c10::InferenceMode guard;
      result = m->module.forward(args);
    } else {
      torch::NoGradGuard guard;
      result = m->module.forward(args);
    }
    auto out = std::make_unique<Outputs>();
    flatten(result, &out->tensors);
    for (auto &t : out->tensors) {
      t = t.contiguous();
      bool aliases = false;
      for (int32_t i = 0; i < n; i++) {
        const char *p = static_cast<const char *>(inputs[i].data);
        const char *q = static_cast<const char *>(t.data_ptr());
        if (q == p) aliases = true;
      }
      if (aliases) t = t.clone();
      out->shapes.emplace_back(t.sizes().begin(), t.sizes().end());
    }
    return out.release();
  } catch (const std::exception &e) {
    set_err(err, errlen, what(e));
  } catch (...) {
    set_err(err, errlen, "unknown C++ exception");
  }
  return nullptr;
}

int32_t st_out_count(void *out) {
  return static_cast<int32_t>(static_cast<Outputs *>(out)->tensors.size());
}

int32_t st_out_tensor(void *out, int32_t i, int32_t *dtype, int32_t *ndim,
                      const int64_t **shape, const void **data, size_t *nbytes) {
  auto *o = static_cast<Outputs *>(out);
  const at::Tensor &t = o->tensors.at(static_cast<size_t>(i));
  *dtype = from_scalar(t.scalar_type());
  *ndim = static_cast<int32_t>(t.dim());
  *shape = o->shapes[static_cast<size_t>(i)].data();
  *data = t.data_ptr();
  *nbytes = t.nbytes();
  return 0;
}

void st_out_free(void *out) { delete static_cast<Outputs *>(out); }

void st_free(void *model) { delete static_cast<Model *>(model); }

}  // extern "C"
