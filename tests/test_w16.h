/*
 * test_w16.h — helpers of the W·A16 host tests (test_int4_host.c, test_qkv_host.c): random
 * native INT4 weights built here (never by kiln), their dequantization from the packed codes
 * (own code, in double: exact), the float64 reference product, and the output check.
 *
 * The check is two-fold: SPEC §5's relative Frobenius error (f32 out 1e-4, f16 2e-3, bf16
 * 6e-3), and, sharper, every element within half an ulp of its dtype (plus the double sum's own
 * error) of the float64 reference: the CPU path sums in double and rounds once. Outputs are
 * poisoned with NaN first; elements outside the view (padding) must keep the poison.
 * Included after test_util.h and test_matrix.h.
 */
#ifndef KILN_TEST_W16_H
#define KILN_TEST_W16_H

#include <inttypes.h>
#include <stdbool.h>

#include "test_matrix.h"

static uint64_t w16_rng = 0x243F6A8885A308D3ull;
static inline uint32_t w16_rnd(void) {
  w16_rng ^= w16_rng >> 12, w16_rng ^= w16_rng << 25, w16_rng ^= w16_rng >> 27;
  return (uint32_t)((w16_rng * 2685821657736338717ull) >> 32);
}

static inline kiln_context *w16_cpu_ctx(void) {
  kiln_context *ctx = NULL;
  assert_kiln_ok(kiln_context_create(kDLCPU, 0, &ctx));
  return ctx;
}
/* A host tensor descriptor over caller-owned shape / strides (for the error tests). */
static inline DLTensor w16_dl(void *data, DLDataType dt, int ndim, int64_t *shape, int64_t *strides) {
  return (DLTensor){.data = data, .device = {kDLCPU, 0}, .ndim = ndim, .dtype = dt, .shape = shape, .strides = strides};
}

/* A random nonzero f16 scale of either sign, magnitude 0.01 .. 0.06. */
static inline uint16_t w16_scale(void) {
  const float m = 0.01f + (float)(w16_rnd() % 1000) / 20000.0f;
  return kiln_f32_to_f16(w16_rnd() % 2 ? m : -m);
}

/* A native weight with its own buffers. */
typedef struct tq {
  kiln_qweight q;
} tq;

/* Random codes, f16 scales and zeros: symmetric (zeros 8) or asymmetric (zeros 0..16, 16 as
 * GPTQ v1 can store); perm a random permutation of 0..K-1 when with_perm. */
static inline void tq_make(tq *w, int64_t K, int64_t N, int64_t G, bool sym, bool with_perm) {
  size_t cb, sb, zb, pb;
  assert_int_equal(kiln_qweight_bytes(K, N, G, &cb, &sb, &zb, &pb), KILN_OK);
  memset(w, 0, sizeof *w);
  w->q.k = K, w->q.n = N, w->q.group = G;
  w->q.codes = malloc(cb), w->q.scales = malloc(sb), w->q.zeros = malloc(zb);
  w->q.perm = with_perm ? malloc(pb) : NULL;
  w->q.device = (DLDevice){kDLCPU, 0};
  assert_non_null(w->q.codes), assert_non_null(w->q.scales), assert_non_null(w->q.zeros);
  for (size_t i = 0; i < cb / 4; i++) w->q.codes[i] = w16_rnd();
  for (size_t i = 0; i < sb / 2; i++) {
    w->q.scales[i] = w16_scale();
    w->q.zeros[i] = sym ? 8 : (uint8_t)(w16_rnd() % 17);
  }
  if (w->q.perm) {
    for (int64_t i = 0; i < K; i++) w->q.perm[i] = (int32_t)i;
    for (int64_t i = K - 1; i > 0; i--) {
      const int64_t j = w16_rnd() % (uint32_t)(i + 1);
      const int32_t t = w->q.perm[i];
      w->q.perm[i] = w->q.perm[j], w->q.perm[j] = t;
    }
  }
}
static inline void tq_free(tq *w) { free(w->q.codes), free(w->q.scales), free(w->q.zeros), free(w->q.perm); }

/* wd [K][N] (stored rows) = f16(scale) · (q − z), decoded here from the packed words. */
static inline double *tq_dequant(const kiln_qweight *q) {
  const int64_t K = q->k, N = q->n, G = q->group;
  double *wd = malloc(sizeof(double) * (size_t)(K * N));
  assert_non_null(wd);
  for (int64_t r = 0; r < K; r++)
    for (int64_t n = 0; n < N; n++) {
      const uint32_t word = q->codes[(r / 8) * N + n];
      const int code = (int)((word >> (4 * (r % 8))) & 15u);
      const int64_t g = (r / G) * N + n;
      wd[r * N + n] = (double)kiln_f16_to_f32(q->scales[g]) * (double)(code - (int)q->zeros[g]);
    }
  return wd;
}

/* The float64 reference of y = x·W: ref[m·N + n] = Σ_r x[m, src(r)] · wd[r·N + n], with
 * src(r) = perm ? perm[r] : r, times scale[n] (NULL: 1); mag the sum of |terms| (for the bound
 * on the double sum's error). Caller frees both (one block: free(*ref)). */
static inline void w16_reference(const tmat *x, const double *wd, const int32_t *perm, int64_t N,
                                 const double *scale, double **ref, double **mag) {
  const int64_t M = x->rows, K = x->cols;
  double *r = malloc(sizeof(double) * (size_t)(2 * M * N));
  assert_non_null(r);
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      double s = 0, a = 0;
      for (int64_t k = 0; k < K; k++) {
        const double t = tm_get(x, 0, m, perm ? perm[k] : k) * wd[k * N + n];
        s += t, a += fabs(t);
      }
      const double f = scale ? scale[n] : 1.0;
      r[m * N + n] = s * f, r[M * N + m * N + n] = a * fabs(f);
    }
  *ref = r, *mag = r + M * N;
}

