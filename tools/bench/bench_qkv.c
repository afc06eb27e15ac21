/*
 * bench_qkv.c — `kiln-bench qkv`: the fused QKV projections against their peers in the same run.
 *   qkv_int4: kiln_qkv_project_int4 (G = 128) vs cublasGemmEx f16 on the merged weight
 *             [K, Nq + 2·Nkv], and vs three separate kiln_matmul_int4 calls (peer "kiln x3").
 *   qkv_int8: kiln_qkv_project_int8 (per-column scales; weights column-major, i.e. Linear
 *             weights [N, K] passed as their transposed views, or row-major with --int8 row)
 *             vs the same cuBLAS f16 GEMM.
 * Decode (M <= 16) rows report GB/s of the quantized weights' bytes (codes + scales + zeros, or
 * int8 + f32 scales) and that as a share of the copy bandwidth measured first; larger M report
 * TFLOP/s (2·M·K·(Nq + 2·Nkv)). Every weight is rotated through enough copies that one pass
 * exceeds twice the L2, so each call reads DRAM. Random inputs (never zeros).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

const char bench_qkv_usage[] =
    "usage: kiln-bench qkv [options]\n"
    "  q, k, v = x·Wq, x·Wk, x·Wv with W 4-bit (qkv_int4) or int8 (qkv_int8), against cuBLAS f16 on\n"
    "  the merged [K, Nq + 2 Nkv] weight and (int4) three separate kiln_matmul_int4 calls.\n"
    "  Shapes (K, Nq, Nkv): (4096, 4096, 1024), (4096, 4096, 4096), (8192, 8192, 1024);\n"
    "  M in 1, 8, 16, 64, 512, 2048, 8192 (--quick: the first shape, M in 1, 16, 512).\n"
    "  --dtype f16|bf16     activation and output dtype (default f16)\n"
    "  --int8 col|row       int8 weight layout: column-major views of [N, K] (default) or [K, N]\n"
    "  --only int4|int8     one weight format (default both)\n"
    "  --algo A             auto (default), decode or prefill; the PREFILL workspace (the three\n"
    "                       weights side by side) is given to auto from M = 128 and to prefill\n"
    "                       always (and to the 3 single int4 calls)\n"
    "  --m M                this one M only\n" BENCH_PAIRED_USAGE BENCH_COMMON_USAGE;

/* n_copies copies of the three projections' buffers, back to back, per buffer kind. */
typedef struct qkv_weights {
  int64_t K, N[3];
  int n4, n8, n16;                  /* rotation copies */
  size_t cb[3], sb[3], zb[3];       /* int4 bytes per projection */
  size_t set4, set8, set16;         /* bytes of one copy of all three */
  CUdeviceptr w4, w8, w16;          /* int4 (codes, scales, zeros of q, k, v), int8 (+ f32 scales), f16 merged */
} qkv_weights;

typedef struct qkv_call {
  bench_env *env;
  const bench_cublas *cb;
  qkv_weights *w;
  int64_t M;
  bench_dtype dt;
  int int8_col;
  DLTensor x, y[3], w8[3], s8[3];
  int64_t xs[2], ys[3][2], w8s[3][2], w8st[3][2], s8s[3];
  kiln_qweight q[3];
  kiln_qkv_opts opts;         /* int4: the algo, and PREFILL's workspace */
  kiln_matmul_int4_opts opts1; /* the same for the three single calls */
  CUdeviceptr xp, yp, ws; /* y: [M, Nq + 2 Nkv] row-major, q, k, v its column slices */
  kiln_status st;
  cublasStatus_t cst;
} qkv_call;

static void point_int4(qkv_call *c, int iter) {
  const qkv_weights *w = c->w;
  CUdeviceptr p = w->w4 + (size_t)(iter % w->n4) * w->set4;
  for (int i = 0; i < 3; i++) {
    c->q[i].codes = (uint32_t *)(uintptr_t)p, p += w->cb[i];
    c->q[i].scales = (uint16_t *)(uintptr_t)p, p += w->sb[i];
    c->q[i].zeros = (uint8_t *)(uintptr_t)p, p += w->zb[i];
  }
}

