/*
 * attention.c — kiln_attention and kiln_attention_backward: validate -> choose kernel -> launch
 * (or the CPU path, src/cpu/attention_cpu.c).
 *
 * Validation rules (every one fails with a message naming the op, the argument, what was found,
 * what was expected and the fix; checked in this order, before anything is read or written):
 *   - ctx non-NULL; opts NULL means kiln_attention_opts_default(). The same opts are checked by
 *     the forward, the backward and the size query:
 *       algo          KILN_ATTENTION_AUTO, _SMEM, _FLASH, _FLASH_MMA_SYNC, _FLASH_WGMMA or
 *                     _FLASH_DECODE (else INVALID_ARGUMENT); all but AUTO are GPU algorithms:
 *                     on the CPU context they are UNSUPPORTED (as kiln_matmul's explicit
 *                     algos), AUTO runs the CPU path; what a GPU kernel needs beyond this is
 *                     attention_gpu.c's to check;
 *       scale         0 (or -0) means 1/sqrt(D), computed as (float)(1 / sqrt((double)D));
 *                     otherwise a finite value > 0. NaN, ±inf and negative values are rejected
 *                     (a negative scale is almost surely a sign error; negate Q instead);
 *       causal        0 or 1;
 *       deterministic 0 or 1 (the forward checks it too, so one opts value serves both calls;
 *                     the CPU path is deterministic either way);
 *       tile_m        0, or with algo FLASH_WGMMA 128 or 192 (INVALID_ARGUMENT otherwise; 192 with a
 *                     head dim above 64 is attention_gpu.c's UNSUPPORTED).
 *   - q, k, v, o (and dout, lse in the backward): kiln_check_tensor (non-NULL, device, dtype
 *     width, non-negative shape and strides, data). q, k, v share one dtype (float16, bfloat16
 *     or float32); o is q's dtype or float32; dout any of the three; dq/dk/dv float32 or q's
 *     dtype.
 *   - Rank 4 [B, H, S, D], 3 [H, S, D] (B = 1) or 2 [S, D] (B = H = 1), the same for q, k, v, o
 *     (and dout, dq, dk, dv). Every dimension >= 1 and < 2^31; the byte span of every view must
 *     fit in the address space.
 *   - k [B, Hkv, Sk, D] with q's B and D; v [B, Hkv, Sk, Dv] with k's B, Hkv, Sk; Hq % Hkv == 0;
 *     1 <= D, Dv <= 256; o [B, Hq, Sq, Dv]; dout o's shape; dq/dk/dv the shapes of q/k/v.
 *   - lse (optional in the forward, required by the backward): float32 of rank (q's rank - 1):
 *     [B, Hq, Sq], [Hq, Sq] or [Sq], its last dimension contiguous (stride 1 when Sq > 1).
 *   - Outputs (o and lse in the forward, dq, dk, dv in the backward) must not overlap
 *     themselves (two elements at one address: e.g. stride 0 over a dimension of size > 1; the
 *     rule is PyTorch's: dimensions sorted by stride, each stride >= the span of the smaller
 *     ones), any input, or each other. The check compares byte spans [first, last element], so
 *     views interleaved in one buffer (e.g. dq, dk, dv as slices of one packed [B, S, 3, H, D]
 *     tensor) count as overlapping: pass separate buffers.
 *   - Backward: at least one of dq, dk, dv; workspace >= the size query's bytes (0 on the CPU)
 *     and, when non-empty, 256-byte aligned and not overlapping any argument.
 *
 * The validated problem is described to both paths by a kiln_attn_args: data pointers with
 * byte_offset applied, strides in elements (any values, also 0 for an input broadcast over a
 * dimension), normalized so that a dimension of size 1 has stride 0 (b, h, s) or 1 (d) —
 * strides that address nothing never make a GPU kernel refuse a layout.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops.h"
#include "cpu/cpu.h"

#define ATTN_MAX_HEAD_DIM 256

kiln_attention_opts kiln_attention_opts_default(void) {
  kiln_attention_opts o;
  memset(&o, 0, sizeof o);
  o.algo = KILN_ATTENTION_AUTO;
  o.scale = 0.0f;
  o.causal = 0;
  o.deterministic = 0;
  o.tile_m = 0;
  return o;
}

static const char *algo_name(kiln_attention_algo a) {
  switch (a) {
  case KILN_ATTENTION_AUTO: return "AUTO";
  case KILN_ATTENTION_SMEM: return "SMEM";
  case KILN_ATTENTION_FLASH: return "FLASH";
  case KILN_ATTENTION_FLASH_MMA_SYNC: return "FLASH_MMA_SYNC";
  case KILN_ATTENTION_FLASH_WGMMA: return "FLASH_WGMMA";
  case KILN_ATTENTION_FLASH_DECODE: return "FLASH_DECODE";
  }
  return "unknown";
}

static kiln_status check_opts(const kiln_context *ctx, const char *op, const kiln_attention_opts *o) {
  if (o->algo != KILN_ATTENTION_AUTO && o->algo != KILN_ATTENTION_SMEM && o->algo != KILN_ATTENTION_FLASH &&
      o->algo != KILN_ATTENTION_FLASH_MMA_SYNC && o->algo != KILN_ATTENTION_FLASH_WGMMA &&
      o->algo != KILN_ATTENTION_FLASH_DECODE)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: opts->algo is %d; expected KILN_ATTENTION_AUTO, _SMEM, _FLASH, _FLASH_MMA_SYNC, "
                     "_FLASH_WGMMA or _FLASH_DECODE",
                     op, (int)o->algo);
  if (!isfinite(o->scale) || o->scale < 0.0f)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: opts->scale is %g; expected a finite value > 0, or 0 for the default 1/sqrt(D) (to flip "
                     "the sign of the scores, negate q)",
                     op, (double)o->scale);
  if (o->causal != 0 && o->causal != 1)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: opts->causal is %d; expected 0 (no mask) or 1 (causal)", op,
                     o->causal);
  if (o->deterministic != 0 && o->deterministic != 1)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: opts->deterministic is %d; expected 0 or 1 (1: the same bits on every run)", op,
                     o->deterministic);
  if (o->tile_m != 0 && (o->algo != KILN_ATTENTION_FLASH_WGMMA || (o->tile_m != 128 && o->tile_m != 192)))
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: opts->tile_m is %d with algo %s; expected 0 (the query tile chosen per problem), or "
                     "with algo KILN_ATTENTION_FLASH_WGMMA 128 or 192 (192 for head dims <= 64)",
                     op, o->tile_m, algo_name(o->algo));
  if (o->algo != KILN_ATTENTION_AUTO && ctx->device_type == kDLCPU)
    return kiln_fail(KILN_ERROR_UNSUPPORTED,
                     "%s: algo %s needs a CUDA device but the context is the CPU's; use KILN_ATTENTION_AUTO for CPU "
                     "tensors",
                     op, algo_name(o->algo));
  return KILN_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Views                                                                                       */
