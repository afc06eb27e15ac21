/* probe_check.h — the probes' one error rule: a failed CUDA runtime call prints where and why,
 * and the probe exits 1 (a probe's numbers mean nothing after a failure). */
#ifndef KILN_PROBE_CHECK_H
#define KILN_PROBE_CHECK_H
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                            \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)
#endif
