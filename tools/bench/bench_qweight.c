/*
 * bench_qweight.c — `kiln-bench qweight`: converting a checkpoint's weights on the GPU
 * (kernels/qweight.cu, kernels/int8_quantize.cu) against the same kiln op on a CPU context, on
 * the same data: a GPTQ import with act-order (the sort, then the gather of the codes), the
 * round-to-nearest INT4 quantization of an f16 weight, and the per-column INT8 quantization.
 * These run once per model load, so the question is seconds, not percent: the ratio column is
 * CPU time / GPU time. GB/s counts the source bytes read plus the native bytes written.
 *
 * Check before timing: the GPU's native buffers must equal the CPU context's byte for byte
 * (test_gpu_qweight does so over every format and shape; this is the benchmark's own guard).
 */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

const char bench_qweight_usage[] =
    "usage: kiln-bench qweight [options]\n"
    "  Weight conversion on the GPU against kiln's CPU context on the same data: GPTQ import with\n"
    "  act-order (group 128), INT4 quantization of an f16 weight (group 128, asymmetric) and INT8\n"
    "  quantization (per column). Ratio: CPU time / GPU time.\n"
    "  --shape KxN      the weight [K, N] (repeatable, up to 8; default 4096x12288 and 8192x28672,\n"
    "                   --quick: 4096x12288)\n" BENCH_COMMON_USAGE;

typedef struct shape {
  int64_t k, n;
} shape;

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
  rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
  return (uint32_t)((rng * 2685821657736338717ull) >> 32);
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

/* A blocking copy between host and device (unified addressing, as bench.c copies). */
static int copy(bench_env *env, CUdeviceptr dst, CUdeviceptr src, size_t bytes, const char *what) {
  return bench_cu_check(env, env->cu->cuMemcpyAsync(dst, src, bytes, env->stream), what) ||
         bench_cu_check(env, env->cu->cuStreamSynchronize(env->stream), what);
}

/* A tensor description over data (host or device) with its own shape and strides. */
typedef struct view {
  DLTensor t;
  int64_t shape[2], strides[2];
} view;
static DLTensor *mk(view *v, void *data, DLDataType dt, int ndim, int64_t d0, int64_t d1, int dev) {
  memset(v, 0, sizeof *v);
  v->shape[0] = d0, v->shape[1] = d1;
  v->strides[0] = ndim == 2 ? d1 : 1, v->strides[1] = 1;
  v->t.data = data, v->t.ndim = ndim, v->t.dtype = dt;
  v->t.shape = v->shape, v->t.strides = v->strides;
  v->t.device = dev ? (DLDevice){kDLCUDA, 0} : (DLDevice){kDLCPU, 0};
  return &v->t;
}

/* One conversion, the same arguments on both sides: host buffers for the CPU context, device
 * twins for the GPU. kind 0: GPTQ v2 import with act-order; 1: INT4 quantize; 2: INT8 quantize. */
typedef struct job {
  bench_env *env;
  kiln_context *cpu;
  int kind;
  DLTensor *src[2][4]; /* [host, device] sources: qweight, qzeros, scales, g_idx (kind 0) or w */
  kiln_qweight out[2];
  DLTensor *q8[2], *s8[2];
  size_t out_bytes[4];   /* the native buffers (kind 2: q, scales) */
  void *host_out[4];     /* host outputs, [0..3] */
  CUdeviceptr dev_out[4];
} job;

static kiln_status run(job *j, int dev) {
  kiln_context *ctx = dev ? j->env->ctx : j->cpu;
  CUstream s = dev ? j->env->stream : NULL;
  if (j->kind == 0)
    return kiln_qweight_import(ctx, KILN_QFORMAT_GPTQ_V2, j->src[dev][0], j->src[dev][1], j->src[dev][2],
                               j->src[dev][3], &j->out[dev], s);
  if (j->kind == 1) return kiln_qweight_quantize(ctx, j->src[dev][0], 0, &j->out[dev], s);
  return kiln_quantize_int8(ctx, j->src[dev][0], j->q8[dev], j->s8[dev], 1, s);
}
static int gpu_call(void *user, int iter) {
  (void)iter;
  job *j = user;
  if (run(j, 1) != KILN_OK) {
    fprintf(stderr, "kiln-bench qweight: %s\n", kiln_last_error());
    return 1;
  }
  return 0;
}