static int fused4_fn(void *user, int iter) {
  qkv_call *c = user;
  point_int4(c, iter);
  c->st = kiln_qkv_project_int4(c->env->ctx, &c->x, &c->q[0], &c->q[1], &c->q[2], &c->y[0], &c->y[1], &c->y[2],
                                &c->opts, c->env->stream);
  return c->st != KILN_OK;
}

static int three4_fn(void *user, int iter) {
  qkv_call *c = user;
  point_int4(c, iter);
  for (int i = 0; i < 3; i++)
    if ((c->st = kiln_matmul_int4(c->env->ctx, &c->x, &c->q[i], &c->y[i], &c->opts1, c->env->stream)) != KILN_OK)
      return 1;
  return 0;
}

static int fused8_fn(void *user, int iter) {
  qkv_call *c = user;
  const qkv_weights *w = c->w;
  CUdeviceptr p = w->w8 + (size_t)(iter % w->n8) * w->set8;
  for (int i = 0; i < 3; i++) c->w8[i].data = (void *)(uintptr_t)p, p += (size_t)(w->K * w->N[i]);
  for (int i = 0; i < 3; i++) c->s8[i].data = (void *)(uintptr_t)p, p += sizeof(float) * (size_t)w->N[i];
  c->st = kiln_qkv_project_int8(c->env->ctx, &c->x, &c->w8[0], &c->w8[1], &c->w8[2], &c->s8[0], &c->s8[1], &c->s8[2],
                                &c->y[0], &c->y[1], &c->y[2], &c->opts, c->env->stream);
  return c->st != KILN_OK;
}

static int peer_fn(void *user, int iter) {
  qkv_call *c = user;
  const qkv_weights *w = c->w;
  const int n = (int)(w->N[0] + w->N[1] + w->N[2]), m = (int)c->M, k = (int)w->K;
  const void *b = (const void *)(uintptr_t)(w->w16 + (size_t)(iter % w->n16) * w->set16);
  const int t = c->dt == BENCH_BF16 ? BENCH_CUDA_R_16BF : BENCH_CUDA_R_16F;
  const float one = 1.f, zero = 0.f;
  /* row-major y = x·W is column-major yᵀ = Wᵀ·xᵀ */
  c->cst = c->cb->gemm_ex(c->cb->handle, BENCH_CUBLAS_OP_N, BENCH_CUBLAS_OP_N, n, m, k, &one, b, t, n,
                          (const void *)(uintptr_t)c->xp, t, k, &zero, (void *)(uintptr_t)c->yp, t, n,
                          BENCH_CUBLAS_COMPUTE_32F, BENCH_CUBLAS_GEMM_DEFAULT);
  return c->cst != BENCH_CUBLAS_STATUS_SUCCESS;
}

static void free_weights(bench_env *env, qkv_weights *w) {
  bench_free(env, w->w4), bench_free(env, w->w8), bench_free(env, w->w16);
  memset(w, 0, sizeof *w);
}

