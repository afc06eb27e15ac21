/*
 * attention_simt.cu — kiln_attention's CUDA-core kernels: the FLASH algorithm of the tensor-core
 * kernels (online-softmax forward; the deterministic two-kernel backward of attention_bwd_sm80.cu)
 * in f32 FMA arithmetic, for every problem those kernels do not take: f32 inputs (SPEC 4.5: "as
 * the reference's flash path", exact enough for the f32 tolerance 2e-4), D != Dv, head dims that
 * are not multiples of 8, strided head dimensions, rows not 16-byte aligned. Nothing here asks
 * more of a view than validation does, so AUTO and FLASH never refuse a valid problem.
 *
 * Elements are read through kiln_load_as_f32 (any dtype, any strides) into shared rows of f32;
 * outputs are written through kiln_store_from_f32. Products are f32 with f32 accumulation, the
 * softmax in log2 units as in the other kernels: P = exp2(s·scale·log2 e − m).
 *
 * Thread layout (128 threads): tx = t % 16, ty = t / 16. In a ROWS x ROWS score tile a thread owns
 * rows ty + 8 r (r < ROWS / 8) and columns tx + 16 c (c < ROWS / 16), so the 16 lanes of a half
 * warp hold one row between them (row reductions are 4 shuffles) and a column walk reads 16
 * consecutive shared rows at an odd pitch (no bank conflicts). An output accumulator row [ROWS]
 * x [D] is split the same way: rows ty + 8 r, columns tx + 16 cc.
 *
 * These are correctness kernels, not fast ones: f32 FMA peak is a fifteenth of the f16 tensor
 * cores', and a score costs D shared loads per 1.6 FMA here. They exist so that no valid problem
 * is refused; docs/performance.md has their speed.
 */
#include <math.h>

#include "attention.cuh"

