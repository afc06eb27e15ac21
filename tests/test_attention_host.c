/*
 * test_attention_host.c — kiln_attention and kiln_attention_backward on the CPU context.
 *
 * A float64 oracle (forward and backward) written here is first checked against central finite
 * differences of its own forward; the library's CPU path is then compared with it on the same
 * f16/bf16-rounded inputs: ragged and unequal sequence lengths, causal and not, GQA and MQA,
 * head dimensions up to 256 (Dv != D too), every input dtype with same-dtype and f32 outputs,
 * strided [B, S, H, D] buffers passed as their [B, H, S, D] views, a non-unit stride along D,
 * inputs broadcast over heads by stride 0, rank 2 and rank 3 tensors,
 * the scale option, LSE, fully masked rows (exactly 0 and -inf), determinism; then every
 * validation error with its status and message.
 *
 * Outputs are poisoned with NaN before each call, so an element the op does not write fails the
 * check; elements of an output buffer outside its view must keep the poison.
 *
 * Tolerances (SPEC 5, relative Frobenius error, plus a max-abs check at 5x the tolerance times
 * the largest reference magnitude): forward f16 output 2e-3, bf16 output 1e-2; f32 output 1e-5
 * (tighter than the SPEC's 2e-4 for f32 inputs: the CPU path works in double); backward 1e-2
 * when o or the gradient is f16/bf16, else 1e-5. LSE: |err| <= 1e-5 · max(1, |ref|).
 */
#include <inttypes.h>
#include <stdbool.h>

#include "test_util.h"

/* ------------------------------------------------------------------------------------------ */
/* Strided host tensors seen as [B, H, S, D] (lse: [B, H, S])                                  */
/* ------------------------------------------------------------------------------------------ */
enum { COMPACT = 0, BSHD = 1, DMAJOR = 2 };

typedef struct atens {
  DLDataType dt;
  size_t elem;
  int ndim;           /* of the DLTensor */
  int lr;             /* logical rank: 4, or 3 for lse */
  int64_t n[4], st[4]; /* the logical view (lse: n[3] = 1, st[3] = 0), element strides */
  int64_t off;        /* elements before the view */
  int64_t total;      /* elements in buf */
  void *buf;
  int64_t shape[4], strides[4];
  DLTensor t;
} atens;

static void at_finish(atens *x) {
  int64_t last = 0;
  for (int d = 0; d < 4; d++) last += (x->n[d] - 1) * x->st[d];
  x->total = x->off + last + 1;
  x->buf = malloc((size_t)x->total * x->elem);
  assert_non_null(x->buf);
  const int lead = x->lr - x->ndim;
  for (int d = 0; d < lead; d++) assert_int_equal(x->n[d], 1);
  for (int k = 0; k < x->ndim; k++) {
    x->shape[k] = x->n[lead + k];
    x->strides[k] = x->st[lead + k];
  }
  x->t.data = x->buf;
  x->t.device = (DLDevice){kDLCPU, 0};
  x->t.ndim = x->ndim;
  x->t.dtype = x->dt;
  x->t.shape = x->shape;
  x->t.strides = x->strides;
  x->t.byte_offset = (uint64_t)x->off * x->elem;
}

/* A [B, H, S, D] tensor of rank ndim (leading dimensions must be 1 when dropped): compact
 * row-major, a [B, S, H, D] buffer seen through strides (BSHD), or a [B, H, D, S] buffer seen
 * transposed (DMAJOR: stride 1 along S, a non-unit stride along D). pad: extra elements after
 * each D-row (DMAJOR: each S-column); off: elements before the view. */
static void at_init(atens *x, DLDataType dt, int ndim, int64_t B, int64_t H, int64_t S, int64_t D, int layout,
                    int64_t pad, int64_t off) {
  memset(x, 0, sizeof *x);
  x->dt = dt;
  x->elem = dt.bits / 8;
  x->ndim = ndim;
  x->lr = 4;
  x->n[0] = B, x->n[1] = H, x->n[2] = S, x->n[3] = D;
  const int64_t Dp = D + pad;
  if (layout == DMAJOR)
    x->st[0] = H * D * (S + pad), x->st[1] = D * (S + pad), x->st[2] = 1, x->st[3] = S + pad;
  else if (layout == BSHD)
    x->st[0] = S * H * Dp, x->st[1] = Dp, x->st[2] = H * Dp, x->st[3] = 1;
  else
    x->st[0] = H * S * Dp, x->st[1] = S * Dp, x->st[2] = Dp, x->st[3] = 1;
  x->off = off;
  at_finish(x);
}
static void at_compact(atens *x, DLDataType dt, int ndim, int64_t B, int64_t H, int64_t S, int64_t D) {
  at_init(x, dt, ndim, B, H, S, D, COMPACT, 0, 0);
}

/* An f32 lse [B, H, S] of rank ndim; S contiguous, pad_s elements after each row of S, pad_h
 * after each batch's heads. */
static void at_init_lse(atens *x, int ndim, int64_t B, int64_t H, int64_t S, int64_t pad_s, int64_t pad_h,
                        int64_t off) {
  memset(x, 0, sizeof *x);
  x->dt = TEST_F32;
  x->elem = 4;
  x->ndim = ndim;
  x->lr = 3;
  x->n[0] = B, x->n[1] = H, x->n[2] = S, x->n[3] = 1;
  x->st[0] = H * (S + pad_s) + pad_h, x->st[1] = S + pad_s, x->st[2] = 1, x->st[3] = 0;
  x->off = off;
  at_finish(x);
}

static void at_free(atens *x) {
  free(x->buf);
  x->buf = NULL;
}
static void at_fill(atens *x) { test_fill(x->buf, x->dt, x->total); }
static void at_poison(atens *x) { test_poison(x->buf, x->dt, x->total); }
static int64_t at_count(const atens *x) { return x->n[0] * x->n[1] * x->n[2] * x->n[3]; }
static int64_t at_index(const atens *x, int64_t b, int64_t h, int64_t s, int64_t d) {
  return x->off + b * x->st[0] + h * x->st[1] + s * x->st[2] + d * x->st[3];
}
static double at_get(const atens *x, int64_t b, int64_t h, int64_t s, int64_t d) {
  return test_load(x->buf, x->dt, at_index(x, b, h, s, d));
}

/* The view's values as compact doubles [n0][n1][n2][n3]. */
static double *at_extract(const atens *x) {
  double *v = malloc(sizeof(double) * (size_t)at_count(x));
  assert_non_null(v);
  int64_t k = 0;
  for (int64_t b = 0; b < x->n[0]; b++)
    for (int64_t h = 0; h < x->n[1]; h++)
      for (int64_t s = 0; s < x->n[2]; s++)
        for (int64_t d = 0; d < x->n[3]; d++) v[k++] = at_get(x, b, h, s, d);
  return v;
}

static bool is_poison(const atens *x, int64_t idx) {
  if (x->elem == 4) return ((const uint32_t *)x->buf)[idx] == 0x7fc00000u;
  return ((const uint16_t *)x->buf)[idx] == (x->dt.code == kDLBfloat ? 0x7fc0 : 0x7e00);
}

/* Every element of the buffer outside the view still holds the poison. */
static void at_check_outside(const atens *x, const char *what) {
  char *in_view = calloc((size_t)x->total, 1);
  assert_non_null(in_view);
  for (int64_t b = 0; b < x->n[0]; b++)
    for (int64_t h = 0; h < x->n[1]; h++)
      for (int64_t s = 0; s < x->n[2]; s++)
        for (int64_t d = 0; d < x->n[3]; d++) in_view[at_index(x, b, h, s, d)] = 1;
  for (int64_t i = 0; i < x->total; i++)
    if (!in_view[i] && !is_poison(x, i)) fail_msg("%s: element %" PRId64 " outside the view was written", what, i);
  free(in_view);
}

static const char *dt_str(DLDataType dt) {
  if (dt.bits == 0) return "-";
  return dt.bits == 32 ? "f32" : dt.code == kDLBfloat ? "bf16" : "f16";
}
static bool is_half(DLDataType dt) { return dt.bits == 16; }

/* Relative Frobenius error <= tol and max |got - ref| <= 5·tol·max |ref| (absolute when ref is 0). */
static void check_close(const double *got, const double *ref, int64_t n, double tol, const char *what) {
  const double rel = test_rel_error(got, ref, n);
  double max_ref = 0, max_err = 0;
  for (int64_t i = 0; i < n; i++) {
    if (fabs(ref[i]) > max_ref) max_ref = fabs(ref[i]);
    if (fabs(got[i] - ref[i]) > max_err) max_err = fabs(got[i] - ref[i]);
  }
  if (!(rel <= tol)) fail_msg("%s: relative error %.3g > %.3g", what, rel, tol);
  if (!(max_err <= 5 * tol * (max_ref > 0 ? max_ref : 1)))
    fail_msg("%s: max abs error %.3g > 5 x %.3g x max |ref| %.3g", what, max_err, tol, max_ref);
}

/* ------------------------------------------------------------------------------------------ */
/* The float64 oracle                                                                          */
/* ------------------------------------------------------------------------------------------ */
typedef struct dims {
  int64_t B, Hq, Hkv, Sq, Sk, D, Dv;
  int causal;
  double scale;
} dims;

static int64_t oracle_visible(const dims *p, int64_t i) {
  if (!p->causal) return p->Sk;
  int64_t n = i + p->Sk - p->Sq + 1;
  return n < 0 ? 0 : n > p->Sk ? p->Sk : n;
}

/* P[j] for j < n (returned) of row i of head h, batch b; the row's logsumexp in *lse. */
static int64_t oracle_probs(const dims *p, const double *Q, const double *K, int64_t b, int64_t h, int64_t i,
                            double *P, double *lse) {
  const int64_t kvh = h / (p->Hq / p->Hkv), n = oracle_visible(p, i);
  const double *q = Q + ((b * p->Hq + h) * p->Sq + i) * p->D;
  if (n <= 0) {
    *lse = -INFINITY;
    return 0;
  }
  double m = -INFINITY;
  for (int64_t j = 0; j < n; j++) {
    const double *k = K + ((b * p->Hkv + kvh) * p->Sk + j) * p->D;
    double s = 0;
    for (int64_t d = 0; d < p->D; d++) s += q[d] * k[d];
    P[j] = p->scale * s;
    if (P[j] > m) m = P[j];
  }
  double sum = 0;
  for (int64_t j = 0; j < n; j++) sum += (P[j] = exp(P[j] - m));
  for (int64_t j = 0; j < n; j++) P[j] /= sum;
  *lse = m + log(sum);
  return n;
}

/* O [B, Hq, Sq, Dv] and L [B, Hq, Sq] (L may be NULL). */
static void oracle_forward(const dims *p, const double *Q, const double *K, const double *V, double *O, double *L) {
  double *P = malloc(sizeof(double) * (size_t)p->Sk);
  assert_non_null(P);
  for (int64_t b = 0; b < p->B; b++)
    for (int64_t h = 0; h < p->Hq; h++)
      for (int64_t i = 0; i < p->Sq; i++) {
        double lse;
        const int64_t n = oracle_probs(p, Q, K, b, h, i, P, &lse);
        const int64_t kvh = h / (p->Hq / p->Hkv), r = (b * p->Hq + h) * p->Sq + i;
        for (int64_t d = 0; d < p->Dv; d++) {
          double s = 0;
          for (int64_t j = 0; j < n; j++) s += P[j] * V[((b * p->Hkv + kvh) * p->Sk + j) * p->Dv + d];
          O[r * p->Dv + d] = s;
        }
        if (L) L[r] = lse;
      }
  free(P);
}

/* Gradients of sum(O ∘ G): dQ, dK, dV (each may be NULL). */
static void oracle_backward(const dims *p, const double *Q, const double *K, const double *V, const double *G,
                            double *dQ, double *dK, double *dV) {
  double *P = malloc(sizeof(double) * (size_t)p->Sk), *dP = malloc(sizeof(double) * (size_t)p->Sk);
  assert_non_null(P);
  assert_non_null(dP);
  if (dK) memset(dK, 0, sizeof(double) * (size_t)(p->B * p->Hkv * p->Sk * p->D));
  if (dV) memset(dV, 0, sizeof(double) * (size_t)(p->B * p->Hkv * p->Sk * p->Dv));
  for (int64_t b = 0; b < p->B; b++)
    for (int64_t h = 0; h < p->Hq; h++)
      for (int64_t i = 0; i < p->Sq; i++) {
        double lse;
        const int64_t n = oracle_probs(p, Q, K, b, h, i, P, &lse);
        const int64_t kvh = h / (p->Hq / p->Hkv), r = (b * p->Hq + h) * p->Sq + i;
        const double *g = G + r * p->Dv, *q = Q + r * p->D;
        double Di = 0;
        for (int64_t j = 0; j < n; j++) {
          const double *v = V + ((b * p->Hkv + kvh) * p->Sk + j) * p->Dv;
          double s = 0;
          for (int64_t d = 0; d < p->Dv; d++) s += g[d] * v[d];
          dP[j] = s;
          Di += P[j] * s;
        }
        if (dQ)
          for (int64_t d = 0; d < p->D; d++) dQ[r * p->D + d] = 0;
        for (int64_t j = 0; j < n; j++) {
          const int64_t kr = (b * p->Hkv + kvh) * p->Sk + j;
          const double dS = P[j] * (dP[j] - Di);
          if (dQ)
            for (int64_t d = 0; d < p->D; d++) dQ[r * p->D + d] += p->scale * dS * K[kr * p->D + d];
          if (dK)
            for (int64_t d = 0; d < p->D; d++) dK[kr * p->D + d] += p->scale * dS * q[d];
          if (dV)
            for (int64_t d = 0; d < p->Dv; d++) dV[kr * p->Dv + d] += P[j] * g[d];
        }
      }
  free(P);
  free(dP);
}

