/*
 * test_gpu_soak.c — the GPU counterpart of test_concurrency_host.c (reliability issue,
 * "Concurrency"): threads, each on its own stream, share one context (or two contexts of one
 * device) and run mixed ops round after round — f16 matmul and its backward, causal GQA FLASH
 * attention with LSE and its backward, int8 matmul, int4 matmul, fused int4 QKV — with a failing
 * call after every op. Every round's outputs must be bit-identical to a serial run of the same
 * inputs, and every thread's kiln_last_error() must stay its own message. A third test checks
 * that the device's free memory is back where it was once contexts, streams and tensors of such
 * runs are gone.
 *
 * Short by default (a few seconds). KILN_SOAK_SECONDS=N makes the two concurrency tests loop for
 * N seconds each (checking every round). KILN_TEST_SANITIZER=1 (set under compute-sanitizer)
 * uses tiny shapes and 2 rounds. Exits 77 (CTest: skipped) without a usable GPU.
 */
#include <inttypes.h>
#include <pthread.h>
#include <time.h>

#include "test_util.h"
#include "cuda_driver.h" /* kiln_cuda(): the driver table, for cuMemGetInfo in the leak test */

static kiln_context *g_ctx; /* made in main(): keeps device 0's primary context alive between tests */
static kiln_context *g_cpu; /* quantizes the int4 weights (kiln_qweight_quantize is CPU-only) */

static const DLDataType U8 = {kDLUInt, 8, 1}, I8 = {kDLInt, 8, 1};

/* ---------------------------------------------------------------------------------------- */
/* Shapes and modes                                                                          */
/* ---------------------------------------------------------------------------------------- */
typedef struct sizes {
  int64_t m, k, n;                    /* kiln_matmul and kiln_matmul_int8: A [m, k], B [k, n] */
  int64_t hq, hkv, s, d;              /* kiln_attention: B = 1, Sq = Sk = s */
  int64_t m4, k4, n4, nq, nkv, group; /* int4: x [m4, k4], W [k4, n4]; QKV widths nq, nkv, nkv */
} sizes;
static const sizes NORMAL = {256, 384, 192, 4, 2, 256, 64, 16, 384, 192, 256, 128, 128};
/* Under compute-sanitizer (10-100x slower): ragged edges kept, everything small. */
static const sizes TINY = {40, 64, 24, 2, 1, 40, 64, 3, 128, 64, 64, 32, 64};

enum { THREADS = 8, THREADS_TWO_CONTEXTS = 4, OPS = 5, FAIL_KINDS = 3 };
static const sizes *g_z = &NORMAL;
static int g_rounds = 30;     /* rounds per thread at least */
static double g_seconds = 0;  /* KILN_SOAK_SECONDS: keep going this long */
static int g_sanitizer;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---------------------------------------------------------------------------------------- */
/* Device buffers with a host side                                                           */
/* ---------------------------------------------------------------------------------------- */
typedef struct tbuf {
  DLManagedTensorVersioned *dev; /* the storage: compact, from kiln_tensor_empty */
  size_t bytes;
  int64_t shape[4], strides[4];
  DLTensor view; /* what the ops see: the storage, or for some operands its transposed view */
  void *host;    /* inputs: the uploaded data; outputs: the latest download */
  void *ref;     /* outputs: the serial run's bits */
} tbuf;

/* transposed (2-D only): the storage is [cols, rows] and the view its [rows, cols] transpose,
 * the way a PyTorch Linear weight W[N, K] is passed as W.T. */
