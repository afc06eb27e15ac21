/*
 * kiln-demo — one attention block of an LLM, end to end, on kiln:
 *
 *   x ──► kiln_qkv_project_int4 ──► q, k, v          INT4 weights (W4A16), one fused call, GQA widths
 *         kiln_attention (FLASH, causal) ──► o        q against the KV cache (bottom-right causal mask)
 *         kiln_matmul (f16 / bf16) ──► y              output projection, a Linear weight passed as Wᵀ
 *
 * run as one prefill (kv-len tokens at once) and a few decode steps (one new token against the
 * growing KV cache). K and V rows are written by the projection straight into a preallocated
 * cache [kv-len + decode-steps, kv-heads · head-dim]; attention reads [heads, S, head-dim] views
 * of it (strides, no copies). The weights are quantized on a CPU context (wq, wk through
 * kiln_qweight_quantize; wv built in the GPTQ v1 format with act-order and imported through
 * kiln_qweight_import), then copied to the GPU.
 *
 * On the GPU when there is one (and the build has kernels), else on the CPU at a smaller size;
 * it says which. Every stage is checked on sampled rows against a float64 reference computed
 * from that stage's actual inputs and, on the GPU, against kiln's CPU path run on host copies of
 * the same inputs. Exit status 0 when every check passes, 1 on a mismatch or a failed call,
 * 2 on a usage error. `kiln-demo --help` lists the options.
 */
#ifndef _GNU_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kiln.h"

/* ------------------------------------------------------------------------------------------ */
/* Small helpers                                                                               */
/* ------------------------------------------------------------------------------------------ */
#define CHECK(call)                                                                                         \
  do {                                                                                                      \
    kiln_status st_ = (call);                                                                               \
    if (st_ != KILN_OK) {                                                                                   \
      fprintf(stderr, "\nkiln-demo: %s failed: %s: %s\n", #call, kiln_status_string(st_), kiln_last_error()); \
      exit(1);                                                                                              \
    }                                                                                                       \
  } while (0)

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "kiln-demo: out of host memory (%zu bytes); try smaller sizes (--help)\n", bytes);
    exit(1);
  }
  return p;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float uniform(void) { /* xorshift64*, uniform in [-1, 1) */
  rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
  return (float)((rng_state * 2685821657736338717ull) >> 40) / (float)(1 << 23) - 1.0f;
}
static uint32_t rand_below(uint32_t n) { return (uint32_t)((uniform() + 1.0f) * 0.5f * (float)n) % n; }

/* Progress on stderr for anything that runs longer than a second: a line rewritten in place on
 * a terminal, else a line every few seconds. */
typedef struct progress {
  const char *what;
  double t0, last;
  int shown;
} progress;
static progress progress_start(const char *what) { return (progress){what, now_s(), 0, 0}; }
static void progress_update(progress *p, double frac) {
  const double t = now_s(), el = t - p->t0;
  const int tty = isatty(2);
  if (el < 1.0 || t - p->last < (tty ? 0.25 : 5.0)) return;
  p->last = t;
  p->shown = 1;
  fprintf(stderr, tty ? "\r  ... %s: %3.0f%% (%.1f s)  " : "  ... %s: %3.0f%% (%.1f s)\n", p->what, 100.0 * frac, el);
  fflush(stderr);
}
static void progress_end(progress *p) {
  if (p->shown && isatty(2)) fprintf(stderr, "\r%*s\r", 72, "");
}

/* ------------------------------------------------------------------------------------------ */
/* Configuration                                                                               */
/* ------------------------------------------------------------------------------------------ */
typedef struct cfg {
  int64_t hidden, heads, kv_heads, head_dim, kv_len, steps, group, check_rows;
  int bf16, force_cpu, require_gpu;
} cfg;

static const cfg GPU_DEFAULTS = {4096, 32, 8, 128, 4096, 8, 128, 16, 0, 0, 0};
static const cfg CPU_DEFAULTS = {1024, 8, 2, 128, 2048, 4, 128, 16, 0, 0, 0};

static void usage(FILE *f) {
  fprintf(f,
          "usage: kiln-demo [options]\n"
          "One attention block of an LLM on kiln: INT4 fused QKV projection (GQA), causal FLASH\n"
          "attention over a KV cache, output projection with kiln_matmul; one prefill and a few\n"
          "decode steps, every stage checked against float64 and (on a GPU) kiln's CPU path.\n"
          "Runs on GPU 0 when there is one, else on the CPU at the smaller CPU defaults.\n\n"
          "  --hidden N        model width, K of the QKV projection (GPU %" PRId64 ", CPU %" PRId64 ")\n"
          "  --heads N         query heads (GPU %" PRId64 ", CPU %" PRId64 ")\n"
          "  --kv-heads N      key/value heads, dividing --heads (GPU %" PRId64 ", CPU %" PRId64 ")\n"
          "  --head-dim N      head dimension, a multiple of 8, <= 256 (GPU %" PRId64 ", CPU %" PRId64 ")\n"
          "  --kv-len N        prefill tokens = KV length before decoding (GPU %" PRId64 ", CPU %" PRId64 ")\n"
          "  --decode-steps N  decode steps, one token each (GPU %" PRId64 ", CPU %" PRId64 ")\n"
          "  --group N         INT4 group size: 32, 64, 128 or --hidden (default %" PRId64 ")\n"
          "  --dtype f16|bf16  activations, KV cache, outputs and the f16/bf16 output weight (f16)\n"
          "  --check-rows N    prefill rows checked, spread over the sequence (default %" PRId64 ")\n"
          "  --cpu             run on the CPU even when a GPU is present\n"
          "  --require-gpu     exit with status 77 (a skipped test) when the GPU path cannot run\n"
          "  --help            this text\n",
          GPU_DEFAULTS.hidden, CPU_DEFAULTS.hidden, GPU_DEFAULTS.heads, CPU_DEFAULTS.heads, GPU_DEFAULTS.kv_heads,
          CPU_DEFAULTS.kv_heads, GPU_DEFAULTS.head_dim, CPU_DEFAULTS.head_dim, GPU_DEFAULTS.kv_len,
          CPU_DEFAULTS.kv_len, GPU_DEFAULTS.steps, CPU_DEFAULTS.steps, GPU_DEFAULTS.group, GPU_DEFAULTS.check_rows);
}

static int bad_usage(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "kiln-demo: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, " (kiln-demo --help lists the options)\n");
  va_end(ap);
  return 2;
}

/* Parses argv into *c, marking in set[] the sizes given (the others take the GPU or CPU
 * defaults once the device is known). Returns 0, 1 for --help, or 2 on a usage error. */
