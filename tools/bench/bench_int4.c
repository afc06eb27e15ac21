/*
 * bench_int4.c — `kiln-bench int4`: kiln_matmul_int4 (W4A16) against cublasGemmEx f16 x f16 -> f16
 * on the same logical shape y[M, N] = x[M, K]·W[K, N], W row-major f16 for the peer.
 *
 * Decode (M <= 16) is weight-bandwidth-bound: rows report GB/s of the 4-bit weight's bytes
 * (codes + f16 scales + u8 zeros) and that as a share of the device copy bandwidth measured
 * first in the same run; larger M report TFLOP/s (2·M·N·K). Every weight (kiln's and the peer's)
 * is rotated through enough copies that one pass exceeds twice the L2, so each call reads DRAM.
 * Random codes and scales (never zeros); zeros 8 (symmetric weights).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

const char bench_int4_usage[] =
    "usage: kiln-bench int4 [options]\n"
    "  y[M,N] = x[M,K]·W[K,N], W 4-bit (kiln) vs W f16 (cuBLAS), x and y f16 (or bf16).\n"
    "  Shapes: (K, N) in (4096, 4096), (4096, 12288), (8192, 28672), (28672, 8192),\n"
    "  M in 1, 4, 16, 64, 256, 1024, 4096 (--quick: first two shapes, M in 1, 16, 1024).\n"
    "  --dtype f16|bf16     activation and output dtype (default f16)\n"
    "  --group G            group size 32, 64, 128 or 0 for per-column (default 128)\n"
    "  --shape KxN          this one weight shape only (e.g. 4096x12288; for profiling)\n"
    "  --m M                this one M only\n"
    "  --algo A             auto (default), decode or prefill (the workspace is given to auto\n"
    "                       from M = 128 and to prefill always)\n" BENCH_PAIRED_USAGE BENCH_COMMON_USAGE;

typedef struct w4_weights {
  int n_copies;
  CUdeviceptr codes, scales, zeros; /* n_copies copies each, back to back */
  size_t codes_b, scales_b, zeros_b;
  CUdeviceptr w16; /* the peer's f16 weight copies */
  int n16;
  size_t w16_b;
} w4_weights;

typedef struct w4_call {
  bench_env *env;
  const bench_cublas *cb;
  w4_weights *w;
  kiln_qweight q;
  kiln_matmul_int4_opts opts; /* AUTO; with a workspace from M = 128 (so AUTO may take PREFILL) */
  CUdeviceptr ws;
  int64_t group;
  DLTensor x, y;
  int64_t xs[2], ys[2];
  CUdeviceptr xp, yp;
  int m, n, k;
  int dt; /* BENCH_CUDA_R_16F / 16BF */
  kiln_status st;
  cublasStatus_t cst;
} w4_call;

static int kiln_fn(void *user, int iter) {
  w4_call *c = user;
  const int i = iter % c->w->n_copies;
  c->q.codes = (uint32_t *)(uintptr_t)(c->w->codes + (size_t)i * c->w->codes_b);
  c->q.scales = (uint16_t *)(uintptr_t)(c->w->scales + (size_t)i * c->w->scales_b);
  c->q.zeros = (uint8_t *)(uintptr_t)(c->w->zeros + (size_t)i * c->w->zeros_b);
  c->st = kiln_matmul_int4(c->env->ctx, &c->x, &c->q, &c->y, &c->opts, c->env->stream);
  return c->st != KILN_OK;
}

static int peer_fn(void *user, int iter) {
  w4_call *c = user;
  const void *w = (const void *)(uintptr_t)(c->w->w16 + (size_t)(iter % c->w->n16) * c->w->w16_b);
  const float one = 1.f, zero = 0.f;
  /* row-major y = x·W is column-major yᵀ = Wᵀ·xᵀ */
  c->cst = c->cb->gemm_ex(c->cb->handle, BENCH_CUBLAS_OP_N, BENCH_CUBLAS_OP_N, c->n, c->m, c->k, &one, w, c->dt, c->n,
                          (const void *)(uintptr_t)c->xp, c->dt, c->k, &zero, (void *)(uintptr_t)c->yp, c->dt, c->n,
                          BENCH_CUBLAS_COMPUTE_32F, BENCH_CUBLAS_GEMM_DEFAULT);
  return c->cst != BENCH_CUBLAS_STATUS_SUCCESS;
}

static void free_weights(bench_env *env, w4_weights *w) {
  bench_free(env, w->codes), bench_free(env, w->scales), bench_free(env, w->zeros), bench_free(env, w->w16);
  memset(w, 0, sizeof *w);
}

