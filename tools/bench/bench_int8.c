/*
 * bench_int8.c — `kiln-bench int8`: kiln_matmul_int8 (W8A8) against cuBLAS's int8 GEMM
 * (cublasGemmEx, CUDA_R_8I x CUDA_R_8I -> CUDA_R_32I, CUBLAS_COMPUTE_32I: the IMMA kernels that
 * torch._int_mm's cuBLASLt call reaches) on C[M,N] = A[M,K] · W[N,K]ᵀ, the layout both take
 * fastest (K contiguous in both operands: cuBLAS's "TN"). Ops = 2·M·N·K, reported in the TFLOPS
 * column (TOPS).
 *
 * Check before timing: kiln with scale 1 into f32 must equal (float)(cuBLAS's int32 sum) for
 * every element (exact: random int8 in [-127, 127] keeps |sum| < 2^24 up to K = 16384, beyond
 * that both sides round the same int once); other output dtypes are compared after the same
 * rounding. Without cuBLAS the rows are kiln-only and checked against no peer. With --scales,
 * kiln also multiplies by per-row and / or per-column f32 vectors (random, in [0.5, 2)), and the
 * check applies them to cuBLAS's sums on the host in kiln's order, ((sum · 1) · row) · col, each
 * product rounded to f32: still exact.
 */
#define _POSIX_C_SOURCE 200809L

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

const char bench_int8_usage[] =
    "usage: kiln-bench int8 [options]\n"
    "  C[M,N] = A[M,K]·W[N,K]^T (int8, K contiguous in both): kiln_matmul_int8 against\n"
    "  cublasGemmEx int8 -> int32 (IMMA). kiln's f32 output must equal cuBLAS's sums exactly.\n"
    "  --out f32|f16|bf16|all    kiln's output dtype (default f32)\n"
    "  --algo auto|mma_sync|wgmma|all  kiln's kernels (default all: MMA_SYNC, and WGMMA on sm_90)\n"
    "  --shapes square|llm|all   (default all)\n"
    "                   square: M=N=K in 1024, 2048, 4096, 8192 (--quick: 4096)\n"
    "                   llm: M in 16, 128, 2048 (--quick: 2048) x (K,N) in (4096,4096)\n"
    "                   (4096,12288) (8192,28672) (28672,8192)\n"
    "  --shape MxNxK             one shape instead (repeatable, up to 16)\n"
    "  --rotate-c on|off         C in rotating copies too, as A and W, so that no call writes into the\n"
    "                            C lines the call before it left in L2 (default off: one C each)\n"
    "  --scales none|rows|cols|both  kiln's per-row / per-column scale vectors (default none; the\n"
    "                            dtype column then reads e.g. i8->f32+rows+cols)\n" BENCH_PAIRED_USAGE BENCH_COMMON_USAGE;

typedef struct shape {
  int64_t m, n, k;
} shape;

typedef struct int8_opts {
  bench_dtype outs[3];
  int n_outs;
  kiln_int8_algo algos[2];
  int n_algos; /* 0: all the device runs */
  int square, llm;
  int rotate_c;
  int scales; /* bit 0: row_scale, bit 1: col_scale */
  shape custom[16];
  int n_custom;
  bench_common common;
} int8_opts;