/* ------------------------------------------------------------------------------------------ */
/* A tensor seen as [B, H, S, D] (q, k, v, o, dout, dq, dk, dv) or [B, H, S] (lse): missing
 * leading dimensions are 1. Strides in elements, normalized: a dimension of size 1 gets stride
 * 0, except the last of a 4-D view, which gets 1. */
typedef struct attn_view {
  const DLTensor *t; /* NULL: argument absent */
  char *data;        /* data + byte_offset */
  int dt;            /* KILN_DT_* */
  size_t elem;
  int nd;            /* 4, or 3 for lse */
  int64_t n[4], s[4];
  int64_t span_bytes; /* bytes from data to one past the last element */
} attn_view;

/* Builds the nd-dimensional view of t (rank <= nd, already checked): sizes >= 1 and < 2^31,
 * byte span within the address space. */
static kiln_status make_view(const char *op, const char *arg, const DLTensor *t, int nd, attn_view *v) {
  char sh[160];
  memset(v, 0, sizeof *v);
  v->t = t;
  v->data = kiln_tensor_data(t);
  v->dt = kiln_dt_code(t->dtype);
  v->elem = kiln_dtype_size(t->dtype);
  v->nd = nd;
  const int pad = nd - t->ndim;
  for (int d = 0; d < nd; d++) {
    v->n[d] = d < pad ? 1 : t->shape[d - pad];
    v->s[d] = d < pad ? 0 : kiln_tensor_stride(t, d - pad);
  }
  for (int d = 0; d < nd; d++) {
    if (v->n[d] < 1)
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s has shape %s; every dimension must be >= 1", op, arg,
                       kiln_shape_str(t, sh, sizeof sh));
    if (v->n[d] > INT32_MAX)
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s has shape %s; each dimension must be < 2^31", op, arg,
                       kiln_shape_str(t, sh, sizeof sh));
  }
  for (int d = 0; d < nd; d++)
    if (v->n[d] == 1) v->s[d] = (nd == 4 && d == 3) ? 1 : 0;
  int64_t span = 1, term;
  for (int d = 0; d < nd; d++)
    if (__builtin_mul_overflow(v->n[d] - 1, v->s[d], &term) || __builtin_add_overflow(span, term, &span))
      goto overflow;
  if (__builtin_mul_overflow(span, (int64_t)v->elem, &v->span_bytes) ||
      (uintptr_t)v->data + (uint64_t)v->span_bytes < (uintptr_t)v->data)
    goto overflow;
  return KILN_OK;