static void tbuf_init(kiln_context *ctx, tbuf *b, DLDataType dt, int ndim, const int64_t *shape, int transposed) {
  memset(b, 0, sizeof *b);
  int64_t store[4], n = 1;
  for (int i = 0; i < ndim; i++) store[i] = shape[i], n *= shape[i];
  if (transposed) store[0] = shape[1], store[1] = shape[0];
  assert_kiln_ok(kiln_tensor_empty(ctx, ndim, store, dt, &b->dev));
  b->bytes = (size_t)n * (dt.bits / 8);
  int64_t s = 1;
  for (int i = ndim - 1; i >= 0; i--) b->shape[i] = shape[i], b->strides[i] = s, s *= shape[i];
  if (transposed) b->strides[0] = 1, b->strides[1] = shape[0];
  b->view = (DLTensor){b->dev->dl_tensor.data, b->dev->dl_tensor.device, ndim, dt, b->shape, b->strides, 0};
  b->host = malloc(b->bytes);
  assert_non_null(b->host);
}
static void tbuf_free(tbuf *b) {
  if (b->dev) kiln_tensor_free(b->dev);
  free(b->host);
  free(b->ref);
  memset(b, 0, sizeof *b);
}
/* Whole-storage copies, enqueued on s (callable from any thread: no cmocka asserts). */
static kiln_status tbuf_up(kiln_context *ctx, tbuf *b, const void *src, CUstream s) {
  DLTensor *d = &b->dev->dl_tensor;
  test_tensor h = test_host_tensor((void *)src, d->dtype, d->ndim, d->shape);
  return kiln_tensor_copy(ctx, test_dl(&h), d, s);
}
static kiln_status tbuf_down(kiln_context *ctx, tbuf *b, CUstream s) {
  DLTensor *d = &b->dev->dl_tensor;
  test_tensor h = test_host_tensor(b->host, d->dtype, d->ndim, d->shape);
  return kiln_tensor_copy(ctx, d, test_dl(&h), s);
}

/* ---------------------------------------------------------------------------------------- */
/* One thread's job: its inputs (seeded), outputs, workspaces and int4 weights              */
/* ---------------------------------------------------------------------------------------- */
enum { IN_A, IN_B, IN_DC, IN_Q, IN_K, IN_V, IN_DO, IN_A8, IN_B8, IN_X4, IN_W0, N_IN = IN_W0 + 12 };
enum { OUT_C, OUT_DA, OUT_DB, OUT_O, OUT_LSE, OUT_DQ, OUT_DK, OUT_DV, OUT_C8, OUT_Y4, OUT_Q4, OUT_K4, OUT_V4, N_OUT };
static const char *const OUT_NAMES[N_OUT] = {"matmul C", "matmul dA", "matmul dB", "attention O", "attention LSE",
                                             "attention dQ", "attention dK", "attention dV", "int8 C", "int4 y",
                                             "qkv q", "qkv k", "qkv v"};
static const char *const OP_NAMES[OPS] = {"kiln_matmul + backward", "kiln_attention + backward", "kiln_matmul_int8",
                                          "kiln_matmul_int4", "kiln_qkv_project_int4"};

typedef struct job {
  kiln_context *ctx;
  tbuf in[N_IN], out[N_OUT], ws[2]; /* ws: matmul and attention backward workspaces (may be empty) */
  size_t ws_bytes[2];
  kiln_qweight w[4]; /* W, Wq, Wk, Wv, pointing at in[IN_W0 ..] on the device */
  void *poison;      /* 0xFF bytes: a NaN in every output dtype */
} job;

static kiln_attention_opts attention_opts(void) {
  kiln_attention_opts o = kiln_attention_opts_default();
  o.algo = KILN_ATTENTION_FLASH;
  o.causal = 1;
  o.deterministic = 1;
  return o;
}
static void *ws_ptr(const job *j, int i) { return j->ws_bytes[i] ? j->ws[i].view.data : NULL; }