static size_t align256(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

typedef struct operands {
  CUdeviceptr a, w; /* rot copies each */
  size_t a_stride, w_stride;
  int rot;
  size_t c_stride; /* between the c_rot copies of kiln's C and of cuBLAS's (1 copy: 0) */
  int c_rot;
  int64_t m, n, k;
  CUdeviceptr scales;               /* --scales: one allocation of M + N floats (else 0) */
  CUdeviceptr row_scale, col_scale; /* in it: f32 [M], [N], else 0 */
  const float *h_row, *h_col;      /* their host copies (the check) */
} operands;

typedef struct kiln_call {
  bench_env *env;
  const operands *x;
  int64_t a_shape[2], a_strides[2], b_shape[2], b_strides[2], c_shape[2], c_strides[2];
  DLTensor a, b, c;
  kiln_matmul_int8_opts opts;
  CUdeviceptr c0; /* C's first copy */
  int64_t rs_shape[1], cs_shape[1], one_stride[1];
  DLTensor rs, cs; /* --scales: f32 [M] and [N] */
  kiln_status st;
} kiln_call;

static void kiln_call_init(kiln_call *kc, bench_env *env, const operands *x, CUdeviceptr c, bench_dtype out,
                           kiln_int8_algo algo) {
  memset(kc, 0, sizeof *kc);
  kc->env = env;
  kc->opts = kiln_matmul_int8_opts_default();
  kc->opts.algo = algo;
  kc->x = x;
  DLDevice dev = {kDLCUDA, env->info.ordinal};
  const DLDataType i8 = {kDLInt, 8, 1};
  kc->a_shape[0] = x->m, kc->a_shape[1] = x->k, kc->a_strides[0] = x->k, kc->a_strides[1] = 1;
  kc->b_shape[0] = x->k, kc->b_shape[1] = x->n, kc->b_strides[0] = 1, kc->b_strides[1] = x->k; /* W.T */
  kc->c_shape[0] = x->m, kc->c_shape[1] = x->n, kc->c_strides[0] = x->n, kc->c_strides[1] = 1;
  kc->a = (DLTensor){NULL, dev, 2, i8, kc->a_shape, kc->a_strides, 0};
  kc->b = (DLTensor){NULL, dev, 2, i8, kc->b_shape, kc->b_strides, 0};
  kc->c = (DLTensor){(void *)(uintptr_t)c, dev, 2, bench_dtype_dl(out), kc->c_shape, kc->c_strides, 0};
  kc->c0 = c;
  const DLDataType f32 = {kDLFloat, 32, 1};
  kc->rs_shape[0] = x->m, kc->cs_shape[0] = x->n, kc->one_stride[0] = 1;
  kc->rs = (DLTensor){(void *)(uintptr_t)x->row_scale, dev, 1, f32, kc->rs_shape, kc->one_stride, 0};
  kc->cs = (DLTensor){(void *)(uintptr_t)x->col_scale, dev, 1, f32, kc->cs_shape, kc->one_stride, 0};
  if (x->row_scale) kc->opts.row_scale = &kc->rs;
  if (x->col_scale) kc->opts.col_scale = &kc->cs;
}

static int kiln_call_fn(void *user, int iter) {
  kiln_call *kc = user;
  const operands *x = kc->x;
  size_t i = (size_t)(iter % x->rot);
  kc->a.data = (void *)(uintptr_t)(x->a + i * x->a_stride);
  kc->b.data = (void *)(uintptr_t)(x->w + i * x->w_stride);
  kc->c.data = (void *)(uintptr_t)(kc->c0 + (size_t)(iter % x->c_rot) * x->c_stride);
  kc->st = kiln_matmul_int8(kc->env->ctx, &kc->a, &kc->b, &kc->c, &kc->opts, kc->env->stream);
  return kc->st != KILN_OK;
}

typedef struct peer_call {
  const bench_cublas *cb;
  const operands *x;
  CUdeviceptr c;
  cublasStatus_t st;
} peer_call;

/* Row-major C[M,N] is column-major Cᵀ[N,M] = W[N,K]·Aᵀ: W (column-major [K,N], ld K) transposed,
 * Aᵀ (column-major [K,M], ld K) as is. */
static int peer_call_fn(void *user, int iter) {
  peer_call *pc = user;
  const operands *x = pc->x;
  size_t i = (size_t)(iter % x->rot);
  const int32_t alpha = 1, beta = 0;
  pc->st = pc->cb->gemm_ex(pc->cb->handle, BENCH_CUBLAS_OP_T, BENCH_CUBLAS_OP_N, (int)x->n, (int)x->m, (int)x->k,
                           &alpha, (const void *)(uintptr_t)(x->w + i * x->w_stride), BENCH_CUDA_R_8I, (int)x->k,
                           (const void *)(uintptr_t)(x->a + i * x->a_stride), BENCH_CUDA_R_8I, (int)x->k, &beta,
                           (void *)(uintptr_t)(pc->c + (size_t)(iter % x->c_rot) * x->c_stride), BENCH_CUDA_R_32I, (int)x->n, BENCH_CUBLAS_COMPUTE_32I,
                           BENCH_CUBLAS_GEMM_DEFAULT);
  return pc->st != BENCH_CUBLAS_STATUS_SUCCESS;
}

static int to_host(bench_env *env, void *dst, CUdeviceptr src, size_t bytes) {
  if (bench_cu_check(env, env->cu->cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst, src, bytes, env->stream),
                     "cuMemcpyAsync (device to host)"))
    return -1;
  return bench_cu_check(env, env->cu->cuStreamSynchronize(env->stream), "cuStreamSynchronize");
}