overflow:
  return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s (shape %s) spans more bytes than a 64-bit address holds", op,
                   arg, kiln_shape_str(t, sh, sizeof sh));
}

/* An output's elements must be distinct: with the dimensions of size > 1 sorted by stride, each
 * stride must reach past everything the smaller ones address. */
static kiln_status check_output_layout(const char *op, const char *arg, const attn_view *v) {
  int idx[4], m = 0;
  for (int d = 0; d < v->nd; d++)
    if (v->n[d] > 1) idx[m++] = d;
  for (int i = 1; i < m; i++) /* insertion sort by stride */
    for (int j = i; j > 0 && v->s[idx[j]] < v->s[idx[j - 1]]; j--) {
      int t = idx[j];
      idx[j] = idx[j - 1];
      idx[j - 1] = t;
    }
  int64_t reach = 1; /* elements addressed by the dimensions checked so far, from the first */
  for (int i = 0; i < m; i++) {
    const int d = idx[i];
    if (v->s[d] < reach) {
      char sh[160];
      const int dim = d - (v->nd - v->t->ndim);
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                       "%s: %s (shape %s) has stride %" PRId64 " in dimension %d, so some of its elements share "
                       "memory; an output needs distinct elements (stride >= %" PRId64 " there): allocate it "
                       "contiguous",
                       op, arg, kiln_shape_str(v->t, sh, sizeof sh), kiln_tensor_stride(v->t, dim), dim, reach);
    }
    reach = v->s[d] * (v->n[d] - 1) + reach; /* no overflow: bounded by the span checked already */
  }
  return KILN_OK;
}

typedef struct named_view {
  const char *name;
  const attn_view *v;
} named_view;

/* out must not overlap any of the others (absent ones skipped). */
static kiln_status check_no_overlap(const char *op, const char *out_name, const attn_view *out, const named_view *others,
                                    size_t count) {
  kiln_status st = KILN_OK;
  for (size_t i = 0; i < count && !st; i++)
    if (others[i].v && others[i].v->t)
      st = kiln_check_disjoint(op, out_name, out->data, out->span_bytes, others[i].name, others[i].v->data,
                               others[i].v->span_bytes);
  return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Validation shared by the forward and the backward                                          */
/* ------------------------------------------------------------------------------------------ */
typedef struct attn_problem {
  attn_view q, k, v, o, lse, dout, dq, dk, dv;
  int64_t batch, hq, hkv, sq, sk, d, dv_dim;
  float scale;
  int causal;
} attn_problem;

static kiln_status check_dtype_float(const char *op, const char *arg, const DLTensor *t) {
  char dn[48];
  if (kiln_dt_code(t->dtype) < 0)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s has dtype %s; expected float16, bfloat16 or float32", op,
                     arg, kiln_dtype_name(t->dtype, dn));
  return KILN_OK;
}

