/*
 * fake_cublas.c — a stand-in for libcublas that kiln-bench loads (KILN_BENCH_CUBLAS) beside the
 * fake driver (fake_libcuda.c), so that the benchmarks' peer paths, `--paired` among them, run in
 * CI without a GPU: tests/check_bench.sh. Every entry point kiln-bench resolves exists; a handle
 * is checked, a GEMM's arguments too (what cuBLAS itself would refuse), and then nothing is
 * computed, as the fake device computes nothing either. The timings and checks that result are
 * meaningless; the smoke test asks only that the tool runs every path to its report.
 */
#include <stddef.h>

#define EXPORT __attribute__((visibility("default")))

enum { SUCCESS = 0, NOT_INITIALIZED = 1, INVALID_VALUE = 7 };

static int the_handle; /* the one handle this fake gives out */
static int valid(const void *h) { return h == &the_handle; }

EXPORT int cublasCreate_v2(void **handle) {
  if (!handle) return INVALID_VALUE;
  *handle = &the_handle;
  return SUCCESS;
}
EXPORT int cublasDestroy_v2(void *handle) { return valid(handle) ? SUCCESS : NOT_INITIALIZED; }
EXPORT int cublasSetStream_v2(void *handle, void *stream) {
  (void)stream;
  return valid(handle) ? SUCCESS : NOT_INITIALIZED;
}
EXPORT int cublasSetMathMode(void *handle, int mode) {
  return !valid(handle) ? NOT_INITIALIZED : mode == 0 ? SUCCESS : INVALID_VALUE;
}
/* major, minor, patch */
EXPORT int cublasGetProperty(int type, int *value) {
  if (!value || type < 0 || type > 2) return INVALID_VALUE;
  *value = type == 0 ? 13 : 0;
  return SUCCESS;
}

/* cuBLAS's own checks of a column-major GEMM: sizes, leading dimensions, pointers. */
static int gemm_args(void *handle, int transa, int transb, int m, int n, int k, const void *alpha, const void *a,
                     int lda, const void *b, int ldb, const void *beta, const void *c, int ldc) {
  if (!valid(handle)) return NOT_INITIALIZED;
  const int a_rows = transa ? k : m, b_rows = transb ? n : k;
  if (m < 0 || n < 0 || k < 0 || (transa != 0 && transa != 1) || (transb != 0 && transb != 1) || !alpha || !beta ||
      !a || !b || !c || lda < (a_rows > 1 ? a_rows : 1) || ldb < (b_rows > 1 ? b_rows : 1) || ldc < (m > 1 ? m : 1))
    return INVALID_VALUE;
  return SUCCESS;
}

EXPORT int cublasGemmEx(void *handle, int transa, int transb, int m, int n, int k, const void *alpha, const void *a,
                        int a_type, int lda, const void *b, int b_type, int ldb, const void *beta, void *c, int c_type,
                        int ldc, int compute_type, int algo) {
  (void)a_type, (void)b_type, (void)c_type, (void)compute_type, (void)algo;
  return gemm_args(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

EXPORT int cublasGemmStridedBatchedEx(void *handle, int transa, int transb, int m, int n, int k, const void *alpha,
                                      const void *a, int a_type, int lda, long long stride_a, const void *b,
                                      int b_type, int ldb, long long stride_b, const void *beta, void *c, int c_type,
                                      int ldc, long long stride_c, int batch, int compute_type, int algo) {
  (void)a_type, (void)b_type, (void)c_type, (void)compute_type, (void)algo;
  if (batch < 0 || stride_a < 0 || stride_b < 0 || stride_c < 0) return INVALID_VALUE;
  return gemm_args(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
