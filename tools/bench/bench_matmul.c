/*
 * bench_matmul.c — `kiln-bench matmul`: kiln_matmul against cublasGemmEx on the same row-major
 * inputs (same input and output dtypes, fp32 compute). Every result is checked before it is timed,
 * so a broken kernel shows up as CHECK FAILED rather than as a fast number.
 */
#define _POSIX_C_SOURCE 200809L

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

const char bench_matmul_usage[] =
    "usage: kiln-bench matmul [options]\n"
    "  C[M,N] = A[M,K]·B[K,N], all row-major, random inputs: kiln_matmul against cublasGemmEx\n"
    "  (same dtypes, fp32 compute). Each result is checked against cuBLAS before timing\n"
    "  (against a host-computed sample of C when cuBLAS is missing).\n"
    "  --algo auto|mma_sync|cp_async|wgmma|all  kiln algorithm (default auto; all = auto,\n"
    "                   mma_sync, cp_async, wgmma)\n"
    "  --dtype f16|bf16|all      input dtype (default f16)\n"
    "  --out f32|f16|bf16|same|all  output dtype (default f32; same = the input dtype)\n"
    "  --shapes square|llm|all   (default all)\n"
    "                   square: M=N=K in 256, 512, 1024, 2048, 4096, 8192 (--quick: 1024, 4096)\n"
    "                   llm: M in 1, 16, 128, 2048, 8192 (--quick: 1, 2048) x (K,N) in\n"
    "                   (4096,12288) (4096,4096) (8192,28672) (28672,8192)\n"
    "  --shape MxNxK             one shape instead (repeatable, up to 16)\n"
    "  --tile-n 64|128|256       force the WGMMA tile width (opts.tile_n; default: per shape)\n"
    "  --stream-k auto|off|on|both|all  kiln's opts.stream_k, with a workspace always given:\n"
    "                   auto (0, the default: split WGMMA's last wave where it pays), off (-1,\n"
    "                   rows labelled /nosk), on (1, whenever the last wave is partial; --algo\n"
    "                   wgmma; rows labelled /sk), both (off and auto), all (off, auto, on)\n" BENCH_PAIRED_USAGE BENCH_COMMON_USAGE;

static const struct {
  const char *name;
  kiln_matmul_algo algo;
} algo_names[] = {
    {"auto", KILN_MATMUL_AUTO},
    {"mma_sync", KILN_MATMUL_MMA_SYNC},
    {"cp_async", KILN_MATMUL_CP_ASYNC},
    {"wgmma", KILN_MATMUL_WGMMA},
};
#define N_ALGO_NAMES (int)(sizeof algo_names / sizeof algo_names[0])
#define N_ALGOS_IN_ALL 4 /* auto, mma_sync, cp_async, wgmma (skipped with a note off sm_90) */

typedef struct shape {
  int64_t m, n, k;
} shape;

typedef struct matmul_opts {
  int algos[N_ALGO_NAMES]; /* indices into algo_names */
  int n_algos;
  bench_dtype dtypes[2];
  int n_dtypes;
  bench_dtype outs[3];
  int n_outs;
  int out_same; /* --out same: the output dtype follows the input */
  int square, llm;
  shape custom[16]; /* --shape, overrides --shapes */
  int n_custom;
  int tile_n; /* --tile-n: opts.tile_n of the WGMMA runs */
  int sk_modes[3]; /* --stream-k: opts.stream_k values, one row each */
  int n_sk;
  bench_common common;
} matmul_opts;
/* kiln's workspace in every run (opts.workspace): above what stream-K takes on 132 SMs (17 MB) */
#define BENCH_MATMUL_WS_BYTES ((size_t)32 << 20)

/* Relative Frobenius error above which a result is wrong: f32 output differs from cuBLAS only by
 * summation order; f16/bf16 output adds up to one rounding of the output (2^-11, 2^-8). */
static double tolerance(bench_dtype out) {
  return out == BENCH_F32 ? 1e-3 : out == BENCH_F16 ? 4e-3 : 3e-2;
}

static size_t align256(size_t bytes) {
  return (bytes + 255) & ~(size_t)255;
}

/* ------------------------------------------------------------------------------------------ */
/* The two measured calls                                                                      */
/* ------------------------------------------------------------------------------------------ */
typedef struct operands {
  CUdeviceptr a, b;          /* rot copies each, a_stride / b_stride bytes apart */
  size_t a_stride, b_stride;
  int rot;
  int64_t m, n, k;
  bench_dtype in, out;
  CUdeviceptr ws; /* BENCH_MATMUL_WS_BYTES of workspace */
} operands;