/* A tensor of the same rank as q (checked by the caller's order: q first). */
static kiln_status check_rank(const char *op, const char *arg, const DLTensor *t, const DLTensor *q) {
  char sh[160];
  if (t->ndim != q->ndim)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: %s has rank %d (shape %s) but q has rank %d; %s must all have the same rank", op, arg,
                     (int)t->ndim, kiln_shape_str(t, sh, sizeof sh), (int)q->ndim,
                     strcmp(op, "kiln_attention") ? "q, k, v, o, dout and the gradients" : "q, k, v and o");
  return KILN_OK;
}

/* "[1, 2, 3, 4]" for the first `rank` of the trailing dimensions of n (a 4-D view's). */
static const char *dims_str(const int64_t *n, int nd, int rank, char *buf, size_t size) {
  size_t len = 0;
  len += (size_t)snprintf(buf, size, "[");
  for (int d = nd - rank; d < nd && len < size; d++)
    len += (size_t)snprintf(buf + len, size - len, d > nd - rank ? ", %" PRId64 : "%" PRId64, n[d]);
  if (len < size) snprintf(buf + len, size - len, "]");
  return buf;
}

/* t must have exactly the shape want (a 4-D view's dimensions, written at t's rank); why says
 * where the expected shape comes from. */
static kiln_status check_shape(const char *op, const char *arg, const attn_view *v, const int64_t want[4],
                               const char *why) {
  for (int d = 0; d < 4; d++)
    if (v->n[d] != want[d]) {
      char sh[160], w[160];
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s has shape %s; expected %s (%s)", op, arg,
                       kiln_shape_str(v->t, sh, sizeof sh), dims_str(want, 4, v->t->ndim, w, sizeof w), why);
    }
  return KILN_OK;
}

static kiln_status check_lse(const kiln_context *ctx, const char *op, const DLTensor *lse, attn_problem *p) {
  kiln_status st;
  if ((st = kiln_check_tensor(ctx, op, "lse", lse))) return st;
  char dn[48], sh[160], w[160];
  if (!KILN_IS_F32(lse->dtype))
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: lse has dtype %s; expected float32", op,
                     kiln_dtype_name(lse->dtype, dn));
  const int64_t want[3] = {p->batch, p->hq, p->sq};
  const int rank = p->q.t->ndim - 1;
  bool ok = lse->ndim == rank;
  for (int d = 0; ok && d < rank; d++) ok = lse->shape[d] == want[3 - rank + d];
  if (!ok)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: lse has shape %s; expected %s ([B, Hq, Sq] from q, rank %d for a rank-%d q)", op,
                     kiln_shape_str(lse, sh, sizeof sh), dims_str(want, 3, rank, w, sizeof w), rank,
                     (int)p->q.t->ndim);
  if ((st = make_view(op, "lse", lse, 3, &p->lse))) return st;
  if (p->sq > 1 && kiln_tensor_stride(lse, rank - 1) != 1)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: lse has stride %" PRId64 " in its last (Sq) dimension; expected 1: pass an lse whose "
                     "last dimension is contiguous (e.g. torch.empty(B, Hq, Sq))",
                     op, kiln_tensor_stride(lse, rank - 1));
  return KILN_OK;
}