enum { O_HIDDEN, O_HEADS, O_KV_HEADS, O_HEAD_DIM, O_KV_LEN, O_STEPS, O_GROUP, O_CHECK_ROWS, O_COUNT };
static int parse_args(int argc, char **argv, cfg *c, int set[O_COUNT]) {
  static const char *const names[O_COUNT] = {"--hidden", "--heads",  "--kv-heads", "--head-dim",
                                             "--kv-len", "--decode-steps", "--group", "--check-rows"};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *val = NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return 1;
    if (!strcmp(a, "--cpu") || !strcmp(a, "--require-gpu")) {
      *(a[2] == 'c' ? &c->force_cpu : &c->require_gpu) = 1;
      continue;
    }
    char name[32];
    const char *eq = strchr(a, '=');
    size_t len = eq ? (size_t)(eq - a) : strlen(a);
    if (len >= sizeof name) return bad_usage("unknown option '%s'", a);
    memcpy(name, a, len), name[len] = 0;
    if (eq) val = eq + 1;
    else if (i + 1 < argc) val = argv[++i];
    if (!strcmp(name, "--dtype")) {
      if (!val) return bad_usage("--dtype needs a value, f16 or bf16");
      if (!strcmp(val, "f16") || !strcmp(val, "float16")) c->bf16 = 0;
      else if (!strcmp(val, "bf16") || !strcmp(val, "bfloat16")) c->bf16 = 1;
      else return bad_usage("--dtype %s: expected f16 or bf16", val);
      continue;
    }
    int o = 0;
    while (o < O_COUNT && strcmp(name, names[o])) o++;
    if (o == O_COUNT) return bad_usage("unknown option '%s'", a);
    if (!val) return bad_usage("%s needs a value", name);
    char *end;
    long long v = strtoll(val, &end, 10);
    if (*val == 0 || *end || v < (o == O_STEPS ? 0 : 1) || v > (1ll << 24))
      return bad_usage("%s %s: expected an integer in %d..%d", name, val, o == O_STEPS ? 0 : 1, 1 << 24);
    int64_t *dst[O_COUNT] = {&c->hidden, &c->heads, &c->kv_heads, &c->head_dim,
                             &c->kv_len, &c->steps, &c->group,    &c->check_rows};
    *dst[o] = v;
    set[o] = 1;
  }
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Device, buffers and views                                                                   */
/* ------------------------------------------------------------------------------------------ */
static kiln_context *g_ctx, *g_cpu; /* the device's context, and a CPU context (the reference) */
static CUstream g_stream;
static int g_gpu, g_bf16;
static DLDataType g_act; /* f16 or bf16: activations, KV cache, outputs, wo */
static const DLDataType DT_F32 = {kDLFloat, 32, 1}, DT_U8 = {kDLUInt, 8, 1}, DT_I32 = {kDLInt, 32, 1};
static const DLDevice HOST = {kDLCPU, 0};

static float act_get(const uint16_t *p, int64_t i) { return g_bf16 ? kiln_bf16_to_f32(p[i]) : kiln_f16_to_f32(p[i]); }
static uint16_t act_make(float f) { return g_bf16 ? kiln_f32_to_bf16(f) : kiln_f32_to_f16(f); }

/* A row-major matrix [rows, cols] of activations on the device, with a host mirror (the same
 * memory on the CPU). */
typedef struct buf {
  DLManagedTensorVersioned *dev;
  uint16_t *host;
  int64_t rows, cols;
} buf;

/* A view: a DLTensor with its own shape and strides (keep the struct where it is while used). */
typedef struct view {
  DLTensor t;
  int64_t shape[3], strides[3];
} view;

static DLTensor *mkview(view *v, void *data, DLDevice dev, DLDataType dt, uint64_t byte_offset, int ndim,
                        const int64_t *shape, const int64_t *strides) {
  memset(v, 0, sizeof *v);
  memcpy(v->shape, shape, sizeof(int64_t) * (size_t)ndim);
  memcpy(v->strides, strides, sizeof(int64_t) * (size_t)ndim);
  v->t = (DLTensor){.data = data, .device = dev, .ndim = ndim, .dtype = dt, .shape = v->shape,
                    .strides = v->strides, .byte_offset = byte_offset};
  return &v->t;
}
/* Rows [r0, r0 + n) of b as a compact [n, cols] matrix, on the device or the host mirror. */
static DLTensor *rows_of(view *v, const buf *b, int host, int64_t r0, int64_t n) {
  const int64_t shape[2] = {n, b->cols}, strides[2] = {b->cols, 1};
  return mkview(v, host ? (void *)b->host : b->dev->dl_tensor.data, host ? HOST : b->dev->dl_tensor.device, g_act,
                (uint64_t)(r0 * b->cols) * 2, 2, shape, strides);
}
/* Rows [r0, r0 + n) of b, each holding h heads of d, as the [h, n, d] view attention takes
 * (the token-major [S, H, D] buffer seen as [H, S, D] through strides, no copy). */
static DLTensor *heads_of(view *v, const buf *b, int host, int64_t r0, int64_t n, int64_t h, int64_t d) {
  const int64_t shape[3] = {h, n, d}, strides[3] = {d, b->cols, 1};
  return mkview(v, host ? (void *)b->host : b->dev->dl_tensor.data, host ? HOST : b->dev->dl_tensor.device, g_act,
                (uint64_t)(r0 * b->cols) * 2, 3, shape, strides);
}

static void buf_make(buf *b, int64_t rows, int64_t cols) {
  const int64_t shape[2] = {rows, cols};
  b->rows = rows, b->cols = cols;
  CHECK(kiln_tensor_empty(g_ctx, 2, shape, g_act, &b->dev));
  b->host = g_gpu ? xmalloc((size_t)(rows * cols) * 2) : (uint16_t *)b->dev->dl_tensor.data;
}
static void buf_free(buf *b) {
  if (g_gpu) free(b->host);
  kiln_tensor_free(b->dev);
}
static void buf_upload(buf *b, int64_t r0, int64_t n) {
  if (!g_gpu || n == 0) return;
  view h, d;
  CHECK(kiln_tensor_copy(g_ctx, rows_of(&h, b, 1, r0, n), rows_of(&d, b, 0, r0, n), g_stream));
  CHECK(kiln_stream_synchronize(g_ctx, g_stream));
}
static void buf_download(buf *b, int64_t r0, int64_t n) {
  if (!g_gpu || n == 0) return;
  view h, d;
  CHECK(kiln_tensor_copy(g_ctx, rows_of(&d, b, 0, r0, n), rows_of(&h, b, 1, r0, n), g_stream));
  CHECK(kiln_stream_synchronize(g_ctx, g_stream));
}
/* NaN into rows [r0, r0 + n): an output element the op does not write fails the checks. */
static void buf_poison(buf *b, int64_t r0, int64_t n) {
  const uint16_t nan = g_bf16 ? 0x7fc0 : 0x7e00;
  for (int64_t i = r0 * b->cols; i < (r0 + n) * b->cols; i++) b->host[i] = nan;
  buf_upload(b, r0, n);
}
static void buf_random(buf *b, float scale) {
  for (int64_t i = 0; i < b->rows * b->cols; i++) b->host[i] = act_make(scale * uniform());
  buf_upload(b, 0, b->rows);
}
/* Elements of rows [r0, r0 + n) that are not finite (still poisoned, or overflowed). */
static int64_t buf_nonfinite(const buf *b, int64_t r0, int64_t n) {
  int64_t bad = 0;
  for (int64_t i = r0 * b->cols; i < (r0 + n) * b->cols; i++) bad += !isfinite(act_get(b->host, i));
  return bad;
}

/* An INT4 weight: the native buffers on the host (what the CPU importers write), their copy on
 * the device, and the dequantized f32 [K, N] (stored row order) for the float64 reference. */
typedef struct qweight {
  kiln_qweight host, dev;
  DLManagedTensorVersioned *dbuf[4];
  float *deq;
  size_t bytes; /* codes + scales + zeros (+ perm) */
} qweight;