typedef struct kiln_call {
  bench_env *env;
  const operands *x;
  int64_t a_shape[2], a_strides[2], b_shape[2], b_strides[2], c_shape[2], c_strides[2];
  DLTensor a, b, c;
  kiln_matmul_opts opts;
  kiln_status st;
} kiln_call;

static void set2(int64_t v[2], int64_t v0, int64_t v1) {
  v[0] = v0;
  v[1] = v1;
}

static void kiln_call_init(kiln_call *kc, bench_env *env, const operands *x, CUdeviceptr c, kiln_matmul_algo algo,
                           int tile_n, int stream_k) {
  memset(kc, 0, sizeof *kc);
  kc->env = env;
  kc->x = x;
  DLDevice dev = {kDLCUDA, env->info.ordinal};
  set2(kc->a_shape, x->m, x->k);
  set2(kc->a_strides, x->k, 1);
  set2(kc->b_shape, x->k, x->n);
  set2(kc->b_strides, x->n, 1);
  set2(kc->c_shape, x->m, x->n);
  set2(kc->c_strides, x->n, 1);
  kc->a = (DLTensor){NULL, dev, 2, bench_dtype_dl(x->in), kc->a_shape, kc->a_strides, 0};
  kc->b = (DLTensor){NULL, dev, 2, bench_dtype_dl(x->in), kc->b_shape, kc->b_strides, 0};
  kc->c = (DLTensor){(void *)(uintptr_t)c, dev, 2, bench_dtype_dl(x->out), kc->c_shape, kc->c_strides, 0};
  kc->opts = kiln_matmul_opts_default();
  kc->opts.algo = algo;
  kc->opts.tile_n = algo == KILN_MATMUL_WGMMA ? tile_n : 0;
  kc->opts.stream_k = stream_k;
  kc->opts.workspace = (void *)(uintptr_t)x->ws;
  kc->opts.workspace_bytes = BENCH_MATMUL_WS_BYTES;
}

static int kiln_call_fn(void *user, int iter) {
  kiln_call *kc = user;
  const operands *x = kc->x;
  size_t i = (size_t)(iter % x->rot);
  kc->a.data = (void *)(uintptr_t)(x->a + i * x->a_stride);
  kc->b.data = (void *)(uintptr_t)(x->b + i * x->b_stride);
  kc->st = kiln_matmul(kc->env->ctx, &kc->a, &kc->b, &kc->c, &kc->opts, kc->env->stream);
  return kc->st != KILN_OK;
}

typedef struct peer_call {
  const bench_cublas *cb;
  const operands *x;
  CUdeviceptr c;
  cublasStatus_t st;
} peer_call;

/* Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: the same memory, with the operands swapped. */
static int peer_call_fn(void *user, int iter) {
  peer_call *pc = user;
  const operands *x = pc->x;
  size_t i = (size_t)(iter % x->rot);
  const float alpha = 1.0f, beta = 0.0f;
  int ab = bench_cuda_data_type(x->in), ct = bench_cuda_data_type(x->out);
  pc->st = pc->cb->gemm_ex(pc->cb->handle, BENCH_CUBLAS_OP_N, BENCH_CUBLAS_OP_N, (int)x->n, (int)x->m, (int)x->k,
                           &alpha, (const void *)(uintptr_t)(x->b + i * x->b_stride), ab, (int)x->n,
                           (const void *)(uintptr_t)(x->a + i * x->a_stride), ab, (int)x->k, &beta,
                           (void *)(uintptr_t)pc->c, ct, (int)x->n, BENCH_CUBLAS_COMPUTE_32F,
                           BENCH_CUBLAS_GEMM_DEFAULT);
  return pc->st != BENCH_CUBLAS_STATUS_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */
/* Checking                                                                                    */
/* ------------------------------------------------------------------------------------------ */
/* Fills C with NaN so that elements a kernel never writes fail the check. */
static int poison(bench_env *env, CUdeviceptr c, size_t count, bench_dtype out) {
  const kiln_cuda_api *cu = env->cu;
  CUresult r = out == BENCH_F32   ? cu->cuMemsetD32Async(c, 0x7FC00000u, count, env->stream)
               : out == BENCH_F16 ? cu->cuMemsetD16Async(c, 0x7E00, count, env->stream)
                                  : cu->cuMemsetD16Async(c, 0x7FC0, count, env->stream);
  return bench_cu_check(env, r, "cuMemsetAsync (NaN fill)");
}

static int to_host(bench_env *env, void *dst, CUdeviceptr src, size_t bytes) {
  if (bench_cu_check(env, env->cu->cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst, src, bytes, env->stream),
                     "cuMemcpyAsync (device to host)"))
    return -1;
  return bench_cu_check(env, env->cu->cuStreamSynchronize(env->stream), "cuStreamSynchronize");
}