/* q, k, v, o (o an output in the forward, an input in the backward) and lse when given. */
static kiln_status check_common(const kiln_context *ctx, const char *op, const DLTensor *q, const DLTensor *k,
                                const DLTensor *v, const DLTensor *o, const kiln_attention_opts *opts,
                                attn_problem *p) {
  kiln_status st;
  memset(p, 0, sizeof *p);
  if ((st = kiln_check_tensor(ctx, op, "q", q)) || (st = kiln_check_tensor(ctx, op, "k", k)) ||
      (st = kiln_check_tensor(ctx, op, "v", v)) || (st = kiln_check_tensor(ctx, op, "o", o)))
    return st;
  char dn[48], dn2[48], sh[160], sh2[160];
  if ((st = check_dtype_float(op, "q", q))) return st;
  const struct { const char *name; const DLTensor *t; } kv[2] = {{"k", k}, {"v", v}};
  for (int i = 0; i < 2; i++)
    if (memcmp(&kv[i].t->dtype, &q->dtype, sizeof q->dtype) != 0)
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                       "%s: %s has dtype %s but q has %s; q, k and v must share one dtype (float16, bfloat16 or "
                       "float32)",
                       op, kv[i].name, kiln_dtype_name(kv[i].t->dtype, dn), kiln_dtype_name(q->dtype, dn2));
  if (memcmp(&o->dtype, &q->dtype, sizeof q->dtype) != 0 && !KILN_IS_F32(o->dtype)) {
    if (KILN_IS_F32(q->dtype))
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: o has dtype %s; expected float32 (q's dtype)", op,
                       kiln_dtype_name(o->dtype, dn));
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: o has dtype %s; expected %s (q's dtype) or float32", op,
                     kiln_dtype_name(o->dtype, dn), kiln_dtype_name(q->dtype, dn2));
  }
  if (q->ndim < 2 || q->ndim > 4)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: q has rank %d (shape %s); expected rank 4 [B, H, S, D], rank 3 [H, S, D] or rank 2 [S, D]",
                     op, (int)q->ndim, kiln_shape_str(q, sh, sizeof sh));
  if ((st = check_rank(op, "k", k, q)) || (st = check_rank(op, "v", v, q)) || (st = check_rank(op, "o", o, q)))
    return st;
  if ((st = make_view(op, "q", q, 4, &p->q)) || (st = make_view(op, "k", k, 4, &p->k)) ||
      (st = make_view(op, "v", v, 4, &p->v)) || (st = make_view(op, "o", o, 4, &p->o)))
    return st;
  p->batch = p->q.n[0], p->hq = p->q.n[1], p->sq = p->q.n[2], p->d = p->q.n[3];
  p->hkv = p->k.n[1], p->sk = p->k.n[2], p->dv_dim = p->v.n[3];
  if (p->k.n[0] != p->batch)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: k has batch %" PRId64 " (shape %s) but q has batch %" PRId64 " (shape %s); batch sizes "
                     "must match",
                     op, p->k.n[0], kiln_shape_str(k, sh, sizeof sh), p->batch, kiln_shape_str(q, sh2, sizeof sh2));
  if (p->k.n[3] != p->d)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: k has head dimension D = %" PRId64 " (shape %s) but q has D = %" PRId64 " (shape %s); q "
                     "and k must have the same last dimension",
                     op, p->k.n[3], kiln_shape_str(k, sh, sizeof sh), p->d, kiln_shape_str(q, sh2, sizeof sh2));
  if (p->v.n[0] != p->batch || p->v.n[1] != p->hkv || p->v.n[2] != p->sk) {
    char w[160];
    const int64_t want[4] = {p->batch, p->hkv, p->sk, p->dv_dim};
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: v has shape %s; expected %s ([B, Hkv, Sk, Dv]: batch, heads and sequence length Sk = "
                     "%" PRId64 " of k, shape %s)",
                     op, kiln_shape_str(v, sh, sizeof sh), dims_str(want, 4, q->ndim, w, sizeof w), p->sk,
                     kiln_shape_str(k, sh2, sizeof sh2));
  }
  if (p->hq % p->hkv != 0)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: q has Hq = %" PRId64 " heads and k has Hkv = %" PRId64 "; Hq must be a multiple of Hkv "
                     "(grouped-query attention: query head h reads key/value head h / (Hq / Hkv))",
                     op, p->hq, p->hkv);
  if (p->d > ATTN_MAX_HEAD_DIM)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: q has head dimension D = %" PRId64 " (shape %s); expected 1 <= D <= %d", op, p->d,
                     kiln_shape_str(q, sh, sizeof sh), ATTN_MAX_HEAD_DIM);
  if (p->dv_dim > ATTN_MAX_HEAD_DIM)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: v has value dimension Dv = %" PRId64 " (shape %s); expected 1 <= Dv <= %d", op, p->dv_dim,
                     kiln_shape_str(v, sh, sizeof sh), ATTN_MAX_HEAD_DIM);
  const int64_t want_o[4] = {p->batch, p->hq, p->sq, p->dv_dim};
  if ((st = check_shape(op, "o", &p->o, want_o, "[B, Hq, Sq, Dv] from q and v"))) return st;
  p->scale = opts->scale != 0.0f ? opts->scale : (float)(1.0 / sqrt((double)p->d));
  p->causal = opts->causal;
  return KILN_OK;
}