static double oracle_loss(const dims *p, const double *Q, const double *K, const double *V, const double *G) {
  const int64_t n = p->B * p->Hq * p->Sq * p->Dv;
  double *O = malloc(sizeof(double) * (size_t)n);
  assert_non_null(O);
  oracle_forward(p, Q, K, V, O, NULL);
  double loss = 0;
  for (int64_t i = 0; i < n; i++) loss += O[i] * G[i];
  free(O);
  return loss;
}

static double *random_doubles(int64_t n) {
  double *x = malloc(sizeof(double) * (size_t)n);
  assert_non_null(x);
  for (int64_t i = 0; i < n; i++) x[i] = test_uniform();
  return x;
}

/* The oracle's gradients against central differences of its forward (loss = sum(O ∘ G)), for
 * Q, K and V, on tiny GQA problems: causal and not, Sq < Sk and Sq > Sk (fully masked rows). */
static void oracle_matches_finite_differences(void **state) {
  (void)state;
  test_seed(101);
  static const dims shapes[] = {
      {1, 2, 1, 3, 5, 4, 4, 0, 0.5}, {1, 2, 1, 3, 5, 4, 4, 1, 0.5}, {1, 2, 1, 5, 3, 4, 3, 1, 0.8},
      {2, 4, 2, 4, 4, 3, 5, 1, 1.0}, {1, 2, 2, 5, 3, 4, 3, 0, 1.3},
  };
  for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
    const dims *p = &shapes[c];
    const int64_t nq = p->B * p->Hq * p->Sq * p->D, nk = p->B * p->Hkv * p->Sk * p->D;
    const int64_t nv = p->B * p->Hkv * p->Sk * p->Dv, no = p->B * p->Hq * p->Sq * p->Dv;
    double *Q = random_doubles(nq), *K = random_doubles(nk), *V = random_doubles(nv), *G = random_doubles(no);
    double *dQ = malloc(sizeof(double) * (size_t)nq), *dK = malloc(sizeof(double) * (size_t)nk);
    double *dV = malloc(sizeof(double) * (size_t)nv);
    assert_non_null(dQ);
    assert_non_null(dK);
    assert_non_null(dV);
    oracle_backward(p, Q, K, V, G, dQ, dK, dV);
    struct { double *x, *g; int64_t n; const char *name; } args[3] = {{Q, dQ, nq, "dQ"}, {K, dK, nk, "dK"},
                                                                      {V, dV, nv, "dV"}};
    const double h = 1e-5;
    double max_g = 0;
    for (int a = 0; a < 3; a++)
      for (int64_t i = 0; i < args[a].n; i++)
        if (fabs(args[a].g[i]) > max_g) max_g = fabs(args[a].g[i]);
    assert_true(max_g > 1e-3); /* the problem has non-trivial gradients */
    for (int a = 0; a < 3; a++)
      for (int64_t i = 0; i < args[a].n; i++) {
        const double x0 = args[a].x[i];
        args[a].x[i] = x0 + h;
        const double lp = oracle_loss(p, Q, K, V, G);
        args[a].x[i] = x0 - h;
        const double lm = oracle_loss(p, Q, K, V, G);
        args[a].x[i] = x0;
        const double fd = (lp - lm) / (2 * h);
        if (!(fabs(fd - args[a].g[i]) <= 1e-7 * (1 + max_g)))
          fail_msg("case %zu (causal %d, Sq %" PRId64 ", Sk %" PRId64 "): %s[%" PRId64 "] = %.12g, finite "
                   "difference %.12g",
                   c, p->causal, p->Sq, p->Sk, args[a].name, i, args[a].g[i], fd);
      }
    /* fully masked query rows have zero dQ */
    for (int64_t b = 0; b < p->B; b++)
      for (int64_t hh = 0; hh < p->Hq; hh++)
        for (int64_t i = 0; i < p->Sq; i++)
          if (oracle_visible(p, i) == 0)
            for (int64_t d = 0; d < p->D; d++) assert_true(dQ[((b * p->Hq + hh) * p->Sq + i) * p->D + d] == 0.0);
    free(Q), free(K), free(V), free(G), free(dQ), free(dK), free(dV);
  }
}

/* ------------------------------------------------------------------------------------------ */
/* One case through the library and the oracle                                                 */
/* ------------------------------------------------------------------------------------------ */
static const DLDataType NONE = {0, 0, 0}; /* an absent gradient (NULL) */

typedef struct acase {
  DLDataType in, out;                 /* q/k/v dtype, o dtype */
  int64_t B, Hq, Hkv, Sq, Sk, D, Dv;
  int rank;                           /* 2, 3 or 4 (0 means 4) */
  int causal;
  float scale;                        /* 0: the default 1/sqrt(D) */
  int layout;                         /* COMPACT or BSHD, for every [B, H, S, D] tensor */
  int64_t pad, off;                   /* per-row padding and leading elements of those tensors */
  int lse;                            /* pass an lse to the forward (the backward always does) */
  int64_t lse_pad;                    /* padding after each lse row and after each batch */
  int null_strides;                   /* strides NULL on every tensor (compact layouts only) */
  int bwd;                            /* run the backward too */
  DLDataType dout, dq, dk, dv;        /* NONE: NULL gradient */
} acase;

static kiln_context *cpu_ctx(void) {
  kiln_context *ctx = NULL;
  assert_kiln_ok(kiln_context_create(kDLCPU, 0, &ctx));
  return ctx;
}

static double fwd_tol(DLDataType out) {
  if (out.bits == 32) return 1e-5;
  return out.code == kDLBfloat ? 1e-2 : 2e-3;
}
static double bwd_tol(DLDataType o, DLDataType g) { return is_half(o) || is_half(g) ? 1e-2 : 1e-5; }

static void label_case(const acase *c, const char *what, char *buf, size_t size) {
  snprintf(buf, size,
           "%s: %s->%s B%" PRId64 " Hq%" PRId64 " Hkv%" PRId64 " Sq%" PRId64 " Sk%" PRId64 " D%" PRId64 " Dv%" PRId64
           " rank %d causal %d scale %g layout %s pad %" PRId64 " off %" PRId64 " | dout %s dq %s dk %s dv %s",
           what, dt_str(c->in), dt_str(c->out), c->B, c->Hq, c->Hkv, c->Sq, c->Sk, c->D, c->Dv, c->rank ? c->rank : 4,
           c->causal, (double)c->scale, c->layout == BSHD ? "bshd" : c->layout == DMAJOR ? "dmajor" : "compact", c->pad, c->off,
           c->bwd ? dt_str(c->dout) : "-", c->bwd ? dt_str(c->dq) : "-", c->bwd ? dt_str(c->dk) : "-",
           c->bwd ? dt_str(c->dv) : "-");
}

/* Buffers of one case (kept for the determinism tests). */
typedef struct arun {
  atens q, k, v, o, lse, dout, dq, dk, dv;
  bool have_lse, have_dq, have_dk, have_dv;
} arun;

static void run_alloc(const acase *c, arun *r) {
  memset(r, 0, sizeof *r);
  const int rank = c->rank ? c->rank : 4;
  at_init(&r->q, c->in, rank, c->B, c->Hq, c->Sq, c->D, c->layout, c->pad, c->off);
  at_init(&r->k, c->in, rank, c->B, c->Hkv, c->Sk, c->D, c->layout, c->pad, c->off + 1);
  at_init(&r->v, c->in, rank, c->B, c->Hkv, c->Sk, c->Dv, c->layout, c->pad, c->off + 2);
  at_init(&r->o, c->out, rank, c->B, c->Hq, c->Sq, c->Dv, c->layout, c->pad, c->off + 3);
  r->have_lse = c->lse || c->bwd;
  if (r->have_lse) at_init_lse(&r->lse, rank - 1, c->B, c->Hq, c->Sq, c->lse_pad, 2 * c->lse_pad, c->off);
  if (c->bwd) {
    at_init(&r->dout, c->dout, rank, c->B, c->Hq, c->Sq, c->Dv, c->layout, c->pad, c->off);
    r->have_dq = c->dq.bits != 0, r->have_dk = c->dk.bits != 0, r->have_dv = c->dv.bits != 0;
    if (r->have_dq) at_init(&r->dq, c->dq, rank, c->B, c->Hq, c->Sq, c->D, c->layout, c->pad, c->off + 1);
    if (r->have_dk) at_init(&r->dk, c->dk, rank, c->B, c->Hkv, c->Sk, c->D, c->layout, c->pad, c->off + 2);
    if (r->have_dv) at_init(&r->dv, c->dv, rank, c->B, c->Hkv, c->Sk, c->Dv, c->layout, c->pad, c->off + 3);
  }
  if (c->null_strides) {
    assert_true(c->layout == COMPACT && c->pad == 0);
    atens *all[9] = {&r->q, &r->k, &r->v, &r->o, &r->lse, &r->dout, &r->dq, &r->dk, &r->dv};
    for (int i = 0; i < 9; i++)
      if (all[i]->buf) {
        if (all[i] == &r->lse) assert_int_equal(c->lse_pad, 0);
        all[i]->t.strides = NULL;
      }
  }
}

static void run_free(arun *r) {
  atens *all[9] = {&r->q, &r->k, &r->v, &r->o, &r->lse, &r->dout, &r->dq, &r->dk, &r->dv};
  for (int i = 0; i < 9; i++) at_free(all[i]);
}

static kiln_attention_opts case_opts(const acase *c) {
  kiln_attention_opts o = kiln_attention_opts_default();
  o.scale = c->scale;
  o.causal = c->causal;
  return o;
}

/* Fills the inputs, poisons the outputs, runs the forward (and the backward). */
static void run_library(kiln_context *ctx, const acase *c, arun *r) {
  at_fill(&r->q);
  at_fill(&r->k);
  at_fill(&r->v);
  at_poison(&r->o);
  if (r->have_lse) at_poison(&r->lse);
  const kiln_attention_opts opts = case_opts(c);
  assert_kiln_ok(kiln_attention(ctx, &r->q.t, &r->k.t, &r->v.t, &r->o.t, r->have_lse ? &r->lse.t : NULL, &opts, NULL));
  if (!c->bwd) return;
  at_fill(&r->dout);
  if (r->have_dq) at_poison(&r->dq);
  if (r->have_dk) at_poison(&r->dk);
  if (r->have_dv) at_poison(&r->dv);
  const DLTensor *dq = r->have_dq ? &r->dq.t : NULL, *dk = r->have_dk ? &r->dk.t : NULL;
  const DLTensor *dv = r->have_dv ? &r->dv.t : NULL;
  size_t bytes = 12345;
  assert_kiln_ok(kiln_attention_backward_workspace_size(ctx, &r->q.t, &r->k.t, &r->v.t, &r->o.t, &r->lse.t,
                                                        &r->dout.t, dq, dk, dv, &opts, &bytes));
  assert_int_equal(bytes, 0); /* the CPU path needs none */
  assert_kiln_ok(kiln_attention_backward(ctx, &r->q.t, &r->k.t, &r->v.t, &r->o.t, &r->lse.t, &r->dout.t, dq, dk, dv,
                                         NULL, 0, &opts, NULL));
}

static void check_grad(const atens *x, const double *ref, double tol, const char *label, const char *name) {
  char what[600];
  snprintf(what, sizeof what, "%s [%s]", label, name);
  double *got = at_extract(x);
  check_close(got, ref, at_count(x), tol, what);
  at_check_outside(x, what);
  free(got);
}