static void qw_alloc(qweight *w, int64_t k, int64_t n, int64_t group, int with_perm) {
  size_t cb, sb, zb, pb;
  CHECK(kiln_qweight_bytes(k, n, group, &cb, &sb, &zb, &pb));
  memset(w, 0, sizeof *w);
  w->host = (kiln_qweight){.k = k, .n = n, .group = group, .codes = xmalloc(cb), .scales = xmalloc(sb),
                           .zeros = xmalloc(zb), .perm = with_perm ? xmalloc(pb) : NULL, .device = HOST};
  w->bytes = cb + sb + zb + (with_perm ? pb : 0);
}

/* Copies one host buffer into a new device allocation (kiln_tensor_empty + kiln_tensor_copy). */
static void *upload_bytes(const void *src, size_t bytes, DLManagedTensorVersioned **keep) {
  const int64_t n = (int64_t)bytes, stride = 1;
  view h;
  CHECK(kiln_tensor_empty(g_ctx, 1, &n, DT_U8, keep));
  CHECK(kiln_tensor_copy(g_ctx, mkview(&h, (void *)src, HOST, DT_U8, 0, 1, &n, &stride), &(*keep)->dl_tensor,
                         g_stream));
  return (*keep)->dl_tensor.data;
}

/* The device copy (the host buffers themselves on the CPU) and the dequantized reference. */
static void qw_finish(qweight *w) {
  const kiln_qweight *h = &w->host;
  w->dev = *h;
  if (g_gpu) {
    size_t cb, sb, zb, pb;
    CHECK(kiln_qweight_bytes(h->k, h->n, h->group, &cb, &sb, &zb, &pb));
    w->dev.device = (DLDevice){kDLCUDA, 0};
    w->dev.codes = upload_bytes(h->codes, cb, &w->dbuf[0]);
    w->dev.scales = upload_bytes(h->scales, sb, &w->dbuf[1]);
    w->dev.zeros = upload_bytes(h->zeros, zb, &w->dbuf[2]);
    if (h->perm) w->dev.perm = upload_bytes(h->perm, pb, &w->dbuf[3]);
    CHECK(kiln_stream_synchronize(g_ctx, g_stream));
  }
  const int64_t shape[2] = {h->k, h->n}, strides[2] = {h->n, 1};
  w->deq = xmalloc(sizeof(float) * (size_t)(h->k * h->n));
  view v;
  CHECK(kiln_qweight_dequantize(g_cpu, h, mkview(&v, w->deq, HOST, DT_F32, 0, 2, shape, strides), NULL));
}
static void qw_free(qweight *w) {
  for (int i = 0; i < 4; i++)
    if (w->dbuf[i]) kiln_tensor_free(w->dbuf[i]);
  free(w->host.codes), free(w->host.scales), free(w->host.zeros), free(w->host.perm), free(w->deq);
}

/* Round-to-nearest quantization of a random float weight [K, N] (kiln_qweight_quantize). The
 * float weight is uniform in ±amp; amp sets the size of q and k, hence of the scores. */
static void qw_quantize(qweight *w, int64_t k, int64_t n, int64_t group, int symmetric, float amp) {
  float *f = xmalloc(sizeof(float) * (size_t)(k * n));
  for (int64_t i = 0; i < k * n; i++) f[i] = amp * uniform();
  qw_alloc(w, k, n, group, 0);
  const int64_t shape[2] = {k, n}, strides[2] = {n, 1};
  view v;
  CHECK(kiln_qweight_quantize(g_cpu, mkview(&v, f, HOST, DT_F32, 0, 2, shape, strides), symmetric, &w->host, NULL));
  free(f);
  qw_finish(w);
}

/* A GPTQ v1 checkpoint's tensors built here (random codes 0..15, zero points 1..15 stored as
 * zero - 1, f16 scales, act-order g_idx: a random assignment of rows to groups, G rows each),
 * imported with kiln_qweight_import; the importer sorts the rows by group and returns perm. */
static void qw_gptq(qweight *w, int64_t k, int64_t n, int64_t group, float amp) {
  const int64_t ng = k / group;
  uint32_t *qweight = xmalloc(sizeof(uint32_t) * (size_t)(k / 8 * n));
  uint32_t *qzeros = xmalloc(sizeof(uint32_t) * (size_t)(ng * n / 8));
  uint16_t *scales = xmalloc(sizeof(uint16_t) * (size_t)(ng * n));
  int32_t *g_idx = xmalloc(sizeof(int32_t) * (size_t)k);
  for (int64_t i = 0; i < k / 8 * n; i++) {
    uint32_t word = 0;
    for (int j = 0; j < 8; j++) word |= rand_below(16) << (4 * j); /* nibble j: row 8r + j */
    qweight[i] = word;
  }
  for (int64_t i = 0; i < ng * n / 8; i++) {
    uint32_t word = 0;
    for (int j = 0; j < 8; j++) word |= rand_below(15) << (4 * j); /* zero - 1: zeros 1..15 */
    qzeros[i] = word;
  }
  for (int64_t i = 0; i < ng * n; i++) scales[i] = kiln_f32_to_f16(amp * (0.5f + 0.25f * (uniform() + 1.0f)));
  for (int64_t r = 0; r < k; r++) g_idx[r] = (int32_t)(r / group); /* then shuffled (Fisher-Yates) */
  for (int64_t r = k - 1; r > 0; r--) {
    const int64_t j = (int64_t)(((uint64_t)rand_below(1u << 16) << 16 | rand_below(1u << 16)) % (uint64_t)(r + 1));
    const int32_t t = g_idx[r];
    g_idx[r] = g_idx[j], g_idx[j] = t;
  }
  qw_alloc(w, k, n, group, 1);
  const int64_t sq[2] = {k / 8, n}, tq[2] = {n, 1}, sz[2] = {ng, n / 8}, tz[2] = {n / 8, 1}, ss[2] = {ng, n},
                ts[2] = {n, 1}, sg[1] = {k}, tg[1] = {1};
  const DLDataType f16 = {kDLFloat, 16, 1};
  view vq, vz, vs, vg;
  CHECK(kiln_qweight_import(g_cpu, KILN_QFORMAT_GPTQ_V1, mkview(&vq, qweight, HOST, DT_I32, 0, 2, sq, tq),
                            mkview(&vz, qzeros, HOST, DT_I32, 0, 2, sz, tz), mkview(&vs, scales, HOST, f16, 0, 2, ss, ts),
                            mkview(&vg, g_idx, HOST, DT_I32, 0, 1, sg, tg), &w->host, NULL));
  free(qweight), free(qzeros), free(scales), free(g_idx);
  qw_finish(w);
}

/* ------------------------------------------------------------------------------------------ */
/* The block                                                                                   */
/* ------------------------------------------------------------------------------------------ */
typedef struct block {
  cfg c;
  int64_t nq, nkv, ctx_len; /* heads · head_dim, kv_heads · head_dim, kv_len + steps */
  qweight wq, wk, wv;
  uint16_t *wo_host;        /* [hidden, nq]: a Linear weight (out_features x in_features) */
  float *wo_f;              /* the same as f32, for the float64 reference */
  DLManagedTensorVersioned *wo_dev;
  buf x, xd;                /* prefill input [kv_len, hidden]; decode inputs [steps, hidden] */
  buf q, o, y;              /* prefill: q [kv_len, nq], o [kv_len, nq], y [kv_len, hidden] */
  buf kc, vc;               /* the KV cache [ctx_len, nkv] */
  buf qd, od, yd;           /* decode: q [1, nq], o [1, nq], y [steps, hidden] */
  float *kf, *vf;           /* the cache's rows as f32 (host), for the float64 reference */
  DLManagedTensorVersioned *ws; /* GPU: PREFILL's workspace, so AUTO takes PREFILL for the prefill */
  size_t ws_bytes;
} block;