static void fill_strides(const attn_view *v, int64_t *bs, int64_t *hs, int64_t *ss, int64_t *ds) {
  *bs = v->s[0], *hs = v->s[1], *ss = v->s[2], *ds = v->s[3];
}

static void fill_args(const attn_problem *p, kiln_attn_args *a) {
  memset(a, 0, sizeof *a);
  a->q = p->q.data, a->k = p->k.data, a->v = p->v.data;
  a->o = p->o.data;
  a->lse = p->lse.t ? (float *)(void *)p->lse.data : NULL;
  a->dout = p->dout.t ? p->dout.data : NULL;
  a->dq = p->dq.t ? p->dq.data : NULL;
  a->dk = p->dk.t ? p->dk.data : NULL;
  a->dv = p->dv.t ? p->dv.data : NULL;
  fill_strides(&p->q, &a->q_bs, &a->q_hs, &a->q_ss, &a->q_ds);
  fill_strides(&p->k, &a->k_bs, &a->k_hs, &a->k_ss, &a->k_ds);
  fill_strides(&p->v, &a->v_bs, &a->v_hs, &a->v_ss, &a->v_ds);
  fill_strides(&p->o, &a->o_bs, &a->o_hs, &a->o_ss, &a->o_ds);
  if (p->lse.t) a->lse_bs = p->lse.s[0], a->lse_hs = p->lse.s[1];
  if (p->dout.t) fill_strides(&p->dout, &a->do_bs, &a->do_hs, &a->do_ss, &a->do_ds);
  if (p->dq.t) fill_strides(&p->dq, &a->dq_bs, &a->dq_hs, &a->dq_ss, &a->dq_ds);
  if (p->dk.t) fill_strides(&p->dk, &a->dk_bs, &a->dk_hs, &a->dk_ss, &a->dk_ds);
  if (p->dv.t) fill_strides(&p->dv, &a->dv_bs, &a->dv_hs, &a->dv_ss, &a->dv_ds);
  a->batch = (int32_t)p->batch, a->hq = (int32_t)p->hq, a->hkv = (int32_t)p->hkv;
  a->sq = (int32_t)p->sq, a->sk = (int32_t)p->sk, a->d = (int32_t)p->d, a->dv_dim = (int32_t)p->dv_dim;
  a->scale = p->scale;
  a->causal = p->causal;
  a->in_dtype = p->q.dt;
  a->o_dtype = p->o.dt;
  /* dtypes of absent tensors: the inputs' (never read) */
  a->do_dtype = p->dout.t ? p->dout.dt : p->q.dt;
  a->dq_dtype = p->dq.t ? p->dq.dt : p->q.dt;
  a->dk_dtype = p->dk.t ? p->dk.dt : p->q.dt;
  a->dv_dtype = p->dv.t ? p->dv.dt : p->q.dt;
}

/* ------------------------------------------------------------------------------------------ */
/* kiln_attention                                                                             */
/* ------------------------------------------------------------------------------------------ */
kiln_status kiln_attention(kiln_context *ctx, const DLTensor *q, const DLTensor *k, const DLTensor *v,
                           const DLTensor *o, const DLTensor *lse, const kiln_attention_opts *opts, CUstream stream) {
  const char *op = "kiln_attention";
  kiln_status st = kiln_check_context(ctx, op);
  if (st) return st;
  const kiln_attention_opts opt = opts ? *opts : kiln_attention_opts_default();
  if ((st = check_opts(ctx, op, &opt))) return st;
  attn_problem p;
  if ((st = check_common(ctx, op, q, k, v, o, &opt, &p))) return st;
  if ((st = check_output_layout(op, "o", &p.o))) return st;
  if (lse) {
    if ((st = check_lse(ctx, op, lse, &p)) || (st = check_output_layout(op, "lse", &p.lse))) return st;
  }
  const named_view inputs[3] = {{"q", &p.q}, {"k", &p.k}, {"v", &p.v}};
  if ((st = check_no_overlap(op, "o", &p.o, inputs, 3))) return st;
  if (lse) {
    const named_view others[4] = {{"q", &p.q}, {"k", &p.k}, {"v", &p.v}, {"o", &p.o}};
    if ((st = check_no_overlap(op, "lse", &p.lse, others, 4))) return st;
  }
  kiln_attn_args args;
  fill_args(&p, &args);
  if (ctx->device_type == kDLCPU) return kiln_cpu_attention_forward(op, &args);
  kiln_ctx_scope scope;
  if ((st = kiln_ctx_enter(ctx, &scope, op))) return st;
  st = kiln_attention_gpu_forward(ctx, op, &args, (int)opt.algo, opt.tile_m, stream);
  kiln_ctx_leave(ctx, &scope);
  return st;
}

