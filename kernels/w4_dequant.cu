/*
 * w4_dequant.cu — PREFILL's first half for kiln_matmul_int4: the 4-bit weight (kiln's native
 * layout, kiln.h) written out as x's 16-bit dtype, row-major [K, N], for kiln_matmul to multiply.
 * w[k, n] = scale · (q − zero) in f32 (exact: an f16 scale times an integer of 5 bits), rounded
 * once. Act-order weights store rows sorted by group; stored row r is logical row perm[r],
 * written there, so the product needs no gather of x.
 *
 * Bandwidth-bound: K·N/2 bytes in, 2·K·N out (4096 x 12288: 126 MB, ~30 µs at the H200's
 * ~4.2 TB/s copy bandwidth), before a GEMM of 2·M·K·N FLOPs that at M >= 128 takes longer.
 * A code word holds 8 k of one column and an output row wants consecutive columns, so each
 * thread transposes in registers: 8 words (columns c..c+7 of one word row, 32 bytes) in, 8
 * rows of 8 columns out as 16-byte stores, so a warp writes 512 contiguous bytes per row.
 * That needs N % 8 == 0 and 16/16/8-byte aligned codes/scales/zeros (the host checks; else
 * `cols` is 1 and each thread does one column with 2-byte stores, v1 of this kernel).
 * ws rows are ld elements apart (ld >= N): the fused QKV call writes its three weights side by
 * side as one [K, Nq + Nk + Nv] matrix for a single GEMM; the 16-byte path also needs ld % 8 == 0
 * and a 16-byte aligned ws.
 */
#include "common.cuh"

template <bool BF16> KILN_DEVICE uint32_t to16(float v) {
  return BF16 ? __bfloat16_as_ushort(__float2bfloat16_rn(v)) : __half_as_ushort(__float2half_rn(v));
}

template <bool BF16>
KILN_DEVICE void dequant(const kiln_int4_args &a, uint16_t *ws, int cols, int64_t ld) {
  const int c0 = (blockIdx.x * blockDim.x + threadIdx.x) * cols; /* first column of this thread */
  if (c0 >= a.n) return;
  for (int r8 = blockIdx.y; r8 < a.k / 8; r8 += gridDim.y) {
    const int64_t g = (int64_t)(8 * r8 / a.group) * a.n + c0; /* scale and zero of (row group, c0) */
    const uint32_t *words = a.codes + (int64_t)r8 * a.n + c0;
    if (cols == 8) {
      const uint4 w0 = __ldg((const uint4 *)words), w1 = __ldg((const uint4 *)words + 1);
      const uint4 sv = __ldg((const uint4 *)(a.scales + g));
      const uint2 zv = __ldg((const uint2 *)(a.zeros + g));
      const uint32_t q[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
      const uint32_t sp[4] = {sv.x, sv.y, sv.z, sv.w};
      float s[8];
      int z[8];
#pragma unroll
      for (int c = 0; c < 8; c++) {
        s[c] = __half2float(__ushort_as_half((uint16_t)(sp[c / 2] >> (16 * (c % 2)))));
        z[c] = (int)(((c < 4 ? zv.x : zv.y) >> (8 * (c % 4))) & 0xffu);
      }
#pragma unroll
      for (int j = 0; j < 8; j++) {
        const int k = 8 * r8 + j, row = a.perm ? __ldg(a.perm + k) : k;
        uint32_t out[4];
#pragma unroll
        for (int c = 0; c < 8; c += 2)
          out[c / 2] = to16<BF16>(s[c] * (float)((int)(q[c] >> (4 * j) & 15u) - z[c])) |
                       to16<BF16>(s[c + 1] * (float)((int)(q[c + 1] >> (4 * j) & 15u) - z[c + 1])) << 16;
        *(uint4 *)(ws + (int64_t)row * ld + c0) = make_uint4(out[0], out[1], out[2], out[3]);
      }
    } else {
      const uint32_t q = __ldg(words);
      const float s = __half2float(__ushort_as_half(__ldg(a.scales + g)));
      const int z = __ldg(a.zeros + g);
#pragma unroll
      for (int j = 0; j < 8; j++) {
        const int k = 8 * r8 + j, row = a.perm ? __ldg(a.perm + k) : k;
        ws[(int64_t)row * ld + c0] = (uint16_t)to16<BF16>(s * (float)((int)(q >> (4 * j) & 15u) - z));
      }
    }
  }
}

extern "C" __global__ void kiln_w4_dequant_f16(const kiln_int4_args args, uint16_t *ws, int cols, int64_t ld) {
  dequant<false>(args, ws, cols, ld);
}
extern "C" __global__ void kiln_w4_dequant_bf16(const kiln_int4_args args, uint16_t *ws, int cols, int64_t ld) {
  dequant<true>(args, ws, cols, ld);
}
