/* The C interface of libsluice_torch.so, the shim between Sluice and
 * libtorch. Package libtorch opens the library with dlopen and calls these
 * functions through pointers from dlsym, so the Go binary neither links
 * libtorch nor needs its headers. Every function that can fail takes a
 * buffer for a one-line error message and never lets a C++ exception out. */
#ifndef SLUICE_TORCH_H
#define SLUICE_TORCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped when a signature below changes. */
#define SLUICE_TORCH_ABI 1

/* Element types: the numbering of Go's infer.DataType. */
enum {
  ST_BOOL = 1, ST_UINT8 = 2, ST_UINT16 = 3, ST_UINT32 = 4, ST_UINT64 = 5,
  ST_INT8 = 6, ST_INT16 = 7, ST_INT32 = 8, ST_INT64 = 9,
  ST_FP16 = 10, ST_FP32 = 11, ST_FP64 = 12, ST_BF16 = 14
};

/* One input tensor; data is borrowed for the duration of the call. */
typedef struct {
  int32_t dtype;
  int32_t ndim;
  const int64_t *shape;
  void *data;
} st_tensor;

/* Settings of a load; thread counts <= 0 keep libtorch's defaults. The
 * thread counts are process-wide and the first load that sets them wins. */
typedef struct {
  int32_t optimized_execution; /* 0: torch::jit::setGraphExecutorOptimize(false) */
  int32_t inference_mode;      /* 1: run under c10::InferenceMode, else NoGradGuard */
  int32_t intra_op_threads;
  int32_t inter_op_threads;
  int32_t jit_executor;        /* -1 keep, 0 off, 1 on */
  int32_t jit_profiling;       /* -1 keep, 0 off, 1 on */
} st_options;

int32_t st_abi(void);
/* The libtorch version the shim was built against, e.g. "1.13.1". */
const char *st_version(void);

/* Loads a TorchScript file on the CPU; NULL on error. */
void *st_load(const char *path, const st_options *opts, char *err, size_t errlen);
/* Number of forward() arguments after self, and the name of one. */
int32_t st_num_args(void *model);
const char *st_arg_name(void *model, int32_t i);
/* The TorchScript type of argument i ("Tensor", "Dict(str, Tensor)", ...)
 * and of forward()'s result ("Tensor", "(Tensor, Tensor)", ...). */
const char *st_arg_type(void *model, int32_t i);
const char *st_return_type(void *model);
/* Runs forward(); returns an output handle, or NULL on error. The result
 * (a tensor, or a tuple or list of tensors) is flattened into tensors. */
void *st_forward(void *model, const st_tensor *inputs, int32_t n, char *err, size_t errlen);
int32_t st_out_count(void *out);
/* Describes output i: its element type (0 when it has none of the above),
 * rank, shape and contiguous data of nbytes bytes, valid until
 * st_out_free. */
int32_t st_out_tensor(void *out, int32_t i, int32_t *dtype, int32_t *ndim,
                      const int64_t **shape, const void **data, size_t *nbytes);
void st_out_free(void *out);
void st_free(void *model);

#ifdef __cplusplus
}
#endif
#endif