static void one(bench_env *env, kiln_context *cpu, shape sh, int kind, int reps) {
  static const char *names[3] = {"gptq act-order g128", "quantize g128 asym", "int8 per column"};
  const int64_t K = sh.k, N = sh.n, G = 128, NG = K / G;
  job j;
  memset(&j, 0, sizeof j);
  j.env = env, j.cpu = cpu, j.kind = kind;
  /* sources on the host: random words / scales / a shuffled g_idx, or an f16 weight */
  size_t src_bytes[4] = {0, 0, 0, 0};
  void *hsrc[4] = {NULL, NULL, NULL, NULL};
  view hv[4], dv[4];
  if (kind == 0) {
    src_bytes[0] = (size_t)(K / 8 * N) * 4, src_bytes[1] = (size_t)(NG * N / 8) * 4;
    src_bytes[2] = (size_t)(NG * N) * 2, src_bytes[3] = (size_t)K * 4;
  } else {
    src_bytes[0] = (size_t)(K * N) * 2;
  }
  for (int i = 0; i < 4; i++) {
    if (!src_bytes[i]) continue;
    hsrc[i] = malloc(src_bytes[i]);
    if (i == 2 || kind != 0) { /* f16 values in [-1, 1] (scales, or the weight) */
      for (size_t e = 0; e < src_bytes[i] / 2; e++)
        ((uint16_t *)hsrc[i])[e] = kiln_f32_to_f16((float)(rnd() % 2001) / 1000.0f - 1.0f);
    } else if (i == 3) {
      int32_t *g = hsrc[i];
      for (int64_t k = 0; k < K; k++) g[k] = (int32_t)(k / G);
      for (int64_t k = K - 1; k > 0; k--) {
        const int64_t o = rnd() % (uint32_t)(k + 1);
        const int32_t t = g[k];
        g[k] = g[o], g[o] = t;
      }
    } else {
      for (size_t e = 0; e < src_bytes[i] / 4; e++) ((uint32_t *)hsrc[i])[e] = rnd();
    }
  }
  CUdeviceptr dsrc[4] = {0, 0, 0, 0};
  for (int i = 0; i < 4; i++)
    if (src_bytes[i] && (bench_alloc(env, src_bytes[i], &dsrc[i]) ||
                         copy(env, dsrc[i], (CUdeviceptr)(uintptr_t)hsrc[i], src_bytes[i], "cuMemcpyAsync (upload)")))
      goto done;
  static const DLDataType I32 = {kDLInt, 32, 1}, F16 = {kDLFloat, 16, 1}, I8 = {kDLInt, 8, 1}, F32 = {kDLFloat, 32, 1};
  for (int d = 0; d < 2; d++) {
    view *v = d ? dv : hv;
    void *p[4];
    for (int i = 0; i < 4; i++) p[i] = d ? (void *)(uintptr_t)dsrc[i] : hsrc[i];
    if (kind == 0) {
      j.src[d][0] = mk(&v[0], p[0], I32, 2, K / 8, N, d), j.src[d][1] = mk(&v[1], p[1], I32, 2, NG, N / 8, d);
      j.src[d][2] = mk(&v[2], p[2], F16, 2, NG, N, d), j.src[d][3] = mk(&v[3], p[3], I32, 1, K, 1, d);
    } else {
      j.src[d][0] = mk(&v[0], p[0], F16, 2, K, N, d);
    }
  }
  /* outputs */
  size_t ob[4] = {0, 0, 0, 0};
  if (kind == 2) ob[0] = (size_t)(K * N), ob[1] = (size_t)N * 4;
  else kiln_qweight_bytes(K, N, G, &ob[0], &ob[1], &ob[2], &ob[3]);
  if (kind == 1) ob[3] = 0;
  view q8v[2], s8v[2];
  for (int i = 0; i < 4; i++) {
    if (!ob[i]) continue;
    j.host_out[i] = malloc(ob[i]);
    if (bench_alloc(env, ob[i], &j.dev_out[i])) goto done;
  }
  for (int d = 0; d < 2; d++) {
    void *p[4];
    for (int i = 0; i < 4; i++) p[i] = d ? (void *)(uintptr_t)j.dev_out[i] : j.host_out[i];
    if (kind == 2) {
      j.q8[d] = mk(&q8v[d], p[0], I8, 2, K, N, d), j.s8[d] = mk(&s8v[d], p[1], F32, 1, N, 1, d);
    } else {
      j.out[d] = (kiln_qweight){.k = K, .n = N, .group = G, .codes = p[0], .scales = p[1], .zeros = p[2],
                                .perm = p[3], .device = d ? (DLDevice){kDLCUDA, 0} : (DLDevice){kDLCPU, 0}};
    }
  }
  size_t total_src = 0, total_out = 0;
  for (int i = 0; i < 4; i++) total_src += src_bytes[i], total_out += ob[i];
  char shape_s[48];
  snprintf(shape_s, sizeof shape_s, "K%" PRId64 "N%" PRId64, K, N);
  bench_row row;
  bench_row_init(&row, "qweight", shape_s, kind == 0 ? "i32" : "f16", names[kind], BENCH_GBPS,
                 (double)(total_src + total_out));
  snprintf(row.peer, sizeof row.peer, "kiln cpu context");
  /* the CPU context once (the peer), then the GPU's buffers against its */
  double t0 = now_us();
  if (run(&j, 0) != KILN_OK) {
    fprintf(stderr, "kiln-bench qweight: cpu: %s\n", kiln_last_error());
    env->failures++;
    goto done;
  }
  row.peer_t.median_us = row.peer_t.min_us = row.peer_t.p90_us = now_us() - t0;
  row.peer_t.reps = 1, row.peer_t.batch = 1;
  if (gpu_call(&j, 0) || bench_cu_check(env, env->cu->cuStreamSynchronize(env->stream), "sync")) goto done;
  for (int i = 0; i < 4 && !row.check_failed; i++) {
    if (!ob[i]) continue;
    void *back = malloc(ob[i]);
    if (!copy(env, (CUdeviceptr)(uintptr_t)back, j.dev_out[i], ob[i], "cuMemcpyAsync (download)"))
      row.check_failed = memcmp(back, j.host_out[i], ob[i]) != 0;
    free(back);
  }
  row.rel_err = row.check_failed ? NAN : 0.0;
  if (row.check_failed) snprintf(row.note, sizeof row.note, "the GPU's buffers differ from the CPU's");
  else if (bench_time(env, env->stream, gpu_call, &j, reps, &row.kiln)) goto done;
  bench_report(env, &row);
done:
  for (int i = 0; i < 4; i++) {
    free(hsrc[i]), free(j.host_out[i]);
    if (dsrc[i]) bench_free(env, dsrc[i]);
    if (j.dev_out[i]) bench_free(env, j.dev_out[i]);
  }
}