/* ------------------------------------------------------------------------------------------ */
/* kiln_attention_backward                                                                    */
/* ------------------------------------------------------------------------------------------ */
static kiln_status check_grad(const kiln_context *ctx, const char *op, const char *arg, const DLTensor *g,
                              const DLTensor *like, const attn_view *like_view, const attn_problem *p,
                              attn_view *out) {
  kiln_status st;
  if ((st = kiln_check_tensor(ctx, op, arg, g))) return st;
  char dn[48], dn2[48];
  if (memcmp(&g->dtype, &like->dtype, sizeof g->dtype) != 0 && !KILN_IS_F32(g->dtype)) {
    if (KILN_IS_F32(like->dtype))
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s has dtype %s; expected float32 (the inputs' dtype)", op,
                       arg, kiln_dtype_name(g->dtype, dn));
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s has dtype %s; expected float32 or %s (the inputs' dtype)",
                     op, arg, kiln_dtype_name(g->dtype, dn), kiln_dtype_name(like->dtype, dn2));
  }
  if ((st = check_rank(op, arg, g, p->q.t)) || (st = make_view(op, arg, g, 4, out))) return st;
  char why[48];
  snprintf(why, sizeof why, "the shape of %s", arg + 1); /* "dq" -> "the shape of q" */
  if ((st = check_shape(op, arg, out, like_view->n, why))) return st;
  return check_output_layout(op, arg, out);
}

static kiln_status plan_backward(const kiln_context *ctx, const char *op, const DLTensor *q, const DLTensor *k,
                                 const DLTensor *v, const DLTensor *o, const DLTensor *lse, const DLTensor *dout,
                                 const DLTensor *dq, const DLTensor *dk, const DLTensor *dv,
                                 const kiln_attention_opts *opt, attn_problem *p) {
  kiln_status st;
  if ((st = check_opts(ctx, op, opt))) return st;
  if ((st = check_common(ctx, op, q, k, v, o, opt, p))) return st;
  if (!lse)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: lse is NULL; the backward needs the forward's logsumexp: pass an f32 lse to kiln_attention "
                     "and then here",
                     op);
  if ((st = check_lse(ctx, op, lse, p))) return st;
  if ((st = kiln_check_tensor(ctx, op, "dout", dout)) || (st = check_dtype_float(op, "dout", dout)) ||
      (st = check_rank(op, "dout", dout, q)) || (st = make_view(op, "dout", dout, 4, &p->dout)))
    return st;
  if ((st = check_shape(op, "dout", &p->dout, p->o.n, "the shape of o"))) return st;
  if (!dq && !dk && !dv)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: dq, dk and dv are all NULL; pass at least one gradient to compute", op);
  if (dq && (st = check_grad(ctx, op, "dq", dq, q, &p->q, p, &p->dq))) return st;
  if (dk && (st = check_grad(ctx, op, "dk", dk, k, &p->k, p, &p->dk))) return st;
  if (dv && (st = check_grad(ctx, op, "dv", dv, v, &p->v, p, &p->dv))) return st;
  const named_view others[8] = {{"q", &p->q},    {"k", &p->k},       {"v", &p->v},   {"o", &p->o},
                                {"lse", &p->lse}, {"dout", &p->dout}, {"dq", &p->dq}, {"dk", &p->dk}};
  if (dq && (st = check_no_overlap(op, "dq", &p->dq, others, 6))) return st;
  if (dk && (st = check_no_overlap(op, "dk", &p->dk, others, 7))) return st;
  if (dv && (st = check_no_overlap(op, "dv", &p->dv, others, 8))) return st;
  return KILN_OK;
}