/* Elements of kiln's C that differ from cuBLAS's int32 sums rounded to kiln's output dtype (the
 * f32 value, then that float read back from the output dtype's bits), times the scale vectors if
 * given (x); -1 on a copy error. */
static int64_t mismatches(bench_env *env, const operands *x, CUdeviceptr ck, CUdeviceptr cp, size_t count,
                          bench_dtype out) {
  size_t os = bench_dtype_size(out);
  void *hk = malloc(count * os);
  int32_t *hp = malloc(count * 4);
  int64_t bad = -1;
  if (hk && hp && !to_host(env, hk, ck, count * os) && !to_host(env, hp, cp, count * 4)) {
    bad = 0;
    for (size_t i = 0; i < count; i++) {
      float want = (float)hp[i] * 1.0f; /* kiln's order: ((sum · scale) · row) · col, scale 1 */
      if (x->h_row) want = want * x->h_row[i / (size_t)x->n];
      if (x->h_col) want = want * x->h_col[i % (size_t)x->n];
      const float got = bench_load_f32(out, hk, i);
      /* f16/bf16: the same RNE rounding of the f32 value; compare through kiln's converters */
      const float want_r = out == BENCH_F32   ? want
                           : out == BENCH_F16 ? kiln_f16_to_f32(kiln_f32_to_f16(want))
                                              : kiln_bf16_to_f32(kiln_f32_to_bf16(want));
      bad += !(got == want_r || (isinf(got) && isinf(want_r) && (got > 0) == (want_r > 0)));
    }
  } else if (!hk || !hp)
    fprintf(stderr, "kiln-bench int8: out of host memory for the check\n");
  free(hk);
  free(hp);
  return bad;
}

static const char *algo_name(kiln_int8_algo a) {
  return a == KILN_INT8_WGMMA ? "wgmma" : a == KILN_INT8_MMA_SYNC ? "mma_sync" : "auto";
}

/* --scales: random f32 vectors in [0.5, 2) for the rows (bit 0) and / or columns (bit 1), on the
 * device and, for the check, on the host (*host: one allocation, freed by the caller). */
static int make_scales(bench_env *env, int which, operands *x, float **host) {
  const size_t n = (size_t)(x->m + x->n);
  float *h = *host = malloc(n * sizeof *h);
  CUdeviceptr d = 0;
  if (!h) {
    fprintf(stderr, "kiln-bench int8: out of host memory for the scale vectors\n");
    return -1;
  }
  uint32_t state = 0x9e3779b9u;
  for (size_t i = 0; i < n; i++) {
    state = state * 1664525u + 1013904223u;
    h[i] = 0.5f + 1.5f * (float)(state >> 8) / 16777216.0f;
  }
  if (bench_alloc(env, n * sizeof *h, &d)) {
    fprintf(stderr, "kiln-bench int8: out of device memory for the scale vectors\n");
    return -1;
  }
  x->scales = d; /* freed by the caller */
  if (bench_cu_check(env, env->cu->cuMemcpyAsync(d, (CUdeviceptr)(uintptr_t)h, n * sizeof *h, env->stream),
                     "cuMemcpyAsync (scales)") ||
      bench_cu_check(env, env->cu->cuStreamSynchronize(env->stream), "cuStreamSynchronize"))
    return -1;
  if (which & 1) x->row_scale = d, x->h_row = h;
  if (which & 2) x->col_scale = d + (size_t)x->m * sizeof *h, x->h_col = h + x->m;
  return 0;
}