/* Compares the library's outputs of r with the oracle's. */
static void check_run(const acase *c, const arun *r, const char *label) {
  dims p = {c->B, c->Hq, c->Hkv, c->Sq, c->Sk, c->D, c->Dv, c->causal, 0};
  p.scale = c->scale != 0.0f ? (double)c->scale : 1.0 / sqrt((double)c->D);
  const int64_t rows = c->B * c->Hq * c->Sq;
  double *Q = at_extract(&r->q), *K = at_extract(&r->k), *V = at_extract(&r->v);
  double *O = malloc(sizeof(double) * (size_t)(rows * c->Dv)), *L = malloc(sizeof(double) * (size_t)rows);
  assert_non_null(O);
  assert_non_null(L);
  oracle_forward(&p, Q, K, V, O, L);

  char what[600];
  snprintf(what, sizeof what, "%s [o]", label);
  double *got = at_extract(&r->o);
  check_close(got, O, rows * c->Dv, fwd_tol(c->out), what);
  at_check_outside(&r->o, what);
  /* fully masked rows: exactly zero */
  for (int64_t row = 0; row < rows; row++)
    if (oracle_visible(&p, row % c->Sq) == 0)
      for (int64_t d = 0; d < c->Dv; d++)
        if (got[row * c->Dv + d] != 0.0) fail_msg("%s: masked row %" PRId64 " has o = %g", what, row, got[row * c->Dv + d]);
  free(got);
  if (r->have_lse) {
    snprintf(what, sizeof what, "%s [lse]", label);
    double *lse = at_extract(&r->lse);
    for (int64_t row = 0; row < rows; row++) {
      if (isinf(L[row])) {
        if (!(isinf(lse[row]) && lse[row] < 0)) fail_msg("%s: masked row %" PRId64 " has lse %g, not -inf", what, row, lse[row]);
      } else if (!(fabs(lse[row] - L[row]) <= 1e-5 * fmax(1.0, fabs(L[row])))) {
        fail_msg("%s: row %" PRId64 " lse %.9g, expected %.9g", what, row, lse[row], L[row]);
      }
    }
    at_check_outside(&r->lse, what);
    free(lse);
  }
  if (c->bwd) {
    double *G = at_extract(&r->dout);
    double *dQ = malloc(sizeof(double) * (size_t)at_count(&r->q));
    double *dK = malloc(sizeof(double) * (size_t)at_count(&r->k));
    double *dV = malloc(sizeof(double) * (size_t)at_count(&r->v));
    assert_non_null(dQ);
    assert_non_null(dK);
    assert_non_null(dV);
    oracle_backward(&p, Q, K, V, G, dQ, dK, dV);
    if (r->have_dq) {
      check_grad(&r->dq, dQ, bwd_tol(c->out, c->dq), label, "dq");
      double *g = at_extract(&r->dq);
      for (int64_t row = 0; row < rows; row++)
        if (oracle_visible(&p, row % c->Sq) == 0)
          for (int64_t d = 0; d < c->D; d++)
            if (g[row * c->D + d] != 0.0) fail_msg("%s: masked row %" PRId64 " has dq %g", label, row, g[row * c->D + d]);
      free(g);
    }
    if (r->have_dk) check_grad(&r->dk, dK, bwd_tol(c->out, c->dk), label, "dk");
    if (r->have_dv) check_grad(&r->dv, dV, bwd_tol(c->out, c->dv), label, "dv");
    free(G), free(dQ), free(dK), free(dV);
  }
  free(Q), free(K), free(V), free(O), free(L);
}

static void run_case(kiln_context *ctx, const acase *c, const char *what) {
  char label[512];
  label_case(c, what, label, sizeof label);
  arun r;
  run_alloc(c, &r);
  run_library(ctx, c, &r);
  check_run(c, &r, label);
  run_free(&r);
}

static const DLDataType *in_dtypes[3] = {&TEST_F16, &TEST_BF16, &TEST_F32};

/* A backward case with every gradient in dtype g (and dout in dtype gdo). */
static void set_bwd(acase *c, DLDataType gdo, DLDataType g) {
  c->bwd = 1;
  c->dout = gdo;
  c->dq = c->dk = c->dv = g;
}

/* ------------------------------------------------------------------------------------------ */
/* Forward                                                                                      */
/* ------------------------------------------------------------------------------------------ */

/* Sq, Sk in {1, 17, 255} (equal and unequal both ways), causal and not, rotating dtypes. */
static void fwd_ragged_lengths(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(1);
  static const int64_t S[3] = {1, 17, 255};
  int idx = 0;
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 3; b++)
      for (int causal = 0; causal < 2; causal++, idx++) {
        const DLDataType in = *in_dtypes[idx % 3];
        acase c = {.in = in, .out = idx & 1 ? TEST_F32 : in, .B = 1, .Hq = 2, .Hkv = 1, .Sq = S[a], .Sk = S[b],
                   .D = 32, .Dv = 32, .causal = causal, .lse = 1};
        run_case(ctx, &c, "fwd_ragged_lengths");
      }
  kiln_context_destroy(ctx);
}

/* Every input dtype with a same-dtype and an f32 output. */
static void fwd_dtypes(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(2);
  for (int i = 0; i < 3; i++)
    for (int o = 0; o < 2; o++) {
      acase c = {.in = *in_dtypes[i], .out = o ? TEST_F32 : *in_dtypes[i], .B = 2, .Hq = 2, .Hkv = 2, .Sq = 33,
                 .Sk = 47, .D = 64, .Dv = 64, .causal = (i + o) & 1, .lse = 1};
      run_case(ctx, &c, "fwd_dtypes");
    }
  kiln_context_destroy(ctx);
}

/* Grouped-query (Hq 4 / Hkv 2, 6 / 3), multi-query (Hkv 1) and plain multi-head attention. */
static void fwd_gqa_mqa(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(3);
  static const int64_t heads[4][2] = {{4, 2}, {4, 1}, {6, 3}, {3, 3}};
  for (int h = 0; h < 4; h++)
    for (int causal = 0; causal < 2; causal++) {
      const DLDataType in = *in_dtypes[(h + causal) % 3];
      acase c = {.in = in, .out = causal ? in : TEST_F32, .B = 2, .Hq = heads[h][0], .Hkv = heads[h][1], .Sq = 17,
                 .Sk = 33, .D = 32, .Dv = 32, .causal = causal, .lse = 1};
      run_case(ctx, &c, "fwd_gqa_mqa");
    }
  kiln_context_destroy(ctx);
}

/* D in {32, 64, 80, 128, 256} with Dv = D, and Dv != D, D = 1, odd sizes. */
static void fwd_head_dims(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(4);
  static const int64_t dd[][2] = {{32, 32}, {64, 64}, {80, 80}, {128, 128}, {256, 256},
                                  {80, 32}, {32, 256}, {1, 1},   {7, 13},    {256, 1}};
  for (size_t i = 0; i < sizeof dd / sizeof dd[0]; i++) {
    const DLDataType in = *in_dtypes[i % 3];
    acase c = {.in = in, .out = i & 1 ? TEST_F32 : in, .B = 1, .Hq = 2, .Hkv = 1, .Sq = 17, .Sk = dd[i][0] > 64 ? 17 : 33,
               .D = dd[i][0], .Dv = dd[i][1], .causal = (int)(i / 2) & 1, .lse = 1};
    run_case(ctx, &c, "fwd_head_dims");
  }
  kiln_context_destroy(ctx);
}

/* [B, S, H, D] buffers passed as their [B, H, S, D] views, with padded rows and byte offsets,
 * for q, k, v and o; an lse with padded strides; and k / v broadcast over heads by stride 0. */
static void fwd_strided_bshd(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(5);
  for (int v = 0; v < 6; v++) {
    const DLDataType in = *in_dtypes[v % 3];
    acase c = {.in = in, .out = v & 1 ? TEST_F32 : in, .B = 2, .Hq = 4, .Hkv = v < 3 ? 2 : 4, .Sq = 17, .Sk = 23,
               .D = 16, .Dv = 24, .causal = v & 1, .layout = BSHD, .pad = v % 3, .off = v, .lse = 1, .lse_pad = v & 2};
    run_case(ctx, &c, "fwd_strided_bshd");
  }
  /* k and v [1, 2, Sk, D] whose head stride is 0: both heads read the same memory */
  atens q, k, v, o, lse;
  at_compact(&q, TEST_F16, 4, 1, 4, 9, 8);
  at_compact(&k, TEST_F16, 4, 1, 2, 11, 8);
  at_compact(&v, TEST_F16, 4, 1, 2, 11, 8);
  at_compact(&o, TEST_F32, 4, 1, 4, 9, 8);
  at_init_lse(&lse, 3, 1, 4, 9, 0, 0, 0);
  at_fill(&q), at_fill(&k), at_fill(&v), at_poison(&o), at_poison(&lse);
  k.strides[1] = v.strides[1] = 0;
  assert_kiln_ok(kiln_attention(ctx, &q.t, &k.t, &v.t, &o.t, &lse.t, NULL, NULL));
  /* the same as MQA over head 0 */
  atens k1 = k, v1 = v, o1;
  k1.shape[1] = v1.shape[1] = 1;
  k1.t.shape = k1.shape, k1.t.strides = k1.strides, v1.t.shape = v1.shape, v1.t.strides = v1.strides;
  at_compact(&o1, TEST_F32, 4, 1, 4, 9, 8);
  at_poison(&o1);
  assert_kiln_ok(kiln_attention(ctx, &q.t, &k1.t, &v1.t, &o1.t, NULL, NULL, NULL));
  assert_memory_equal(o.buf, o1.buf, (size_t)o.total * o.elem);
  at_free(&q), at_free(&k), at_free(&v), at_free(&o), at_free(&lse), at_free(&o1);
  kiln_context_destroy(ctx);
}

/* A non-unit stride along D (the CPU path takes any strides): [B, H, D, S] buffers seen as
 * [B, H, S, D], alone or mixed with other layouts. */
static void fwd_strided_d_major(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(12);
  for (int v = 0; v < 4; v++) {
    const DLDataType in = *in_dtypes[v % 3];
    acase c = {.in = in, .out = v & 1 ? TEST_F32 : in, .B = 2, .Hq = 2, .Hkv = 1, .Sq = 9 + v, .Sk = 14, .D = 12,
               .Dv = 10, .causal = v & 1, .layout = DMAJOR, .pad = v, .off = v, .lse = 1};
    run_case(ctx, &c, "fwd_strided_d_major");
  }
  kiln_context_destroy(ctx);
}

/* Rank 2 [S, D] (lse [Sq]) and rank 3 [H, S, D] (lse [Hq, Sq]) tensors, with explicit and NULL
 * strides, and an lse on a rank-4 problem with strides NULL. */
static void fwd_rank2_rank3(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(6);
  for (int v = 0; v < 8; v++) {
    const DLDataType in = *in_dtypes[v % 3];
    const int rank = v < 4 ? 2 : 3;
    acase c = {.in = in, .out = v & 1 ? TEST_F32 : in, .B = 1, .Hq = rank == 2 ? 1 : 4, .Hkv = rank == 2 ? 1 : 2,
               .Sq = 17 + v, .Sk = 31 - v, .D = 24, .Dv = 16, .rank = rank, .causal = (v >> 1) & 1, .lse = 1,
               .null_strides = v & 2 ? 1 : 0, .pad = v & 2 ? 0 : 3};
    run_case(ctx, &c, "fwd_rank2_rank3");
  }
  acase c = {.in = TEST_BF16, .out = TEST_BF16, .B = 2, .Hq = 2, .Hkv = 1, .Sq = 9, .Sk = 9, .D = 8, .Dv = 8,
             .causal = 1, .lse = 1, .null_strides = 1};
  run_case(ctx, &c, "fwd_rank4_null_strides");
  kiln_context_destroy(ctx);
}

/* The scale option: explicit values, sharp softmax (large scale), and the default 1/sqrt(D)
 * (opts NULL, the defaults and an explicit (float)(1/sqrt(D)) give the same bits). */
static void fwd_scale(void **state) {
  (void)state;
  const kiln_attention_opts def = kiln_attention_opts_default();
  assert_int_equal(def.algo, KILN_ATTENTION_AUTO);
  assert_true(def.scale == 0.0f);
  assert_int_equal(def.causal, 0);
  assert_int_equal(def.deterministic, 0);
  assert_int_equal(def.tile_m, 0);
  kiln_context *ctx = cpu_ctx();
  test_seed(7);
  static const float scales[] = {0.3f, 1.0f, 2.5f, 8.0f, 40.0f};
  for (size_t i = 0; i < sizeof scales / sizeof scales[0]; i++) {
    const DLDataType in = *in_dtypes[i % 3];
    acase c = {.in = in, .out = i & 1 ? in : TEST_F32, .B = 1, .Hq = 2, .Hkv = 2, .Sq = 19, .Sk = 37, .D = 48,
               .Dv = 40, .causal = (int)i & 1, .scale = scales[i], .lse = 1};
    run_case(ctx, &c, "fwd_scale");
  }
  atens q, k, v, o1, o2, o3, l1, l2, l3;
  at_compact(&q, TEST_F16, 4, 1, 2, 13, 80);
  at_compact(&k, TEST_F16, 4, 1, 2, 29, 80);
  at_compact(&v, TEST_F16, 4, 1, 2, 29, 80);
  at_compact(&o1, TEST_F32, 4, 1, 2, 13, 80);
  at_compact(&o2, TEST_F32, 4, 1, 2, 13, 80);
  at_compact(&o3, TEST_F32, 4, 1, 2, 13, 80);
  at_init_lse(&l1, 3, 1, 2, 13, 0, 0, 0);
  at_init_lse(&l2, 3, 1, 2, 13, 0, 0, 0);
  at_init_lse(&l3, 3, 1, 2, 13, 0, 0, 0);
  at_fill(&q), at_fill(&k), at_fill(&v);
  at_poison(&o1), at_poison(&o2), at_poison(&o3), at_poison(&l1), at_poison(&l2), at_poison(&l3);
  kiln_attention_opts explicit_scale = def;
  explicit_scale.scale = (float)(1.0 / sqrt(80.0));
  assert_kiln_ok(kiln_attention(ctx, &q.t, &k.t, &v.t, &o1.t, &l1.t, NULL, NULL));
  assert_kiln_ok(kiln_attention(ctx, &q.t, &k.t, &v.t, &o2.t, &l2.t, &def, NULL));
  assert_kiln_ok(kiln_attention(ctx, &q.t, &k.t, &v.t, &o3.t, &l3.t, &explicit_scale, NULL));
  assert_memory_equal(o1.buf, o2.buf, (size_t)o1.total * 4);
  assert_memory_equal(o1.buf, o3.buf, (size_t)o1.total * 4);
  assert_memory_equal(l1.buf, l2.buf, (size_t)l1.total * 4);
  assert_memory_equal(l1.buf, l3.buf, (size_t)l1.total * 4);
  /* -0.0 is the default too */
  explicit_scale.scale = -0.0f;
  at_poison(&o3);
  assert_kiln_ok(kiln_attention(ctx, &q.t, &k.t, &v.t, &o3.t, NULL, &explicit_scale, NULL));
  assert_memory_equal(o1.buf, o3.buf, (size_t)o1.total * 4);
  at_free(&q), at_free(&k), at_free(&v), at_free(&o1), at_free(&o2), at_free(&o3);
  at_free(&l1), at_free(&l2), at_free(&l3);
  kiln_context_destroy(ctx);
}