/* Enqueues op `which` of job j on s. */
static kiln_status run_op(job *j, int which, CUstream s) {
  kiln_context *ctx = j->ctx;
  tbuf *in = j->in, *out = j->out;
  kiln_status st;
  switch (which) {
  case 0:
    if ((st = kiln_matmul(ctx, &in[IN_A].view, &in[IN_B].view, &out[OUT_C].view, NULL, s))) return st;
    return kiln_matmul_backward(ctx, &in[IN_A].view, &in[IN_B].view, &in[IN_DC].view, &out[OUT_DA].view,
                                &out[OUT_DB].view, ws_ptr(j, 0), j->ws_bytes[0], NULL, s);
  case 1: {
    const kiln_attention_opts o = attention_opts();
    if ((st = kiln_attention(ctx, &in[IN_Q].view, &in[IN_K].view, &in[IN_V].view, &out[OUT_O].view,
                             &out[OUT_LSE].view, &o, s)))
      return st;
    return kiln_attention_backward(ctx, &in[IN_Q].view, &in[IN_K].view, &in[IN_V].view, &out[OUT_O].view,
                                   &out[OUT_LSE].view, &in[IN_DO].view, &out[OUT_DQ].view, &out[OUT_DK].view,
                                   &out[OUT_DV].view, ws_ptr(j, 1), j->ws_bytes[1], &o, s);
  }
  case 2: {
    kiln_matmul_int8_opts o = kiln_matmul_int8_opts_default();
    o.scale = 1.0f / 4096;
    return kiln_matmul_int8(ctx, &in[IN_A8].view, &in[IN_B8].view, &out[OUT_C8].view, &o, s);
  }
  case 3: return kiln_matmul_int4(ctx, &in[IN_X4].view, &j->w[0], &out[OUT_Y4].view, NULL, s);
  default:
    return kiln_qkv_project_int4(ctx, &in[IN_X4].view, &j->w[1], &j->w[2], &j->w[3], &out[OUT_Q4].view,
                                 &out[OUT_K4].view, &out[OUT_V4].view, NULL, s);
  }
}

/* A call that must fail: an operand whose K is off by an amount only this thread (uid) uses.
 * Returns 1 when it failed with INVALID_ARGUMENT and a message of the right op naming that K;
 * mine receives the message either way. */
static int failing_call(job *j, int kind, int uid, CUstream s, char *mine, size_t cap) {
  const sizes *z = g_z;
  const int64_t k_bad = kind == 2 ? z->k4 + 8 * (uid + 1) : z->k + 1 + uid;
  int64_t shape[2] = {kind == 2 ? z->m4 : z->m, k_bad};
  const int src = kind == 0 ? IN_A : kind == 1 ? IN_A8 : IN_X4;
  DLTensor bad = {j->in[src].view.data, {kDLCUDA, 0}, 2, kind == 1 ? I8 : TEST_F16, shape, NULL, 0};
  const char *op;
  kiln_status st;
  if (kind == 0) {
    op = "kiln_matmul:";
    st = kiln_matmul(j->ctx, &bad, &j->in[IN_B].view, &j->out[OUT_C].view, NULL, s);
  } else if (kind == 1) {
    op = "kiln_matmul_int8:";
    st = kiln_matmul_int8(j->ctx, &bad, &j->in[IN_B8].view, &j->out[OUT_C8].view, NULL, s);
  } else {
    op = "kiln_matmul_int4:";
    st = kiln_matmul_int4(j->ctx, &bad, &j->w[0], &j->out[OUT_Y4].view, NULL, s);
  }
  const char *msg = kiln_last_error();
  snprintf(mine, cap, "%s", msg);
  char want[64];
  snprintf(want, sizeof want, "%s has K = %" PRId64 " ", kind == 2 ? "x" : "a", k_bad);
  return st == KILN_ERROR_INVALID_ARGUMENT && !strncmp(msg, op, strlen(op)) && strstr(msg, want);
}

/* Weight idx of j: a random f32 [k, n] quantized on the CPU (group g, sym or asym), uploaded. */
static void weight_setup(job *j, int idx, int64_t k, int64_t n, int64_t g, int sym) {
  size_t bytes[4];
  assert_kiln_ok(kiln_qweight_bytes(k, n, g, &bytes[0], &bytes[1], &bytes[2], &bytes[3]));
  tbuf *b = &j->in[IN_W0 + 3 * idx];
  for (int i = 0; i < 3; i++) tbuf_init(j->ctx, &b[i], U8, 1, (const int64_t[]){(int64_t)bytes[i]}, 0);
  kiln_qweight h = {.k = k, .n = n, .group = g, .codes = b[0].host, .scales = b[1].host, .zeros = b[2].host,
                    .perm = NULL, .device = {kDLCPU, 0}};
  float *w = malloc(sizeof(float) * (size_t)(k * n));
  assert_non_null(w);
  test_fill(w, TEST_F32, k * n);
  test_tensor tw = test_host_tensor(w, TEST_F32, 2, (const int64_t[]){k, n});
  assert_kiln_ok(kiln_qweight_quantize(g_cpu, test_dl(&tw), sym, &h, NULL));
  free(w);
  j->w[idx] = h;
  j->w[idx].codes = b[0].view.data, j->w[idx].scales = b[1].view.data, j->w[idx].zeros = b[2].view.data;
  j->w[idx].device = (DLDevice){kDLCUDA, 0};
}

