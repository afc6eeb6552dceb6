/* Kiln kernel ABI (DESIGN §4). The only Kiln header a kernel includes. C-compatible.
 *
 * Both the candidate (kernel.*) and the trusted reference (reference.*) export kiln_entry(). The tester,
 * never the kernel, allocates, fills, times and compares the tensors. A kernel must not synchronize the
 * device; it enqueues its work on `stream` (CUDA) or runs it before returning (CPU). */
#ifndef KILN_KERNEL_ABI_H_
#define KILN_KERNEL_ABI_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { KILN_F32 = 0, KILN_F16 = 1, KILN_BF16 = 2, KILN_F64 = 3, KILN_I32 = 4, KILN_I64 = 5, KILN_I8 = 6, KILN_U8 = 7 };

#define KILN_MAX_DIMS 8

typedef struct {
  void* data;
  int32_t dtype;
  int32_t ndim;
  int64_t shape[KILN_MAX_DIMS];
} kiln_tensor;

typedef struct {
  const kiln_tensor* inputs;
  int32_t n_inputs;
  kiln_tensor* outputs;
  int32_t n_outputs;
  const char* const* scalar_names;
  const double* scalar_values;
  int32_t n_scalars;
  void* stream; /* cudaStream_t for CUDA, NULL for CPU */
} kiln_args;

/* Returns 0 on success; any other value is reported as a failed call. */
#if defined(_WIN32)
#define KILN_EXPORT __declspec(dllexport)
#else
#define KILN_EXPORT __attribute__((visibility("default")))
#endif

KILN_EXPORT int kiln_entry(const kiln_args* args);

/* A scalar by name, or `fallback` when the task does not pass it. */
static inline double kiln_scalar(const kiln_args* a, const char* name, double fallback) {
  for (int32_t i = 0; i < a->n_scalars; ++i) {
    const char* p = a->scalar_names[i];
    const char* q = name;
    while (*p && *p == *q) {
      ++p;
      ++q;
    }
    if (*p == 0 && *q == 0) return a->scalar_values[i];
  }
  return fallback;
}

#ifdef __cplusplus
}
#endif

#endif /* KILN_KERNEL_ABI_H_ */
