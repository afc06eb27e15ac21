/*
 * gemm_int8_sm90.cu — kiln_matmul_int8's WGMMA kernels for Hopper (sm_90a): C = float(A·B in
 * int32) · scale · row_scale[i] · col_scale[j] with A [M,K] and B [K,N] both k-major (x @ W.T
 * with a Linear weight W [N,K]); every other layout takes the IMMA kernels (gemm_int8_sm80.cu).
 *
 * Why: on the H200 the IMMA kernels (mma.sync m16n8k32) ran at 301 TOPS at 4096^3, 0.21x
 * cuBLASLt int8; the int8 tensor-core peak (1979 TOPS dense) is reachable only through
 * wgmma.mma_async m64nNk32.s32.s8.s8. The block is gemm_sm90.cuh's, unchanged in bytes: a
 * 128-byte tile row holds 128 int8 of K instead of 64 f16, one wgmma k32 step reads 32 bytes
 * as a k16 f16 step does, so the TMA ring, the swizzle and the descriptors are the f16 ones.
 *
 * Exactness: the s32 sums wrap modulo 2^32 (no .satfinite), as IMMA's; integer addition is
 * associative, so the accumulation order (TMA slices, 4 k32 steps each) cannot change a bit,
 * and gemm_int8.cuh's epilogue turns the sums into C exactly as the IMMA kernels and the CPU do.
 * K tail, M and N edges: TMA fills out-of-bounds bytes with zeros; stores are predicated.
 */
#include "gemm_sm90.cuh"

KILN_WGMMA_ENTRY(kiln_gemm_wgmma256_i8_kk, kiln::sm90::WgmmaS8, kiln_int8_args, true, true, 256, 1, false, KILN_NO_ATTRS)
KILN_WGMMA_ENTRY(kiln_gemm_wgmma128_i8_kk, kiln::sm90::WgmmaS8, kiln_int8_args, true, true, 128, 1, false, KILN_NO_ATTRS)
KILN_WGMMA_ENTRY(kiln_gemm_wgmma64_i8_kk, kiln::sm90::WgmmaS8, kiln_int8_args, true, true, 64, 1, false, KILN_NO_ATTRS)
/* 128 x 256 tiles in 2-CTA clusters sharing B by TMA multicast (KILN_WGMMA_PAIRS builds only) */
#if KILN_WGMMA_PAIRS
KILN_WGMMA_ENTRY(kiln_gemm_wgmma256c_i8_kk, kiln::sm90::WgmmaS8, kiln_int8_args, true, true, 256, 2, false,
                 KILN_CLUSTER_PAIR)
#endif