/* Inputs from seed, uploaded; outputs, workspaces; then the serial reference: every op once,
 * in order, on the legacy default stream, into outputs poisoned first. Main thread only (cmocka
 * asserts, and test_fill's generator is global). */
static void job_setup(job *j, kiln_context *ctx, uint64_t seed) {
  const sizes *z = g_z;
  memset(j, 0, sizeof *j);
  j->ctx = ctx;
  test_seed(seed);
  const int64_t q_shape[4] = {1, z->hq, z->s, z->d}, kv_shape[4] = {1, z->hkv, z->s, z->d},
                lse_shape[3] = {1, z->hq, z->s};
  tbuf *in = j->in, *out = j->out;
  tbuf_init(ctx, &in[IN_A], TEST_F16, 2, (const int64_t[]){z->m, z->k}, 0);
  tbuf_init(ctx, &in[IN_B], TEST_F16, 2, (const int64_t[]){z->k, z->n}, 0);
  tbuf_init(ctx, &in[IN_DC], TEST_F16, 2, (const int64_t[]){z->m, z->n}, 0);
  tbuf_init(ctx, &in[IN_Q], TEST_F16, 4, q_shape, 0);
  tbuf_init(ctx, &in[IN_K], TEST_F16, 4, kv_shape, 0);
  tbuf_init(ctx, &in[IN_V], TEST_F16, 4, kv_shape, 0);
  tbuf_init(ctx, &in[IN_DO], TEST_F16, 4, q_shape, 0);
  tbuf_init(ctx, &in[IN_A8], I8, 2, (const int64_t[]){z->m, z->k}, 0);
  tbuf_init(ctx, &in[IN_B8], I8, 2, (const int64_t[]){z->k, z->n}, 1); /* k-major: the cp.async path */
  tbuf_init(ctx, &in[IN_X4], TEST_F16, 2, (const int64_t[]){z->m4, z->k4}, 0);
  for (int i = IN_A; i <= IN_X4; i++) {
    if (i == IN_A8 || i == IN_B8)
      for (size_t e = 0; e < in[i].bytes; e++) ((int8_t *)in[i].host)[e] = (int8_t)(test_uniform() * 127.0f);
    else
      test_fill(in[i].host, in[i].view.dtype, (int64_t)(in[i].bytes / 2));
  }
  /* the QKV weights in GQA widths, each its own group size and symmetry */
  weight_setup(j, 0, z->k4, z->n4, z->group, 1);
  weight_setup(j, 1, z->k4, z->nq, z->group, 0);
  weight_setup(j, 2, z->k4, z->nkv, z->group / 2, 1);
  weight_setup(j, 3, z->k4, z->nkv, z->group, 0);
  for (int i = 0; i < N_IN; i++) assert_kiln_ok(tbuf_up(ctx, &in[i], in[i].host, NULL));

  tbuf_init(ctx, &out[OUT_C], TEST_F32, 2, (const int64_t[]){z->m, z->n}, 0);
  tbuf_init(ctx, &out[OUT_DA], TEST_F16, 2, (const int64_t[]){z->m, z->k}, 0);
  tbuf_init(ctx, &out[OUT_DB], TEST_F32, 2, (const int64_t[]){z->k, z->n}, 0);
  tbuf_init(ctx, &out[OUT_O], TEST_F16, 4, q_shape, 0);
  tbuf_init(ctx, &out[OUT_LSE], TEST_F32, 3, lse_shape, 0);
  tbuf_init(ctx, &out[OUT_DQ], TEST_F32, 4, q_shape, 0);
  tbuf_init(ctx, &out[OUT_DK], TEST_F16, 4, kv_shape, 0);
  tbuf_init(ctx, &out[OUT_DV], TEST_F16, 4, kv_shape, 0);
  tbuf_init(ctx, &out[OUT_C8], TEST_F32, 2, (const int64_t[]){z->m, z->n}, 0);
  tbuf_init(ctx, &out[OUT_Y4], TEST_F32, 2, (const int64_t[]){z->m4, z->n4}, 0);
  tbuf_init(ctx, &out[OUT_Q4], TEST_F16, 2, (const int64_t[]){z->m4, z->nq}, 0);
  tbuf_init(ctx, &out[OUT_K4], TEST_F16, 2, (const int64_t[]){z->m4, z->nkv}, 0);
  tbuf_init(ctx, &out[OUT_V4], TEST_F16, 2, (const int64_t[]){z->m4, z->nkv}, 0);
  size_t most = 0;
  for (int i = 0; i < N_OUT; i++) {
    out[i].ref = malloc(out[i].bytes);
    assert_non_null(out[i].ref);
    if (out[i].bytes > most) most = out[i].bytes;
  }
  j->poison = malloc(most);
  assert_non_null(j->poison);
  memset(j->poison, 0xFF, most);

  const kiln_attention_opts o = attention_opts();
  assert_kiln_ok(kiln_matmul_backward_workspace_size(ctx, &in[IN_A].view, &in[IN_B].view, &in[IN_DC].view,
                                                     &out[OUT_DA].view, &out[OUT_DB].view, &j->ws_bytes[0]));
  assert_kiln_ok(kiln_attention_backward_workspace_size(ctx, &in[IN_Q].view, &in[IN_K].view, &in[IN_V].view,
                                                        &out[OUT_O].view, &out[OUT_LSE].view, &in[IN_DO].view,
                                                        &out[OUT_DQ].view, &out[OUT_DK].view, &out[OUT_DV].view, &o,
                                                        &j->ws_bytes[1]));
  for (int i = 0; i < 2; i++)
    if (j->ws_bytes[i]) tbuf_init(ctx, &j->ws[i], U8, 1, (const int64_t[]){(int64_t)j->ws_bytes[i]}, 0);

  for (int i = 0; i < N_OUT; i++) assert_kiln_ok(tbuf_up(ctx, &out[i], j->poison, NULL));
  for (int op = 0; op < OPS; op++) assert_kiln_ok(run_op(j, op, NULL));
  for (int i = 0; i < N_OUT; i++) assert_kiln_ok(tbuf_down(ctx, &out[i], NULL));
  assert_kiln_ok(kiln_stream_synchronize(ctx, NULL));
  for (int i = 0; i < N_OUT; i++) {
    memcpy(out[i].ref, out[i].host, out[i].bytes);
    /* every element written (no poison left): a reference that is all NaN would prove nothing */
    const int wide = out[i].view.dtype.bits == 32;
    const size_t n = out[i].bytes / (wide ? 4 : 2);
    for (size_t e = 0; e < n; e++)
      if (wide ? ((const uint32_t *)out[i].ref)[e] == 0xFFFFFFFFu : ((const uint16_t *)out[i].ref)[e] == 0xFFFF)
        fail_msg("serial run: %s element %zu was not written", OUT_NAMES[i], e);
  }
}

