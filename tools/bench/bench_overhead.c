/*
 * bench_overhead.c — `kiln-bench overhead`: what one C call costs the host (SPEC 6: validation +
 * launch < 2 µs per C call), on problems so small that the GPU's work is negligible.
 *
 * For each call: warm-up, then N calls back to back on one stream, timed with CLOCK_MONOTONIC
 * before the stream is synchronized ("issue": what the host spends per call, the quantity the
 * target is about) and after it ("total": issue plus whatever the GPU could not overlap). The
 * median of --reps such runs. Peers in the same run: cublasGemmEx on the same 16x16x16 product
 * (validation + launch inside cuBLAS), and kiln_cast of 256 elements, kiln's cheapest launch.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

const char bench_overhead_usage[] =
    "usage: kiln-bench overhead [options]\n"
    "  Host time per C call on tiny problems (16x16x16 matmul, [1,1,16,64] attention, 256-element\n"
    "  cast), N calls back to back, µs per call before and after the final stream synchronize,\n"
    "  median of --reps runs; cublasGemmEx on the same matmul as the peer.\n"
    "  --n N            calls per run (default 2000)\n" BENCH_COMMON_USAGE;

typedef int (*call_fn)(void *user);

typedef struct tiny {
  bench_env *env;
  kiln_context *ctx;
  CUstream stream;
  DLTensor a, b, c, q, o, src, dst;
  int64_t mk[2], o_shape[2], q_shape[4], v_shape[1];
  kiln_matmul_opts mm;
  kiln_attention_opts at;
  bench_cublas *cb;
  CUdeviceptr dev[5];
} tiny;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_double(const void *x, const void *y) {
  const double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* Median issue and total µs per call over reps runs of n calls. Returns 0, or -1 if a call failed. */
static int measure(tiny *t, call_fn fn, int n, int reps, double *issue, double *total) {
  double is[64], to[64];
  if (reps > 64) reps = 64;
  for (int i = 0; i < 200; i++)
    if (fn(t)) return -1;
  if (bench_cu_check(t->env, t->env->cu->cuStreamSynchronize(t->stream), "cuStreamSynchronize")) return -1;
  for (int r = 0; r < reps; r++) {
    const double t0 = now_us();
    for (int i = 0; i < n; i++)
      if (fn(t)) return -1;
    const double t1 = now_us();
    if (bench_cu_check(t->env, t->env->cu->cuStreamSynchronize(t->stream), "cuStreamSynchronize")) return -1;
    const double t2 = now_us();
    is[r] = (t1 - t0) / n;
    to[r] = (t2 - t0) / n;
  }
  qsort(is, (size_t)reps, sizeof is[0], cmp_double);
  qsort(to, (size_t)reps, sizeof to[0], cmp_double);
  *issue = is[reps / 2];
  *total = to[reps / 2];
  return 0;
}

static int call_matmul(void *user) {
  tiny *t = user;
  return kiln_matmul(t->ctx, &t->a, &t->b, &t->c, &t->mm, t->stream) != KILN_OK;
}
static int call_attention(void *user) {
  tiny *t = user;
  return kiln_attention(t->ctx, &t->q, &t->q, &t->q, &t->o, NULL, &t->at, t->stream) != KILN_OK;
}
static int call_cast(void *user) {
  tiny *t = user;
  return kiln_cast(t->ctx, &t->src, &t->dst, t->stream) != KILN_OK;
}
static int call_cublas(void *user) {
  tiny *t = user;
  const float alpha = 1.0f, beta = 0.0f;
  return t->cb->gemm_ex(t->cb->handle, BENCH_CUBLAS_OP_N, BENCH_CUBLAS_OP_N, 16, 16, 16, &alpha,
                        (const void *)(uintptr_t)t->dev[1], BENCH_CUDA_R_16F, 16, (const void *)(uintptr_t)t->dev[0],
                        BENCH_CUDA_R_16F, 16, &beta, (void *)(uintptr_t)t->dev[2], BENCH_CUDA_R_16F, 16,
                        BENCH_CUBLAS_COMPUTE_32F, BENCH_CUBLAS_GEMM_DEFAULT) != BENCH_CUBLAS_STATUS_SUCCESS;
}