/* wo as kiln_matmul's B [nq, hidden]: the transposed view of the Linear weight (column-major). */
static DLTensor *wo_view(view *v, const block *b, int host) {
  const int64_t shape[2] = {b->nq, b->c.hidden}, strides[2] = {1, b->nq};
  return mkview(v, host ? (void *)b->wo_host : b->wo_dev->dl_tensor.data, host ? HOST : b->wo_dev->dl_tensor.device,
                g_act, 0, 2, shape, strides);
}

/* Stage 1: q, k, v of m tokens: x rows [xr, xr + m) of x -> q rows [qr, qr + m), cache rows
 * [cr, cr + m) (k and v are written straight into the cache). */
static void op_qkv(block *b, buf *x, int64_t xr, int64_t m, buf *q, int64_t qr, int64_t cr) {
  view vx, vq, vk, vv;
  kiln_qkv_opts opts = kiln_qkv_opts_default(); /* AUTO: DECODE for decode steps, PREFILL from 128 rows */
  if (b->ws) opts.workspace = b->ws->dl_tensor.data, opts.workspace_bytes = b->ws_bytes;
  CHECK(kiln_qkv_project_int4(g_ctx, rows_of(&vx, x, 0, xr, m), &b->wq.dev, &b->wk.dev, &b->wv.dev,
                              rows_of(&vq, q, 0, qr, m), rows_of(&vk, &b->kc, 0, cr, m),
                              rows_of(&vv, &b->vc, 0, cr, m), &opts, g_stream));
}
/* Stage 2: causal attention of m queries (rows [qr, qr + m) of q) against the first nk cache
 * rows; the mask is aligned bottom-right, so the last query sees all nk keys. -> o rows [or_, ...). */
static void op_attn(block *b, buf *q, int64_t qr, int64_t m, int64_t nk, buf *o, int64_t or_) {
  const cfg *c = &b->c;
  view vq, vk, vv, vo;
  kiln_attention_opts opts = kiln_attention_opts_default();
  opts.causal = 1;
  if (g_gpu) opts.algo = KILN_ATTENTION_FLASH;
  CHECK(kiln_attention(g_ctx, heads_of(&vq, q, 0, qr, m, c->heads, c->head_dim),
                       heads_of(&vk, &b->kc, 0, 0, nk, c->kv_heads, c->head_dim),
                       heads_of(&vv, &b->vc, 0, 0, nk, c->kv_heads, c->head_dim),
                       heads_of(&vo, o, 0, or_, m, c->heads, c->head_dim), NULL, &opts, g_stream));
}
/* Stage 3: y rows [yr, yr + m) = o rows [or_, or_ + m) · woᵀ. */
static void op_oproj(block *b, buf *o, int64_t or_, int64_t m, buf *y, int64_t yr) {
  view vo, vw, vy;
  CHECK(kiln_matmul(g_ctx, rows_of(&vo, o, 0, or_, m), wo_view(&vw, b, 0), rows_of(&vy, y, 0, yr, m), NULL, g_stream));
}

/* ------------------------------------------------------------------------------------------ */
/* Checks                                                                                      */
/* ------------------------------------------------------------------------------------------ */
/* ‖got − ref‖ / ‖ref‖ over the elements checked, and the largest difference against the
 * largest |ref|; a stage passes with rel <= tol and max <= 4·tol·max|ref| (SPEC §5's limits). */
typedef struct errs {
  double num, den, maxd, maxr;
  int64_t n;
} errs;
static void err_add(errs *e, double got, double ref) {
  const double d = got - ref;
  e->num += d * d, e->den += ref * ref, e->n++;
  if (!(fabs(d) <= e->maxd)) e->maxd = isnan(d) ? NAN : fmax(e->maxd, fabs(d));
  e->maxr = fmax(e->maxr, fabs(ref));
}
static double err_rel(const errs *e) { return e->den > 0 ? sqrt(e->num / e->den) : (e->num > 0 ? INFINITY : 0); }
static int err_ok(const errs *e, double tol) {
  return e->n > 0 && err_rel(e) <= tol && e->maxd <= 4 * tol * fmax(e->maxr, 1e-30);
}

typedef struct check {
  errs f64, cpu; /* against the float64 reference; against kiln's CPU path (GPU runs) */
  int64_t rows, nonfinite;
} check;
static int check_ok(const check *k, double tol) {
  return !k->nonfinite && err_ok(&k->f64, tol) && (!g_gpu || err_ok(&k->cpu, tol));
}

/* Stage 1 on rows: x row xr[i] gave q row qr[i] and cache row cr[i]. */
static void check_qkv(block *b, const buf *x, const buf *q, int64_t cnt, const int64_t *xr, const int64_t *qr,
                      const int64_t *cr, check *k, progress *p) {
  const int64_t K = b->c.hidden;
  const qweight *w[3] = {&b->wq, &b->wk, &b->wv};
  const buf *out[3] = {q, &b->kc, &b->vc};
  double *xs = xmalloc(sizeof(double) * (size_t)K), *acc = xmalloc(sizeof(double) * (size_t)b->nq);
  for (int64_t i = 0; i < cnt; i++) {
    for (int pj = 0; pj < 3; pj++) {
      const kiln_qweight *h = &w[pj]->host;
      const int64_t N = h->n, row = pj == 0 ? qr[i] : cr[i];
      for (int64_t r = 0; r < K; r++) xs[r] = act_get(x->host, xr[i] * K + (h->perm ? h->perm[r] : r));
      memset(acc, 0, sizeof(double) * (size_t)N);
      for (int64_t r = 0; r < K; r++) {
        const float *wr = w[pj]->deq + r * N;
        for (int64_t n = 0; n < N; n++) acc[n] += xs[r] * (double)wr[n];
      }
      for (int64_t n = 0; n < N; n++) err_add(&k->f64, act_get(out[pj]->host, row * N + n), acc[n]);
    }
    if (p) progress_update(p, 0.5 * (double)(i + 1) / (double)cnt);
  }
  free(xs), free(acc);
  k->rows += cnt;
  if (!g_gpu) return;
  /* kiln's CPU path on host copies of the same x rows, 4 rows a call */
  const int64_t nn[3] = {b->nq, b->nkv, b->nkv};
  for (int64_t i0 = 0; i0 < cnt; i0 += 4) {
    const int64_t m = cnt - i0 < 4 ? cnt - i0 : 4;
    uint16_t *xh = xmalloc((size_t)(m * K) * 2), *oh[3];
    for (int64_t i = 0; i < m; i++) memcpy(xh + i * K, x->host + xr[i0 + i] * K, (size_t)K * 2);
    view vx, vo[3];
    for (int pj = 0; pj < 3; pj++) {
      oh[pj] = xmalloc((size_t)(m * nn[pj]) * 2);
      const int64_t s[2] = {m, nn[pj]}, t[2] = {nn[pj], 1};
      mkview(&vo[pj], oh[pj], HOST, g_act, 0, 2, s, t);
    }
    const int64_t s[2] = {m, K}, t[2] = {K, 1};
    CHECK(kiln_qkv_project_int4(g_cpu, mkview(&vx, xh, HOST, g_act, 0, 2, s, t), &b->wq.host, &b->wk.host,
                                &b->wv.host, &vo[0].t, &vo[1].t, &vo[2].t, NULL, NULL));
    for (int64_t i = 0; i < m; i++)
      for (int pj = 0; pj < 3; pj++) {
        const int64_t row = pj == 0 ? qr[i0 + i] : cr[i0 + i];
        for (int64_t n = 0; n < nn[pj]; n++)
          err_add(&k->cpu, act_get(out[pj]->host, row * nn[pj] + n), act_get(oh[pj], i * nn[pj] + n));
      }
    free(xh), free(oh[0]), free(oh[1]), free(oh[2]);
    if (p) progress_update(p, 0.5 + 0.5 * (double)(i0 + m) / (double)cnt);
  }
}

