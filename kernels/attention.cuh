/*
 * attention.cuh — pieces shared by the FLASH attention kernels (attention_sm80.cu forward,
 * attention_bwd_sm80.cu backward): the block size, the f32 -> 16-bit packing that turns an
 * accumulator fragment into an A fragment. (The visibility rule, key j < Sk and, when causal,
 * j <= i + shift with shift = Sk - Sq, is written out in each kernel: as a shared inline
 * function it cost the forward's D = 64 kernels 20 bytes of spills under ptxas 13.)
 *
 * The accumulator of two adjacent m16n8 fragments (rows lane/4 and lane/4 + 8, columns
 * 2·(lane%4) + {0, 1} and + 8) holds exactly the elements of one m16n8k16 A fragment, so a
 * product computed by one MMA (scores, probabilities, dS) feeds the next MMA from registers:
 * a[0] = pack2(f[2t][0..1]), a[1] = pack2(f[2t][2..3]), a[2] = pack2(f[2t+1][0..1]),
 * a[3] = pack2(f[2t+1][2..3]).
 */
#pragma once
#include "gemm_sm80.cuh"

namespace kiln {
namespace attn {

constexpr int THREADS = KILN_ATTN_THREADS;

template <bool BF16>
KILN_DEVICE uint32_t pack2(float lo, float hi) {
  if (BF16) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
  }
}

/* The A fragment of k16 step t from an accumulator of n8 fragments f (see above). */
template <bool BF16, int N>
KILN_DEVICE void acc_to_a_frag(uint32_t (&a)[4], const float (&f)[N][4], int t) {
  a[0] = pack2<BF16>(f[2 * t][0], f[2 * t][1]);
  a[1] = pack2<BF16>(f[2 * t][2], f[2 * t][3]);
  a[2] = pack2<BF16>(f[2 * t + 1][0], f[2 * t + 1][1]);
  a[3] = pack2<BF16>(f[2 * t + 1][2], f[2 * t + 1][3]);
}

} /* namespace attn */
} /* namespace kiln */