static int run_shape(bench_env *env, const int8_opts *o, const bench_cublas *cb, shape s) {
  const kiln_cuda_api *cu = env->cu;
  operands x = {.m = s.m, .n = s.n, .k = s.k};
  size_t a_bytes = (size_t)(s.m * s.k), w_bytes = (size_t)(s.k * s.n), c_count = (size_t)(s.m * s.n);
  x.a_stride = align256(a_bytes);
  x.w_stride = align256(w_bytes);
  x.rot = bench_rotation_count(env, a_bytes + w_bytes, env->mem_budget);
  x.c_rot = o->rotate_c ? bench_rotation_count(env, c_count * 4, env->mem_budget) : 1;
  if (o->rotate_c && x.c_rot < 2) x.c_rot = 2; /* a C larger than the L2 still alternates */
  x.c_stride = align256(c_count * 4);
  char shape_s[48];
  snprintf(shape_s, sizeof shape_s, "%lldx%lldx%lld", (long long)s.m, (long long)s.n, (long long)s.k);
  const double ops = 2.0 * (double)s.m * (double)s.n * (double)s.k;
  const int reps = bench_default_reps(env);
  CUdeviceptr ck = 0, cp = 0;
  float *h_scales = NULL;
  int rc = 0;
  if (bench_alloc(env, x.a_stride * (size_t)x.rot, &x.a) || bench_alloc(env, x.w_stride * (size_t)x.rot, &x.w) ||
      bench_alloc(env, x.c_stride * (size_t)x.c_rot, &ck) || bench_alloc(env, x.c_stride * (size_t)x.c_rot, &cp)) {
    printf("note: int8 %s skipped: device memory\n", shape_s);
    goto done;
  }
  if ((rc = bench_fill_random(env, x.a, a_bytes, BENCH_I8, 11)) || (rc = bench_fill_random(env, x.w, w_bytes, BENCH_I8, 12)))
    goto done;
  for (int i = 1; i < x.rot && !rc; i++)
    rc = bench_cu_check(env, cu->cuMemcpyAsync(x.a + i * x.a_stride, x.a, a_bytes, env->stream), "cuMemcpyAsync") ||
         bench_cu_check(env, cu->cuMemcpyAsync(x.w + i * x.w_stride, x.w, w_bytes, env->stream), "cuMemcpyAsync");
  if (rc || (rc = bench_cu_check(env, cu->cuStreamSynchronize(env->stream), "cuStreamSynchronize"))) goto done;
  if (o->scales && (rc = make_scales(env, o->scales, &x, &h_scales))) goto done;

  /* The peer once: its sums are the reference, its time the comparison (with --paired, timed beside
   * each kiln algo instead of once here). */
  bench_timing pt = {NAN, NAN, NAN, 0, 0};
  int peer_ok = 0;
  char peer_note[96] = "";
  peer_call pc = {cb, &x, cp, 0};
  if (cb->handle) {
    if (peer_call_fn(&pc, 0))
      snprintf(peer_note, sizeof peer_note, "cublas int8: %s", bench_cublas_status_name(pc.st));
    else if ((rc = bench_cu_check(env, cu->cuStreamSynchronize(env->stream), "cuStreamSynchronize (cublas)")))
      goto done;
    else if (!env->opts.paired && bench_time(env, env->stream, peer_call_fn, &pc, reps, &pt)) {
      if (pc.st == BENCH_CUBLAS_STATUS_SUCCESS) {
        rc = -1;
        goto done;
      }
      snprintf(peer_note, sizeof peer_note, "cublas int8: %s", bench_cublas_status_name(pc.st));
    } else
      peer_ok = 1;
  }

  /* all: MMA_SYNC, and WGMMA where the device is sm_90 */
  const int hopper = env->info.cc_major == 9 && env->info.cc_minor == 0;
  const kiln_int8_algo all[2] = {KILN_INT8_MMA_SYNC, KILN_INT8_WGMMA};
  const kiln_int8_algo *algos = o->n_algos ? o->algos : all;
  const int n_algos = o->n_algos ? o->n_algos : hopper ? 2 : 1;
  for (int run = 0; run < o->n_outs * n_algos; run++) {
    const bench_dtype out = o->outs[run / n_algos];
    const kiln_int8_algo algo = algos[run % n_algos];
    char dtype_s[24];
    snprintf(dtype_s, sizeof dtype_s, "i8->%s%s%s", bench_dtype_name(out), o->scales & 1 ? "+rows" : "",
             o->scales & 2 ? "+cols" : "");
    bench_row row;
    bench_row_init(&row, "int8", shape_s, dtype_s, algo_name(algo), BENCH_TFLOPS, ops);
    if (peer_ok) {
      snprintf(row.peer, sizeof row.peer, "cublas%s%s", cb->version[0] ? " " : "", cb->version);
      row.peer_t = pt;
    }
    kiln_call kc;
    kiln_call_init(&kc, env, &x, ck, out, algo);
    if (kiln_call_fn(&kc, 0)) {
      fprintf(stderr, "kiln-bench: kiln_matmul_int8 %s %s: %s: %s\n", shape_s, dtype_s, kiln_status_string(kc.st),
              kiln_last_error());
      snprintf(row.note, sizeof row.note, "error %s: %s", kiln_status_string(kc.st), kiln_last_error());
      env->failures++;
      bench_report(env, &row);
      continue;
    }
    if ((rc = bench_cu_check(env, cu->cuStreamSynchronize(env->stream), "cuStreamSynchronize (kiln_matmul_int8)")))
      goto done;
    int len = 0;
    if (peer_ok) {
      const int64_t bad = mismatches(env, &x, ck, cp, c_count, out);
      row.rel_err = bad < 0 ? NAN : (double)bad / (double)c_count;
      row.check_failed = bad != 0;
      if (bad) len = snprintf(row.note, sizeof row.note, "%lld elements differ from cuBLAS's sums", (long long)bad);
    } else
      len = snprintf(row.note, sizeof row.note, "unchecked (no cuBLAS)%s%s", peer_note[0] ? ": " : "", peer_note);
    /* --paired: kiln and cuBLAS in alternating batches (row.peer_t then holds this pairing's peer) */
    const int paired = peer_ok && env->opts.paired;
    if (paired
            ? bench_time_paired(env, env->stream, kiln_call_fn, &kc, peer_call_fn, &pc, reps, &row.kiln, &row.peer_t,
                                &row.pair)
            : bench_time(env, env->stream, kiln_call_fn, &kc, reps, &row.kiln)) {
      if (kc.st == KILN_OK && (!paired || pc.st == BENCH_CUBLAS_STATUS_SUCCESS)) { /* a driver error, printed */
        rc = -1;
        goto done;
      }
      snprintf(row.note + len, sizeof row.note - (size_t)len, "%serror while timing: %s", len ? "; " : "",
               kc.st != KILN_OK ? kiln_last_error() : bench_cublas_status_name(pc.st));
      env->failures++;
    }
    bench_report(env, &row);
  }
done:
  bench_free(env, x.scales);
  free(h_scales);
  bench_free(env, x.a);
  bench_free(env, x.w);
  bench_free(env, ck);
  bench_free(env, cp);
  return rc;
}