static int make_weights(bench_env *env, int64_t K, int64_t Nq, int64_t Nkv, bench_dtype dt, qkv_weights *w) {
  memset(w, 0, sizeof *w);
  w->K = K, w->N[0] = Nq, w->N[1] = w->N[2] = Nkv;
  const int64_t Nt = Nq + 2 * Nkv;
  for (int i = 0; i < 3; i++) {
    size_t pb;
    if (kiln_qweight_bytes(K, w->N[i], 128, &w->cb[i], &w->sb[i], &w->zb[i], &pb) != KILN_OK) {
      fprintf(stderr, "kiln-bench qkv: %s\n", kiln_last_error());
      return -1;
    }
    w->set4 += w->cb[i] + w->sb[i] + w->zb[i];
  }
  w->set8 = (size_t)(K * Nt) + sizeof(float) * (size_t)Nt;
  w->set16 = (size_t)(K * Nt) * 2;
  w->n4 = bench_rotation_count(env, w->set4, env->mem_budget / 4);
  w->n8 = bench_rotation_count(env, w->set8, env->mem_budget / 4);
  w->n16 = bench_rotation_count(env, w->set16, env->mem_budget / 3);
  if (bench_alloc(env, w->set4 * (size_t)w->n4, &w->w4) || bench_alloc(env, w->set8 * (size_t)w->n8, &w->w8) ||
      bench_alloc(env, w->set16 * (size_t)w->n16, &w->w16))
    return -1;
  /* random bytes everywhere (f16 scales too), then each copy's zeros 8 and f16 scales random
   * floats; int8 scales random floats */
  if (bench_fill_random(env, w->w4, w->set4 * (size_t)w->n4, BENCH_I8, 31) ||
      bench_fill_random(env, w->w8, w->set8 * (size_t)w->n8, BENCH_I8, 32) ||
      bench_fill_random(env, w->w16, w->set16 / 2 * (size_t)w->n16, dt, 33))
    return -1;
  for (int r = 0; r < w->n4; r++) {
    CUdeviceptr p = w->w4 + (size_t)r * w->set4;
    for (int i = 0; i < 3; i++) {
      p += w->cb[i];
      if (bench_fill_random(env, p, w->sb[i] / 2, BENCH_F16, 34 + (uint64_t)r) ||
          bench_cu_check(env, env->cu->cuMemsetD8Async(p + w->sb[i], 8, w->zb[i], env->stream), "cuMemsetD8Async"))
        return -1;
      p += w->sb[i] + w->zb[i];
    }
  }
  for (int r = 0; r < w->n8; r++)
    if (bench_fill_random(env, w->w8 + (size_t)r * w->set8 + (size_t)(K * Nt), (size_t)Nt, BENCH_F32,
                          40 + (uint64_t)r))
      return -1;
  return 0;
}

/* One row: kiln fn against peer fn (peer_name; NULL peer_fn for none). */
static int measure(bench_env *env, qkv_call *c, const char *op, const char *algo, double wbytes, bench_fn fn,
                   bench_fn pfn, const char *peer_name, double copy_gbps) {
  const int decode = c->M <= 16;
  const int64_t Nt = c->w->N[0] + c->w->N[1] + c->w->N[2];
  char shape_s[48];
  snprintf(shape_s, sizeof shape_s, "M%lldK%lldN%lld+%lld+%lld", (long long)c->M, (long long)c->w->K,
           (long long)c->w->N[0], (long long)c->w->N[1], (long long)c->w->N[2]);
  bench_row row;
  bench_row_init(&row, op, shape_s, bench_dtype_name(c->dt), algo, decode ? BENCH_GBPS : BENCH_TFLOPS,
                 decode ? wbytes : 2.0 * (double)c->M * (double)Nt * (double)c->w->K);
  if (pfn && env->opts.paired) { /* --paired: kiln and the peer in alternating batches */
    snprintf(row.peer, sizeof row.peer, "%s", peer_name);
    c->st = KILN_OK, c->cst = BENCH_CUBLAS_STATUS_SUCCESS;
    if (bench_row_paired(env, &row, fn, pfn, c, &c->st, &c->cst)) return -1;
  } else if (bench_time(env, env->stream, fn, c, bench_default_reps(env), &row.kiln)) {
    if (c->st == KILN_OK) return -1;
    snprintf(row.note, sizeof row.note, "error: %s", kiln_last_error());
    env->failures++;
  }
  if (pfn && !env->opts.paired) {
    snprintf(row.peer, sizeof row.peer, "%s", peer_name);
    c->st = KILN_OK, c->cst = BENCH_CUBLAS_STATUS_SUCCESS;
    if (bench_time(env, env->stream, pfn, c, bench_default_reps(env), &row.peer_t)) {
      if (c->st != KILN_OK) snprintf(row.note, sizeof row.note, "peer error: %s", kiln_last_error());
      else snprintf(row.note, sizeof row.note, "cublas: %s", bench_cublas_status_name(c->cst));
      row.peer_t.median_us = NAN;
    }
  }
  if (decode && !row.note[0] && !isnan(row.kiln.median_us))
    snprintf(row.note, sizeof row.note, "%.0f%% of copy bandwidth (%.0f GB/s)",
             100.0 * bench_rate(&row, row.kiln.median_us) / copy_gbps, copy_gbps);
  bench_report(env, &row);
  return 0;
}

