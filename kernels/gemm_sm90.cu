/*
 * gemm_sm90.cu — kiln_matmul's WGMMA kernels for Hopper (sm_90a): C = alpha·A·B + beta·C with
 * f16 or bf16 operands in any layout. The block, its ring and its measurements: gemm_sm90.cuh.
 */
#include "gemm_sm90.cuh"

/* f16/bf16 kernels in the four operand layouts kk, kn, mk, mn (kernel_list.h's order). */
#define KILN_WGMMA_LAYOUTS(prefix, bf16, bn, cluster, sk, attrs)                                                   \
  KILN_WGMMA_ENTRY(prefix##_kk, kiln::sm90::WgmmaF16<bf16>, kiln_gemm_args, true, true, bn, cluster, sk, attrs)   \
  KILN_WGMMA_ENTRY(prefix##_kn, kiln::sm90::WgmmaF16<bf16>, kiln_gemm_args, true, false, bn, cluster, sk, attrs)  \
  KILN_WGMMA_ENTRY(prefix##_mk, kiln::sm90::WgmmaF16<bf16>, kiln_gemm_args, false, true, bn, cluster, sk, attrs)  \
  KILN_WGMMA_ENTRY(prefix##_mn, kiln::sm90::WgmmaF16<bf16>, kiln_gemm_args, false, false, bn, cluster, sk, attrs)

KILN_WGMMA_LAYOUTS(kiln_gemm_wgmma256_f16, false, 256, 1, false, KILN_NO_ATTRS)
KILN_WGMMA_LAYOUTS(kiln_gemm_wgmma256_bf16, true, 256, 1, false, KILN_NO_ATTRS)
KILN_WGMMA_LAYOUTS(kiln_gemm_wgmma128_f16, false, 128, 1, false, KILN_NO_ATTRS)
KILN_WGMMA_LAYOUTS(kiln_gemm_wgmma128_bf16, true, 128, 1, false, KILN_NO_ATTRS)
KILN_WGMMA_LAYOUTS(kiln_gemm_wgmma64_f16, false, 64, 1, false, KILN_NO_ATTRS)
KILN_WGMMA_LAYOUTS(kiln_gemm_wgmma64_bf16, true, 64, 1, false, KILN_NO_ATTRS)
/* 128 x 256 tiles with stream-K (kiln_stream_k): chosen by the host when it splits the last wave */
KILN_WGMMA_LAYOUTS(kiln_gemm_wgmma256k_f16, false, 256, 1, true, KILN_NO_ATTRS)
KILN_WGMMA_LAYOUTS(kiln_gemm_wgmma256k_bf16, true, 256, 1, true, KILN_NO_ATTRS)
/* 128 x 256 tiles in 2-CTA clusters sharing B through TMA multicast (compile-time cluster shape,
 * so a plain cuLaunchKernel launches them; the grid is a multiple of 2). An experiment that did
 * not pay (kiln_abi.h, KILN_WGMMA_PAIRS). */
#if KILN_WGMMA_PAIRS
KILN_WGMMA_LAYOUTS(kiln_gemm_wgmma256c_f16, false, 256, 2, false, KILN_CLUSTER_PAIR)
KILN_WGMMA_LAYOUTS(kiln_gemm_wgmma256c_bf16, true, 256, 2, false, KILN_CLUSTER_PAIR)
#endif