/* Stage 2 on rows: query row qr[i] of q, against the first nk[i] cache rows, gave o row or_[i]. */
static void check_attn(block *b, const buf *q, const buf *o, int64_t cnt, const int64_t *qr, const int64_t *nk,
                       const int64_t *or_, check *k, progress *p) {
  const cfg *c = &b->c;
  const int64_t D = c->head_dim, H = c->heads, group = c->heads / c->kv_heads;
  const double scale = 1.0 / sqrt((double)D);
  int64_t maxk = 0;
  for (int64_t i = 0; i < cnt; i++) maxk = nk[i] > maxk ? nk[i] : maxk;
  double *s = xmalloc(sizeof(double) * (size_t)maxk), *qs = xmalloc(sizeof(double) * (size_t)D),
         *acc = xmalloc(sizeof(double) * (size_t)D);
  for (int64_t i = 0; i < cnt; i++) {
    for (int64_t h = 0; h < H; h++) {
      const int64_t kvh = h / group;
      for (int64_t d = 0; d < D; d++) qs[d] = act_get(q->host, qr[i] * b->nq + h * D + d);
      double mx = -INFINITY;
      for (int64_t j = 0; j < nk[i]; j++) {
        const float *kr = b->kf + j * b->nkv + kvh * D;
        double dot = 0;
        for (int64_t d = 0; d < D; d++) dot += qs[d] * (double)kr[d];
        s[j] = scale * dot;
        mx = fmax(mx, s[j]);
      }
      double z = 0;
      memset(acc, 0, sizeof(double) * (size_t)D);
      for (int64_t j = 0; j < nk[i]; j++) {
        const double e = exp(s[j] - mx);
        const float *vr = b->vf + j * b->nkv + kvh * D;
        z += e;
        for (int64_t d = 0; d < D; d++) acc[d] += e * (double)vr[d];
      }
      for (int64_t d = 0; d < D; d++) err_add(&k->f64, act_get(o->host, or_[i] * b->nq + h * D + d), acc[d] / z);
    }
    if (g_gpu) { /* kiln's CPU path: the same query row (all heads) against host copies of the cache */
      uint16_t *oh = xmalloc((size_t)b->nq * 2);
      const int64_t so[3] = {H, 1, D}, to[3] = {D, b->nq, 1};
      view vq, vk, vv, vo;
      kiln_attention_opts opts = kiln_attention_opts_default();
      opts.causal = 1;
      CHECK(kiln_attention(g_cpu, heads_of(&vq, q, 1, qr[i], 1, H, D), heads_of(&vk, &b->kc, 1, 0, nk[i], c->kv_heads, D),
                           heads_of(&vv, &b->vc, 1, 0, nk[i], c->kv_heads, D),
                           mkview(&vo, oh, HOST, g_act, 0, 3, so, to), NULL, &opts, NULL));
      for (int64_t n = 0; n < b->nq; n++) err_add(&k->cpu, act_get(o->host, or_[i] * b->nq + n), act_get(oh, n));
      free(oh);
    }
    if (p) progress_update(p, (double)(i + 1) / (double)cnt);
  }
  free(s), free(qs), free(acc);
  k->rows += cnt;
}

/* Stage 3 on rows: o row or_[i] gave y row yr[i]. */
static void check_oproj(block *b, const buf *o, const buf *y, int64_t cnt, const int64_t *or_, const int64_t *yr,
                        check *k, progress *p) {
  const int64_t K = b->nq, N = b->c.hidden;
  double *os = xmalloc(sizeof(double) * (size_t)K);
  for (int64_t i = 0; i < cnt; i++) {
    for (int64_t r = 0; r < K; r++) os[r] = act_get(o->host, or_[i] * K + r);
    for (int64_t n = 0; n < N; n++) {
      const float *wr = b->wo_f + n * K;
      double s = 0;
      for (int64_t r = 0; r < K; r++) s += os[r] * (double)wr[r];
      err_add(&k->f64, act_get(y->host, yr[i] * N + n), s);
    }
    if (p) progress_update(p, 0.5 * (double)(i + 1) / (double)cnt);
  }
  free(os);
  k->rows += cnt;
  if (!g_gpu) return;
  for (int64_t i0 = 0; i0 < cnt; i0 += 4) { /* kiln's CPU path, 4 rows a call */
    const int64_t m = cnt - i0 < 4 ? cnt - i0 : 4;
    uint16_t *oh = xmalloc((size_t)(m * K) * 2), *yh = xmalloc((size_t)(m * N) * 2);
    for (int64_t i = 0; i < m; i++) memcpy(oh + i * K, o->host + or_[i0 + i] * K, (size_t)K * 2);
    const int64_t so[2] = {m, K}, to[2] = {K, 1}, sy[2] = {m, N}, ty[2] = {N, 1};
    view vo, vw, vy;
    CHECK(kiln_matmul(g_cpu, mkview(&vo, oh, HOST, g_act, 0, 2, so, to), wo_view(&vw, b, 1),
                      mkview(&vy, yh, HOST, g_act, 0, 2, sy, ty), NULL, NULL));
    for (int64_t i = 0; i < m; i++)
      for (int64_t n = 0; n < N; n++) err_add(&k->cpu, act_get(y->host, yr[i0 + i] * N + n), act_get(yh, i * N + n));
    free(oh), free(yh);
    if (p) progress_update(p, 0.5 + 0.5 * (double)(i0 + m) / (double)cnt);
  }
}

/* Cache rows [r0, r0 + n) from the device into the host mirror and its f32 copy. */
static void cache_fetch(block *b, int64_t r0, int64_t n) {
  buf_download(&b->kc, r0, n);
  buf_download(&b->vc, r0, n);
  for (int64_t i = r0 * b->nkv; i < (r0 + n) * b->nkv; i++) {
    b->kf[i] = act_get(b->kc.host, i);
    b->vf[i] = act_get(b->vc.host, i);
  }
}

/* ------------------------------------------------------------------------------------------ */
/* Reporting                                                                                   */
/* ------------------------------------------------------------------------------------------ */
static void fmt_time(char *s, size_t n, double sec) {
  if (sec >= 1.0) snprintf(s, n, "%8.3f s ", sec);
  else snprintf(s, n, "%8.3f ms", 1e3 * sec);
}
static void fmt_rate(char *s, size_t n, double flops, double bytes, double sec) {
  if (flops > 0) {
    const double t = flops / sec / 1e12;
    snprintf(s, n, t >= 0.1 ? "%8.1f TFLOP/s" : "%8.2f GFLOP/s", t >= 0.1 ? t : t * 1e3);
  } else {
    const double g = bytes / sec / 1e9;
    snprintf(s, n, g >= 10 ? "%8.0f GB/s   " : "%8.2f GB/s   ", g);
  }
}
static const char *err_str(char *s, size_t n, const errs *e) {
  snprintf(s, n, "%.1e (max %.1e)", err_rel(e), e->maxd / fmax(e->maxr, 1e-30));
  return s;
}