int bench_qweight_main(int argc, char **argv) {
  bench_common common;
  bench_common_init(&common);
  shape shapes[8];
  int n_shapes = 0;
  for (int i = 1; i < argc; i++) {
    int c = bench_parse_common(argc, argv, &i, &common, bench_qweight_usage);
    if (c == BENCH_HELP) return 0;
    if (c < 0) return 2;
    if (c > 0) continue;
    long long k, n;
    if (!strcmp(argv[i], "--shape") && i + 1 < argc && n_shapes < 8 && sscanf(argv[i + 1], "%lldx%lld", &k, &n) == 2 &&
        k > 0 && n > 0 && k % 128 == 0 && n % 8 == 0) {
      shapes[n_shapes++] = (shape){k, n};
      i++;
      continue;
    }
    fprintf(stderr, "kiln-bench qweight: bad option or value \"%s%s%s\" (K a multiple of 128, N of 8; see kiln-bench "
            "qweight --help)\n", argv[i], i + 1 < argc ? " " : "", i + 1 < argc ? argv[i + 1] : "");
    return 2;
  }
  if (!n_shapes) {
    shapes[n_shapes++] = (shape){4096, 12288};
    if (!common.quick) shapes[n_shapes++] = (shape){8192, 28672};
  }
  bench_env env;
  if (bench_env_open(&env, &common, 1)) return bench_env_close(&env);
  kiln_context *cpu = NULL;
  if (kiln_context_create(kDLCPU, 0, &cpu) != KILN_OK) {
    fprintf(stderr, "kiln-bench qweight: %s\n", kiln_last_error());
    env.failures++;
    return bench_env_close(&env);
  }
  const int reps = bench_default_reps(&env);
  bench_table_header(BENCH_GBPS);
  for (int s = 0; s < n_shapes; s++)
    for (int kind = 0; kind < 3; kind++) one(&env, cpu, shapes[s], kind, reps);
  kiln_context_destroy(cpu);
  return bench_env_close(&env);
}