/* Causal with Sq > Sk: the first Sq - Sk query rows see no key: o exactly 0, lse -inf (checked
 * by check_run for every case); also Sk = 1 and rows that see exactly one key. */
static void fwd_causal_masked_rows(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(8);
  static const int64_t s[][2] = {{7, 3}, {17, 1}, {5, 4}, {255, 17}, {2, 1}};
  for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
    const DLDataType in = *in_dtypes[i % 3];
    acase c = {.in = in, .out = i & 1 ? TEST_F32 : in, .B = 2, .Hq = 2, .Hkv = 1, .Sq = s[i][0], .Sk = s[i][1],
               .D = 16, .Dv = 8, .causal = 1, .lse = 1};
    run_case(ctx, &c, "fwd_causal_masked_rows");
  }
  /* bit-exact: +0.0 in o, -inf in lse */
  atens q, k, v, o, lse;
  at_compact(&q, TEST_F16, 2, 1, 1, 6, 8);
  at_compact(&k, TEST_F16, 2, 1, 1, 2, 8);
  at_compact(&v, TEST_F16, 2, 1, 1, 2, 8);
  at_compact(&o, TEST_F16, 2, 1, 1, 6, 8);
  at_init_lse(&lse, 1, 1, 1, 6, 0, 0, 0);
  at_fill(&q), at_fill(&k), at_fill(&v), at_poison(&o), at_poison(&lse);
  kiln_attention_opts opts = kiln_attention_opts_default();
  opts.causal = 1;
  assert_kiln_ok(kiln_attention(ctx, &q.t, &k.t, &v.t, &o.t, &lse.t, &opts, NULL));
  for (int i = 0; i < 4; i++) { /* rows 0..3 see no key */
    for (int d = 0; d < 8; d++) assert_int_equal(((uint16_t *)o.buf)[i * 8 + d], 0);
    const float l = ((float *)lse.buf)[i];
    assert_true(isinf(l) && l < 0);
  }
  for (int i = 4; i < 6; i++) assert_true(isfinite(((float *)lse.buf)[i]));
  at_free(&q), at_free(&k), at_free(&v), at_free(&o), at_free(&lse);
  kiln_context_destroy(ctx);
}

/* lse layouts: padded head and batch strides (the gaps keep their poison), an lse of Sq = 1 with
 * any last stride, and no lse at all. */
static void fwd_lse_layouts(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(9);
  for (int v = 0; v < 4; v++) {
    acase c = {.in = *in_dtypes[v % 3], .out = TEST_F32, .B = 3, .Hq = 2, .Hkv = 1, .Sq = 11, .Sk = 13, .D = 8,
               .Dv = 8, .causal = v & 1, .lse = v != 3, .lse_pad = 1 + v * 5};
    run_case(ctx, &c, "fwd_lse_layouts");
  }
  /* Sq = 1: the last stride of lse addresses nothing, so any value is fine */
  atens q, k, v, o, lse;
  at_compact(&q, TEST_BF16, 4, 2, 3, 1, 8);
  at_compact(&k, TEST_BF16, 4, 2, 3, 5, 8);
  at_compact(&v, TEST_BF16, 4, 2, 3, 5, 8);
  at_compact(&o, TEST_F32, 4, 2, 3, 1, 8);
  at_init_lse(&lse, 3, 2, 3, 1, 0, 0, 0);
  at_fill(&q), at_fill(&k), at_fill(&v), at_poison(&o), at_poison(&lse);
  lse.strides[2] = 7;
  assert_kiln_ok(kiln_attention(ctx, &q.t, &k.t, &v.t, &o.t, &lse.t, NULL, NULL));
  for (int i = 0; i < 6; i++) assert_true(isfinite(((float *)lse.buf)[i]));
  at_free(&q), at_free(&k), at_free(&v), at_free(&o), at_free(&lse);
  kiln_context_destroy(ctx);
}

/* Repeated runs give the same bits (o and lse); rows are handed to threads dynamically, so the
 * split differs from run to run. */
static void fwd_deterministic(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(10);
  acase c = {.in = TEST_BF16, .out = TEST_F32, .B = 2, .Hq = 4, .Hkv = 2, .Sq = 65, .Sk = 129, .D = 64, .Dv = 64,
             .causal = 1, .lse = 1};
  arun r;
  run_alloc(&c, &r);
  run_library(ctx, &c, &r);
  void *o1 = malloc((size_t)r.o.total * r.o.elem), *l1 = malloc((size_t)r.lse.total * 4);
  assert_non_null(o1);
  assert_non_null(l1);
  memcpy(o1, r.o.buf, (size_t)r.o.total * r.o.elem);
  memcpy(l1, r.lse.buf, (size_t)r.lse.total * 4);
  const kiln_attention_opts opts = case_opts(&c);
  for (int rep = 0; rep < 2; rep++) {
    at_poison(&r.o);
    at_poison(&r.lse);
    assert_kiln_ok(kiln_attention(ctx, &r.q.t, &r.k.t, &r.v.t, &r.o.t, &r.lse.t, &opts, NULL));
    assert_memory_equal(o1, r.o.buf, (size_t)r.o.total * r.o.elem);
    assert_memory_equal(l1, r.lse.buf, (size_t)r.lse.total * 4);
  }
  free(o1);
  free(l1);
  run_free(&r);
  kiln_context_destroy(ctx);
}

/* kDLCUDAHost (page-locked host memory) tensors are accepted by the CPU context. */
static void fwd_cuda_host(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(11);
  atens q, k, v, o;
  at_compact(&q, TEST_F16, 3, 1, 2, 5, 8);
  at_compact(&k, TEST_F16, 3, 1, 2, 6, 8);
  at_compact(&v, TEST_F16, 3, 1, 2, 6, 8);
  at_compact(&o, TEST_F16, 3, 1, 2, 5, 8);
  at_fill(&q), at_fill(&k), at_fill(&v), at_poison(&o);
  q.t.device = k.t.device = v.t.device = o.t.device = (DLDevice){kDLCUDAHost, 0};
  assert_kiln_ok(kiln_attention(ctx, &q.t, &k.t, &v.t, &o.t, NULL, NULL, NULL));
  for (int64_t i = 0; i < o.total; i++) assert_false(isnan(test_load(o.buf, o.dt, i)));
  at_free(&q), at_free(&k), at_free(&v), at_free(&o);
  kiln_context_destroy(ctx);
}

/* ------------------------------------------------------------------------------------------ */
/* Backward                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* Sq, Sk in {1, 17, 255}, causal and not, rotating input / output / gradient dtypes. */
static void bwd_ragged_lengths(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(21);
  static const int64_t S[3] = {1, 17, 255};
  int idx = 0;
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 3; b++)
      for (int causal = 0; causal < 2; causal++, idx++) {
        const DLDataType in = *in_dtypes[idx % 3];
        acase c = {.in = in, .out = idx & 1 ? TEST_F32 : in, .B = 1, .Hq = 2, .Hkv = 1, .Sq = S[a], .Sk = S[b],
                   .D = 16, .Dv = 16, .causal = causal};
        set_bwd(&c, *in_dtypes[(idx + 1) % 3], (idx >> 1) & 1 ? TEST_F32 : in);
        run_case(ctx, &c, "bwd_ragged_lengths");
      }
  kiln_context_destroy(ctx);
}

/* Every input dtype x o dtype (same, f32) x gradient dtype (same, f32), dout of each dtype. */
static void bwd_dtypes(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(22);
  int idx = 0;
  for (int i = 0; i < 3; i++)
    for (int o = 0; o < 2; o++)
      for (int g = 0; g < 2; g++, idx++) {
        const DLDataType in = *in_dtypes[i];
        acase c = {.in = in, .out = o ? TEST_F32 : in, .B = 2, .Hq = 2, .Hkv = 1, .Sq = 23, .Sk = 31, .D = 32,
                   .Dv = 32, .causal = idx & 1};
        set_bwd(&c, *in_dtypes[idx % 3], g ? TEST_F32 : in);
        c.dk = g ? in : TEST_F32; /* mixed gradient dtypes in one call */
        run_case(ctx, &c, "bwd_dtypes");
      }
  kiln_context_destroy(ctx);
}

/* GQA and MQA: dK and dV sum over the query heads of each group. */
static void bwd_gqa_mqa(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(23);
  static const int64_t heads[4][2] = {{4, 2}, {4, 1}, {6, 3}, {2, 2}};
  for (int h = 0; h < 4; h++)
    for (int causal = 0; causal < 2; causal++) {
      const DLDataType in = *in_dtypes[(h + causal) % 3];
      acase c = {.in = in, .out = causal ? in : TEST_F32, .B = 2, .Hq = heads[h][0], .Hkv = heads[h][1], .Sq = 19,
                 .Sk = 17, .D = 16, .Dv = 24, .causal = causal};
      set_bwd(&c, in, TEST_F32);
      run_case(ctx, &c, "bwd_gqa_mqa");
    }
  kiln_context_destroy(ctx);
}

/* D in {32, 64, 80, 128, 256} and Dv != D. */
static void bwd_head_dims(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(24);
  static const int64_t dd[][2] = {{32, 32}, {64, 64}, {80, 80}, {128, 128}, {256, 256}, {80, 32}, {32, 256}, {1, 3}};
  for (size_t i = 0; i < sizeof dd / sizeof dd[0]; i++) {
    const DLDataType in = *in_dtypes[i % 3];
    acase c = {.in = in, .out = i & 1 ? TEST_F32 : in, .B = 1, .Hq = 2, .Hkv = 1, .Sq = 9, .Sk = 13, .D = dd[i][0],
               .Dv = dd[i][1], .causal = (int)(i / 2) & 1};
    set_bwd(&c, in, i & 2 ? in : TEST_F32);
    run_case(ctx, &c, "bwd_head_dims");
  }
  kiln_context_destroy(ctx);
}

/* Every non-empty subset of {dq, dk, dv}; the others are NULL. */
static void bwd_partial_grads(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(25);
  for (int mask = 1; mask < 8; mask++) {
    const DLDataType in = *in_dtypes[mask % 3];
    acase c = {.in = in, .out = TEST_F32, .B = 1, .Hq = 4, .Hkv = 2, .Sq = 17, .Sk = 17, .D = 16, .Dv = 16,
               .causal = mask & 1};
    set_bwd(&c, TEST_F32, TEST_F32);
    if (!(mask & 1)) c.dq = NONE;
    if (!(mask & 2)) c.dk = NONE;
    if (!(mask & 4)) c.dv = NONE;
    run_case(ctx, &c, "bwd_partial_grads");
  }
  kiln_context_destroy(ctx);
}

/* [B, S, H, D] views with padding and offsets for every tensor, inputs and gradients. */
static void bwd_strided_bshd(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(26);
  for (int v = 0; v < 6; v++) {
    const DLDataType in = *in_dtypes[v % 3];
    acase c = {.in = in, .out = v & 1 ? TEST_F32 : in, .B = 2, .Hq = 4, .Hkv = v < 3 ? 2 : 1, .Sq = 13, .Sk = 21,
               .D = 16, .Dv = 8, .causal = v & 1, .layout = BSHD, .pad = v % 3, .off = v + 1, .lse_pad = v & 2};
    set_bwd(&c, *in_dtypes[(v + 1) % 3], v & 2 ? TEST_F32 : in);
    run_case(ctx, &c, "bwd_strided_bshd");
  }
  kiln_context_destroy(ctx);
}