static void job_free(job *j) {
  for (int i = 0; i < N_IN; i++) tbuf_free(&j->in[i]);
  for (int i = 0; i < N_OUT; i++) tbuf_free(&j->out[i]);
  for (int i = 0; i < 2; i++) tbuf_free(&j->ws[i]);
  free(j->poison);
  j->poison = NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* The threads                                                                               */
/* ---------------------------------------------------------------------------------------- */
/* One thread: reports through the struct (cmocka's assertions are for the main thread). */
typedef struct worker {
  job *j;
  int uid; /* distinct among the run's threads: the K of its failing calls, its op order */
  int min_rounds;
  double seconds;
  pthread_barrier_t *start;
  int rounds, mismatches, wrong_messages;
  kiln_status status;
  char message[640]; /* the first failure, mismatch or wrong message */
} worker;

static void note(worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(worker *w, const char *fmt, ...) {
  if (w->message[0]) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->message, sizeof w->message, fmt, ap);
  va_end(ap);
}

static void *worker_main(void *arg) {
  worker *w = arg;
  job *j = w->j;
  kiln_context *ctx = j->ctx;
  CUstream s = NULL;
  char mine[512] = "", msg[512];
  int have_mine = 0;
  kiln_status st = KILN_OK;
  pthread_barrier_wait(w->start); /* streams made at the same time, too */
  if ((st = kiln_stream_create(ctx, &s))) {
    note(w, "kiln_stream_create: %s", kiln_last_error());
    goto done;
  }
  const double t0 = now_s();
  for (int r = 0; r < w->min_rounds || now_s() - t0 < w->seconds; r++) {
    for (int i = 0; i < N_OUT; i++)
      if ((st = tbuf_up(ctx, &j->out[i], j->poison, s))) {
        note(w, "round %d: poisoning %s: %s", r, OUT_NAMES[i], kiln_last_error());
        goto done;
      }
    for (int i = 0; i < OPS; i++) {
      const int which = (w->uid + r + i) % OPS; /* threads run different ops at the same moment */
      if ((st = run_op(j, which, s))) {
        note(w, "round %d: %s -> %s: %s", r, OP_NAMES[which], kiln_status_string(st), kiln_last_error());
        goto done;
      }
      /* the successful op must not have cleared this thread's message, nor another thread's
       * failure replaced it */
      if (have_mine && strcmp(kiln_last_error(), mine)) {
        w->wrong_messages++;
        note(w, "round %d: after %s, kiln_last_error() is \"%s\", expected this thread's \"%s\"", r, OP_NAMES[which],
             kiln_last_error(), mine);
      }
      if (!failing_call(j, (r + i) % FAIL_KINDS, w->uid, s, msg, sizeof msg)) {
        w->wrong_messages++;
        note(w, "round %d: failing call %d of thread %d: message \"%s\"", r, (r + i) % FAIL_KINDS, w->uid, msg);
      }
      memcpy(mine, msg, sizeof mine);
      have_mine = 1;
    }
    for (int i = 0; i < N_OUT; i++)
      if ((st = tbuf_down(ctx, &j->out[i], s))) {
        note(w, "round %d: downloading %s: %s", r, OUT_NAMES[i], kiln_last_error());
        goto done;
      }
    if ((st = kiln_stream_synchronize(ctx, s))) {
      note(w, "round %d: kiln_stream_synchronize: %s", r, kiln_last_error());
      goto done;
    }
    for (int i = 0; i < N_OUT; i++) {
      if (!memcmp(j->out[i].host, j->out[i].ref, j->out[i].bytes)) continue;
      size_t first = 0, diff = 0;
      for (size_t b = j->out[i].bytes; b-- > 0;)
        if (((const unsigned char *)j->out[i].host)[b] != ((const unsigned char *)j->out[i].ref)[b]) first = b, diff++;
      w->mismatches++;
      note(w, "round %d: %s differs from the serial run in %zu of %zu bytes (first at byte %zu)", r, OUT_NAMES[i],
           diff, j->out[i].bytes, first);
    }
    w->rounds = r + 1;
  }
done:
  w->status = st;
  if (s) {
    kiln_stream_synchronize(ctx, s);
    kiln_stream_destroy(ctx, s);
  }
  return NULL;
}

/* nthreads threads over nctx contexts (thread i on ctxs[i % nctx]), each with its own job, for
 * at least `rounds` rounds and `seconds` seconds. same_inputs: threads with the same i / nctx
 * (one on each context) share a seed, so the contexts' serial runs must agree bit for bit too. */
static void soak(kiln_context **ctxs, int nctx, int nthreads, int rounds, double seconds, int same_inputs) {
  job *jobs = calloc((size_t)nthreads, sizeof *jobs);
  worker *w = calloc((size_t)nthreads, sizeof *w);
  pthread_t *tid = calloc((size_t)nthreads, sizeof *tid);
  assert_non_null(jobs), assert_non_null(w), assert_non_null(tid);
  int ref_differs = 0;
  for (int i = 0; i < nthreads; i++) {
    job_setup(&jobs[i], ctxs[i % nctx], 1000 + (uint64_t)(same_inputs ? i / nctx : i));
    if (same_inputs && i % nctx) /* thread i - i % nctx had the same seed on context 0 */
      for (int o = 0; o < N_OUT; o++)
        if (memcmp(jobs[i].out[o].ref, jobs[i - i % nctx].out[o].ref, jobs[i].out[o].bytes)) {
          print_message("  serial runs differ between contexts: thread %d's %s vs thread %d's\n", i, OUT_NAMES[o],
                        i - i % nctx);
          ref_differs++;
        }
  }
  pthread_barrier_t start;
  assert_int_equal(pthread_barrier_init(&start, NULL, (unsigned)nthreads), 0);
  const double t0 = now_s();
  for (int i = 0; i < nthreads; i++) {
    w[i] = (worker){.j = &jobs[i], .uid = i, .min_rounds = rounds, .seconds = seconds, .start = &start};
    assert_int_equal(pthread_create(&tid[i], NULL, worker_main, &w[i]), 0);
  }
  int mismatches = 0, wrong = 0, failed = 0, rmin = 1 << 30, rmax = 0;
  for (int i = 0; i < nthreads; i++) {
    pthread_join(tid[i], NULL);
    mismatches += w[i].mismatches, wrong += w[i].wrong_messages, failed += w[i].status != KILN_OK;
    rmin = w[i].rounds < rmin ? w[i].rounds : rmin;
    rmax = w[i].rounds > rmax ? w[i].rounds : rmax;
    if (w[i].message[0]) print_message("  thread %d (context %d): %s\n", i, i % nctx, w[i].message);
  }
  const double elapsed = now_s() - t0;
  pthread_barrier_destroy(&start);
  print_message("  %d threads on %d context%s x %d..%d rounds x %d ops in %.1f s: %d mismatches, %d wrong error "
                "messages, %d threads stopped by an error\n",
                nthreads, nctx, nctx == 1 ? "" : "s", rmin, rmax, OPS, elapsed, mismatches, wrong, failed);
  for (int i = 0; i < nthreads; i++) job_free(&jobs[i]);
  free(jobs), free(w), free(tid);
  assert_int_equal(ref_differs, 0);
  assert_int_equal(failed, 0);
  assert_int_equal(mismatches, 0);
  assert_int_equal(wrong, 0);
  assert_true(rmin >= rounds);
}

/* (a) and (b) on fresh contexts, destroyed afterwards. */
static void one_context_run(int rounds, double seconds) {
  kiln_context *ctx = NULL;
  assert_kiln_ok(kiln_context_create(kDLCUDA, 0, &ctx));
  soak(&ctx, 1, THREADS, rounds, seconds, 0);
  kiln_context_destroy(ctx);
}
static void two_contexts_run(int rounds, double seconds) {
  kiln_context *ctxs[2] = {NULL, NULL};
  assert_kiln_ok(kiln_context_create(kDLCUDA, 0, &ctxs[0]));
  assert_kiln_ok(kiln_context_create(kDLCUDA, 0, &ctxs[1]));
  assert_ptr_not_equal(ctxs[0], ctxs[1]);
  soak(ctxs, 2, THREADS_TWO_CONTEXTS, rounds, seconds, 1);
  kiln_context_destroy(ctxs[1]);
  kiln_context_destroy(ctxs[0]);
}

/* Device 0's free memory, read in its primary context (the one kiln's contexts retain), after
 * the device is idle. */
static size_t device_free_bytes(void) {
  kiln_status st;
  const kiln_cuda_api *cu = kiln_cuda("test_gpu_soak", &st);
  if (!cu) fail_msg("kiln_cuda: %s", kiln_last_error());
  CUdevice dev = 0;
  CUcontext primary = NULL, popped = NULL;
  assert_int_equal(cu->cuDeviceGet(&dev, 0), CUDA_SUCCESS);
  assert_int_equal(cu->cuDevicePrimaryCtxRetain(&primary, dev), CUDA_SUCCESS);
  assert_int_equal(cu->cuCtxPushCurrent(primary), CUDA_SUCCESS);
  size_t free_b = 0, total_b = 0;
  CUresult r = cu->cuCtxSynchronize();
  if (r == CUDA_SUCCESS) r = cu->cuMemGetInfo(&free_b, &total_b);
  cu->cuCtxPopCurrent(&popped);
  cu->cuDevicePrimaryCtxRelease(dev);
  assert_int_equal(r, CUDA_SUCCESS);
  return free_b;
}

/* ---------------------------------------------------------------------------------------- */
/* Tests                                                                                     */
/* ---------------------------------------------------------------------------------------- */
/* (a) 8 threads, one context, a stream each. */
static void threads_streams_mixed_ops(void **state) {
  (void)state;
  one_context_run(g_rounds, g_seconds);
}

/* (b) two contexts of device 0, two threads on each (own streams): each context's results are
 * the serial run's, and the two contexts' serial runs agree. */
static void two_contexts_one_device(void **state) {
  (void)state;
  two_contexts_run(g_rounds, g_seconds);
}

/* (c) Contexts, streams and tensors of (a)- and (b)-style runs leave nothing on the device. The
 * first cycle is a warm-up: the driver grows some reservations lazily and keeps them (e.g. the
 * local memory of kernels with stacks), so the baseline is taken after it. Other processes on
 * the GPU would disturb the count: run it alone (CTest runs tests one at a time by default). */
static void no_device_memory_leak(void **state) {
  (void)state;
  const int rounds = g_sanitizer ? 1 : 3, cycles = g_sanitizer ? 1 : 3;
  const size_t tolerance = 2u << 20;
  one_context_run(rounds, 0);
  two_contexts_run(rounds, 0);
  const size_t before = device_free_bytes();
  for (int c = 0; c < cycles; c++) {
    one_context_run(rounds, 0);
    two_contexts_run(rounds, 0);
    print_message("  after cycle %d: free %.2f MiB (baseline %.2f MiB)\n", c + 1,
                  (double)device_free_bytes() / (1 << 20), (double)before / (1 << 20));
  }
  const size_t after = device_free_bytes();
  const double lost = ((double)before - (double)after) / (1 << 20);
  print_message("  device free memory: %zu bytes before, %zu after %d cycles (%.2f MiB %s)\n", before, after, cycles,
                lost >= 0 ? lost : -lost, lost >= 0 ? "fewer" : "more");
  if (g_sanitizer) {
    /* compute-sanitizer allocates device memory of its own; memcheck's --leak-check covers leaks there */
    print_message("  (not compared under the sanitizer)\n");
    return;
  }
  if (after + tolerance < before)
    fail_msg("device free memory dropped by %.2f MiB over %d cycles of contexts, streams and tensors (tolerance "
             "%.0f MiB): something is not released",
             lost, cycles, (double)tolerance / (1 << 20));
}

int main(int argc, char **argv) {
  test_apply_filter(argc, argv);
  g_ctx = test_gpu_context_or_skip(); /* exits 77 (skipped) without a usable GPU */
  if (kiln_context_create(kDLCPU, 0, &g_cpu) != KILN_OK) {
    printf("FAIL: the CPU context: %s\n", kiln_last_error());
    return 1;
  }
  const char *san = getenv("KILN_TEST_SANITIZER"), *secs = getenv("KILN_SOAK_SECONDS");
  g_sanitizer = san && *san && strcmp(san, "0") != 0;
  if (g_sanitizer) {
    g_z = &TINY, g_rounds = 2;
    if (secs) printf("KILN_SOAK_SECONDS ignored under KILN_TEST_SANITIZER\n");
  } else if (secs) {
    g_seconds = strtod(secs, NULL);
    if (!(g_seconds >= 0)) g_seconds = 0;
  }
  printf("soak: %s shapes, at least %d rounds%s", g_sanitizer ? "tiny (sanitizer)" : "normal", g_rounds,
         g_seconds > 0 ? "" : "\n");
  if (g_seconds > 0) printf(" and %.0f s per concurrency test\n", g_seconds);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(threads_streams_mixed_ops),
      cmocka_unit_test(two_contexts_one_device),
      cmocka_unit_test(no_device_memory_leak),
  };
  int failed = cmocka_run_group_tests_name("gpu_soak", tests, NULL, NULL);
  kiln_context_destroy(g_cpu);
  kiln_context_destroy(g_ctx);
  return failed;
}