static int run_m(bench_env *env, const bench_cublas *cb, qkv_weights *w, int64_t M, bench_dtype dt, int int8_col,
                 int formats, kiln_qkv_algo algo, double copy_gbps) {
  qkv_call c = {.env = env, .cb = cb, .w = w, .M = M, .dt = dt, .int8_col = int8_col};
  const int64_t K = w->K, Nt = w->N[0] + w->N[1] + w->N[2];
  int rc = 0;
  if (bench_alloc(env, (size_t)(M * K) * 2, &c.xp) || bench_alloc(env, (size_t)(M * Nt) * 2, &c.yp) ||
      bench_fill_random(env, c.xp, (size_t)(M * K), dt, 35)) {
    rc = -1;
    goto done;
  }
  c.opts = kiln_qkv_opts_default(), c.opts1 = kiln_matmul_int4_opts_default();
  c.opts.algo = algo, c.opts1.algo = (kiln_int4_algo)algo;
  if (bench_w16_gets_workspace(algo, M)) {
    /* the three weights side by side in x's dtype: q, k, v are adjacent slices of y, so the
     * fused PREFILL runs one GEMM (and the three single calls have room too) */
    const size_t b = (size_t)K * (size_t)Nt * 2;
    if (bench_alloc(env, b, &c.ws)) {
      rc = -1;
      goto done;
    }
    c.opts.workspace = c.opts1.workspace = (void *)(uintptr_t)c.ws;
    c.opts.workspace_bytes = c.opts1.workspace_bytes = b;
  }
  const DLDevice dev = {kDLCUDA, env->info.ordinal};
  const DLDataType f32 = {kDLFloat, 32, 1}, i8 = {kDLInt, 8, 1};
  c.xs[0] = M, c.xs[1] = K;
  c.x = (DLTensor){(void *)(uintptr_t)c.xp, dev, 2, bench_dtype_dl(dt), c.xs, NULL, 0};
  int64_t col = 0;
  int64_t y_st[2] = {Nt, 1}; /* q, k, v: column slices of one row-major [M, Nt] */
  for (int i = 0; i < 3; i++) {
    c.ys[i][0] = M, c.ys[i][1] = w->N[i];
    c.y[i] = (DLTensor){(void *)(uintptr_t)(c.yp + (size_t)col * 2), dev, 2, bench_dtype_dl(dt), c.ys[i], y_st, 0};
    col += w->N[i];
    c.q[i] = (kiln_qweight){.k = K, .n = w->N[i], .group = 128, .device = dev};
    c.w8s[i][0] = K, c.w8s[i][1] = w->N[i];
    c.w8st[i][0] = int8_col ? 1 : w->N[i], c.w8st[i][1] = int8_col ? K : 1;
    c.w8[i] = (DLTensor){NULL, dev, 2, i8, c.w8s[i], c.w8st[i], 0};
    c.s8s[i] = w->N[i];
    c.s8[i] = (DLTensor){NULL, dev, 1, f32, &c.s8s[i], NULL, 0};
  }
  const double w4b = (double)w->set4, w8b = (double)w->set8;
  const char *cublas = cb->lib ? "cublas f16 merged" : NULL;
  if (formats & 1) {
    char name4[32];
    snprintf(name4, sizeof name4, "w4 g128%s", bench_w16_algo_suffix(algo));
    if ((rc = measure(env, &c, "qkv_int4", name4, w4b, fused4_fn, cb->lib ? peer_fn : NULL, cublas, copy_gbps)))
      goto done;
    if ((rc = measure(env, &c, "qkv_int4", "fused vs 3 calls", w4b, fused4_fn, three4_fn, "kiln matmul_int4 x3",
                      copy_gbps)))
      goto done;
  }
  if (formats & 2) {
    static const char *const sfx[] = {"", " decode", " prefill"};
    char name8[40];
    snprintf(name8, sizeof name8, "w8 %s%s", int8_col ? "col-major" : "row-major", sfx[algo]);
    rc = measure(env, &c, "qkv_int8", name8, w8b, fused8_fn, cb->lib ? peer_fn : NULL, cublas, copy_gbps);
  }
done:
  bench_free(env, c.xp), bench_free(env, c.yp), bench_free(env, c.ws);
  return rc;
}