/* A non-unit stride along D for every tensor, inputs and gradients. */
static void bwd_strided_d_major(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(30);
  for (int v = 0; v < 4; v++) {
    const DLDataType in = *in_dtypes[v % 3];
    acase c = {.in = in, .out = v & 1 ? TEST_F32 : in, .B = 2, .Hq = 4, .Hkv = 2, .Sq = 11, .Sk = 9 + v, .D = 8,
               .Dv = 12, .causal = (v >> 1) & 1, .layout = DMAJOR, .pad = v, .off = 2};
    set_bwd(&c, *in_dtypes[(v + 2) % 3], v & 1 ? in : TEST_F32);
    run_case(ctx, &c, "bwd_strided_d_major");
  }
  kiln_context_destroy(ctx);
}

/* Rank 2 and rank 3 problems, with explicit and NULL strides. */
static void bwd_rank2_rank3(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(27);
  for (int v = 0; v < 8; v++) {
    const DLDataType in = *in_dtypes[v % 3];
    const int rank = v < 4 ? 2 : 3;
    acase c = {.in = in, .out = v & 1 ? TEST_F32 : in, .B = 1, .Hq = rank == 2 ? 1 : 4, .Hkv = rank == 2 ? 1 : 2,
               .Sq = 15 + v, .Sk = 25 - v, .D = 16, .Dv = 12, .rank = rank, .causal = (v >> 1) & 1,
               .null_strides = v & 2 ? 1 : 0, .pad = v & 2 ? 0 : 2};
    set_bwd(&c, in, v & 4 ? in : TEST_F32);
    run_case(ctx, &c, "bwd_rank2_rank3");
  }
  kiln_context_destroy(ctx);
}

/* Causal with Sq > Sk: masked query rows get dq exactly 0 and add nothing to dk / dv. */
static void bwd_causal_masked_rows(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(28);
  static const int64_t s[][2] = {{7, 3}, {17, 1}, {33, 17}};
  for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
    const DLDataType in = *in_dtypes[i % 3];
    acase c = {.in = in, .out = i & 1 ? in : TEST_F32, .B = 2, .Hq = 2, .Hkv = 1, .Sq = s[i][0], .Sk = s[i][1],
               .D = 8, .Dv = 8, .causal = 1};
    set_bwd(&c, in, i & 1 ? in : TEST_F32);
    run_case(ctx, &c, "bwd_causal_masked_rows");
  }
  kiln_context_destroy(ctx);
}

/* Two backward runs give the same bits (deterministic opts or not: the CPU path always is). */
static void bwd_deterministic(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(29);
  acase c = {.in = TEST_F16, .out = TEST_F16, .B = 2, .Hq = 4, .Hkv = 1, .Sq = 47, .Sk = 61, .D = 32, .Dv = 32,
             .causal = 1};
  set_bwd(&c, TEST_F16, TEST_F32);
  arun r;
  run_alloc(&c, &r);
  run_library(ctx, &c, &r);
  const atens *g[3] = {&r.dq, &r.dk, &r.dv};
  void *first[3];
  for (int i = 0; i < 3; i++) {
    first[i] = malloc((size_t)g[i]->total * g[i]->elem);
    assert_non_null(first[i]);
    memcpy(first[i], g[i]->buf, (size_t)g[i]->total * g[i]->elem);
  }
  for (int rep = 0; rep < 2; rep++) {
    kiln_attention_opts opts = case_opts(&c);
    opts.deterministic = rep;
    at_poison(&r.dq), at_poison(&r.dk), at_poison(&r.dv);
    assert_kiln_ok(kiln_attention_backward(ctx, &r.q.t, &r.k.t, &r.v.t, &r.o.t, &r.lse.t, &r.dout.t, &r.dq.t, &r.dk.t,
                                           &r.dv.t, NULL, 0, &opts, NULL));
    for (int i = 0; i < 3; i++) assert_memory_equal(first[i], g[i]->buf, (size_t)g[i]->total * g[i]->elem);
  }
  for (int i = 0; i < 3; i++) free(first[i]);
  run_free(&r);
  kiln_context_destroy(ctx);
}

/* ------------------------------------------------------------------------------------------ */
/* Errors: status and message (op, argument, what was found, what was expected)                */
/* ------------------------------------------------------------------------------------------ */

/* A valid problem to break one argument at a time: q [1, 2, 5, 8] f16, k and v [1, 1, 7, 8] f16,
 * o [1, 2, 5, 8] f32, lse [1, 2, 5]; backward dout [1, 2, 5, 8] f16, dq f32, dk f16, dv f32. */
typedef struct fixture {
  kiln_context *ctx;
  atens q, k, v, o, lse, dout, dq, dk, dv;
} fixture;

static void fx_init(fixture *f) {
  f->ctx = cpu_ctx();
  test_seed(99);
  at_compact(&f->q, TEST_F16, 4, 1, 2, 5, 8);
  at_compact(&f->k, TEST_F16, 4, 1, 1, 7, 8);
  at_compact(&f->v, TEST_F16, 4, 1, 1, 7, 8);
  at_compact(&f->o, TEST_F32, 4, 1, 2, 5, 8);
  at_init_lse(&f->lse, 3, 1, 2, 5, 0, 0, 0);
  at_compact(&f->dout, TEST_F16, 4, 1, 2, 5, 8);
  at_compact(&f->dq, TEST_F32, 4, 1, 2, 5, 8);
  at_compact(&f->dk, TEST_F16, 4, 1, 1, 7, 8);
  at_compact(&f->dv, TEST_F32, 4, 1, 1, 7, 8);
  at_fill(&f->q), at_fill(&f->k), at_fill(&f->v), at_fill(&f->dout);
  at_poison(&f->o), at_poison(&f->lse), at_poison(&f->dq), at_poison(&f->dk), at_poison(&f->dv);
}
static void fx_free(fixture *f) {
  at_free(&f->q), at_free(&f->k), at_free(&f->v), at_free(&f->o), at_free(&f->lse);
  at_free(&f->dout), at_free(&f->dq), at_free(&f->dk), at_free(&f->dv);
  kiln_context_destroy(f->ctx);
}
/* The calls on the fixture's context (the backward without workspace: the CPU needs none). */
static kiln_status fx_fwd(fixture *f, const DLTensor *q, const DLTensor *k, const DLTensor *v, const DLTensor *o,
                          const DLTensor *lse, const kiln_attention_opts *opts) {
  return kiln_attention(f->ctx, q, k, v, o, lse, opts, NULL);
}
static kiln_status fx_bwd(fixture *f, const DLTensor *q, const DLTensor *k, const DLTensor *v, const DLTensor *o,
                          const DLTensor *lse, const DLTensor *dout, const DLTensor *dq, const DLTensor *dk,
                          const DLTensor *dv, const kiln_attention_opts *opts) {
  return kiln_attention_backward(f->ctx, q, k, v, o, lse, dout, dq, dk, dv, NULL, 0, opts, NULL);
}
static kiln_status fx_size(fixture *f, const DLTensor *q, const DLTensor *k, const DLTensor *v, const DLTensor *o,
                           const DLTensor *lse, const DLTensor *dout, const DLTensor *dq, const DLTensor *dk,
                           const DLTensor *dv, const kiln_attention_opts *opts) {
  size_t bytes = 77;
  kiln_status st = kiln_attention_backward_workspace_size(f->ctx, q, k, v, o, lse, dout, dq, dk, dv, opts, &bytes);
  if (st != KILN_OK) assert_int_equal(bytes, 77); /* a failed query does not set bytes */
  return st;
}
#define FQ &f.q.t
#define FK &f.k.t
#define FV &f.v.t
#define FO &f.o.t
#define FL &f.lse.t
#define FDO &f.dout.t
#define FDQ &f.dq.t
#define FDK &f.dk.t
#define FDV &f.dv.t

