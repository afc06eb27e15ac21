/*
 * kiln-demo — shows kiln working end to end on this machine: on the GPU when there is one
 * (else on the CPU, saying so), it converts a random f32 tensor to f16 with kiln_cast, runs a
 * kiln_matmul on it, and checks both against the CPU reference.
 * (The demo issue grows this into one LLM attention block.)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float uniform(void) { /* xorshift64*, uniform in [-1, 1) */
  rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
  return (float)((rng * 2685821657736338717ull) >> 40) / (float)(1 << 23) - 1.0f;
}

#define CHECK(call)                                                                         \
  do {                                                                                      \
    kiln_status st_ = (call);                                                               \
    if (st_ != KILN_OK) {                                                                   \
      fprintf(stderr, "kiln-demo: %s failed: %s: %s\n", #call, kiln_status_string(st_), kiln_last_error()); \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

static DLTensor host_tensor(void *data, int ndim, int64_t *shape, DLDataType dt) {
  DLTensor t = {.data = data, .device = {kDLCPU, 0}, .ndim = ndim, .dtype = dt, .shape = shape};
  return t;
}

int main(int argc, char **argv) {
  int m = 512, n = 768, k = 1024;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--m")) m = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--n")) n = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--k")) k = atoi(argv[i + 1]);
  }
  int devices = 0;
  kiln_status dst = kiln_device_count(&devices);
  int gpu = dst == KILN_OK && devices > 0 && kiln_build_has_kernels();
  kiln_context *cpu = NULL, *ctx = NULL;
  CHECK(kiln_context_create(kDLCPU, 0, &cpu));
  if (gpu && kiln_context_create(kDLCUDA, 0, &ctx) != KILN_OK) {
    printf("kiln-demo: GPU present but unusable (%s); running on the CPU\n", kiln_last_error());
    gpu = 0;
  }
  if (!gpu) {
    if (!kiln_build_has_kernels())
      printf("kiln-demo: this build has no GPU kernels (built without nvcc): running on the CPU\n");
    else
      printf("kiln-demo: no CUDA GPU found (%s): running on the CPU\n", dst == KILN_OK ? "0 devices" : kiln_last_error());
    ctx = cpu;
  }
  kiln_device_info info;
  CHECK(kiln_context_info(ctx, &info));
  if (gpu)
    printf("kiln-demo: device %s (sm_%d%d, %d SMs)\n", info.name, info.cc_major, info.cc_minor, info.sm_count);
  else
    printf("kiln-demo: device CPU (%d hardware threads)\n", info.sm_count);

  DLDataType f32 = {kDLFloat, 32, 1}, f16 = {kDLFloat, 16, 1};
  int64_t sa[2] = {m, k}, sb[2] = {k, n}, sc[2] = {m, n};
  float *ha = malloc(sizeof(float) * (size_t)m * k), *hb = malloc(sizeof(float) * (size_t)k * n);
  float *hc = malloc(sizeof(float) * (size_t)m * n), *ref = malloc(sizeof(float) * (size_t)m * n);
  uint16_t *ha16 = malloc(2 * (size_t)m * k), *hb16 = malloc(2 * (size_t)k * n);
  for (int64_t i = 0; i < (int64_t)m * k; i++) ha[i] = uniform();
  for (int64_t i = 0; i < (int64_t)k * n; i++) hb[i] = uniform();

  /* Host reference: f16-rounded inputs, products summed in double. */
  DLTensor A32 = host_tensor(ha, 2, sa, f32), B32 = host_tensor(hb, 2, sb, f32);
  DLTensor A16h = host_tensor(ha16, 2, sa, f16), B16h = host_tensor(hb16, 2, sb, f16), Ch = host_tensor(hc, 2, sc, f32);
  CHECK(kiln_cast(cpu, &A32, &A16h, NULL));
  CHECK(kiln_cast(cpu, &B32, &B16h, NULL));
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double s = 0;
      for (int kk = 0; kk < k; kk++) s += (double)kiln_f16_to_f32(ha16[i * k + kk]) * kiln_f16_to_f32(hb16[kk * n + j]);
      ref[i * n + j] = (float)s;
    }

  if (gpu) {
    DLManagedTensorVersioned *a32, *a16, *b16, *c32;
    CUstream stream;
    CHECK(kiln_stream_create(ctx, &stream));
    CHECK(kiln_tensor_empty(ctx, 2, sa, f32, &a32));
    CHECK(kiln_tensor_empty(ctx, 2, sa, f16, &a16));
    CHECK(kiln_tensor_empty(ctx, 2, sb, f16, &b16));
    CHECK(kiln_tensor_empty(ctx, 2, sc, f32, &c32));
    CHECK(kiln_tensor_copy(ctx, &A32, &a32->dl_tensor, stream));
    CHECK(kiln_cast(ctx, &a32->dl_tensor, &a16->dl_tensor, stream)); /* the first kernel: f32 -> f16 on the GPU */
    CHECK(kiln_tensor_copy(ctx, &B16h, &b16->dl_tensor, stream));
    CHECK(kiln_matmul(ctx, &a16->dl_tensor, &b16->dl_tensor, &c32->dl_tensor, NULL, stream));
    uint16_t *back16 = malloc(2 * (size_t)m * k);
    DLTensor back = host_tensor(back16, 2, sa, f16);
    CHECK(kiln_tensor_copy(ctx, &a16->dl_tensor, &back, stream));
    CHECK(kiln_tensor_copy(ctx, &c32->dl_tensor, &Ch, stream));
    CHECK(kiln_stream_synchronize(ctx, stream));
    int cast_ok = memcmp(back16, ha16, 2 * (size_t)m * k) == 0;
    printf("kiln-demo: kiln_cast f32 -> f16 on the GPU: %s\n", cast_ok ? "bit-identical to the CPU" : "MISMATCH");
    free(back16);
    kiln_tensor_free(a32), kiln_tensor_free(a16), kiln_tensor_free(b16), kiln_tensor_free(c32);
    CHECK(kiln_stream_destroy(ctx, stream));
    if (!cast_ok) return 1;
  } else {
    CHECK(kiln_matmul(ctx, &A16h, &B16h, &Ch, NULL, NULL));
  }
  double num = 0, den = 0;
  for (int64_t i = 0; i < (int64_t)m * n; i++) {
    double d = (double)hc[i] - ref[i];
    num += d * d;
    den += (double)ref[i] * ref[i];
  }
  double rel = sqrt(num / den);
  printf("kiln-demo: kiln_matmul [%d x %d] x [%d x %d] f16 -> f32 on the %s: relative error %.2e vs float64 (limit 1e-4): %s\n",
         m, k, k, n, gpu ? "GPU" : "CPU", rel, rel <= 1e-4 ? "ok" : "MISMATCH");
  free(ha), free(hb), free(hc), free(ref), free(ha16), free(hb16);
  if (ctx != cpu) kiln_context_destroy(ctx);
  kiln_context_destroy(cpu);
  return rel <= 1e-4 ? 0 : 1;
}