/* Without a peer: a 16 x 16 sample of C recomputed on the host in double. */
static int sampled_error(bench_env *env, const operands *x, CUdeviceptr c, double *err) {
  enum { SAMPLES = 16 };
  size_t es = bench_dtype_size(x->in), os = bench_dtype_size(x->out);
  int64_t rows = x->m < SAMPLES ? x->m : SAMPLES, cols = x->n < SAMPLES ? x->n : SAMPLES;
  void *hb = malloc((size_t)(x->k * x->n) * es), *ha = malloc((size_t)x->k * es), *hc = malloc((size_t)x->n * os);
  int rc = !hb || !ha || !hc ? -1 : to_host(env, hb, x->b, (size_t)(x->k * x->n) * es);
  double num = 0, den = 0;
  int nan_seen = 0;
  for (int64_t ri = 0; ri < rows && !rc; ri++) {
    int64_t i = ri * x->m / rows;
    rc = to_host(env, ha, x->a + (size_t)(i * x->k) * es, (size_t)x->k * es);
    if (!rc) rc = to_host(env, hc, c + (size_t)(i * x->n) * os, (size_t)x->n * os);
    for (int64_t cj = 0; cj < cols && !rc; cj++) {
      int64_t j = cj * x->n / cols;
      double ref = 0;
      for (int64_t p = 0; p < x->k; p++)
        ref += (double)bench_load_f32(x->in, ha, (size_t)p) * bench_load_f32(x->in, hb, (size_t)(p * x->n + j));
      double got = bench_load_f32(x->out, hc, (size_t)j);
      if (isnan(got)) nan_seen = 1;
      num += (got - ref) * (got - ref);
      den += ref * ref;
    }
  }
  if (!hb || !ha || !hc) fprintf(stderr, "kiln-bench: out of host memory for the sampled check\n");
  free(hb);
  free(ha);
  free(hc);
  *err = rc ? NAN : nan_seen ? NAN : den > 0 ? sqrt(num / den) : 0.0;
  return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* One shape and input dtype: the peer once per output dtype, then every kiln algo             */
/* ------------------------------------------------------------------------------------------ */
/* Returns 0, or -1 when the device is no longer usable (a driver error after a launch). */
static int run_outputs(bench_env *env, const matmul_opts *o, const bench_cublas *cb, operands *x, CUdeviceptr ck,
                       CUdeviceptr cp) {
  int reps = bench_default_reps(env);
  size_t c_count = (size_t)(x->m * x->n);
  char shape_s[48];
  snprintf(shape_s, sizeof shape_s, "%lldx%lldx%lld", (long long)x->m, (long long)x->n, (long long)x->k);
  double flops = 2.0 * (double)x->m * (double)x->n * (double)x->k;
  int n_outs = o->out_same ? 1 : o->n_outs;

  for (int oi = 0; oi < n_outs; oi++) {
    x->out = o->out_same ? x->in : o->outs[oi];
    char dtype_s[24];
    if (x->out == x->in) snprintf(dtype_s, sizeof dtype_s, "%s", bench_dtype_name(x->in));
    else snprintf(dtype_s, sizeof dtype_s, "%s->%s", bench_dtype_name(x->in), bench_dtype_name(x->out));

    /* The peer: its result is the reference, its time the comparison (with --paired, timed beside
     * each kiln algo instead of once here). */
    bench_timing pt = {NAN, NAN, NAN, 0, 0};
    int peer_ok = 0;
    char peer_note[96] = "";
    peer_call pc = {cb, x, cp, 0};
    if (cb->handle) {
      if (poison(env, cp, c_count, x->out)) return -1;
      if (peer_call_fn(&pc, 0))
        snprintf(peer_note, sizeof peer_note, "cublas: %s", bench_cublas_status_name(pc.st));
      else if (bench_cu_check(env, env->cu->cuStreamSynchronize(env->stream), "cuStreamSynchronize (cublas)"))
        return -1;
      else if (!env->opts.paired && bench_time(env, env->stream, peer_call_fn, &pc, reps, &pt)) {
        if (pc.st == BENCH_CUBLAS_STATUS_SUCCESS) return -1;
        snprintf(peer_note, sizeof peer_note, "cublas: %s", bench_cublas_status_name(pc.st));
      } else
        peer_ok = 1;
    }

    for (int ai = 0; ai < o->n_algos * o->n_sk; ai++) {
      char algo_s[32];
      const int algo = o->algos[ai / o->n_sk], sk = o->sk_modes[ai % o->n_sk];
      const int wg = algo_names[algo].algo == KILN_MATMUL_WGMMA;
      int alen = snprintf(algo_s, sizeof algo_s, "%s", algo_names[algo].name);
      if (wg && o->tile_n) alen += snprintf(algo_s + alen, sizeof algo_s - (size_t)alen, "/%d", o->tile_n);
      if (sk) snprintf(algo_s + alen, sizeof algo_s - (size_t)alen, sk < 0 ? "/nosk" : "/sk");
      bench_row row;
      bench_row_init(&row, "matmul", shape_s, dtype_s, algo_s, BENCH_TFLOPS, flops);
      if (peer_ok) {
        snprintf(row.peer, sizeof row.peer, "cublas%s%s", cb->version[0] ? " " : "", cb->version);
        row.peer_t = pt;
      }
      kiln_call kc;
      kiln_call_init(&kc, env, x, ck, algo_names[algo].algo, o->tile_n, sk);
      if (poison(env, ck, c_count, x->out)) return -1;
      if (kiln_call_fn(&kc, 0)) {
        if (kc.st == KILN_ERROR_UNSUPPORTED) {
          snprintf(row.note, sizeof row.note, "skipped, unsupported: %s", kiln_last_error());
        } else {
          fprintf(stderr, "kiln-bench: kiln_matmul %s %s %s: %s: %s\n", shape_s, dtype_s, algo_s,
                  kiln_status_string(kc.st), kiln_last_error());
          snprintf(row.note, sizeof row.note, "error %s: %s", kiln_status_string(kc.st), kiln_last_error());
          env->failures++;
        }
        bench_report(env, &row);
        continue;
      }
      if (bench_cu_check(env, env->cu->cuStreamSynchronize(env->stream), "cuStreamSynchronize (kiln_matmul)"))
        return -1;

      double err = NAN;
      int checked = peer_ok ? !bench_rel_error(env, ck, cp, c_count, x->out, &err) : !sampled_error(env, x, ck, &err);
      row.rel_err = err;
      row.check_failed = !checked || !(err <= tolerance(x->out)); /* NaN fails too */
      int len = 0;
      if (!peer_ok) len = snprintf(row.note, sizeof row.note, "checked on a 16x16 sample%s%s",
                                   peer_note[0] ? "; " : "", peer_note);

      /* --paired: kiln and cuBLAS in alternating batches (row.peer_t then holds this pairing's peer) */
      const int paired = peer_ok && env->opts.paired;
      if (paired
              ? bench_time_paired(env, env->stream, kiln_call_fn, &kc, peer_call_fn, &pc, reps, &row.kiln,
                                  &row.peer_t, &row.pair)
              : bench_time(env, env->stream, kiln_call_fn, &kc, reps, &row.kiln)) {
        /* both calls succeeded: a driver error, already printed */
        if (kc.st == KILN_OK && (!paired || pc.st == BENCH_CUBLAS_STATUS_SUCCESS)) return -1;
        snprintf(row.note + len, sizeof row.note - (size_t)len, "%serror while timing: %s", len ? "; " : "",
                 kc.st != KILN_OK ? kiln_last_error() : bench_cublas_status_name(pc.st));
        env->failures++;
      }
      bench_report(env, &row);
    }
  }
  return 0;
}

/* Allocates and fills the operands of one shape, runs it, frees. */
static int run_shape(bench_env *env, const matmul_opts *o, const bench_cublas *cb, shape s, bench_dtype in) {
  const kiln_cuda_api *cu = env->cu;
  operands x = {.m = s.m, .n = s.n, .k = s.k, .in = in};
  size_t es = bench_dtype_size(in);
  size_t a_bytes = (size_t)(s.m * s.k) * es, b_bytes = (size_t)(s.k * s.n) * es;
  size_t c_bytes = (size_t)(s.m * s.n) * 4; /* room for the widest output */
  x.a_stride = align256(a_bytes);
  x.b_stride = align256(b_bytes);
  x.rot = bench_rotation_count(env, a_bytes + b_bytes, env->mem_budget);

  CUdeviceptr ck = 0, cp = 0;
  int rc = 0;
  if (bench_alloc(env, x.a_stride * (size_t)x.rot, &x.a) || bench_alloc(env, x.b_stride * (size_t)x.rot, &x.b) ||
      bench_alloc(env, c_bytes, &ck) || bench_alloc(env, c_bytes, &cp) ||
      bench_alloc(env, BENCH_MATMUL_WS_BYTES, &x.ws)) {
    printf("note: matmul %lldx%lldx%lld %s skipped: device memory\n", (long long)s.m, (long long)s.n,
           (long long)s.k, bench_dtype_name(in));
    goto done;
  }
  /* Copy 0 is random; the others duplicate it: what matters is that they live at other addresses. */
  if ((rc = bench_fill_random(env, x.a, (size_t)(s.m * s.k), in, 1)) ||
      (rc = bench_fill_random(env, x.b, (size_t)(s.k * s.n), in, 2)))
    goto done;
  for (int i = 1; i < x.rot && !rc; i++)
    rc = bench_cu_check(env, cu->cuMemcpyAsync(x.a + i * x.a_stride, x.a, a_bytes, env->stream), "cuMemcpyAsync") ||
         bench_cu_check(env, cu->cuMemcpyAsync(x.b + i * x.b_stride, x.b, b_bytes, env->stream), "cuMemcpyAsync");
  if (!rc) rc = bench_cu_check(env, cu->cuStreamSynchronize(env->stream), "cuStreamSynchronize");
  if (!rc) rc = run_outputs(env, o, cb, &x, ck, cp);
done:
  bench_free(env, x.a);
  bench_free(env, x.b);
  bench_free(env, ck);
  bench_free(env, cp);
  bench_free(env, x.ws);
  return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Options and shapes                                                                          */
/* ------------------------------------------------------------------------------------------ */
static int bad_value(const char *opt, const char *v) {
  fprintf(stderr, "kiln-bench matmul: bad value \"%s\" for %s (see kiln-bench matmul --help)\n", v ? v : "", opt);
  return -1;
}

/* Returns 0 to run, 1 after --help, -1 on a bad option. */
static int parse(int argc, char **argv, matmul_opts *o) {
  memset(o, 0, sizeof *o);
  bench_common_init(&o->common);
  o->n_algos = 1; /* algos[0] = 0: auto */
  o->n_sk = 1;    /* sk_modes[0] = 0: stream-K where it pays */
  o->dtypes[0] = BENCH_F16;
  o->n_dtypes = 1;
  o->outs[0] = BENCH_F32;
  o->n_outs = 1;
  o->square = o->llm = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int c = bench_parse_common(argc, argv, &i, &o->common, bench_matmul_usage);
    if (c == BENCH_HELP) return 1;
    if (c < 0) return -1;
    if (c > 0) continue;
    const char *v = i + 1 < argc ? argv[++i] : NULL;
    if (!strcmp(a, "--algo")) {
      o->n_algos = 0;
      for (int j = 0; j < N_ALGO_NAMES; j++)
        if (v && (!strcmp(v, algo_names[j].name) || (!strcmp(v, "all") && j < N_ALGOS_IN_ALL)))
          o->algos[o->n_algos++] = j;
      if (!o->n_algos) return bad_value(a, v);
    } else if (!strcmp(a, "--dtype")) {
      bench_dtype dt;
      if (v && !strcmp(v, "all")) {
        o->dtypes[0] = BENCH_F16;
        o->dtypes[1] = BENCH_BF16;
        o->n_dtypes = 2;
      } else if (v && !bench_dtype_parse(v, &dt) && (dt == BENCH_F16 || dt == BENCH_BF16)) {
        o->dtypes[0] = dt;
        o->n_dtypes = 1;
      } else
        return bad_value(a, v);
    } else if (!strcmp(a, "--out")) {
      bench_dtype dt;
      o->out_same = 0;
      if (v && !strcmp(v, "same")) {
        o->out_same = 1;
      } else if (v && !strcmp(v, "all")) {
        o->outs[0] = BENCH_F32;
        o->outs[1] = BENCH_F16;
        o->outs[2] = BENCH_BF16;
        o->n_outs = 3;
      } else if (v && !bench_dtype_parse(v, &dt) && dt != BENCH_I8) {
        o->outs[0] = dt;
        o->n_outs = 1;
      } else
        return bad_value(a, v);
    } else if (!strcmp(a, "--shape")) {
      long long m = 0, n = 0, k = 0;
      char tail = 0;
      if (!v || o->n_custom == 16 || sscanf(v, "%lldx%lldx%lld%c", &m, &n, &k, &tail) != 3 || m < 1 || n < 1 ||
          k < 1 || m > INT_MAX || n > INT_MAX || k > INT_MAX)
        return bad_value(a, v);
      o->custom[o->n_custom++] = (shape){m, n, k};
    } else if (!strcmp(a, "--tile-n")) {
      if (!v || (strcmp(v, "64") && strcmp(v, "128") && strcmp(v, "256"))) return bad_value(a, v);
      o->tile_n = atoi(v);
    } else if (!strcmp(a, "--stream-k")) {
      static const struct {
        const char *name;
        int n, modes[3];
      } sk_names[] = {{"auto", 1, {0}}, {"off", 1, {-1}}, {"on", 1, {1}}, {"both", 2, {-1, 0}}, {"all", 3, {-1, 0, 1}}};
      int found = -1;
      for (int i = 0; v && i < (int)(sizeof sk_names / sizeof sk_names[0]); i++)
        if (!strcmp(v, sk_names[i].name)) found = i;
      if (found < 0) return bad_value(a, v);
      o->n_sk = sk_names[found].n;
      memcpy(o->sk_modes, sk_names[found].modes, sizeof o->sk_modes);
    } else if (!strcmp(a, "--shapes")) {
      if (!v || (strcmp(v, "square") && strcmp(v, "llm") && strcmp(v, "all"))) return bad_value(a, v);
      o->square = strcmp(v, "llm") != 0;
      o->llm = strcmp(v, "square") != 0;
    } else {
      fprintf(stderr, "kiln-bench matmul: unknown option \"%s\" (see kiln-bench matmul --help)\n", a);
      return -1;
    }
  }
  return 0;
}

/* The shapes to run, in order; returns how many were written to out (capacity 64). */
static int build_shapes(const matmul_opts *o, shape *out) {
  static const int64_t square_full[] = {256, 512, 1024, 2048, 4096, 8192}, square_quick[] = {1024, 4096};
  static const int64_t m_full[] = {1, 16, 128, 2048, 8192}, m_quick[] = {1, 2048};
  static const int64_t kn[][2] = {{4096, 12288}, {4096, 4096}, {8192, 28672}, {28672, 8192}};
  int quick = o->common.quick, n = 0;
  if (o->n_custom) {
    memcpy(out, o->custom, (size_t)o->n_custom * sizeof *out);
    return o->n_custom;
  }
  if (o->square) {
    const int64_t *sq = quick ? square_quick : square_full;
    int count = quick ? 2 : 6;
    for (int i = 0; i < count; i++) out[n++] = (shape){sq[i], sq[i], sq[i]};
  }
  if (o->llm) {
    const int64_t *ms = quick ? m_quick : m_full;
    int count = quick ? 2 : 5;
    for (int j = 0; j < 4; j++)
      for (int i = 0; i < count; i++) out[n++] = (shape){ms[i], kn[j][1], kn[j][0]};
  }
  return n;
}

int bench_matmul_main(int argc, char **argv) {
  matmul_opts o;
  int p = parse(argc, argv, &o);
  if (p) return p > 0 ? 0 : 2;

  bench_env env;
  if (bench_env_open(&env, &o.common, 1)) {
    bench_env_close(&env);
    return 1;
  }
  bench_cublas cb;
  bench_cublas_open(&cb, env.stream); /* on failure cb is zeroed: kiln-only */

  shape shapes[64];
  int n_shapes = build_shapes(&o, shapes);
  bench_table_header(BENCH_TFLOPS);
  for (int s = 0; s < n_shapes; s++) {
    int dead = 0;
    for (int d = 0; d < o.n_dtypes && !dead; d++) dead = run_shape(&env, &o, &cb, shapes[s], o.dtypes[d]) < 0;
    if (dead) {
      fprintf(stderr, "kiln-bench matmul: stopping: the device reported an error (see above)\n");
      break;
    }
  }
  bench_cublas_close(&cb);
  return bench_env_close(&env);
}