int bench_overhead_main(int argc, char **argv) {
  bench_common common;
  bench_common_init(&common);
  int n = 2000;
  for (int i = 1; i < argc; i++) {
    int c = bench_parse_common(argc, argv, &i, &common, bench_overhead_usage);
    if (c == BENCH_HELP) return 0;
    if (c < 0) return 2;
    if (c > 0) continue;
    if (!strcmp(argv[i], "--n") && i + 1 < argc && atoi(argv[i + 1]) >= 1) {
      n = atoi(argv[++i]);
      continue;
    }
    fprintf(stderr, "kiln-bench overhead: bad option \"%s\" (see kiln-bench overhead --help)\n", argv[i]);
    return 2;
  }
  bench_env env;
  if (bench_env_open(&env, &common, 1)) {
    bench_env_close(&env);
    return 1;
  }
  const int reps = common.reps > 0 ? common.reps : common.quick ? 3 : 7;
  tiny t;
  memset(&t, 0, sizeof t);
  t.env = &env, t.ctx = env.ctx, t.stream = env.stream;
  const DLDevice dev = {kDLCUDA, env.info.ordinal};
  const DLDataType f16 = {kDLFloat, 16, 1}, f32 = {kDLFloat, 32, 1};
  int rc = 0;
  for (int i = 0; i < 5 && !rc; i++) rc = bench_alloc(&env, 64 * 1024, &t.dev[i]);
  for (int i = 0; i < 4 && !rc; i++) rc = bench_fill_random(&env, t.dev[i], 1024, BENCH_F16, 31 + (uint64_t)i);
  if (rc) return bench_env_close(&env);
  t.mk[0] = t.mk[1] = 16;
  t.a = (DLTensor){(void *)(uintptr_t)t.dev[0], dev, 2, f16, t.mk, NULL, 0};
  t.b = (DLTensor){(void *)(uintptr_t)t.dev[1], dev, 2, f16, t.mk, NULL, 0};
  t.c = (DLTensor){(void *)(uintptr_t)t.dev[2], dev, 2, f16, t.mk, NULL, 0};
  t.q_shape[0] = t.q_shape[1] = 1, t.q_shape[2] = 16, t.q_shape[3] = 64;
  t.q = (DLTensor){(void *)(uintptr_t)t.dev[3], dev, 4, f16, t.q_shape, NULL, 0};
  t.o = (DLTensor){(void *)(uintptr_t)t.dev[4], dev, 4, f16, t.q_shape, NULL, 0};
  t.v_shape[0] = 256;
  t.src = (DLTensor){(void *)(uintptr_t)t.dev[0], dev, 1, f16, t.v_shape, NULL, 0};
  t.dst = (DLTensor){(void *)(uintptr_t)t.dev[4], dev, 1, f32, t.v_shape, NULL, 0};
  t.mm = kiln_matmul_opts_default();
  t.at = kiln_attention_opts_default();
  bench_cublas cb;
  const int have_cublas = bench_cublas_open(&cb, env.stream) == 0;
  t.cb = &cb;

  printf("%d calls per run, median of %d runs; µs per call (issue: before the final synchronize)\n", n, reps);
  printf("%-44s %10s %10s\n", "call", "issue us", "total us");
  struct {
    const char *name;
    call_fn fn;
    int algo; /* matmul / attention algo, -1: none */
  } calls[] = {
      {"kiln_cast f16->f32 [256]", call_cast, -1},
      {"kiln_matmul 16x16x16 f16 AUTO", call_matmul, KILN_MATMUL_AUTO},
      {"kiln_matmul 16x16x16 f16 WGMMA", call_matmul, KILN_MATMUL_WGMMA},
      {"kiln_matmul 16x16x16 f16 CP_ASYNC", call_matmul, KILN_MATMUL_CP_ASYNC},
      {"kiln_matmul 16x16x16 f16 MMA_SYNC", call_matmul, KILN_MATMUL_MMA_SYNC},
      {"cublasGemmEx 16x16x16 f16 (peer)", call_cublas, -1},
      {"kiln_attention [1,1,16,64] f16 AUTO", call_attention, KILN_ATTENTION_AUTO},
      {"kiln_attention [1,1,16,64] f16 FLASH_WGMMA", call_attention, KILN_ATTENTION_FLASH_WGMMA},
      {"kiln_attention [1,1,16,64] f16 FLASH_MMA_SYNC", call_attention, KILN_ATTENTION_FLASH_MMA_SYNC},
  };
  for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
    if (calls[i].fn == call_cublas && !have_cublas) continue;
    if (calls[i].fn == call_matmul) t.mm.algo = (kiln_matmul_algo)calls[i].algo;
    if (calls[i].fn == call_attention) t.at.algo = (kiln_attention_algo)calls[i].algo;
    double issue, total;
    if (measure(&t, calls[i].fn, n, reps, &issue, &total)) {
      printf("%-44s %10s %10s  (%s)\n", calls[i].name, "-", "-",
             calls[i].fn == call_cublas ? "cuBLAS call failed" : kiln_last_error());
      continue;
    }
    printf("%-44s %10.2f %10.2f\n", calls[i].name, issue, total);
  }
  if (have_cublas) bench_cublas_close(&cb);
  for (int i = 0; i < 5; i++) bench_free(&env, t.dev[i]);
  return bench_env_close(&env);
}