int bench_qkv_main(int argc, char **argv) {
  bench_common common;
  bench_common_init(&common);
  bench_dtype dt = BENCH_F16;
  int int8_col = 1, formats = 3;
  kiln_qkv_algo algo = KILN_QKV_AUTO;
  long long one_m = 0;
  for (int i = 1; i < argc; i++) {
    int c = bench_parse_common(argc, argv, &i, &common, bench_qkv_usage);
    if (c == BENCH_HELP) return 0;
    if (c < 0) return 2;
    if (c > 0) continue;
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    i++;
    if (!strcmp(a, "--dtype") && v && !bench_dtype_parse(v, &dt) && (dt == BENCH_F16 || dt == BENCH_BF16)) continue;
    if (!strcmp(a, "--int8") && v && (!strcmp(v, "col") || !strcmp(v, "row"))) {
      int8_col = !strcmp(v, "col");
      continue;
    }
    if (!strcmp(a, "--only") && v && (!strcmp(v, "int4") || !strcmp(v, "int8"))) {
      formats = !strcmp(v, "int4") ? 1 : 2;
      continue;
    }
    if (!strcmp(a, "--algo") && bench_w16_algo_parse(v) >= 0) {
      algo = (kiln_qkv_algo)bench_w16_algo_parse(v);
      continue;
    }
    char tail = 0;
    if (!strcmp(a, "--m") && v && sscanf(v, "%lld%c", &one_m, &tail) == 1 && one_m >= 1 && one_m <= 65536) continue;
    fprintf(stderr, "kiln-bench qkv: bad option or value \"%s %s\" (see kiln-bench qkv --help)\n", a, v ? v : "");
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
  static const int64_t shapes[3][3] = {{4096, 4096, 1024}, {4096, 4096, 4096}, {8192, 8192, 1024}};
  static const int64_t ms_full[] = {1, 8, 16, 64, 512, 2048, 8192}, ms_quick[] = {1, 16, 512};
  const int64_t *ms = common.quick ? ms_quick : ms_full, m_one[1] = {one_m};
  int n_m = common.quick ? 3 : 7;
  const int n_shapes = common.quick ? 1 : 3;
  if (one_m) ms = m_one, n_m = 1;
  int dead = 0;
  for (int s = 0; s < n_shapes && !dead; s++) {
    qkv_weights w;
    if (make_weights(&env, shapes[s][0], shapes[s][1], shapes[s][2], dt, &w)) {
      free_weights(&env, &w);
      dead = 1;
      break;
    }
    for (int i = 0; i < n_m && !dead; i++) {
      if (i == 0 || (ms[i] > 16) != (ms[i - 1] > 16)) bench_table_header(ms[i] > 16 ? BENCH_TFLOPS : BENCH_GBPS);
      dead = run_m(&env, &cb, &w, ms[i], dt, int8_col, formats, algo, copy_gbps) < 0;
    }
    free_weights(&env, &w);
  }
  if (dead) fprintf(stderr, "kiln-bench qkv: stopping: the device reported an error (see above)\n");
  bench_cublas_close(&cb);
  return bench_env_close(&env);
}