static int bad_value(const char *opt, const char *v) {
  fprintf(stderr, "kiln-bench int8: bad value \"%s\" for %s (see kiln-bench int8 --help)\n", v ? v : "", opt);
  return -1;
}

static int parse(int argc, char **argv, int8_opts *o) {
  memset(o, 0, sizeof *o);
  bench_common_init(&o->common);
  o->outs[0] = BENCH_F32;
  o->n_outs = 1;
  o->square = o->llm = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int c = bench_parse_common(argc, argv, &i, &o->common, bench_int8_usage);
    if (c == BENCH_HELP) return 1;
    if (c < 0) return -1;
    if (c > 0) continue;
    const char *v = i + 1 < argc ? argv[++i] : NULL;
    if (!strcmp(a, "--out")) {
      bench_dtype dt;
      if (v && !strcmp(v, "all")) {
        o->outs[0] = BENCH_F32, o->outs[1] = BENCH_F16, o->outs[2] = BENCH_BF16;
        o->n_outs = 3;
      } else if (v && !bench_dtype_parse(v, &dt) && dt != BENCH_I8) {
        o->outs[0] = dt;
        o->n_outs = 1;
      } else
        return bad_value(a, v);
    } else if (!strcmp(a, "--algo")) {
      o->n_algos = 1;
      if (v && !strcmp(v, "all"))
        o->n_algos = 0;
      else if (v && !strcmp(v, "auto"))
        o->algos[0] = KILN_INT8_AUTO;
      else if (v && !strcmp(v, "mma_sync"))
        o->algos[0] = KILN_INT8_MMA_SYNC;
      else if (v && !strcmp(v, "wgmma"))
        o->algos[0] = KILN_INT8_WGMMA;
      else
        return bad_value(a, v);
    } else if (!strcmp(a, "--shape")) {
      long long m = 0, n = 0, k = 0;
      char tail = 0;
      if (!v || o->n_custom == 16 || sscanf(v, "%lldx%lldx%lld%c", &m, &n, &k, &tail) != 3 || m < 1 || n < 1 ||
          k < 1 || m > INT_MAX || n > INT_MAX || k > 131072)
        return bad_value(a, v);
      o->custom[o->n_custom++] = (shape){m, n, k};
    } else if (!strcmp(a, "--rotate-c")) {
      if (!v || (strcmp(v, "on") && strcmp(v, "off"))) return bad_value(a, v);
      o->rotate_c = !strcmp(v, "on");
    } else if (!strcmp(a, "--scales")) {
      if (!v || (strcmp(v, "none") && strcmp(v, "rows") && strcmp(v, "cols") && strcmp(v, "both")))
        return bad_value(a, v);
      o->scales = !strcmp(v, "rows") ? 1 : !strcmp(v, "cols") ? 2 : !strcmp(v, "both") ? 3 : 0;
    } else if (!strcmp(a, "--shapes")) {
      if (!v || (strcmp(v, "square") && strcmp(v, "llm") && strcmp(v, "all"))) return bad_value(a, v);
      o->square = strcmp(v, "llm") != 0;
      o->llm = strcmp(v, "square") != 0;
    } else {
      fprintf(stderr, "kiln-bench int8: unknown option \"%s\" (see kiln-bench int8 --help)\n", a);
      return -1;
    }
  }
  return 0;
}

