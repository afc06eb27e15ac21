/*
 * w4_dequant.cu — PREFILL's first half for kiln_matmul_int4: the 4-bit weight (kiln's native
 * layout, kiln.h) written out as x's 16-bit dtype, row-major [K, N], for kiln_matmul to multiply.
 * w[k, n] = scale · (q − zero) in f32, rounded once. Act-order weights store rows sorted by
 * group; stored row r is logical row perm[r], written there, so the product needs no gather of x.
 *
 * One thread per code word (8 k of one column): a warp reads 128 contiguous bytes of a word row
 * and writes, per k, 64 contiguous bytes of an output row. Bandwidth-bound: K·N/2 bytes in,
 * 2·K·N out (4096 x 12288: 126 MB, ~30 µs at the H200's copy bandwidth), against a GEMM of
 * 2·M·K·N FLOPs that at M >= 128 takes longer.
 */
#include "common.cuh"

template <bool BF16>
__device__ __forceinline__ void dequant(const kiln_int4_args &a, uint16_t *ws) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= a.n) return;
  const int words_k = a.k / 8;
  for (int r8 = blockIdx.y; r8 < words_k; r8 += gridDim.y) {
    const uint32_t q = __ldg(a.codes + (int64_t)r8 * a.n + n);
    const int64_t g = (int64_t)(8 * r8 / a.group) * a.n + n;
    const float s = __half2float(__ushort_as_half(__ldg(a.scales + g)));
    const int z = __ldg(a.zeros + g);
#pragma unroll
    for (int j = 0; j < 8; j++) {
      const int k = 8 * r8 + j, row = a.perm ? __ldg(a.perm + k) : k;
      const float v = s * (float)((int)(q >> (4 * j) & 15u) - z);
      ws[(int64_t)row * a.n + n] = BF16 ? __bfloat16_as_ushort(__float2bfloat16_rn(v)) : __half_as_ushort(__float2half_rn(v));
    }
  }
}

extern "C" __global__ void kiln_w4_dequant_f16(const kiln_int4_args args, uint16_t *ws) { dequant<false>(args, ws); }
extern "C" __global__ void kiln_w4_dequant_bf16(const kiln_int4_args args, uint16_t *ws) { dequant<true>(args, ws); }