/* Weights of one (K, N): kiln's and the peer's rotation copies, random. */
static int make_weights(bench_env *env, int64_t K, int64_t N, int64_t G, bench_dtype dt, w4_weights *w) {
  memset(w, 0, sizeof *w);
  size_t pb;
  if (kiln_qweight_bytes(K, N, G, &w->codes_b, &w->scales_b, &w->zeros_b, &pb) != KILN_OK) {
    fprintf(stderr, "kiln-bench int4: %s\n", kiln_last_error());
    return -1;
  }
  const size_t per = w->codes_b + w->scales_b + w->zeros_b;
  w->w16_b = (size_t)(K * N) * 2;
  w->n_copies = bench_rotation_count(env, per, env->mem_budget / 4);
  w->n16 = bench_rotation_count(env, w->w16_b, env->mem_budget / 2);
  if (bench_alloc(env, per * 0 + w->codes_b * (size_t)w->n_copies, &w->codes) ||
      bench_alloc(env, w->scales_b * (size_t)w->n_copies, &w->scales) ||
      bench_alloc(env, w->zeros_b * (size_t)w->n_copies, &w->zeros) ||
      bench_alloc(env, w->w16_b * (size_t)w->n16, &w->w16))
    return -1;
  if (bench_fill_random(env, w->codes, w->codes_b * (size_t)w->n_copies, BENCH_I8, 21) ||
      bench_fill_random(env, w->scales, w->scales_b / 2 * (size_t)w->n_copies, BENCH_F16, 22) ||
      bench_cu_check(env, env->cu->cuMemsetD8Async(w->zeros, 8, w->zeros_b * (size_t)w->n_copies, env->stream),
                     "cuMemsetD8Async (zeros)") ||
      bench_fill_random(env, w->w16, w->w16_b / 2 * (size_t)w->n16, dt, 23))
    return -1;
  return 0;
}

static int run_m(bench_env *env, const bench_cublas *cb, w4_weights *w, int64_t M, int64_t K, int64_t N, int64_t G,
                 bench_dtype dt, kiln_int4_algo algo, double copy_gbps) {
  w4_call c = {.env = env, .cb = cb, .w = w, .m = (int)M, .n = (int)N, .k = (int)K};
  c.dt = dt == BENCH_BF16 ? BENCH_CUDA_R_16BF : BENCH_CUDA_R_16F;
  int rc = 0;
  if (bench_alloc(env, (size_t)(M * K) * 2, &c.xp) || bench_alloc(env, (size_t)(M * N) * 2, &c.yp)) {
    rc = -1;
    goto done;
  }
  if ((rc = bench_fill_random(env, c.xp, (size_t)(M * K), dt, 24))) goto done;
  c.opts = kiln_matmul_int4_opts_default();
  c.opts.algo = algo;
  if (bench_w16_gets_workspace(algo, M)) { /* PREFILL's workspace: the weight in x's dtype */
    if (bench_alloc(env, (size_t)(K * N) * 2, &c.ws)) {
      rc = -1;
      goto done;
    }
    c.opts.workspace = (void *)(uintptr_t)c.ws, c.opts.workspace_bytes = (size_t)(K * N) * 2;
  }
  const DLDevice dev = {kDLCUDA, env->info.ordinal};
  c.xs[0] = M, c.xs[1] = K, c.ys[0] = M, c.ys[1] = N;
  c.x = (DLTensor){(void *)(uintptr_t)c.xp, dev, 2, bench_dtype_dl(dt), c.xs, NULL, 0};
  c.y = (DLTensor){(void *)(uintptr_t)c.yp, dev, 2, bench_dtype_dl(dt), c.ys, NULL, 0};
  c.q = (kiln_qweight){.k = K, .n = N, .group = G ? G : K, .device = dev};

  const int decode = M <= 16;
  const double wbytes = (double)(w->codes_b + w->scales_b + w->zeros_b);
  char shape_s[48], algo_s[24];
  snprintf(shape_s, sizeof shape_s, "M%lldK%lldN%lld", (long long)M, (long long)K, (long long)N);
  snprintf(algo_s, sizeof algo_s, "w4 g%lld%s", (long long)(G ? G : K), bench_w16_algo_suffix(algo));
  bench_row row;
  bench_row_init(&row, "matmul_int4", shape_s, bench_dtype_name(dt), algo_s, decode ? BENCH_GBPS : BENCH_TFLOPS,
                 decode ? wbytes : 2.0 * (double)M * (double)N * (double)K);
  if (cb->lib) snprintf(row.peer, sizeof row.peer, "cublas %.20s", cb->version[0] ? cb->version : "f16");
  if (cb->lib && env->opts.paired) { /* --paired: kiln and cuBLAS in alternating batches */
    if ((rc = bench_row_paired(env, &row, kiln_fn, peer_fn, &c, &c.st, &c.cst))) goto done;
  } else if (bench_time(env, env->stream, kiln_fn, &c, bench_default_reps(env), &row.kiln)) {
    if (c.st == KILN_OK) {
      rc = -1;
      goto done;
    }
    snprintf(row.note, sizeof row.note, "error: %s", kiln_last_error());
    env->failures++;
  }
  if (cb->lib && !env->opts.paired) {
    if (bench_time(env, env->stream, peer_fn, &c, bench_default_reps(env), &row.peer_t)) {
      snprintf(row.note, sizeof row.note, "cublas: %s", bench_cublas_status_name(c.cst));
      row.peer_t.median_us = NAN;
    }
  }
  if (decode && !row.note[0] && !isnan(row.kiln.median_us))
    snprintf(row.note, sizeof row.note, "%.0f%% of copy bandwidth (%.0f GB/s)",
             100.0 * bench_rate(&row, row.kiln.median_us) / copy_gbps, copy_gbps);
  bench_report(env, &row);
done:
  bench_free(env, c.xp), bench_free(env, c.yp), bench_free(env, c.ws);
  return rc;
}

