/*
 * attention.cuh — pieces shared by the FLASH attention kernels (attention_sm80.cu and
 * attention_sm90.cu forwards, attention_bwd_sm80.cu backward): the block size, the f32 -> 16-bit
 * packing that turns an accumulator fragment into an A fragment, the forwards' online-softmax
 * step and row epilogue. (The backward writes the visibility rule, key j < Sk and, when causal,
 * j <= i + shift with shift = Sk - Sq, out itself.)
 *
 * The accumulator of two adjacent m16n8 fragments (rows lane/4 and lane/4 + 8, columns
 * 2·(lane%4) + {0, 1} and + 8) holds exactly the elements of one m16n8k16 A fragment, so a
 * product computed by one MMA (scores, probabilities, dS) feeds the next MMA from registers:
 * a[0] = pack2(f[2t][0..1]), a[1] = pack2(f[2t][2..3]), a[2] = pack2(f[2t+1][0..1]),
 * a[3] = pack2(f[2t+1][2..3]).
 */
#pragma once
#include <math.h>

#include "gemm_sm80.cuh"

namespace kiln {
namespace attn {

constexpr int THREADS = KILN_ATTN_THREADS;

/* Half `hi` (0: low, 1: high) of a pack2 result, back in f32. */
template <bool BF16>
KILN_DEVICE float unpack_half(uint32_t v, int hi) {
  const uint16_t h = (uint16_t)(hi ? v >> 16 : v & 0xFFFF);
  if (BF16) return __uint_as_float((uint32_t)h << 16);
  return __half2float(__ushort_as_half(h));
}

/* The A fragment of k16 step t from an accumulator of n8 fragments f (see above). */
template <bool BF16, int N>
KILN_DEVICE void acc_to_a_frag(uint32_t (&a)[4], const float (&f)[N][4], int t) {
  a[0] = pack2<BF16>(f[2 * t][0], f[2 * t][1]);
  a[1] = pack2<BF16>(f[2 * t][2], f[2 * t][3]);
  a[2] = pack2<BF16>(f[2 * t + 1][0], f[2 * t + 1][1]);
  a[3] = pack2<BF16>(f[2 * t + 1][2], f[2 * t + 1][3]);
}

/* 2^x by the special-function unit (one MUFU.EX2; exp2f adds range fix-ups): inputs are
 * scores minus their row maximum, <= 0, or -inf (gives 0). */
KILN_DEVICE float exp2_fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/* The largest of v over the 4 lanes that share a row of an m16 accumulator tile (every lane must
 * call). */
KILN_DEVICE float row_max4(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

/* One key block's online-softmax step for a warp's m16 row tile (FlashAttention-2), shared by
 * the sm_80 and sm_90a forwards. s: the block's raw scores Q·Kᵀ as NT n8 accumulator fragments,
 * replaced by P = exp2(s·sl2 - m'·sl2) (sl2 = scale·log2 e > 0); m: the two rows' running
 * maxima of raw scores (-inf while nothing is visible), l: this lane's partial row sums, both
 * updated; corr: what the output accumulator must be multiplied by, exp2((m - m')·sl2) (see
 * rescale; the sm_90a kernel applies it only once its previous P·V has retired).
 * MASK: element e of fragment j is key key0 + 8 j + (e & 1) of row row0 + 8 (e >> 1) (key0, row0
 * include the lane's offsets), visible iff key < sk and (not causal or key <= row + shift);
 * an invisible score becomes -inf. A row with nothing visible yet uses 0 as its stand-in
 * maximum, so exp2(-inf - 0) = 0 and no NaN arises.
 * LAZY > 0 (FlashAttention-4's conditional rescaling): a row keeps its maximum m until a block's
 * exceeds it by more than LAZY in log2 units, so P <= 2^LAZY (exact in 16 bits: the same relative
 * rounding) and corr is exactly 1 for rows that keep it; the caller skips the rescale of O where
 * every row of the warp kept its maximum (O, l and the LSE all refer to the kept one). */
template <bool MASK, int NT, int LAZY = 0>
KILN_DEVICE void softmax_step(float (&s)[NT][4], float (&m)[2], float (&l)[2], float (&corr)[2], float sl2, int key0,
                              int row0, int sk, int causal, int shift) {
  float mnew[2] = {m[0], m[1]};
#pragma unroll
  for (int j = 0; j < NT; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      if (MASK) {
        const int key = key0 + 8 * j + (e & 1), row = row0 + 8 * (e >> 1);
        if (!(key < sk && (!causal || key <= row + shift))) s[j][e] = -INFINITY;
      }
      mnew[e >> 1] = fmaxf(mnew[e >> 1], s[j][e]);
    }
  float mu[2], rsum[2] = {0.f, 0.f};
#pragma unroll
  for (int r = 0; r < 2; r++) {
    mnew[r] = row_max4(mnew[r]);
    const bool keep = LAZY > 0 && !((mnew[r] - m[r]) * sl2 > (float)LAZY); /* m = -inf: keeps only -inf */
    const float mk = keep ? m[r] : mnew[r];
    mu[r] = mk == -INFINITY ? 0.f : mk * sl2;
    corr[r] = keep ? 1.f : exp2_fast(fmaf(m[r], sl2, -mu[r])); /* m = -inf -> 0, harmless: o and l are 0 */
    m[r] = mk;
  }
#pragma unroll
  for (int j = 0; j < NT; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      s[j][e] = exp2_fast(fmaf(s[j][e], sl2, -mu[e >> 1]));
      rsum[e >> 1] += s[j][e];
    }
#pragma unroll
  for (int r = 0; r < 2; r++) l[r] = l[r] * corr[r] + rsum[r];
}

/* The visibility rule softmax_step's MASK applies, for kernels whose lane rows are not row0 and
 * row0 + 8 (the decode kernel's packed tiles mask first, then take softmax_step<false>). */
KILN_DEVICE bool key_visible(int key, int row, int sk, int causal, int shift) {
  return key < sk && (!causal || key <= row + shift);
}

/* O·corr for the output accumulator's OT fragments (rows lane/4 and lane/4 + 8). */
template <int OT>
KILN_DEVICE void rescale(float (&o)[OT][4], const float (&corr)[2]) {
#pragma unroll
  for (int j = 0; j < OT; j++) {
    o[j][0] *= corr[0];
    o[j][1] *= corr[0];
    o[j][2] *= corr[1];
    o[j][3] *= corr[1];
  }
}

/* Whether the rows of a [B, H, S, D] tensor of dtype dt are 16-bit, contiguous along D and
 * 16-byte aligned at every row start, i.e. can be read or written 16 bytes (8 elements) at a time. */
KILN_DEVICE bool rows_vec16(const void *base, int dt, int64_t bs, int64_t hs, int64_t ss, int64_t ds) {
  return dt != KILN_DT_F32 && ds == 1 && (((uintptr_t)base | (uintptr_t)((bs | hs | ss) * 2)) & 15) == 0;
}

/* l summed over the 4 lanes that share a row (every lane must call). */
KILN_DEVICE float row_sum4(float l) {
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  return l + __shfl_xor_sync(0xffffffffu, l, 2);
}

/* The natural-log LSE = m·scale + ln l of a query row inside the sequence (row sums l from
 * row_sum4; one lane of the four writes), -inf for a row that saw no key. */
KILN_DEVICE void store_lse(const kiln_attn_args &p, int b, int h, int row, float m, float l, float sl2, int lane) {
  if (p.lse && lane % 4 == 0 && row < p.sq)
    p.lse[b * p.lse_bs + h * p.lse_hs + row] = l > 0.f ? (m * sl2 + log2f(l)) * 0.6931471805599453f : -INFINITY;
}

/* The end of one query row, half r (0: row lane/4, 1: + 8) of an m16 tile: sums l over the 4
 * lanes that share the row (every lane must call), then, for a row inside the sequence, stores
 * O / l (the lane's columns 8 j + 2 (lane % 4) + {0, 1}, j < OT, those < D) and the LSE; a row
 * that saw no key gets O = 0. */
template <int OT>
KILN_DEVICE void store_row(const kiln_attn_args &p, int b, int h, int row, float m, float l, float sl2,
                           const float (&o)[OT][4], int r, int lane) {
  l = row_sum4(l);
  store_lse(p, b, h, row, m, l, sl2, lane);
  if (row >= p.sq) return;
  const int dt = p.o_dtype;
  const float inv = l > 0.f ? 1.f / l : 0.f;
  char *orow = (char *)p.o + (b * p.o_bs + h * p.o_hs + (int64_t)row * p.o_ss) * (dt == KILN_DT_F32 ? 4 : 2);
#pragma unroll
  for (int j = 0; j < OT; j++) {
    const int col = j * 8 + (lane % 4) * 2;
    if (col < p.d) {
      kiln_store_from_f32(orow, col, dt, o[j][2 * r] * inv);
      kiln_store_from_f32(orow, col + 1, dt, o[j][2 * r + 1] * inv); /* D % 8 == 0: col + 1 < D */
    }
  }
}

constexpr float LOG2E = 1.4426950408889634f;

/* The forward's LSE in log2 units, with "no contribution" (-inf: no visible key) as +inf. */
KILN_DEVICE float lse_log2(float lse) { return lse == -INFINITY ? INFINITY : lse * LOG2E; }

/* The keys [0, end) that query rows [q0, q0 + rows) see: all of Sk, or with causal up to the last
 * row's diagonal (query i sees keys j <= i + shift, shift = Sk - Sq). */
KILN_DEVICE int key_end(const kiln_attn_args &p, int shift, int q0, int rows) {
  int kend = p.sk;
  if (p.causal) kend = min(kend, max(0, q0 + rows + shift));
  return kend;
}

/* The key blocks of bn keys that hold them. */
KILN_DEVICE int key_blocks(const kiln_attn_args &p, int shift, int q0, int rows, int bn) {
  return (key_end(p, shift, q0, rows) + bn - 1) / bn;
}

/* A head's K and V (from K and V, its first key) walked in blocks of BC keys by the sm_80 kernels
 * that loop over keys (the forward and the backward's dQ; the decode kernel with a deeper ring):
 * block blk goes into buffer blk % BUFS of sk and sv ([BUFS][BC] padded rows each) by cp.async,
 * keys past Sk and columns past D zero-filled. The sizes are read from p at each load, as kernel
 * parameters, not held in registers across the key loop (holding them cost the D = 64 forward 16
 * bytes of spills). */
template <int BC, int DP, int BUFS = 2>
struct KvBlocks {
  TileLoader<BC, DP, THREADS> lk, lv;
  KILN_DEVICE explicit KvBlocks(const kiln_attn_args &p) {
    lk.ld = p.k_ss;
    lv.ld = p.v_ss;
    lk.cols_left = lv.cols_left = p.d;
  }
  KILN_DEVICE void load(const kiln_attn_args &p, const uint16_t *K, const uint16_t *V, int blk, uint16_t *sk,
                        uint16_t *sv, int tid) {
    const int k0 = blk * BC, buf = blk % BUFS;
    lk.g = K + (int64_t)k0 * p.k_ss;
    lv.g = V + (int64_t)k0 * p.v_ss;
    lk.rows_left = lv.rows_left = p.sk - k0;
    lk.async_copy(sk + buf * BC * lk.PITCH, tid);
    lv.async_copy(sv + buf * BC * lv.PITCH, tid);
  }
};

/* x = A_x·B_xᵀ and y = A_y·B_yᵀ over the padded D, for this warp's 16 rows of A_x and A_y (tiles
 * of AR rows, from row 16·warp) and the N n8 columns of B_x and B_y (tiles of BR rows); every
 * tile [rows][DP] in shared memory, D contiguous. The backward's paired products (S and dP, or
 * their transposes) share one loop, each k16 step loading both A fragments together. */
template <bool BF16, int AR, int BR, int DP, int N>
KILN_DEVICE void product_pair(float (&x)[N][4], float (&y)[N][4], const uint16_t *ax, const uint16_t *ay,
                              const uint16_t *bx, const uint16_t *by, int warp, int lane) {
#pragma unroll
  for (int j = 0; j < N; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) x[j][e] = y[j][e] = 0.f;
#pragma unroll
  for (int kd = 0; kd < DP; kd += 16) {
    uint32_t fx[4], fy[4];
    load_a_frag<true, AR, DP>(fx, ax, warp * 16, kd, lane);
    load_a_frag<true, AR, DP>(fy, ay, warp * 16, kd, lane);
#pragma unroll
    for (int j = 0; j < N; j += 2) {
      uint32_t b0[2], b1[2];
      load_b_frag_pair<true, BR, DP>(b0, b1, bx, j * 8, kd, lane);
      mma_16816<BF16>(x[j], fx, b0);
      mma_16816<BF16>(x[j + 1], fx, b1);
      load_b_frag_pair<true, BR, DP>(b0, b1, by, j * 8, kd, lane);
      mma_16816<BF16>(y[j], fy, b0);
      mma_16816<BF16>(y[j + 1], fy, b1);
    }
  }
}

/* The backward's statistics of query row `row` (of head h, batch b): its LSE in log2 units and
 * delta = dO·O; a row past Sq gets +inf and 0, so its P is 0. */
KILN_DEVICE float row_lse2(const kiln_attn_args &p, int b, int h, int row) {
  return row < p.sq ? lse_log2(p.lse[b * p.lse_bs + h * p.lse_hs + row]) : INFINITY;
}
KILN_DEVICE float row_delta(const kiln_attn_args &p, int b, int h, int row) {
  return row < p.sq ? p.delta[((int64_t)b * p.hq + h) * p.sq + row] : 0.f;
}

/* Both statistics of a lane's two rows, row0 and row0 + 8 (the dQ kernels keep them in
 * registers). */
KILN_DEVICE void row_stats(const kiln_attn_args &p, int b, int h, int row0, float (&lse2)[2], float (&delta)[2]) {
#pragma unroll
  for (int r = 0; r < 2; r++) {
    lse2[r] = row_lse2(p, b, h, row0 + 8 * r);
    delta[r] = row_delta(p, b, h, row0 + 8 * r);
  }
}

/* Stores a warp's 16 x (NT·8) f32 accumulator (rows r0 + lane/4 (+8), columns c0 + …) times
 * mul into out (element (row, col) at base + row·rs + col·cs, dtype dt), predicated. */
template <int NT>
KILN_DEVICE void store_rows(const float (&acc)[NT][4], void *out, int64_t base, int64_t rs, int64_t cs, int dt,
                            int r0, int rows, int c0, int cols, float mul, int lane) {
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int r = r0 + lane / 4 + 8 * h;
    if (r >= rows) continue;
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const int c = c0 + j * 8 + (lane % 4) * 2 + e;
        if (c < cols) kiln_store_from_f32(out, base + r * rs + c * cs, dt, acc[j][2 * h + e] * mul);
      }
  }
}

} /* namespace attn */
} /* namespace kiln */