/* A DLTensor copy that can be broken without touching the fixture. */
typedef struct dlcopy {
  DLTensor t;
  int64_t shape[8], strides[8];
} dlcopy;
static DLTensor *dl_copy(dlcopy *d, const DLTensor *t) {
  d->t = *t;
  memcpy(d->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
  if (t->strides) memcpy(d->strides, t->strides, sizeof(int64_t) * (size_t)t->ndim);
  d->t.shape = d->shape;
  d->t.strides = t->strides ? d->strides : NULL;
  return &d->t;
}
/* A DLTensor over data with the given shape and strides (NULL: compact). */
static DLTensor dl_make(void *data, DLDataType dt, int ndim, int64_t *shape, int64_t *strides) {
  DLTensor t = {.data = data, .device = {kDLCPU, 0}, .ndim = ndim, .dtype = dt, .shape = shape, .strides = strides};
  return t;
}

static void err_null_args(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  size_t bytes = 0;
  assert_kiln_fails(kiln_attention(NULL, FQ, FK, FV, FO, FL, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: ctx is NULL", "kiln_context_create");
  assert_kiln_fails(fx_fwd(&f, NULL, FK, FV, FO, FL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: q is NULL; pass a DLTensor");
  assert_kiln_fails(fx_fwd(&f, FQ, NULL, FV, FO, FL, NULL), KILN_ERROR_INVALID_ARGUMENT, "kiln_attention: k is NULL");
  assert_kiln_fails(fx_fwd(&f, FQ, FK, NULL, FO, FL, NULL), KILN_ERROR_INVALID_ARGUMENT, "kiln_attention: v is NULL");
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, NULL, FL, NULL), KILN_ERROR_INVALID_ARGUMENT, "kiln_attention: o is NULL");
  assert_kiln_fails(kiln_attention_backward(NULL, FQ, FK, FV, FO, FL, FDO, FDQ, FDK, FDV, NULL, 0, NULL, NULL),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_attention_backward: ctx is NULL");
  assert_kiln_fails(kiln_attention_backward_workspace_size(NULL, FQ, FK, FV, FO, FL, FDO, FDQ, FDK, FDV, NULL, &bytes),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_attention_backward_workspace_size: ctx is NULL");
  assert_kiln_fails(kiln_attention_backward_workspace_size(f.ctx, FQ, FK, FV, FO, FL, FDO, FDQ, FDK, FDV, NULL, NULL),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_attention_backward_workspace_size: bytes is NULL", "size_t*");
  assert_kiln_fails(fx_bwd(&f, NULL, FK, FV, FO, FL, FDO, FDQ, FDK, FDV, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: q is NULL");
  assert_kiln_fails(fx_bwd(&f, FQ, FK, NULL, FO, FL, FDO, FDQ, FDK, FDV, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: v is NULL");
  assert_kiln_fails(fx_bwd(&f, FQ, FK, FV, NULL, FL, FDO, FDQ, FDK, FDV, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: o is NULL");
  assert_kiln_fails(fx_bwd(&f, FQ, FK, FV, FO, FL, NULL, FDQ, FDK, FDV, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: dout is NULL");
  assert_kiln_fails(fx_size(&f, FQ, FK, FV, FO, FL, NULL, FDQ, FDK, FDV, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward_workspace_size: dout is NULL");
  fx_free(&f);
}

/* A GPU tensor on the CPU context, for each kind of argument. */
static void err_device(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  dlcopy x;
  DLTensor *t = dl_copy(&x, FK);
  t->device = (DLDevice){kDLCUDA, 0};
  assert_kiln_fails(fx_fwd(&f, FQ, t, FV, FO, FL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: k is on kDLCUDA:0 but the context is the CPU's", "CUDA context");
  t = dl_copy(&x, FL);
  t->device = (DLDevice){kDLCUDAManaged, 1};
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, FO, t, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: lse is on kDLCUDAManaged:1");
  t = dl_copy(&x, FDO);
  t->device = (DLDevice){kDLCUDA, 0};
  assert_kiln_fails(fx_bwd(&f, FQ, FK, FV, FO, FL, t, FDQ, FDK, FDV, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: dout is on kDLCUDA:0");
  t = dl_copy(&x, FDV);
  t->device = (DLDevice){kDLCUDA, 0};
  assert_kiln_fails(fx_bwd(&f, FQ, FK, FV, FO, FL, FDO, FDQ, FDK, t, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: dv is on kDLCUDA:0");
  fx_free(&f);
}

static void err_dtypes(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  dlcopy x, y, z, kc;
  DLTensor *q = dl_copy(&x, FQ);
  q->dtype = (DLDataType){kDLFloat, 64, 1};
  assert_kiln_fails(fx_fwd(&f, q, FK, FV, FO, FL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: q has dtype float64; expected float16, bfloat16 or float32");
  q->dtype = (DLDataType){kDLInt, 8, 1};
  assert_kiln_fails(fx_fwd(&f, q, FK, FV, FO, FL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: q has dtype int8; expected float16, bfloat16 or float32");
  DLTensor *k = dl_copy(&kc, FK);
  k->dtype = TEST_BF16;
  assert_kiln_fails(fx_fwd(&f, FQ, k, FV, FO, FL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: k has dtype bfloat16 but q has float16", "q, k and v must share one dtype");
  DLTensor *v = dl_copy(&z, FV);
  v->dtype = TEST_F32;
  assert_kiln_fails(fx_fwd(&f, FQ, FK, v, FO, FL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: v has dtype float32 but q has float16");
  DLTensor *o = dl_copy(&x, FO);
  o->dtype = TEST_BF16;
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, o, FL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: o has dtype bfloat16; expected float16 (q's dtype) or float32");
  o->dtype = (DLDataType){kDLInt, 32, 1};
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, o, FL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: o has dtype int32; expected float16 (q's dtype) or float32");
  /* f32 inputs: o must be f32 */
  atens q32, k32, v32, o16;
  at_compact(&q32, TEST_F32, 2, 1, 1, 5, 8);
  at_compact(&k32, TEST_F32, 2, 1, 1, 7, 8);
  at_compact(&v32, TEST_F32, 2, 1, 1, 7, 8);
  at_compact(&o16, TEST_F16, 2, 1, 1, 5, 8);
  at_fill(&q32), at_fill(&k32), at_fill(&v32);
  assert_kiln_fails(fx_fwd(&f, &q32.t, &k32.t, &v32.t, &o16.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: o has dtype float16; expected float32 (q's dtype)");
  at_free(&q32), at_free(&k32), at_free(&v32), at_free(&o16);
  /* lse f16 / f64 */
  DLTensor *l = dl_copy(&y, FL);
  l->dtype = TEST_F16;
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, FO, l, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: lse has dtype float16; expected float32");
  l->dtype = (DLDataType){kDLFloat, 64, 1};
  assert_kiln_fails(fx_bwd(&f, FQ, FK, FV, FO, l, FDO, FDQ, FDK, FDV, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: lse has dtype float64; expected float32");
  /* backward: dout and the gradients */
  DLTensor *g = dl_copy(&z, FDO);
  g->dtype = (DLDataType){kDLInt, 16, 1};
  assert_kiln_fails(fx_bwd(&f, FQ, FK, FV, FO, FL, g, FDQ, FDK, FDV, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: dout has dtype int16; expected float16, bfloat16 or float32");
  g = dl_copy(&z, FDQ);
  g->dtype = TEST_BF16;
  assert_kiln_fails(fx_bwd(&f, FQ, FK, FV, FO, FL, FDO, g, FDK, FDV, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: dq has dtype bfloat16; expected float32 or float16 (the inputs' dtype)");
  g = dl_copy(&z, FDK);
  g->dtype = (DLDataType){kDLFloat, 64, 1};
  assert_kiln_fails(fx_size(&f, FQ, FK, FV, FO, FL, FDO, FDQ, g, FDV, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward_workspace_size: dk has dtype float64; expected float32 or float16");
  g = dl_copy(&z, FDV);
  g->dtype = TEST_BF16;
  assert_kiln_fails(fx_bwd(&f, FQ, FK, FV, FO, FL, FDO, FDQ, FDK, g, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: dv has dtype bfloat16");
  /* the backward checks q/k/v/o like the forward */
  assert_kiln_fails(fx_bwd(&f, FQ, k, FV, FO, FL, FDO, FDQ, FDK, FDV, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: k has dtype bfloat16 but q has float16");
  fx_free(&f);
}

/* With f32 inputs a gradient must be f32: the message offers no second dtype (with f16/bf16
 * inputs it offers "float32 or" the inputs' dtype, err_dtypes). */
static void err_grad_dtype_f32_inputs(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  atens q, k, v, dout, g16, gbf;
  at_compact(&q, TEST_F32, 4, 1, 2, 5, 8);
  at_compact(&k, TEST_F32, 4, 1, 1, 7, 8);
  at_compact(&v, TEST_F32, 4, 1, 1, 7, 8);
  at_compact(&dout, TEST_F32, 4, 1, 2, 5, 8);
  at_compact(&g16, TEST_F16, 4, 1, 2, 5, 8);
  at_compact(&gbf, TEST_BF16, 4, 1, 1, 7, 8);
  at_fill(&q), at_fill(&k), at_fill(&v), at_fill(&dout);
  assert_kiln_fails(fx_bwd(&f, &q.t, &k.t, &v.t, FO, FL, &dout.t, &g16.t, NULL, NULL, NULL),
                    KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: dq has dtype float16; expected float32 (the inputs' dtype)");
  assert_kiln_fails(fx_bwd(&f, &q.t, &k.t, &v.t, FO, FL, &dout.t, NULL, &gbf.t, NULL, NULL),
                    KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: dk has dtype bfloat16; expected float32 (the inputs' dtype)");
  assert_kiln_fails(fx_size(&f, &q.t, &k.t, &v.t, FO, FL, &dout.t, NULL, NULL, &gbf.t, NULL),
                    KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward_workspace_size: dv has dtype bfloat16; expected float32 (the inputs' "
                    "dtype)");
  at_free(&q), at_free(&k), at_free(&v), at_free(&dout), at_free(&g16), at_free(&gbf);
  fx_free(&f);
}

static void err_rank(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  int64_t s1[1] = {80}, s5[5] = {1, 1, 2, 5, 8}, s3k[3] = {1, 7, 8}, s2o[2] = {10, 8};
  DLTensor q1 = dl_make(f.q.buf, TEST_F16, 1, s1, NULL), q5 = dl_make(f.q.buf, TEST_F16, 5, s5, NULL);
  assert_kiln_fails(fx_fwd(&f, &q1, FK, FV, FO, FL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: q has rank 1 (shape [80]); expected rank 4 [B, H, S, D], rank 3 [H, S, D] or "
                    "rank 2 [S, D]");
  assert_kiln_fails(fx_fwd(&f, &q5, FK, FV, FO, FL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: q has rank 5 (shape [1, 1, 2, 5, 8])");
  DLTensor k3 = dl_make(f.k.buf, TEST_F16, 3, s3k, NULL);
  assert_kiln_fails(fx_fwd(&f, FQ, &k3, FV, FO, FL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: k has rank 3 (shape [1, 7, 8]) but q has rank 4",
                    "q, k, v and o must all have the same rank");
  DLTensor v3 = dl_make(f.v.buf, TEST_F16, 3, s3k, NULL);
  assert_kiln_fails(fx_fwd(&f, FQ, FK, &v3, FO, FL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: v has rank 3 (shape [1, 7, 8]) but q has rank 4");
  DLTensor o2 = dl_make(f.o.buf, TEST_F32, 2, s2o, NULL);
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, &o2, FL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: o has rank 2 (shape [10, 8]) but q has rank 4");
  DLTensor dq2 = dl_make(f.dq.buf, TEST_F32, 2, s2o, NULL);
  assert_kiln_fails(fx_bwd(&f, FQ, FK, FV, FO, FL, FDO, &dq2, FDK, FDV, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: dq has rank 2 (shape [10, 8]) but q has rank 4",
                    "q, k, v, o, dout and the gradients must all have the same rank");
  DLTensor do2 = dl_make(f.dout.buf, TEST_F16, 2, s2o, NULL);
  assert_kiln_fails(fx_bwd(&f, FQ, FK, FV, FO, FL, &do2, FDQ, FDK, FDV, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: dout has rank 2");
  /* rank 0 */
  DLTensor q0 = dl_make(f.q.buf, TEST_F16, 0, NULL, NULL);
  assert_kiln_fails(fx_fwd(&f, &q0, FK, FV, FO, FL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: q has rank 0 (shape [])");
  fx_free(&f);
}

static void err_shapes(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  static uint16_t big16[4096];
  static float big32[4096];
  /* batch */
  int64_t sk[4] = {2, 1, 7, 8};
  DLTensor k = dl_make(big16, TEST_F16, 4, sk, NULL);
  assert_kiln_fails(fx_fwd(&f, FQ, &k, FV, FO, FL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: k has batch 2 (shape [2, 1, 7, 8]) but q has batch 1 (shape [1, 2, 5, 8])",
                    "batch sizes must match");
  /* D of k */
  sk[0] = 1, sk[3] = 4;
  assert_kiln_fails(fx_fwd(&f, FQ, &k, FV, FO, FL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: k has head dimension D = 4 (shape [1, 1, 7, 4]) but q has D = 8 (shape [1, 2, 5, "
                    "8])");
  /* Sk of v differs from k's */
  int64_t sv[4] = {1, 1, 6, 8};
  DLTensor v = dl_make(big16, TEST_F16, 4, sv, NULL);
  assert_kiln_fails(fx_fwd(&f, FQ, FK, &v, FO, FL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: v has shape [1, 1, 6, 8]; expected [1, 1, 7, 8]",
                    "sequence length Sk = 7 of k, shape [1, 1, 7, 8]");
  /* heads of v differ from k's; batch of v */
  sv[1] = 2, sv[2] = 7;
  assert_kiln_fails(fx_fwd(&f, FQ, FK, &v, FO, FL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: v has shape [1, 2, 7, 8]; expected [1, 1, 7, 8]");
  sv[0] = 3, sv[1] = 1;
  assert_kiln_fails(fx_fwd(&f, FQ, FK, &v, FO, FL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: v has shape [3, 1, 7, 8]; expected [1, 1, 7, 8]");
  /* Hq % Hkv */
  int64_t sq3[4] = {1, 3, 5, 8}, sk2[4] = {1, 2, 7, 8}, so3[4] = {1, 3, 5, 8};
  DLTensor q3 = dl_make(big16, TEST_F16, 4, sq3, NULL), k2 = dl_make(big16 + 1024, TEST_F16, 4, sk2, NULL);
  DLTensor v2 = dl_make(big16 + 2048, TEST_F16, 4, sk2, NULL), o3 = dl_make(big32, TEST_F32, 4, so3, NULL);
  assert_kiln_fails(fx_fwd(&f, &q3, &k2, &v2, &o3, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: q has Hq = 3 heads and k has Hkv = 2; Hq must be a multiple of Hkv");
  assert_kiln_fails(fx_size(&f, &q3, &k2, &v2, &o3, NULL, FDO, FDQ, NULL, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward_workspace_size: q has Hq = 3 heads and k has Hkv = 2");
  /* o: Dv, Sq, heads */
  int64_t so[4] = {1, 2, 5, 4};
  DLTensor o = dl_make(big32, TEST_F32, 4, so, NULL);
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, &o, FL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: o has shape [1, 2, 5, 4]; expected [1, 2, 5, 8] ([B, Hq, Sq, Dv] from q and v)");
  so[2] = 6, so[3] = 8;
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, &o, FL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: o has shape [1, 2, 6, 8]; expected [1, 2, 5, 8]");
  so[1] = 1, so[2] = 5;
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, &o, FL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: o has shape [1, 1, 5, 8]; expected [1, 2, 5, 8]");
  /* a zero dimension */
  int64_t sz[4] = {1, 2, 0, 8};
  DLTensor qz = dl_make(big16, TEST_F16, 4, sz, NULL);
  assert_kiln_fails(fx_fwd(&f, &qz, FK, FV, FO, FL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: q has shape [1, 2, 0, 8]; every dimension must be >= 1");
  int64_t skz[4] = {1, 1, 0, 8};
  DLTensor kz = dl_make(NULL, TEST_F16, 4, skz, NULL), vz = dl_make(NULL, TEST_F16, 4, skz, NULL);
  assert_kiln_fails(fx_fwd(&f, FQ, &kz, &vz, FO, FL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: k has shape [1, 1, 0, 8]; every dimension must be >= 1");
  /* backward: dout, dq, dk, dv shapes */
  int64_t sdo[4] = {1, 2, 5, 7};
  DLTensor dout = dl_make(big16, TEST_F16, 4, sdo, NULL);
  assert_kiln_fails(fx_bwd(&f, FQ, FK, FV, FO, FL, &dout, FDQ, FDK, FDV, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: dout has shape [1, 2, 5, 7]; expected [1, 2, 5, 8] (the shape of o)");
  int64_t sdq[4] = {1, 2, 4, 8};
  DLTensor dq = dl_make(big32, TEST_F32, 4, sdq, NULL);
  assert_kiln_fails(fx_bwd(&f, FQ, FK, FV, FO, FL, FDO, &dq, FDK, FDV, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: dq has shape [1, 2, 4, 8]; expected [1, 2, 5, 8] (the shape of q)");
  int64_t sdk[4] = {1, 2, 7, 8}; /* Hq heads instead of Hkv */
  DLTensor dk = dl_make(big16, TEST_F16, 4, sdk, NULL);
  assert_kiln_fails(fx_bwd(&f, FQ, FK, FV, FO, FL, FDO, NULL, &dk, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: dk has shape [1, 2, 7, 8]; expected [1, 1, 7, 8] (the shape of k)");
  DLTensor dv = dl_make(big32, TEST_F32, 4, sdk, NULL);
  assert_kiln_fails(fx_bwd(&f, FQ, FK, FV, FO, FL, FDO, NULL, NULL, &dv, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: dv has shape [1, 2, 7, 8]; expected [1, 1, 7, 8] (the shape of v)");
  fx_free(&f);
}

/* 1 <= D, Dv <= 256 (257 and 300 rejected, 256 accepted). */
static void err_head_dims(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  static uint16_t qb[2 * 300], kb[3 * 300], vb[3 * 300];
  static float ob[2 * 300];
  test_fill(qb, TEST_F16, 600), test_fill(kb, TEST_F16, 900), test_fill(vb, TEST_F16, 900);
  int64_t sq[4] = {1, 1, 2, 257}, sk[4] = {1, 1, 3, 257}, sv[4] = {1, 1, 3, 8}, so[4] = {1, 1, 2, 8};
  DLTensor q = dl_make(qb, TEST_F16, 4, sq, NULL), k = dl_make(kb, TEST_F16, 4, sk, NULL);
  DLTensor v = dl_make(vb, TEST_F16, 4, sv, NULL), o = dl_make(ob, TEST_F32, 4, so, NULL);
  assert_kiln_fails(kiln_attention(ctx, &q, &k, &v, &o, NULL, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: q has head dimension D = 257 (shape [1, 1, 2, 257]); expected 1 <= D <= 256");
  sq[3] = sk[3] = 256;
  test_poison(ob, TEST_F32, 2 * 300);
  assert_kiln_ok(kiln_attention(ctx, &q, &k, &v, &o, NULL, NULL, NULL));
  sv[3] = so[3] = 300;
  assert_kiln_fails(kiln_attention(ctx, &q, &k, &v, &o, NULL, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: v has value dimension Dv = 300 (shape [1, 1, 3, 300]); expected 1 <= Dv <= 256");
  sv[3] = so[3] = 256;
  assert_kiln_ok(kiln_attention(ctx, &q, &k, &v, &o, NULL, NULL, NULL));
  kiln_context_destroy(ctx);
}

static void err_lse(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  static float lb[256];
  /* shape */
  int64_t sl[4] = {1, 2, 6, 1}, st[4] = {0, 0, 0, 0};
  DLTensor l = dl_make(lb, TEST_F32, 3, sl, NULL);
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, FO, &l, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: lse has shape [1, 2, 6]; expected [1, 2, 5] ([B, Hq, Sq] from q, rank 3 for a "
                    "rank-4 q)");
  sl[2] = 5;
  l.ndim = 4; /* [1, 2, 5, 1] */
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, FO, &l, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: lse has shape [1, 2, 5, 1]; expected [1, 2, 5]");
  l.ndim = 2; /* [1, 2] */
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, FO, &l, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: lse has shape [1, 2]; expected [1, 2, 5]");
  /* last stride not 1: [1, 2, 5] with strides {20, 10, 2} */
  l.ndim = 3;
  l.strides = st + 1;
  st[1] = 20, st[2] = 10, st[3] = 2;
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, FO, &l, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: lse has stride 2 in its last (Sq) dimension; expected 1");
  assert_kiln_fails(fx_bwd(&f, FQ, FK, FV, FO, &l, FDO, FDQ, FDK, FDV, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: lse has stride 2 in its last (Sq) dimension");
  /* rank-2 q: lse is [Sq]; [1, Sq] is refused */
  atens q2, k2, v2, o2;
  at_compact(&q2, TEST_F16, 2, 1, 1, 5, 8);
  at_compact(&k2, TEST_F16, 2, 1, 1, 7, 8);
  at_compact(&v2, TEST_F16, 2, 1, 1, 7, 8);
  at_compact(&o2, TEST_F32, 2, 1, 1, 5, 8);
  at_fill(&q2), at_fill(&k2), at_fill(&v2), at_poison(&o2);
  int64_t s2[2] = {1, 5};
  DLTensor l2 = dl_make(lb, TEST_F32, 2, s2, NULL);
  assert_kiln_fails(fx_fwd(&f, &q2.t, &k2.t, &v2.t, &o2.t, &l2, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: lse has shape [1, 5]; expected [5] ([B, Hq, Sq] from q, rank 1 for a rank-2 q)");
  l2.ndim = 1;
  l2.shape = s2 + 1;
  assert_kiln_ok(fx_fwd(&f, &q2.t, &k2.t, &v2.t, &o2.t, &l2, NULL));
  at_free(&q2), at_free(&k2), at_free(&v2), at_free(&o2);
  /* the backward needs an lse */
  assert_kiln_fails(fx_bwd(&f, FQ, FK, FV, FO, NULL, FDO, FDQ, FDK, FDV, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: lse is NULL", "the backward needs the forward's logsumexp");
  assert_kiln_fails(fx_size(&f, FQ, FK, FV, FO, NULL, FDO, FDQ, FDK, FDV, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward_workspace_size: lse is NULL");
  fx_free(&f);
}

/* Outputs overlapping inputs or each other; adjacent buffers are fine. */
static void err_overlap(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  /* o inside q (q is 80 f16 = 160 bytes) */
  DLTensor o = f.o.t;
  o.data = f.q.buf;
  o.dtype = TEST_F16;
  o.strides = NULL;
  int64_t so[4] = {1, 2, 5, 8};
  o.shape = so;
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, &o, FL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: o overlaps q in memory; the output must be a separate buffer");
  /* one pool: q [0, 160), then o, lse, ... */
  static _Alignas(64) unsigned char pool[8192];
  test_fill(pool, TEST_F16, 80);
  DLTensor q = dl_make(pool, TEST_F16, 4, f.q.shape, NULL);
  DLTensor oo = dl_make(pool + 158, TEST_F16, 4, so, NULL); /* last 2 bytes of q */
  assert_kiln_fails(fx_fwd(&f, &q, FK, FV, &oo, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT, "o overlaps q");
  oo.data = pool + 160; /* adjacent: fine; o is [160, 320) */
  assert_kiln_ok(fx_fwd(&f, &q, FK, FV, &oo, NULL, NULL));
  /* o over k and over v */
  DLTensor ok = dl_make(f.k.buf, TEST_F16, 4, so, NULL);
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, &ok, FL, NULL), KILN_ERROR_INVALID_ARGUMENT, "kiln_attention: o overlaps k");
  DLTensor ov = dl_make((char *)f.v.buf + 8, TEST_F16, 4, so, NULL);
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, &ov, FL, NULL), KILN_ERROR_INVALID_ARGUMENT, "kiln_attention: o overlaps v");
  /* lse over o, over q, over v */
  int64_t sl[3] = {1, 2, 5};
  DLTensor l = dl_make(pool + 316, TEST_F32, 3, sl, NULL);
  assert_kiln_fails(fx_fwd(&f, &q, FK, FV, &oo, &l, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: lse overlaps o in memory");
  l.data = pool + 320;
  assert_kiln_ok(fx_fwd(&f, &q, FK, FV, &oo, &l, NULL)); /* lse [320, 360) */
  l.data = pool;
  assert_kiln_fails(fx_fwd(&f, &q, FK, FV, &oo, &l, NULL), KILN_ERROR_INVALID_ARGUMENT, "lse overlaps q");
  l.data = f.v.buf;
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, FO, &l, NULL), KILN_ERROR_INVALID_ARGUMENT, "lse overlaps v");
  /* backward: gradients over inputs and over each other */
  l.data = pool + 320;
  static _Alignas(64) unsigned char gpool[8192];
  DLTensor dq = dl_make(gpool, TEST_F32, 4, f.q.shape, NULL);        /* [0, 320) */
  DLTensor dk = dl_make(gpool + 320, TEST_F16, 4, f.k.shape, NULL);  /* [320, 432) */
  DLTensor dv = dl_make(gpool + 432, TEST_F32, 4, f.v.shape, NULL);  /* [432, 656) */
  assert_kiln_ok(fx_bwd(&f, &q, FK, FV, &oo, &l, FDO, &dq, &dk, &dv, NULL));
  DLTensor bad = dl_make(pool + 100, TEST_F32, 4, f.q.shape, NULL);
  assert_kiln_fails(fx_bwd(&f, &q, FK, FV, &oo, &l, FDO, &bad, &dk, &dv, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: dq overlaps q in memory");
  bad = dl_make(pool + 200, TEST_F32, 4, f.q.shape, NULL);
  assert_kiln_fails(fx_bwd(&f, &q, FK, FV, &oo, &l, FDO, &bad, &dk, &dv, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: dq overlaps o in memory");
  bad = dl_make(f.dout.buf, TEST_F32, 4, f.q.shape, NULL);
  assert_kiln_fails(fx_bwd(&f, &q, FK, FV, &oo, &l, FDO, &bad, &dk, &dv, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: dq overlaps dout in memory");
  bad = dl_make(gpool + 300, TEST_F16, 4, f.k.shape, NULL);
  assert_kiln_fails(fx_bwd(&f, &q, FK, FV, &oo, &l, FDO, &dq, &bad, &dv, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: dk overlaps dq in memory");
  bad = dl_make(f.k.buf, TEST_F16, 4, f.k.shape, NULL);
  assert_kiln_fails(fx_bwd(&f, &q, FK, FV, &oo, &l, FDO, NULL, &bad, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: dk overlaps k in memory");
  bad = dl_make(gpool + 400, TEST_F32, 4, f.v.shape, NULL);
  assert_kiln_fails(fx_bwd(&f, &q, FK, FV, &oo, &l, FDO, &dq, &dk, &bad, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: dv overlaps dk in memory");
  bad = dl_make(pool + 320, TEST_F32, 4, f.v.shape, NULL);
  assert_kiln_fails(fx_bwd(&f, &q, FK, FV, &oo, &l, FDO, NULL, NULL, &bad, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: dv overlaps lse in memory");
  bad = dl_make(gpool, TEST_F32, 4, f.v.shape, NULL); /* dv == dq's memory */
  assert_kiln_fails(fx_bwd(&f, &q, FK, FV, &oo, &l, FDO, &dq, NULL, &bad, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: dv overlaps dq in memory");
  fx_free(&f);
}

/* An output whose elements share memory (stride 0 or strides that collide) is refused. */
static void err_output_self_overlap(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  static float ob[1024];
  int64_t so[4] = {1, 2, 5, 8}, st[4] = {80, 0, 8, 1};
  DLTensor o = dl_make(ob, TEST_F32, 4, so, st);
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, &o, FL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: o (shape [1, 2, 5, 8]) has stride 0 in dimension 1, so some of its elements "
                    "share memory",
                    "stride >= 1 there", "contiguous");
  st[1] = 8; /* heads and rows collide: row 1 of head 0 is row 0 of head 1 */
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, &o, FL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: o (shape [1, 2, 5, 8]) has stride 8 in dimension 2", "stride >= 16 there");
  st[1] = 40; /* distinct: fine; a batch of 1 may have any batch stride */
  st[0] = 0;
  test_poison(ob, TEST_F32, 1024);
  assert_kiln_ok(fx_fwd(&f, FQ, FK, FV, &o, NULL, NULL));
  st[3] = 0; /* every element of a row at one address */
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, &o, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: o (shape [1, 2, 5, 8]) has stride 0 in dimension 3");
  /* lse with stride 0 over heads */
  int64_t sl[3] = {1, 2, 5}, stl[3] = {10, 0, 1};
  DLTensor l = dl_make(ob + 512, TEST_F32, 3, sl, stl);
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, FO, &l, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: lse (shape [1, 2, 5]) has stride 0 in dimension 1");
  /* gradients: dk's rows collide */
  int64_t sdk[4] = {1, 1, 7, 8}, stdk[4] = {56, 56, 4, 1};
  static uint16_t dkb[1024];
  DLTensor dk = dl_make(dkb, TEST_F16, 4, sdk, stdk);
  assert_kiln_fails(fx_bwd(&f, FQ, FK, FV, FO, FL, FDO, NULL, &dk, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: dk (shape [1, 1, 7, 8]) has stride 4 in dimension 2",
                    "stride >= 8 there");
  /* inputs may broadcast through stride 0 */
  int64_t skk[4] = {0, 0, 8, 1};
  DLTensor kb = dl_make(f.k.buf, TEST_F16, 4, f.k.shape, skk);
  int64_t sqb[4] = {80, 0, 8, 1}; /* both query heads read the same rows */
  DLTensor qb = dl_make(f.q.buf, TEST_F16, 4, f.q.shape, sqb);
  at_poison(&f.o);
  assert_kiln_ok(fx_fwd(&f, &qb, &kb, FV, FO, FL, NULL));
  assert_memory_equal(f.o.buf, (float *)f.o.buf + 40, 40 * sizeof(float)); /* identical heads */
  fx_free(&f);
}

/* Options: algo out of range, GPU algos on the CPU context, scale, causal, deterministic. */
static void err_opts(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  kiln_attention_opts o = kiln_attention_opts_default();
  o.algo = (kiln_attention_algo)42;
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, FO, FL, &o), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: opts->algo is 42; expected KILN_ATTENTION_AUTO, _SMEM, _FLASH, _FLASH_MMA_SYNC, "
                    "_FLASH_WGMMA or _FLASH_DECODE");
  o.algo = (kiln_attention_algo)-1;
  assert_kiln_fails(fx_bwd(&f, FQ, FK, FV, FO, FL, FDO, FDQ, FDK, FDV, &o), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: opts->algo is -1");
  assert_kiln_fails(fx_size(&f, FQ, FK, FV, FO, FL, FDO, FDQ, FDK, FDV, &o), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward_workspace_size: opts->algo is -1");
  static const struct { kiln_attention_algo algo; const char *name; } gpu[5] = {
      {KILN_ATTENTION_SMEM, "algo SMEM"},
      {KILN_ATTENTION_FLASH, "algo FLASH"},
      {KILN_ATTENTION_FLASH_MMA_SYNC, "algo FLASH_MMA_SYNC"},
      {KILN_ATTENTION_FLASH_WGMMA, "algo FLASH_WGMMA"},
      {KILN_ATTENTION_FLASH_DECODE, "algo FLASH_DECODE"}};
  for (int i = 0; i < 5; i++) {
    o.algo = gpu[i].algo;
    assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, FO, FL, &o), KILN_ERROR_UNSUPPORTED, "kiln_attention: ", gpu[i].name,
                      "needs a CUDA device but the context is the CPU's", "KILN_ATTENTION_AUTO");
    assert_kiln_fails(fx_bwd(&f, FQ, FK, FV, FO, FL, FDO, FDQ, FDK, FDV, &o), KILN_ERROR_UNSUPPORTED,
                      "kiln_attention_backward: ", gpu[i].name, "the context is the CPU's");
  }
  o = kiln_attention_opts_default();
  static const struct { float scale; const char *text; } bad_scales[4] = {
      {NAN, "opts->scale is nan"}, {INFINITY, "opts->scale is inf"}, {-INFINITY, "opts->scale is -inf"},
      {-0.5f, "opts->scale is -0.5"}};
  for (int i = 0; i < 4; i++) {
    o.scale = bad_scales[i].scale;
    assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, FO, FL, &o), KILN_ERROR_INVALID_ARGUMENT, "kiln_attention: ",
                      bad_scales[i].text, "expected a finite value > 0, or 0 for the default 1/sqrt(D)");
    assert_kiln_fails(fx_bwd(&f, FQ, FK, FV, FO, FL, FDO, FDQ, FDK, FDV, &o), KILN_ERROR_INVALID_ARGUMENT,
                      "kiln_attention_backward: ", bad_scales[i].text);
  }
  o = kiln_attention_opts_default();
  o.causal = 2;
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, FO, FL, &o), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: opts->causal is 2; expected 0 (no mask) or 1 (causal)");
  o.causal = -1;
  assert_kiln_fails(fx_bwd(&f, FQ, FK, FV, FO, FL, FDO, FDQ, FDK, FDV, &o), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: opts->causal is -1");
  o = kiln_attention_opts_default();
  o.deterministic = 2;
  assert_kiln_fails(fx_bwd(&f, FQ, FK, FV, FO, FL, FDO, FDQ, FDK, FDV, &o), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: opts->deterministic is 2; expected 0 or 1");
  o.deterministic = -1;
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, FO, FL, &o), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: opts->deterministic is -1");
  /* tile_m: 0, or 128 / 192 with FLASH_WGMMA only (the backward checks it too) */
  static const struct { kiln_attention_algo algo; int tile_m; const char *text; } bad_tiles[4] = {
      {KILN_ATTENTION_AUTO, 128, "opts->tile_m is 128 with algo AUTO"},
      {KILN_ATTENTION_FLASH, 192, "opts->tile_m is 192 with algo FLASH"},
      {KILN_ATTENTION_FLASH_WGMMA, 64, "opts->tile_m is 64 with algo FLASH_WGMMA"},
      {KILN_ATTENTION_FLASH_WGMMA, -1, "opts->tile_m is -1 with algo FLASH_WGMMA"}};
  for (int i = 0; i < 4; i++) {
    o = kiln_attention_opts_default();
    o.algo = bad_tiles[i].algo, o.tile_m = bad_tiles[i].tile_m;
    assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, FO, FL, &o), KILN_ERROR_INVALID_ARGUMENT, "kiln_attention: ",
                      bad_tiles[i].text, "expected 0 (the query tile chosen per problem), or with algo "
                      "KILN_ATTENTION_FLASH_WGMMA 128 or 192 (192 for head dims <= 64)");
    assert_kiln_fails(fx_bwd(&f, FQ, FK, FV, FO, FL, FDO, FDQ, FDK, FDV, &o), KILN_ERROR_INVALID_ARGUMENT,
                      "kiln_attention_backward: ", bad_tiles[i].text);
  }
  o = kiln_attention_opts_default();
  o.algo = KILN_ATTENTION_FLASH_WGMMA, o.tile_m = 192; /* valid, but a GPU algorithm */
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, FO, FL, &o), KILN_ERROR_UNSUPPORTED, "kiln_attention: ",
                    "algo FLASH_WGMMA needs a CUDA device");
  /* the good values work: AUTO, a small positive scale, causal 1, deterministic 1 */
  o = kiln_attention_opts_default();
  o.scale = 1e-3f, o.causal = 1, o.deterministic = 1;
  assert_kiln_ok(fx_fwd(&f, FQ, FK, FV, FO, FL, &o));
  assert_kiln_ok(fx_bwd(&f, FQ, FK, FV, FO, FL, FDO, FDQ, FDK, FDV, &o));
  fx_free(&f);
}

/* Backward-only rules: at least one gradient; the size query validates like the op and sets
 * bytes (0 on the CPU); workspace NULL / any pointer with 0 bytes works on the CPU. */
static void err_backward_args(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  assert_kiln_ok(fx_fwd(&f, FQ, FK, FV, FO, FL, NULL));
  assert_kiln_fails(fx_bwd(&f, FQ, FK, FV, FO, FL, FDO, NULL, NULL, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: dq, dk and dv are all NULL; pass at least one gradient to compute");
  assert_kiln_fails(fx_size(&f, FQ, FK, FV, FO, FL, FDO, NULL, NULL, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward_workspace_size: dq, dk and dv are all NULL");
  size_t bytes = 99;
  assert_kiln_ok(kiln_attention_backward_workspace_size(f.ctx, FQ, FK, FV, FO, FL, FDO, FDQ, FDK, FDV, NULL, &bytes));
  assert_int_equal(bytes, 0);
  kiln_attention_opts det = kiln_attention_opts_default();
  det.deterministic = 1;
  bytes = 99;
  assert_kiln_ok(kiln_attention_backward_workspace_size(f.ctx, FQ, FK, FV, FO, FL, FDO, NULL, FDK, NULL, &det, &bytes));
  assert_int_equal(bytes, 0);
  /* no workspace needed: NULL with 0 bytes, or any pointer and size, works */
  static _Alignas(256) unsigned char ws[512];
  assert_kiln_ok(kiln_attention_backward(f.ctx, FQ, FK, FV, FO, FL, FDO, FDQ, FDK, FDV, NULL, 0, NULL, NULL));
  assert_kiln_ok(kiln_attention_backward(f.ctx, FQ, FK, FV, FO, FL, FDO, FDQ, FDK, FDV, ws + 1, 3, NULL, NULL));
  assert_kiln_ok(kiln_attention_backward(f.ctx, FQ, FK, FV, FO, FL, FDO, FDQ, FDK, FDV, ws, sizeof ws, &det, NULL));
  fx_free(&f);
}

/* Dimensions >= 2^31 and spans beyond the address space, with a dummy data pointer: rejected
 * before any access (an access would crash). */
static void err_huge_dims(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  void *dummy = (void *)(uintptr_t)0x10000; /* never mapped */
  const int64_t big = (int64_t)INT32_MAX + 1;
  int64_t sq[4] = {1, 1, big, 8}, so[4] = {1, 1, big, 8};
  DLTensor q = dl_make(dummy, TEST_F16, 4, sq, NULL), o = dl_make(dummy, TEST_F32, 4, so, NULL);
  assert_kiln_fails(fx_fwd(&f, &q, FK, FV, &o, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: q has shape [1, 1, 2147483648, 8]; each dimension must be < 2^31");
  int64_t sk[4] = {1, 1, big, 8};
  DLTensor k = dl_make(dummy, TEST_F16, 4, sk, NULL), v = dl_make(dummy, TEST_F16, 4, sk, NULL);
  assert_kiln_fails(fx_fwd(&f, FQ, &k, &v, FO, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: k has shape [1, 1, 2147483648, 8]; each dimension must be < 2^31");
  int64_t sb[4] = {big, 1, 1, 8};
  DLTensor qb = dl_make(dummy, TEST_F16, 4, sb, NULL);
  assert_kiln_fails(fx_bwd(&f, &qb, FK, FV, FO, FL, FDO, FDQ, NULL, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention_backward: q has shape [2147483648, 1, 1, 8]; each dimension must be < 2^31");
  /* spans */
  int64_t st[4] = {0, INT64_MAX / 2, 8, 1};
  DLTensor qs = dl_make(dummy, TEST_F16, 4, f.q.shape, st);
  assert_kiln_fails(fx_fwd(&f, &qs, FK, FV, FO, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: q (shape [1, 2, 5, 8]) spans more bytes than a 64-bit address holds");
  int64_t sto[4] = {80, 40, (int64_t)1 << 61, 1};
  DLTensor os = dl_make(dummy, TEST_F32, 4, f.o.shape, sto);
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, &os, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: o (shape [1, 2, 5, 8]) spans more bytes");
  DLTensor wrap = dl_make((void *)(UINTPTR_MAX - 63), TEST_F16, 4, f.k.shape, NULL);
  assert_kiln_fails(fx_fwd(&f, FQ, &wrap, FV, FO, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: k (shape [1, 1, 7, 8]) spans more bytes than a 64-bit address holds");
  int64_t stl[3] = {0, (int64_t)1 << 62, 1}, sl[3] = {1, 2, 5}; /* a head stride of 2^62 floats */
  DLTensor l = dl_make(dummy, TEST_F32, 3, sl, stl);
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, FO, &l, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_attention: lse (shape [1, 2, 5]) spans more bytes");
  fx_free(&f);
}

/* A call that fails validation writes nothing: o, lse and the gradients keep their poison. */
static void err_failure_leaves_outputs_untouched(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  dlcopy x;
  DLTensor *l = dl_copy(&x, FL);
  l->dtype = TEST_F16; /* o is fine, lse is not: o must stay untouched */
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, FO, l, NULL), KILN_ERROR_INVALID_ARGUMENT, "lse has dtype float16");
  kiln_attention_opts o = kiln_attention_opts_default();
  o.algo = KILN_ATTENTION_FLASH;
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, FO, FL, &o), KILN_ERROR_UNSUPPORTED, "algo FLASH");
  DLTensor lo = dl_make(f.o.buf, TEST_F32, 3, f.lse.shape, NULL); /* lse over o */
  assert_kiln_fails(fx_fwd(&f, FQ, FK, FV, FO, &lo, NULL), KILN_ERROR_INVALID_ARGUMENT, "lse overlaps o");
  DLTensor *dv = dl_copy(&x, FDV);
  dv->dtype = TEST_BF16; /* dq and dk are fine, dv is not */
  assert_kiln_fails(fx_bwd(&f, FQ, FK, FV, FO, FL, FDO, FDQ, FDK, dv, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "dv has dtype bfloat16");
  assert_kiln_fails(fx_bwd(&f, FQ, FK, FV, FO, FL, FDO, FDQ, FDK, FDQ, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "dv has shape [1, 2, 5, 8]");
  const atens *outs[5] = {&f.o, &f.lse, &f.dq, &f.dk, &f.dv};
  static const char *const names[5] = {"o", "lse", "dq", "dk", "dv"};
  for (int i = 0; i < 5; i++)
    for (int64_t j = 0; j < outs[i]->total; j++)
      if (!is_poison(outs[i], j)) fail_msg("a failed call wrote %s element %" PRId64, names[i], j);
  fx_free(&f);
}

int main(int argc, char **argv) {
  test_apply_filter(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(oracle_matches_finite_differences),
      cmocka_unit_test(fwd_ragged_lengths),
      cmocka_unit_test(fwd_dtypes),
      cmocka_unit_test(fwd_gqa_mqa),
      cmocka_unit_test(fwd_head_dims),
      cmocka_unit_test(fwd_strided_bshd),
      cmocka_unit_test(fwd_strided_d_major),
      cmocka_unit_test(fwd_rank2_rank3),
      cmocka_unit_test(fwd_scale),
      cmocka_unit_test(fwd_causal_masked_rows),
      cmocka_unit_test(fwd_lse_layouts),
      cmocka_unit_test(fwd_deterministic),
      cmocka_unit_test(fwd_cuda_host),
      cmocka_unit_test(bwd_ragged_lengths),
      cmocka_unit_test(bwd_dtypes),
      cmocka_unit_test(bwd_gqa_mqa),
      cmocka_unit_test(bwd_head_dims),
      cmocka_unit_test(bwd_partial_grads),
      cmocka_unit_test(bwd_strided_bshd),
      cmocka_unit_test(bwd_strided_d_major),
      cmocka_unit_test(bwd_rank2_rank3),
      cmocka_unit_test(bwd_causal_masked_rows),
      cmocka_unit_test(bwd_deterministic),
      cmocka_unit_test(err_null_args),
      cmocka_unit_test(err_device),
      cmocka_unit_test(err_dtypes),
      cmocka_unit_test(err_grad_dtype_f32_inputs),
      cmocka_unit_test(err_rank),
      cmocka_unit_test(err_shapes),
      cmocka_unit_test(err_head_dims),
      cmocka_unit_test(err_lse),
      cmocka_unit_test(err_overlap),
      cmocka_unit_test(err_output_self_overlap),
      cmocka_unit_test(err_opts),
      cmocka_unit_test(err_backward_args),
      cmocka_unit_test(err_huge_dims),
      cmocka_unit_test(err_failure_leaves_outputs_untouched),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