static size_t backward_workspace(const kiln_context *ctx, const kiln_attn_args *args, const kiln_attention_opts *o) {
  return ctx->device_type == kDLCPU ? 0
                                    : kiln_attention_gpu_workspace(ctx, args, (int)o->algo, o->tile_m, o->deterministic);
}

kiln_status kiln_attention_backward_workspace_size(kiln_context *ctx, const DLTensor *q, const DLTensor *k,
                                                   const DLTensor *v, const DLTensor *o, const DLTensor *lse,
                                                   const DLTensor *dout, const DLTensor *dq, const DLTensor *dk,
                                                   const DLTensor *dv, const kiln_attention_opts *opts,
                                                   size_t *bytes) {
  const char *op = "kiln_attention_backward_workspace_size";
  kiln_status st = kiln_check_size_query(ctx, op, bytes);
  if (st) return st;
  const kiln_attention_opts opt = opts ? *opts : kiln_attention_opts_default();
  attn_problem p;
  if ((st = plan_backward(ctx, op, q, k, v, o, lse, dout, dq, dk, dv, &opt, &p))) return st;
  kiln_attn_args args;
  fill_args(&p, &args);
  *bytes = backward_workspace(ctx, &args, &opt);
  return KILN_OK;
}

kiln_status kiln_attention_backward(kiln_context *ctx, const DLTensor *q, const DLTensor *k, const DLTensor *v,
                                    const DLTensor *o, const DLTensor *lse, const DLTensor *dout, const DLTensor *dq,
                                    const DLTensor *dk, const DLTensor *dv, void *workspace, size_t workspace_bytes,
                                    const kiln_attention_opts *opts, CUstream stream) {
  const char *op = "kiln_attention_backward";
  kiln_status st = kiln_check_context(ctx, op);
  if (st) return st;
  const kiln_attention_opts opt = opts ? *opts : kiln_attention_opts_default();
  attn_problem p;
  if ((st = plan_backward(ctx, op, q, k, v, o, lse, dout, dq, dk, dv, &opt, &p))) return st;
  kiln_attn_args args;
  fill_args(&p, &args);
  const size_t need = backward_workspace(ctx, &args, &opt);
  if (workspace_bytes < need || (need && !workspace))
    return kiln_fail(KILN_ERROR_WORKSPACE,
                     "%s: workspace is %zu bytes%s but this call needs %zu; size it with "
                     "kiln_attention_backward_workspace_size",
                     op, workspace_bytes, workspace ? "" : " (NULL)", need);
  if (need && (uintptr_t)workspace % 256 != 0)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: workspace %p is not 256-byte aligned; pass an allocation's start (cudaMalloc, torch.empty "
                     "and kiln_tensor_empty all return 256-byte aligned memory)",
                     op, workspace);
  if (need) { /* the workspace is written: it must not alias any argument */
    attn_view ws;
    memset(&ws, 0, sizeof ws);
    ws.data = workspace;
    ws.span_bytes = (int64_t)need;
    const named_view all[9] = {{"q", &p.q},       {"k", &p.k},   {"v", &p.v},   {"o", &p.o},  {"lse", &p.lse},
                               {"dout", &p.dout}, {"dq", &p.dq}, {"dk", &p.dk}, {"dv", &p.dv}};
    for (size_t i = 0; i < 9; i++)
      if (all[i].v->t && kiln_spans_overlap(ws.data, ws.span_bytes, all[i].v->data, all[i].v->span_bytes))
        return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                         "%s: workspace overlaps %s in memory; the workspace must be a separate buffer", op,
                         all[i].name);
  }
  if (ctx->device_type == kDLCPU) return kiln_cpu_attention_backward(op, &args);
  kiln_ctx_scope scope;
  if ((st = kiln_ctx_enter(ctx, &scope, op))) return st;
  st = kiln_attention_gpu_backward(ctx, op, &args, (int)opt.algo, opt.tile_m, opt.deterministic, workspace, stream);
  kiln_ctx_leave(ctx, &scope);
  return st;
}