/* One ulp of dtype dt at magnitude a. */
static inline double w16_ulp(DLDataType dt, double a) {
  const int e = a > 0 ? ilogb(a) : -1000;
  if (dt.bits == 32) return ldexp(1.0, (e < -126 ? -126 : e) - 23);
  if (dt.code == kDLBfloat) return ldexp(1.0, (e < -126 ? -126 : e) - 7);
  return ldexp(1.0, (e < -14 ? -14 : e) - 10);
}

/* SPEC §5 tolerance of the relative Frobenius error for an output dtype. */
static inline double w16_tolerance(DLDataType dt) { return dt.bits == 32 ? 1e-4 : dt.code == kDLBfloat ? 6e-3 : 2e-3; }

/* Checks y [M, N] against ref (see the file comment) and its padding against the poison. */
static inline void w16_check(const tmat *y, const double *ref, const double *mag, int64_t K, const char *what) {
  const int64_t M = y->rows, N = y->cols;
  double *got = malloc(sizeof(double) * (size_t)(M * N));
  char *in_view = calloc((size_t)y->total, 1);
  assert_non_null(got), assert_non_null(in_view);
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      in_view[tm_index(y, 0, m, n)] = 1;
      const double g = tm_get(y, 0, m, n), e = ref[m * N + n];
      got[m * N + n] = g;
      const double delta = (double)(K + 2) * 0x1p-52 * mag[m * N + n];
      const double bound = 0.5 * w16_ulp(y->dt, fabs(e) + delta) * (1 + 1e-9) + delta;
      if (!(fabs(g - e) <= bound))
        fail_msg("%s: y[%" PRId64 ", %" PRId64 "] = %.9g, reference %.12g (more than half an ulp: bound %.3g)", what,
                 m, n, g, e, bound);
    }
  const double err = test_rel_error(got, ref, M * N);
  if (!(err <= w16_tolerance(y->dt))) fail_msg("%s: relative error %.3g > %.3g", what, err, w16_tolerance(y->dt));
  for (int64_t i = 0; i < y->total; i++) {
    if (in_view[i]) continue;
    const bool poisoned = y->elem == 4 ? ((uint32_t *)y->buf)[i] == 0x7fc00000u
                                       : ((uint16_t *)y->buf)[i] == (y->dt.code == kDLBfloat ? 0x7fc0 : 0x7e00);
    if (!poisoned) fail_msg("%s: element %" PRId64 " outside the output view was written", what, i);
  }
  free(got);
  free(in_view);
}

/* y = x·w of a native weight against its float64 reference (w16_check). */
static inline void w16_check_int4(const tmat *x, const kiln_qweight *w, const tmat *y, const char *what) {
  double *wd = tq_dequant(w), *ref, *mag;
  w16_reference(x, wd, w->perm, w->n, NULL, &ref, &mag);
  w16_check(y, ref, mag, w->k, what);
  free(ref);
  free(wd);
}

/* Every output dtype and both activation dtypes, for loops over cases. */
static const DLDataType W16_OUT_DT[3] = {{kDLFloat, 32, 1}, {kDLFloat, 16, 1}, {kDLBfloat, 16, 1}};
static const DLDataType W16_X_DT[2] = {{kDLFloat, 16, 1}, {kDLBfloat, 16, 1}};

/* int8 weights (kiln_qkv_project_int8): int8 or uint8 bit patterns, f32 scales. */
static const DLDataType T_I8 = {kDLInt, 8, 1}, T_U8 = {kDLUInt, 8, 1};

/* An f32 scale vector [n] (or [1]) with a stride; gaps hold NaN (never read). */
typedef struct tscale {
  float *buf;
  int64_t n, stride, shape[1], strides[1];
  DLTensor t;
} tscale;
static inline void ts_init(tscale *s, int64_t n, int64_t stride) {
  memset(s, 0, sizeof *s);
  s->n = n, s->stride = stride;
  const int64_t len = (n - 1) * stride + 1;
  s->buf = malloc(sizeof(float) * (size_t)len);
  assert_non_null(s->buf);
  for (int64_t i = 0; i < len; i++) s->buf[i] = NAN;
  for (int64_t i = 0; i < n; i++) s->buf[i * stride] = (0.002f + (float)(w16_rnd() % 1000) / 50000.0f) * (w16_rnd() % 2 ? 1 : -1);
  s->shape[0] = n, s->strides[0] = stride;
  s->t = (DLTensor){.data = s->buf, .device = {kDLCPU, 0}, .ndim = 1, .dtype = TEST_F32, .shape = s->shape,
                    .strides = s->strides};
}
/* The scale of column j as a double array [N] for the reference. */
static inline double *ts_expand(const tscale *s, int64_t N) {
  double *d = malloc(sizeof(double) * (size_t)N);
  assert_non_null(d);
  for (int64_t j = 0; j < N; j++) d[j] = s->buf[s->n == 1 ? 0 : j * s->stride];
  return d;
}

static inline void tm_fill_i8(tmat *m) {
  for (int64_t i = 0; i < m->total; i++) ((uint8_t *)m->buf)[i] = (uint8_t)w16_rnd();
}
/* An int8 weight as doubles [K][N]. */
static inline double *i8_values(const tmat *w) {
  double *d = malloc(sizeof(double) * (size_t)(w->rows * w->cols));
  assert_non_null(d);
  for (int64_t k = 0; k < w->rows; k++)
    for (int64_t n = 0; n < w->cols; n++) d[k * w->cols + n] = (int8_t)((uint8_t *)w->buf)[tm_index(w, 0, k, n)];
  return d;
}

#endif /* KILN_TEST_W16_H */