namespace kiln {
namespace attn_simt {

constexpr int THREADS = KILN_ATTN_SIMT_THREADS;
constexpr float LN2 = 0.6931471805599453f;

/* Rows [row0, row0 + ROWS) x columns [0, cols) of a matrix view (element (s, c) at
 * base + s·ss + c·cs of a dtype-dt buffer) into shared rows of `pitch` floats; rows at or past
 * `rows` are zeros. */
template <int ROWS>
KILN_DEVICE void load_tile(float *dst, int pitch, const void *src, int dt, int64_t base, int64_t ss, int64_t cs,
                           int row0, int rows, int cols) {
  for (int e = threadIdx.x; e < ROWS * cols; e += THREADS) {
    const int r = e / cols, c = e - r * cols, row = row0 + r;
    dst[r * pitch + c] = row < rows ? kiln_load_as_f32(src, base + (int64_t)row * ss + (int64_t)c * cs, dt) : 0.f;
  }
}

/* Reductions over the 16 lanes of a half warp (the threads that share a tile row). */
KILN_DEVICE float half_max(float v) {
#pragma unroll
  for (int o = 8; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
KILN_DEVICE float half_sum(float v) {
#pragma unroll
  for (int o = 8; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* s[r][c] += Σ_k a[(ty + 8 r)·pa + k] · b[(tx + 16 c)·pb + k] over k < n: a tile of dot products
 * of shared rows (Q·Kᵀ, dO·Vᵀ, and their transposes). */
template <int RR, int CC>
KILN_DEVICE void tile_dot(float (&s)[RR][CC], const float *a, int pa, const float *b, int pb, int n, int ty, int tx) {
  for (int k = 0; k < n; k++) {
    float av[RR], bv[CC];
#pragma unroll
    for (int r = 0; r < RR; r++) av[r] = a[(ty + 8 * r) * pa + k];
#pragma unroll
    for (int c = 0; c < CC; c++) bv[c] = b[(tx + 16 * c) * pb + k];
#pragma unroll
    for (int r = 0; r < RR; r++)
#pragma unroll
      for (int c = 0; c < CC; c++) s[r][c] = fmaf(av[r], bv[c], s[r][c]);
  }
}

/* acc[r][cc] += Σ_j w[(ty + 8 r)·pw + j] · m[j·pm + tx + 16 cc] over j < n, for the columns
 * tx + 16 cc < cols: a weighted sum of shared rows (P·V, Pᵀ·dO, dSᵀ·Q, dS·K). */
template <int RR, int NC>
KILN_DEVICE void tile_accumulate(float (&acc)[RR][NC], const float *w, int pw, const float *m, int pm, int n, int cols,
                                 int ty, int tx) {
  for (int j = 0; j < n; j++) {
    float wv[RR];
#pragma unroll
    for (int r = 0; r < RR; r++) wv[r] = w[(ty + 8 * r) * pw + j];
#pragma unroll
    for (int cc = 0; cc < NC; cc++) {
      const int col = tx + 16 * cc;
      if (col < cols) {
        const float x = m[j * pm + col];
#pragma unroll
        for (int r = 0; r < RR; r++) acc[r][cc] = fmaf(wv[r], x, acc[r][cc]);
      }
    }
  }
}

template <int RR, int NC>
KILN_DEVICE void zero(float (&a)[RR][NC]) {
#pragma unroll
  for (int r = 0; r < RR; r++)
#pragma unroll
    for (int c = 0; c < NC; c++) a[r][c] = 0.f;
}

/* Stores rows ty + 8 r of acc·factor (row row0 + ty + 8 r of the view, those < rows; columns <
 * cols) into a dtype-dt buffer at base + row·ss + col·cs. */
template <int RR, int NC>
KILN_DEVICE void store_rows(const float (&acc)[RR][NC], const float (&factor)[RR], void *dst, int dt, int64_t base,
                            int64_t ss, int64_t cs, int row0, int rows, int cols, int ty, int tx) {
#pragma unroll
  for (int r = 0; r < RR; r++) {
    const int row = row0 + ty + 8 * r;
    if (row >= rows) continue;
#pragma unroll
    for (int cc = 0; cc < NC; cc++) {
      const int col = tx + 16 * cc;
      if (col < cols) kiln_store_from_f32(dst, base + (int64_t)row * ss + (int64_t)col * cs, dt, acc[r][cc] * factor[r]);
    }
  }
}

/* Key `key` is visible from query row `row` (the one rule of every kiln kernel). */
KILN_DEVICE bool visible(const kiln_attn_args &p, int row, int key, int shift) {
  return key < p.sk && (!p.causal || key <= row + shift);
}

/* The backward's two score products of a tile: s = rows of qa · rows of qb over D (Q·Kᵀ or its
 * transpose), dp = rows of da · rows of db over Dv (dO·Vᵀ or its transpose). */
template <int RR, int CC>
KILN_DEVICE void score_pair(float (&s)[RR][CC], float (&dp)[RR][CC], const float *qa, const float *qb, int pd,
                            const float *da, const float *db, int pv, const kiln_attn_args &p, int ty, int tx) {
  zero(s), zero(dp);
  tile_dot(s, qa, pd, qb, pd, p.d, ty, tx);
  tile_dot(dp, da, pv, db, pv, p.dv_dim, ty, tx);
}

/* P of one score in the backward: exp2(s·sl2 − lse2) for a visible key, else 0 (lse2 is +inf for
 * a row past Sq or without any visible key, which also gives 0). */
KILN_DEVICE float prob(bool vis, float s, float sl2, const float &lse2) { return vis ? exp2f(s * sl2 - lse2) : 0.f; }

/* Head dims of an accumulator row per thread: 128 / 16 columns at 32 rows, 256 / 16 at 16. */
template <int ROWS>
struct Tile {
  static constexpr int RR = ROWS / 8, CC = ROWS / 16, NC = (ROWS == 32 ? 128 : 256) / 16, SP = ROWS + 1;
};

/* ---- forward: a block owns ROWS query rows of one head --------------------------------------- */
template <int ROWS>
__device__ __forceinline__ void forward(const kiln_attn_args &p) {
  using T = Tile<ROWS>;
  extern __shared__ float smem[];
  const int pd = KILN_ATTN_SIMT_PITCH(p.d), pv = KILN_ATTN_SIMT_PITCH(p.dv_dim), pkv = max(pd, pv);
  float *sq = smem, *skv = sq + ROWS * pd, *sp = skv + ROWS * pkv; /* K, then V of the same keys, in skv */
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int q0 = blockIdx.x * ROWS, h = blockIdx.y, b = blockIdx.z, kvh = h / (p.hq / p.hkv), shift = p.sk - p.sq;
  const int64_t kb = b * p.k_bs + kvh * p.k_hs, vb = b * p.v_bs + kvh * p.v_hs;
  load_tile<ROWS>(sq, pd, p.q, p.in_dtype, b * p.q_bs + h * p.q_hs, p.q_ss, p.q_ds, q0, p.sq, p.d);

  float o[T::RR][T::NC], m[T::RR], l[T::RR]; /* m: running maximum of scaled log2 scores */
  zero(o);
#pragma unroll
  for (int r = 0; r < T::RR; r++) m[r] = -INFINITY, l[r] = 0.f;
  const float sl2 = p.scale * attn::LOG2E;
  const int nblk = attn::key_blocks(p, shift, q0, ROWS, ROWS);
  for (int blk = 0; blk < nblk; blk++) {
    const int k0 = blk * ROWS;
    __syncthreads(); /* Q has landed (first step); the last step's V and P are no longer read */
    load_tile<ROWS>(skv, pd, p.k, p.in_dtype, kb, p.k_ss, p.k_ds, k0, p.sk, p.d);
    __syncthreads();
    float s[T::RR][T::CC];
    zero(s);
    tile_dot(s, sq, pd, skv, pd, p.d, ty, tx);
#pragma unroll
    for (int r = 0; r < T::RR; r++) {
      const int row = q0 + ty + 8 * r;
      float mx = -INFINITY;
#pragma unroll
      for (int c = 0; c < T::CC; c++) {
        s[r][c] = visible(p, row, k0 + tx + 16 * c, shift) ? s[r][c] * sl2 : -INFINITY;
        mx = fmaxf(mx, s[r][c]);
      }
      const float mnew = fmaxf(m[r], half_max(mx));
      const float ref = mnew == -INFINITY ? 0.f : mnew; /* nothing visible yet: exp2(-inf - 0) = 0, no NaN */
      const float corr = exp2f(m[r] - ref);
      float sum = 0.f;
#pragma unroll
      for (int c = 0; c < T::CC; c++) {
        const float pr = exp2f(s[r][c] - ref);
        sp[(ty + 8 * r) * T::SP + tx + 16 * c] = pr;
        sum += pr;
      }
      l[r] = l[r] * corr + half_sum(sum);
      m[r] = mnew;
#pragma unroll
      for (int cc = 0; cc < T::NC; cc++) o[r][cc] *= corr;
    }
    __syncthreads(); /* K is no longer read; P is visible */
    load_tile<ROWS>(skv, pv, p.v, p.in_dtype, vb, p.v_ss, p.v_ds, k0, p.sk, p.dv_dim);
    __syncthreads();
    tile_accumulate(o, sp, T::SP, skv, pv, ROWS, p.dv_dim, ty, tx);
  }

  /* O = o / l (a row that saw no key: 0) and LSE = (m + log2 l)·ln 2 (-inf) */
  float inv[T::RR];
#pragma unroll
  for (int r = 0; r < T::RR; r++) {
    inv[r] = l[r] > 0.f ? 1.f / l[r] : 0.f;
    const int row = q0 + ty + 8 * r;
    if (p.lse && tx == 0 && row < p.sq)
      p.lse[b * p.lse_bs + h * p.lse_hs + row] = l[r] > 0.f ? (m[r] + log2f(l[r])) * LN2 : -INFINITY;
  }
  store_rows(o, inv, p.o, p.o_dtype, b * p.o_bs + h * p.o_hs, p.o_ss, p.o_ds, q0, p.sq, p.dv_dim, ty, tx);
}

/* ---- backward dK/dV: a block owns ROWS keys of one K/V head and walks the queries of every head
 * of its GQA group, so the group's sum happens in registers, in a fixed order -------------------- */
template <int ROWS>
__device__ __forceinline__ void dkdv(const kiln_attn_args &p) {
  using T = Tile<ROWS>;
  extern __shared__ float smem[];
  const int pd = KILN_ATTN_SIMT_PITCH(p.d), pv = KILN_ATTN_SIMT_PITCH(p.dv_dim);
  float *sk = smem, *sv = sk + ROWS * pd, *sq = sv + ROWS * pv, *sdo = sq + ROWS * pd, *spt = sdo + ROWS * pv;
  float *sdst = spt + ROWS * T::SP, *slse = sdst + ROWS * T::SP, *sdel = slse + ROWS;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int k0 = blockIdx.x * ROWS, kvh = blockIdx.y, b = blockIdx.z, group = p.hq / p.hkv, shift = p.sk - p.sq;
  load_tile<ROWS>(sk, pd, p.k, p.in_dtype, b * p.k_bs + kvh * p.k_hs, p.k_ss, p.k_ds, k0, p.sk, p.d);
  load_tile<ROWS>(sv, pv, p.v, p.in_dtype, b * p.v_bs + kvh * p.v_hs, p.v_ss, p.v_ds, k0, p.sk, p.dv_dim);

  float dk[T::RR][T::NC], dv[T::RR][T::NC]; /* rows: keys ty + 8 r */
  zero(dk), zero(dv);
  const float sl2 = p.scale * attn::LOG2E;
  /* causal: queries before k0 - shift see none of these keys */
  const int first = p.causal ? max(0, k0 - shift) / ROWS * ROWS : 0;
  for (int hh = 0; hh < group; hh++) {
    const int h = kvh * group + hh;
    for (int q0 = first; q0 < p.sq; q0 += ROWS) {
      __syncthreads(); /* K and V have landed (first step); the last step's tiles are no longer read */
      load_tile<ROWS>(sq, pd, p.q, p.in_dtype, b * p.q_bs + h * p.q_hs, p.q_ss, p.q_ds, q0, p.sq, p.d);
      load_tile<ROWS>(sdo, pv, p.dout, p.do_dtype, b * p.do_bs + h * p.do_hs, p.do_ss, p.do_ds, q0, p.sq, p.dv_dim);
      if (threadIdx.x < ROWS) {
        slse[threadIdx.x] = attn::row_lse2(p, b, h, q0 + threadIdx.x); /* +inf past Sq or for an empty row */
        sdel[threadIdx.x] = attn::row_delta(p, b, h, q0 + threadIdx.x);
      }
      __syncthreads();
      /* Sᵀ and dPᵀ: rows keys ty + 8 r, columns queries tx + 16 c */
      float s[T::RR][T::CC], dp[T::RR][T::CC];
      score_pair(s, dp, sk, sq, pd, sv, sdo, pv, p, ty, tx);
#pragma unroll
      for (int r = 0; r < T::RR; r++)
#pragma unroll
        for (int c = 0; c < T::CC; c++) {
          const int i = tx + 16 * c, at = (ty + 8 * r) * T::SP + i;
          const float pr = prob(visible(p, q0 + i, k0 + ty + 8 * r, shift), s[r][c], sl2, slse[i]);
          spt[at] = pr;
          sdst[at] = pr * (dp[r][c] - sdel[i]);
        }
      __syncthreads();
      tile_accumulate(dv, spt, T::SP, sdo, pv, ROWS, p.dv_dim, ty, tx); /* dV += Pᵀ·dO */
      tile_accumulate(dk, sdst, T::SP, sq, pd, ROWS, p.d, ty, tx);     /* dK += dSᵀ·Q */
    }
  }
  float one[T::RR], scale[T::RR];
#pragma unroll
  for (int r = 0; r < T::RR; r++) one[r] = 1.f, scale[r] = p.scale;
  if (p.dk)
    store_rows(dk, scale, p.dk, p.dk_dtype, b * p.dk_bs + kvh * p.dk_hs, p.dk_ss, p.dk_ds, k0, p.sk, p.d, ty, tx);
  if (p.dv)
    store_rows(dv, one, p.dv, p.dv_dtype, b * p.dv_bs + kvh * p.dv_hs, p.dv_ss, p.dv_ds, k0, p.sk, p.dv_dim, ty, tx);
}

/* ---- backward dQ: a block owns ROWS query rows of one head and walks the keys ------------------ */
template <int ROWS>
__device__ __forceinline__ void dq(const kiln_attn_args &p) {
  using T = Tile<ROWS>;
  extern __shared__ float smem[];
  const int pd = KILN_ATTN_SIMT_PITCH(p.d), pv = KILN_ATTN_SIMT_PITCH(p.dv_dim);
  float *sq = smem, *sdo = sq + ROWS * pd, *sk = sdo + ROWS * pv, *sv = sk + ROWS * pd, *sds = sv + ROWS * pv;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int q0 = blockIdx.x * ROWS, h = blockIdx.y, b = blockIdx.z, kvh = h / (p.hq / p.hkv), shift = p.sk - p.sq;
  const int64_t kb = b * p.k_bs + kvh * p.k_hs, vb = b * p.v_bs + kvh * p.v_hs;
  load_tile<ROWS>(sq, pd, p.q, p.in_dtype, b * p.q_bs + h * p.q_hs, p.q_ss, p.q_ds, q0, p.sq, p.d);
  load_tile<ROWS>(sdo, pv, p.dout, p.do_dtype, b * p.do_bs + h * p.do_hs, p.do_ss, p.do_ds, q0, p.sq, p.dv_dim);
  float lse2[T::RR], del[T::RR], acc[T::RR][T::NC];
#pragma unroll
  for (int r = 0; r < T::RR; r++) {
    lse2[r] = attn::row_lse2(p, b, h, q0 + ty + 8 * r);
    del[r] = attn::row_delta(p, b, h, q0 + ty + 8 * r);
  }
  zero(acc);
  const float sl2 = p.scale * attn::LOG2E;
  const int nblk = attn::key_blocks(p, shift, q0, ROWS, ROWS);
  for (int blk = 0; blk < nblk; blk++) {
    const int k0 = blk * ROWS;
    __syncthreads(); /* Q and dO have landed (first step); the last step's K and dS are no longer read */
    load_tile<ROWS>(sk, pd, p.k, p.in_dtype, kb, p.k_ss, p.k_ds, k0, p.sk, p.d);
    load_tile<ROWS>(sv, pv, p.v, p.in_dtype, vb, p.v_ss, p.v_ds, k0, p.sk, p.dv_dim);
    __syncthreads();
    float s[T::RR][T::CC], dp[T::RR][T::CC];
    score_pair(s, dp, sq, sk, pd, sdo, sv, pv, p, ty, tx);
#pragma unroll
    for (int r = 0; r < T::RR; r++)
#pragma unroll
      for (int c = 0; c < T::CC; c++) {
        const float pr = prob(visible(p, q0 + ty + 8 * r, k0 + tx + 16 * c, shift), s[r][c], sl2, lse2[r]);
        sds[(ty + 8 * r) * T::SP + tx + 16 * c] = pr * (dp[r][c] - del[r]);
      }
    __syncthreads();
    tile_accumulate(acc, sds, T::SP, sk, pd, ROWS, p.d, ty, tx); /* dQ += dS·K */
  }
  float scale[T::RR];
#pragma unroll
  for (int r = 0; r < T::RR; r++) scale[r] = p.scale;
  store_rows(acc, scale, p.dq, p.dq_dtype, b * p.dq_bs + h * p.dq_hs, p.dq_ss, p.dq_ds, q0, p.sq, p.d, ty, tx);
}

} /* namespace attn_simt */
} /* namespace kiln */

#define KILN_ATTN_SIMT_ENTRIES(rows)                                                                        \
  extern "C" __global__ void __launch_bounds__(KILN_ATTN_SIMT_THREADS)                                      \
      kiln_attn_simt_fwd_r##rows(const kiln_attn_args args) {                                               \
    kiln::attn_simt::forward<rows>(args);                                                                   \
  }                                                                                                         \
  extern "C" __global__ void __launch_bounds__(KILN_ATTN_SIMT_THREADS)                                      \
      kiln_attn_simt_dkdv_r##rows(const kiln_attn_args args) {                                              \
    kiln::attn_simt::dkdv<rows>(args);                                                                      \
  }                                                                                                         \
  extern "C" __global__ void __launch_bounds__(KILN_ATTN_SIMT_THREADS) kiln_attn_simt_dq_r##rows(           \
      const kiln_attn_args args) {                                                                          \
    kiln::attn_simt::dq<rows>(args);                                                                        \
  }
KILN_ATTN_SIMT_ENTRIES(32)
KILN_ATTN_SIMT_ENTRIES(16)
