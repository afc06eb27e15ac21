/*
 * w8_dequant.cu — PREFILL's first half for kiln_qkv_project_int8: one int8 weight [K, N] (row- or
 * column-major with any leading dimension; uint8 read as int8 bit patterns) and its float32
 * scales ([1] or [N], any stride) written out as x's 16-bit dtype, row-major [K, N] with rows ld
 * elements apart: ws[k, n] = w[k, n] · scale[n], rounded once. kiln_matmul then multiplies x by
 * it; the product uses the rounded weight·scale, where DECODE sums x·w exactly and scales after
 * (kiln.h: the bits differ, both within SPEC §5).
 *
 * Bandwidth-bound (K·N bytes in, 2·K·N out). Both weight layouts are read along their contiguous
 * dimension and written along n: a 32 x 32 tile goes through shared memory (padded by one column
 * so the transposed reads of a column-major weight hit 32 different banks). Block: 256 threads
 * (kiln_launch's blocks are one-dimensional) seen as 32 x 8, each 4 rows of the tile.
 */
#include "common.cuh"

constexpr int TILE = 32, ROWS = 8;

template <bool BF16>
KILN_DEVICE void dequant8(const kiln_qkv_proj &p, int k, uint16_t *ws, int64_t ld) {
  __shared__ float tile[TILE][TILE + 1]; /* [k][n] of this block's 32 x 32 tile */
  const int n0 = blockIdx.x * TILE, k0 = blockIdx.y * TILE, tx = threadIdx.x % TILE,
            ty = threadIdx.x / TILE;
  const bool col_major = p.w_cs != 1; /* then w_rs == 1: k is the contiguous dimension */
#pragma unroll
  for (int i = 0; i < TILE; i += ROWS) {
    /* row-major: thread tx reads column n0 + tx of row k0 + ty + i; column-major the transpose,
     * so consecutive threads read consecutive bytes either way */
    const int kk = col_major ? k0 + tx : k0 + ty + i, nn = col_major ? n0 + ty + i : n0 + tx;
    float v = 0.f;
    if (kk < k && nn < p.n) v = (float)(int8_t)__ldg((const unsigned char *)p.w + (int64_t)kk * p.w_rs + (int64_t)nn * p.w_cs);
    if (col_major) tile[tx][ty + i] = v;
    else tile[ty + i][tx] = v;
  }
  __syncthreads();
  const int nn = n0 + tx;
  if (nn >= p.n) return;
  const float s = __ldg(p.scale + (int64_t)nn * p.scale_stride);
#pragma unroll
  for (int i = 0; i < TILE; i += ROWS) {
    const int kk = k0 + ty + i;
    if (kk < k) {
      const float v = tile[ty + i][tx] * s;
      ws[(int64_t)kk * ld + nn] = BF16 ? __bfloat16_as_ushort(__float2bfloat16_rn(v)) : __half_as_ushort(__float2half_rn(v));
    }
  }
}

extern "C" __global__ void __launch_bounds__(TILE * ROWS)
    kiln_w8_dequant_f16(const kiln_qkv_proj p, int k, uint16_t *ws, int64_t ld) {
  dequant8<false>(p, k, ws, ld);
}
extern "C" __global__ void __launch_bounds__(TILE * ROWS)
    kiln_w8_dequant_bf16(const kiln_qkv_proj p, int k, uint16_t *ws, int64_t ld) {
  dequant8<true>(p, k, ws, ld);
}