/* ------------------------------------------------------------------------------------------ */
/* main                                                                                        */
/* ------------------------------------------------------------------------------------------ */
int main(int argc, char **argv) {
  cfg c = GPU_DEFAULTS;
  int set[O_COUNT] = {0};
  const int pr = parse_args(argc, argv, &c, set);
  if (pr == 1) {
    usage(stdout);
    return 0;
  }
  if (pr) return pr;

  /* The device: GPU 0 when there is one and this build has kernels, else the CPU. */
  int devices = 0;
  const kiln_status dst = kiln_device_count(&devices);
  char why[600] = "";
  CHECK(kiln_context_create(kDLCPU, 0, &g_cpu));
  if (c.force_cpu) snprintf(why, sizeof why, "--cpu given");
  else if (!kiln_build_has_kernels()) snprintf(why, sizeof why, "this build has no GPU kernels (built without nvcc)");
  else if (dst != KILN_OK) snprintf(why, sizeof why, "no usable CUDA driver: %s", kiln_last_error());
  else if (devices == 0) snprintf(why, sizeof why, "no CUDA GPU found");
  else if (kiln_context_create(kDLCUDA, 0, &g_ctx) != KILN_OK)
    snprintf(why, sizeof why, "GPU 0 present but unusable: %s", kiln_last_error());
  else g_gpu = 1;
  if (!g_gpu && c.require_gpu && !c.force_cpu) {
    printf("kiln-demo: SKIP: --require-gpu, and the GPU path cannot run: %s\n", why);
    kiln_context_destroy(g_cpu);
    return 77;
  }
  if (!g_gpu) g_ctx = g_cpu;
  const cfg *defaults = g_gpu ? &GPU_DEFAULTS : &CPU_DEFAULTS;
  int64_t *fields[O_COUNT] = {&c.hidden, &c.heads, &c.kv_heads, &c.head_dim,
                              &c.kv_len, &c.steps, &c.group, &c.check_rows};
  const int64_t dvals[O_COUNT] = {defaults->hidden, defaults->heads, defaults->kv_heads, defaults->head_dim,
                                  defaults->kv_len, defaults->steps, defaults->group, defaults->check_rows};
  for (int o = 0; o < O_COUNT; o++)
    if (!set[o]) *fields[o] = dvals[o];
  g_bf16 = c.bf16;
  g_act = c.bf16 ? (DLDataType){kDLBfloat, 16, 1} : (DLDataType){kDLFloat, 16, 1};
  const char *dtn = c.bf16 ? "bf16" : "f16";

  if (c.heads % c.kv_heads)
    return bad_usage("--heads %" PRId64 " is not a multiple of --kv-heads %" PRId64, c.heads, c.kv_heads);
  if (c.head_dim % 8 || c.head_dim > 256)
    return bad_usage("--head-dim %" PRId64 ": expected a multiple of 8 up to 256 (what the FLASH kernels take)", c.head_dim);
  if (c.hidden % c.group || (c.group != c.hidden && c.group != 32 && c.group != 64 && c.group != 128))
    return bad_usage("--group %" PRId64 " with --hidden %" PRId64 ": the group must be 32, 64, 128 or the hidden size, "
                     "and divide the hidden size", c.group, c.hidden);
  if (c.hidden % 8) return bad_usage("--hidden %" PRId64 ": expected a multiple of 8", c.hidden);

  kiln_device_info info;
  CHECK(kiln_context_info(g_ctx, &info));
  printf("kiln-demo: one attention block of an LLM: INT4 fused QKV projection (GQA), causal attention (FLASH on "
         "a GPU), %s output projection\n", dtn);
  if (g_gpu) {
    printf("kiln-demo: running on the GPU: %s (sm_%d%d, %d SMs); checks run on this host's CPU\n", info.name,
           info.cc_major, info.cc_minor, info.sm_count);
    CHECK(kiln_stream_create(g_ctx, &g_stream));
  } else {
    int given = 0;
    for (int o = 0; o < O_COUNT; o++) given |= set[o];
    printf("kiln-demo: running on the CPU (%d hardware threads): %s; %s\n", info.sm_count, why,
           given ? "the sizes given, CPU defaults for the others" : "the smaller CPU default sizes");
  }

  block b;
  memset(&b, 0, sizeof b);
  b.c = c;
  b.nq = c.heads * c.head_dim, b.nkv = c.kv_heads * c.head_dim, b.ctx_len = c.kv_len + c.steps;
  printf("kiln-demo: hidden %" PRId64 ", %" PRId64 " query heads, %" PRId64 " KV heads (GQA %" PRId64
         ":1), head dim %" PRId64 ", prefill %" PRId64 " tokens, %" PRId64 " decode steps, %s activations, INT4 group %" PRId64
         "\n",
         c.hidden, c.heads, c.kv_heads, c.heads / c.kv_heads, c.head_dim, c.kv_len, c.steps, dtn, c.group);

  /* Weights. wq and wk: round-to-nearest quantization of float weights, amplitude 3/sqrt(hidden)
   * so that q·k/sqrt(d) has a standard deviation near 1 (a softmax that is neither flat nor
   * one-hot); wv: a GPTQ v1 act-order checkpoint built here and imported. */
  progress pw = progress_start("quantizing and importing the weights");
  const float amp = 3.0f / sqrtf((float)c.hidden);
  qw_quantize(&b.wq, c.hidden, b.nq, c.group, 1, amp);
  progress_update(&pw, 0.4);
  qw_quantize(&b.wk, c.hidden, b.nkv, c.group, 0, amp);
  progress_update(&pw, 0.6);
  qw_gptq(&b.wv, c.hidden, b.nkv, c.group, sqrtf(3.0f / (40.0f * (float)c.hidden)));
  progress_update(&pw, 0.8);
  b.wo_host = xmalloc((size_t)(c.hidden * b.nq) * 2);
  const float wo_amp = sqrtf(3.0f / (float)b.nq);
  b.wo_f = xmalloc(sizeof(float) * (size_t)(c.hidden * b.nq));
  for (int64_t i = 0; i < c.hidden * b.nq; i++) {
    b.wo_host[i] = act_make(wo_amp * uniform());
    b.wo_f[i] = act_get(b.wo_host, i);
  }
  {
    const int64_t shape[2] = {c.hidden, b.nq};
    CHECK(kiln_tensor_empty(g_ctx, 2, shape, g_act, &b.wo_dev));
    if (g_gpu) {
      view h;
      const int64_t strides[2] = {b.nq, 1};
      CHECK(kiln_tensor_copy(g_ctx, mkview(&h, b.wo_host, HOST, g_act, 0, 2, shape, strides), &b.wo_dev->dl_tensor,
                             g_stream));
      CHECK(kiln_stream_synchronize(g_ctx, g_stream));
    } else {
      memcpy(b.wo_dev->dl_tensor.data, b.wo_host, (size_t)(c.hidden * b.nq) * 2);
    }
  }
  progress_end(&pw);
  const size_t int4_bytes = b.wq.bytes + b.wk.bytes + b.wv.bytes;
  printf("kiln-demo: weights: wq [%" PRId64 " x %" PRId64 "] INT4 symmetric and wk [%" PRId64 " x %" PRId64
         "] INT4 asymmetric (kiln_qweight_quantize),\n"
         "           wv [%" PRId64 " x %" PRId64 "] from GPTQ v1 tensors with act-order g_idx (kiln_qweight_import): "
         "%.1f MiB of INT4 buffers%s;\n"
         "           wo [%" PRId64 " x %" PRId64 "] %s, a Linear weight passed to kiln_matmul as its transposed view\n",
         c.hidden, b.nq, c.hidden, b.nkv, c.hidden, b.nkv, (double)int4_bytes / 1048576.0,
         g_gpu ? ", quantized on the CPU and copied to the GPU" : "", b.nq, c.hidden, dtn);

  /* Activations and the KV cache. */
  buf_make(&b.x, c.kv_len, c.hidden), buf_make(&b.xd, c.steps > 0 ? c.steps : 1, c.hidden);
  buf_make(&b.q, c.kv_len, b.nq), buf_make(&b.o, c.kv_len, b.nq), buf_make(&b.y, c.kv_len, c.hidden);
  buf_make(&b.kc, b.ctx_len, b.nkv), buf_make(&b.vc, b.ctx_len, b.nkv);
  buf_make(&b.qd, 1, b.nq), buf_make(&b.od, 1, b.nq), buf_make(&b.yd, c.steps > 0 ? c.steps : 1, c.hidden);
  b.kf = xmalloc(sizeof(float) * (size_t)(b.ctx_len * b.nkv));
  b.vf = xmalloc(sizeof(float) * (size_t)(b.ctx_len * b.nkv));
  buf_random(&b.x, 1.0f), buf_random(&b.xd, 1.0f);
  if (g_gpu) { /* PREFILL's workspace (the largest weight as the activations' dtype), asked of the prefill call */
    view vx, vq, vk, vv;
    CHECK(kiln_qkv_project_int4_workspace_size(g_ctx, rows_of(&vx, &b.x, 0, 0, c.kv_len), &b.wq.dev, &b.wk.dev,
                                               &b.wv.dev, rows_of(&vq, &b.q, 0, 0, c.kv_len),
                                               rows_of(&vk, &b.kc, 0, 0, c.kv_len), rows_of(&vv, &b.vc, 0, 0, c.kv_len),
                                               &b.ws_bytes));
    const int64_t n = (int64_t)b.ws_bytes;
    if (n > 0) CHECK(kiln_tensor_empty(g_ctx, 1, &n, DT_U8, &b.ws));
  }

  const double tol_qkv = c.bf16 ? 6e-3 : 2e-3, tol_attn = c.bf16 ? 1e-2 : 2e-3, tol_mm = c.bf16 ? 6e-3 : 1e-3;
  const int64_t S = c.kv_len;
  /* On the CPU each prefill stage runs in row blocks (the same results: the causal mask is
   * bottom-right aligned, so a block of queries ending at row r1 against the first r1 keys is
   * exactly those rows of the full call), which lets the progress line move. */
  const int64_t blocks = g_gpu ? 1 : (S >= 8 ? 8 : S), rows_per = (S + blocks - 1) / blocks;

  if (g_gpu) { /* untimed warm-up: one prefill and one decode step (first launches) */
    op_qkv(&b, &b.x, 0, S, &b.q, 0, 0), op_attn(&b, &b.q, 0, S, S, &b.o, 0), op_oproj(&b, &b.o, 0, S, &b.y, 0);
    if (c.steps > 0)
      op_qkv(&b, &b.xd, 0, 1, &b.qd, 0, S), op_attn(&b, &b.qd, 0, 1, S + 1, &b.od, 0),
          op_oproj(&b, &b.od, 0, 1, &b.yd, 0);
    CHECK(kiln_stream_synchronize(g_ctx, g_stream));
  }
  printf("kiln-demo: times are host wall-clock per stage, kiln_stream_synchronize before and after (so they include "
         "launch overhead)%s\n\n", g_gpu ? ", after one untimed warm-up pass" : "");

  /* ---- prefill ---- */
  buf_poison(&b.q, 0, S), buf_poison(&b.o, 0, S), buf_poison(&b.y, 0, S);
  buf_poison(&b.kc, 0, b.ctx_len), buf_poison(&b.vc, 0, b.ctx_len);
  const double pairs = (double)S * (double)(S + 1) / 2; /* (query, key) pairs under the causal mask */
  const char *names[3] = {"qkv_project_int4 (W4A16)", g_gpu ? "attention (FLASH, causal)" : "attention (causal)",
                          "o_proj kiln_matmul"};
  double secs[3];
  const double flops[3] = {2.0 * (double)S * (double)c.hidden * (double)(b.nq + 2 * b.nkv),
                           4.0 * (double)c.head_dim * (double)c.heads * pairs,
                           2.0 * (double)S * (double)b.nq * (double)c.hidden};
  progress pp = progress_start("prefill");
  for (int st = 0; st < 3; st++) {
    CHECK(kiln_stream_synchronize(g_ctx, g_stream));
    const double t0 = now_s();
    for (int64_t r0 = 0; r0 < S; r0 += rows_per) {
      const int64_t m = S - r0 < rows_per ? S - r0 : rows_per;
      if (st == 0) op_qkv(&b, &b.x, r0, m, &b.q, r0, r0);
      else if (st == 1) op_attn(&b, &b.q, r0, m, r0 + m, &b.o, r0);
      else op_oproj(&b, &b.o, r0, m, &b.y, r0);
      if (!g_gpu) progress_update(&pp, (st + (double)(r0 + m) / (double)S) / 3.0);
    }
    CHECK(kiln_stream_synchronize(g_ctx, g_stream));
    secs[st] = now_s() - t0;
  }
  progress_end(&pp);

  /* checks of the prefill on sampled rows (first, last, and evenly spread between) */
  const int64_t nrows = c.check_rows < S ? c.check_rows : S;
  int64_t *rows = xmalloc(sizeof(int64_t) * (size_t)nrows), *nks = xmalloc(sizeof(int64_t) * (size_t)nrows);
  for (int64_t i = 0; i < nrows; i++) {
    rows[i] = nrows == 1 ? S - 1 : (int64_t)((double)i * (double)(S - 1) / (double)(nrows - 1) + 0.5);
    nks[i] = rows[i] + 1;
  }
  buf_download(&b.q, 0, S), buf_download(&b.o, 0, S), buf_download(&b.y, 0, S);
  cache_fetch(&b, 0, S);
  check pk[3];
  memset(pk, 0, sizeof pk);
  pk[0].nonfinite = buf_nonfinite(&b.q, 0, S) + buf_nonfinite(&b.kc, 0, S) + buf_nonfinite(&b.vc, 0, S);
  pk[1].nonfinite = buf_nonfinite(&b.o, 0, S);
  pk[2].nonfinite = buf_nonfinite(&b.y, 0, S);
  progress pc = progress_start("checking the prefill");
  check_qkv(&b, &b.x, &b.q, nrows, rows, rows, rows, &pk[0], &pc);
  pc.what = "checking the prefill attention";
  check_attn(&b, &b.q, &b.o, nrows, rows, nks, rows, &pk[1], &pc);
  pc.what = "checking the prefill o_proj";
  check_oproj(&b, &b.o, &b.y, nrows, rows, rows, &pk[2], &pc);
  progress_end(&pc);

  const double tols[3] = {tol_qkv, tol_attn, tol_mm};
  int failures = 0;
  printf("prefill: %" PRId64 " tokens (KV cache rows 0..%" PRId64 ")%s\n", S, S - 1,
         g_gpu ? "" : ", each stage in row blocks");
  printf("  %-26s %11s  %15s  %s\n", "stage", "time", "rate", g_gpu ? "check: relative error vs float64 | vs kiln's CPU path" : "check: relative error vs float64");
  double total = 0;
  for (int st = 0; st < 3; st++) {
    char ts[32], rs[32], e1[48], e2[48];
    fmt_time(ts, sizeof ts, secs[st]);
    fmt_rate(rs, sizeof rs, flops[st], 0, secs[st]);
    const int ok = check_ok(&pk[st], tols[st]);
    failures += !ok;
    total += secs[st];
    printf("  %-26s %11s  %15s  %s %s", names[st], ts, rs, ok ? "ok  " : "FAIL", err_str(e1, sizeof e1, &pk[st].f64));
    if (g_gpu) printf(" | %s", err_str(e2, sizeof e2, &pk[st].cpu));
    printf(" (limit %.0e)", tols[st]);
    if (pk[st].nonfinite) printf(", %" PRId64 " elements not written or not finite", pk[st].nonfinite);
    printf("\n");
  }
  {
    char ts[32];
    fmt_time(ts, sizeof ts, total);
    const int64_t nf = pk[0].nonfinite + pk[1].nonfinite + pk[2].nonfinite;
    printf("  %-26s %11s  %10.0f tok/s  checked: %" PRId64 " of %" PRId64 " rows (all heads, every column); %s\n",
           "total", ts, (double)S / total, nrows, S,
           nf ? "some output elements were not written (see above)" : "every output element written and finite");
  }

  /* ---- decode ---- */
  double dsecs[3] = {0, 0, 0}, dbytes[3] = {0, 0, 0};
  check dk[3];
  memset(dk, 0, sizeof dk);
  if (c.steps > 0) {
    printf("\ndecode: %" PRId64 " steps, one new token each against the growing KV cache (keys %" PRId64 "..%" PRId64
           "); every output element checked\n", c.steps, S + 1, S + c.steps);
    printf("  %-5s %-6s  %-27s  %-27s  %-27s  %s\n", "step", "keys", "qkv_project_int4", "attention", "o_proj",
           "check (worst relative error)");
  }
  const double wo_bytes = 2.0 * (double)b.nq * (double)c.hidden;
  for (int64_t t = 0; t < c.steps; t++) {
    const int64_t pos = S + t, nk = pos + 1;
    buf_poison(&b.qd, 0, 1), buf_poison(&b.od, 0, 1), buf_poison(&b.yd, t, 1);
    buf_poison(&b.kc, pos, 1), buf_poison(&b.vc, pos, 1);
    double ds[3];
    const double bytes[3] = {(double)int4_bytes + 2.0 * (double)(c.hidden + b.nq + 2 * b.nkv),
                             2.0 * (2.0 * (double)nk * (double)b.nkv + 2.0 * (double)b.nq),
                             wo_bytes + 2.0 * (double)(b.nq + c.hidden)};
    for (int st = 0; st < 3; st++) {
      CHECK(kiln_stream_synchronize(g_ctx, g_stream));
      const double t0 = now_s();
      if (st == 0) op_qkv(&b, &b.xd, t, 1, &b.qd, 0, pos);
      else if (st == 1) op_attn(&b, &b.qd, 0, 1, nk, &b.od, 0);
      else op_oproj(&b, &b.od, 0, 1, &b.yd, t);
      CHECK(kiln_stream_synchronize(g_ctx, g_stream));
      ds[st] = now_s() - t0;
      dsecs[st] += ds[st], dbytes[st] += bytes[st];
    }
    buf_download(&b.qd, 0, 1), buf_download(&b.od, 0, 1), buf_download(&b.yd, t, 1);
    cache_fetch(&b, pos, 1);
    check k[3];
    memset(k, 0, sizeof k);
    const int64_t zero = 0;
    k[0].nonfinite = buf_nonfinite(&b.qd, 0, 1) + buf_nonfinite(&b.kc, pos, 1) + buf_nonfinite(&b.vc, pos, 1);
    k[1].nonfinite = buf_nonfinite(&b.od, 0, 1);
    k[2].nonfinite = buf_nonfinite(&b.yd, t, 1);
    check_qkv(&b, &b.xd, &b.qd, 1, &t, &zero, &pos, &k[0], NULL);
    check_attn(&b, &b.qd, &b.od, 1, &zero, &nk, &zero, &k[1], NULL);
    check_oproj(&b, &b.od, &b.yd, 1, &zero, &t, &k[2], NULL);
    int ok = 1;
    double worst = 0;
    for (int st = 0; st < 3; st++) {
      const int sok = check_ok(&k[st], tols[st]);
      ok &= sok, failures += !sok;
      worst = fmax(worst, err_rel(&k[st].f64));
      if (g_gpu) worst = fmax(worst, err_rel(&k[st].cpu));
      dk[st].nonfinite += k[st].nonfinite;
    }
    char cols[3][72];
    for (int st = 0; st < 3; st++) {
      char ts[32], rs[32];
      fmt_time(ts, sizeof ts, ds[st]);
      fmt_rate(rs, sizeof rs, 0, bytes[st], ds[st]);
      snprintf(cols[st], sizeof cols[st], "%s %s", ts, rs);
    }
    printf("  %-5" PRId64 " %-6" PRId64 "  %-27s  %-27s  %-27s  %s %.1e\n", t + 1, nk, cols[0], cols[1], cols[2],
           ok ? "ok  " : "FAIL", worst);
  }
  if (c.steps > 0) {
    char cols[3][72];
    for (int st = 0; st < 3; st++) {
      char ts[32], rs[32];
      fmt_time(ts, sizeof ts, dsecs[st] / (double)c.steps);
      fmt_rate(rs, sizeof rs, 0, dbytes[st], dsecs[st]);
      snprintf(cols[st], sizeof cols[st], "%s %s", ts, rs);
    }
    printf("  %-12s  %-27s  %-27s  %-27s  %.3f ms per token\n", "mean", cols[0], cols[1], cols[2],
           1e3 * (dsecs[0] + dsecs[1] + dsecs[2]) / (double)c.steps);
    printf("  (GB/s: bytes the stage must read and write: the INT4 weight buffers, the KV rows attended, wo)\n");
  }

  printf("\nkiln-demo: %s on the %s: %s\n", failures ? "FAILED" : "PASS", g_gpu ? "GPU" : "CPU",
         failures ? "a stage does not match its reference (see FAIL above)"
                  : g_gpu ? "every stage matches float64 and kiln's CPU path"
                          : "every stage matches float64 (the ops ran on kiln's CPU path)");

  free(rows), free(nks), free(b.kf), free(b.vf), free(b.wo_host), free(b.wo_f);
  kiln_tensor_free(b.wo_dev);
  kiln_tensor_free(b.ws);
  qw_free(&b.wq), qw_free(&b.wk), qw_free(&b.wv);
  buf *bufs[] = {&b.x, &b.xd, &b.q, &b.o, &b.y, &b.kc, &b.vc, &b.qd, &b.od, &b.yd};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) buf_free(bufs[i]);
  if (g_gpu) {
    CHECK(kiln_stream_destroy(g_ctx, g_stream));
    kiln_context_destroy(g_ctx);
  }
  kiln_context_destroy(g_cpu);
  return failures ? 1 : 0;
}
