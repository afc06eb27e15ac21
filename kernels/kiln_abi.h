/*
 * kiln_abi.h — the argument structs that host code (C17) passes to the kernels (CUDA C) by value.
 * Plain fixed-width fields only, so both compilers lay them out identically.
 */
#ifndef KILN_ABI_H
#define KILN_ABI_H

#include <stdint.h>

/* Element dtypes as the kernels see them. */
enum { KILN_DT_F32 = 0, KILN_DT_F16 = 1, KILN_DT_BF16 = 2 };

/* C[b] = alpha · A[b]·B[b] + beta · C[b] for b < batch, with A [m,k], B [k,n], C [m,n].
 * Element (i, j) of a matrix X of batch b lives at X + b·x_bs + i·x_rs + j·x_cs (strides in
 * elements; a batch stride of 0 broadcasts). The kernel variant fixes which stride is 1:
 * A is "k-major" when a_cs == 1 and "m-major" when a_rs == 1; B is "k-major" when b_rs == 1
 * and "n-major" when b_cs == 1. C is always written with c_cs == 1: the host turns a
 * column-major C into Cᵀ = Bᵀ·Aᵀ. beta == 0 never reads C. */
typedef struct kiln_gemm_args {
  const void *a;
  const void *b;
  void *c;
  int64_t a_bs, a_rs, a_cs;
  int64_t b_bs, b_rs, b_cs;
  int64_t c_bs, c_rs;
  int32_t m, n, k, batch;
  float alpha, beta;
  int32_t c_dtype; /* KILN_DT_* */
  int32_t group_m; /* tiles along m in one band of the L2-friendly tile order */
} kiln_gemm_args;

/* Tile geometry of the sm_80 GEMM kernels (kernels/gemm_sm80.cu); the host sizes shared memory
 * with KILN_GEMM_SMEM_BYTES. A block computes a BM x BN tile of C with 8 warps (2 along M x 4
 * along N), stepping through K in BK slices. Shared-memory rows are padded by KILN_GEMM_PAD
 * elements (16 bytes) so that ldmatrix's eight 16-byte row reads hit eight different bank groups.
 *   MMA_SYNC: 128 x 128 (warp 64 x 32), 2 stages: its register staging needs the headroom.
 *   CP_ASYNC: 128 x 256 (warp 64 x 64), 4 stages: nothing staged in registers. */
#define KILN_GEMM_BK 32
#define KILN_GEMM_PAD 8
#define KILN_GEMM_THREADS 256
#define KILN_GEMM_MMA_BM 128
#define KILN_GEMM_MMA_BN 128
#define KILN_GEMM_MMA_STAGES 2
#define KILN_GEMM_CPA_BM 128
#define KILN_GEMM_CPA_BN 256
#define KILN_GEMM_CPA_STAGES 4

/* Elements of one stage's A or B tile: a k-major operand is stored [MN][BK], an m/n-major one
 * [BK][MN], each row padded. */
#define KILN_GEMM_TILE_ELEMS(mn, kmajor) \
  ((kmajor) ? (mn) * (KILN_GEMM_BK + KILN_GEMM_PAD) : KILN_GEMM_BK * ((mn) + KILN_GEMM_PAD))
#define KILN_GEMM_SMEM_BYTES(stages, bm, bn, a_kmajor, b_kmajor) \
  ((stages) * 2 * (KILN_GEMM_TILE_ELEMS(bm, a_kmajor) + KILN_GEMM_TILE_ELEMS(bn, b_kmajor)))

/* dst[i] = convert(src[i]) over a rank <= 4 index space, any strides (in elements). */
typedef struct kiln_cast_args {
  const void *src;
  void *dst;
  int64_t shape[4];
  int64_t src_strides[4];
  int64_t dst_strides[4];
  int64_t count;
  int32_t src_dtype, dst_dtype;
} kiln_cast_args;

#endif /* KILN_ABI_H */