static int build_shapes(const int8_opts *o, shape *out) {
  static const int64_t square_full[] = {1024, 2048, 4096, 8192}, square_quick[] = {4096};
  static const int64_t m_full[] = {16, 128, 2048}, m_quick[] = {2048};
  static const int64_t kn[][2] = {{4096, 4096}, {4096, 12288}, {8192, 28672}, {28672, 8192}};
  const int quick = o->common.quick;
  int n = 0;
  if (o->n_custom) {
    memcpy(out, o->custom, (size_t)o->n_custom * sizeof *out);
    return o->n_custom;
  }
  if (o->square)
    for (int i = 0; i < (quick ? 1 : 4); i++) {
      const int64_t s = quick ? square_quick[i] : square_full[i];
      out[n++] = (shape){s, s, s};
    }
  if (o->llm)
    for (int j = 0; j < 4; j++)
      for (int i = 0; i < (quick ? 1 : 3); i++) out[n++] = (shape){quick ? m_quick[i] : m_full[i], kn[j][1], kn[j][0]};
  return n;
}

int bench_int8_main(int argc, char **argv) {
  int8_opts o;
  int p = parse(argc, argv, &o);
  if (p) return p > 0 ? 0 : 2;
  bench_env env;
  if (bench_env_open(&env, &o.common, 1)) {
    bench_env_close(&env);
    return 1;
  }
  bench_cublas cb;
  bench_cublas_open(&cb, env.stream); /* on failure cb is zeroed: kiln-only */
  shape shapes[32];
  const int n_shapes = build_shapes(&o, shapes);
  bench_table_header(BENCH_TFLOPS);
  for (int s = 0; s < n_shapes; s++)
    if (run_shape(&env, &o, &cb, shapes[s]) < 0) {
      fprintf(stderr, "kiln-bench int8: stopping: the device reported an error (see above)\n");
      break;
    }
  bench_cublas_close(&cb);
  return bench_env_close(&env);
}