int bench_int4_main(int argc, char **argv) {
  bench_common common;
  bench_common_init(&common);
  bench_dtype dt = BENCH_F16;
  long long group = 128, one_k = 0, one_n = 0, one_m = 0;
  kiln_int4_algo algo = KILN_INT4_AUTO;
  for (int i = 1; i < argc; i++) {
    int c = bench_parse_common(argc, argv, &i, &common, bench_int4_usage);
    if (c == BENCH_HELP) return 0;
    if (c < 0) return 2;
    if (c > 0) continue;
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    i++;
    char tail = 0;
    if (!strcmp(a, "--dtype") && v && !bench_dtype_parse(v, &dt) && (dt == BENCH_F16 || dt == BENCH_BF16)) continue;
    if (!strcmp(a, "--group") && v && sscanf(v, "%lld%c", &group, &tail) == 1 &&
        (group == 0 || group == 32 || group == 64 || group == 128))
      continue;
    if (!strcmp(a, "--shape") && v && sscanf(v, "%lldx%lld%c", &one_k, &one_n, &tail) == 2 && one_k >= 128 &&
        one_k % 128 == 0 && one_n >= 1 && one_k <= (1 << 20) && one_n <= (1 << 20))
      continue;
    if (!strcmp(a, "--m") && v && sscanf(v, "%lld%c", &one_m, &tail) == 1 && one_m >= 1 && one_m <= 65536) continue;
    if (!strcmp(a, "--algo") && bench_w16_algo_parse(v) >= 0) {
      algo = (kiln_int4_algo)bench_w16_algo_parse(v);
      continue;
    }
    fprintf(stderr, "kiln-bench int4: bad option or value \"%s %s\" (see kiln-bench int4 --help)\n", a, v ? v : "");
    return 2;
  }
  bench_env env;
  if (bench_env_open(&env, &common, 1)) {
    bench_env_close(&env);
    return 1;
  }
  const double copy_gbps = bench_copy_gbps(&env);
  bench_cublas cb;
  bench_cublas_open(&cb, env.stream);
  int64_t shapes[4][2] = {{4096, 4096}, {4096, 12288}, {8192, 28672}, {28672, 8192}};
  static const int64_t ms_full[] = {1, 4, 16, 64, 256, 1024, 4096}, ms_quick[] = {1, 16, 1024};
  const int64_t *ms = common.quick ? ms_quick : ms_full;
  int n_m = common.quick ? 3 : 7, n_shapes = common.quick ? 2 : 4;
  const int64_t m_one[1] = {one_m};
  if (one_k) shapes[0][0] = one_k, shapes[0][1] = one_n, n_shapes = 1;
  if (one_m) ms = m_one, n_m = 1;
  int dead = 0;
  for (int s = 0; s < n_shapes && !dead; s++) {
    w4_weights w;
    if (make_weights(&env, shapes[s][0], shapes[s][1], group, dt, &w)) {
      free_weights(&env, &w);
      dead = 1;
      break;
    }
    for (int i = 0; i < n_m && !dead; i++) {
      if (i == 0 || (ms[i] > 16) != (ms[i - 1] > 16)) bench_table_header(ms[i] > 16 ? BENCH_TFLOPS : BENCH_GBPS);
      dead = run_m(&env, &cb, &w, ms[i], shapes[s][0], shapes[s][1], group, dt, algo, copy_gbps) < 0;
    }
    free_weights(&env, &w);
  }
  if (dead) fprintf(stderr, "kiln-bench int4: stopping: the device reported an error (see above)\n");
  bench_cublas_close(&cb);
  return bench_env_close(&env);
}
