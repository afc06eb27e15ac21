/*
 * kernel_list.h — every kernel in kiln's embedded images, X(id, "exported name", "image"), the
 * image being the kernels/<image>.cu file that defines it (so each name is looked up only in its
 * own image: no failed driver look-ups, which compute-sanitizer would report).
 * Host code builds its registry from this list (src/runtime/runtime.h); the .cu files define
 * extern "C" kernels with these names.
 *
 * GEMM names: kiln_gemm_<algo>_<dtype>_<A layout><B layout>[_scalar], A layout k (row-major,
 * k contiguous) or m (column-major); B layout k (column-major, k contiguous) or n (row-major).
 * _scalar variants load element by element for operands whose rows are not 16-byte aligned.
 * wgmma256 / wgmma128 / wgmma64: the WGMMA kernels of tile width 256, 128 and 64; wgmma256k:
 * width 256 whose walk splits its last wave (stream-K, kiln_stream_k); wgmma256c:
 * width 256 in 2-CTA clusters that share B through TMA multicast (only when KILN_WGMMA_PAIRS).
 */
#ifndef KILN_KERNEL_LIST_H
#define KILN_KERNEL_LIST_H

#include "kiln_abi.h" /* KILN_WGMMA_PAIRS */

#if KILN_WGMMA_PAIRS
#define KILN_WGMMA_PAIR_KERNELS(X)                               \
  KILN_GEMM_KERNELS_FOR(X, wgmma256c, f16, , "gemm_sm90")        \
  KILN_GEMM_KERNELS_FOR(X, wgmma256c, bf16, , "gemm_sm90")
#define KILN_INT8_PAIR_KERNELS(X) X(KILN_K_GEMM_wgmma256c_i8_KK, "kiln_gemm_wgmma256c_i8_kk", "gemm_int8_sm90")
#else
#define KILN_WGMMA_PAIR_KERNELS(X)
#define KILN_INT8_PAIR_KERNELS(X)
#endif

#define KILN_GEMM_KERNELS_FOR(X, algo, dt, suffix, image)                                          \
  X(KILN_K_GEMM_##algo##_##dt##_KK##suffix, "kiln_gemm_" #algo "_" #dt "_kk" #suffix, image)        \
  X(KILN_K_GEMM_##algo##_##dt##_KN##suffix, "kiln_gemm_" #algo "_" #dt "_kn" #suffix, image)        \
  X(KILN_K_GEMM_##algo##_##dt##_MK##suffix, "kiln_gemm_" #algo "_" #dt "_mk" #suffix, image)        \
  X(KILN_K_GEMM_##algo##_##dt##_MN##suffix, "kiln_gemm_" #algo "_" #dt "_mn" #suffix, image)

/* Attention forward (FLASH, sm_80+): kiln_attn_fwd_<dtype>_d<padded head dim>. */
#define KILN_ATTN_KERNELS_FOR(X, dt)                                                  \
  X(KILN_K_ATTN_FWD_##dt##_D64, "kiln_attn_fwd_" #dt "_d64", "attention_sm80")     \
  X(KILN_K_ATTN_FWD_##dt##_D128, "kiln_attn_fwd_" #dt "_d128", "attention_sm80")   \
  X(KILN_K_ATTN_FWD_##dt##_D256, "kiln_attn_fwd_" #dt "_d256", "attention_sm80")
/* Attention backward (FLASH, sm_90a WGMMA): kiln_attn_bwd_{dkdv,dq}_wgmma_<dtype>_d<64, 128, 256>, the
 * wide D = 64 dQ kernel (kiln_abi.h WD_DQ_*) and the fused backward (KILN_ATTN_BWD_FUSED) at 64, 128. */
#define KILN_ATTN_WG_BWD_KERNELS_FOR(X, dt)                                                                    \
  X(KILN_K_ATTN_BWD_DKDV_WG_##dt##_D64, "kiln_attn_bwd_dkdv_wgmma_" #dt "_d64", "attention_bwd_sm90")         \
  X(KILN_K_ATTN_BWD_DKDV_WG_##dt##_D128, "kiln_attn_bwd_dkdv_wgmma_" #dt "_d128", "attention_bwd_sm90")       \
  X(KILN_K_ATTN_BWD_DKDV_WG_##dt##_D256, "kiln_attn_bwd_dkdv_wgmma_" #dt "_d256", "attention_bwd_sm90")       \
  X(KILN_K_ATTN_BWD_DQ_WG_##dt##_D64, "kiln_attn_bwd_dq_wgmma_" #dt "_d64", "attention_bwd_sm90")             \
  X(KILN_K_ATTN_BWD_DQ_WG_##dt##_D128, "kiln_attn_bwd_dq_wgmma_" #dt "_d128", "attention_bwd_sm90")           \
  X(KILN_K_ATTN_BWD_DQ_WG_##dt##_D256, "kiln_attn_bwd_dq_wgmma_" #dt "_d256", "attention_bwd_sm90")           \
  X(KILN_K_ATTN_BWD_DQ_WD_##dt##_D64, "kiln_attn_bwd_dq_wide_" #dt "_d64", "attention_bwd_sm90")               \
  X(KILN_K_ATTN_BWD_FUSED_##dt##_D64, "kiln_attn_bwd_fused_" #dt "_d64", "attention_bwd_sm90")               \
  X(KILN_K_ATTN_BWD_FUSED_##dt##_D128, "kiln_attn_bwd_fused_" #dt "_d128", "attention_bwd_sm90")

/* Attention forward (FLASH, sm_90a WGMMA): kiln_attn_fwd_wgmma_<dtype>_d<padded head dim 64, 128, 256>. */
#define KILN_ATTN_WG_KERNELS_FOR(X, dt)                                                          \
  X(KILN_K_ATTN_FWD_WG_##dt##_D64, "kiln_attn_fwd_wgmma_" #dt "_d64", "attention_sm90")         \
  X(KILN_K_ATTN_FWD_WG_##dt##_D128, "kiln_attn_fwd_wgmma_" #dt "_d128", "attention_sm90")       \
  X(KILN_K_ATTN_FWD_WG_##dt##_D256, "kiln_attn_fwd_wgmma_" #dt "_d256", "attention_sm90")
#define KILN_ATTN_WD_KERNELS_FOR(X, dt) /* the wide D = 64 configuration (kiln_abi.h) */      \
  X(KILN_K_ATTN_FWD_WD_##dt##_D64, "kiln_attn_fwd_wide_" #dt "_d64", "attention_sm90")
/* The split-KV decode forward (kiln_abi.h DEC_*; algo FLASH_DECODE), head dims padded to 64, 128, 256. */
#define KILN_ATTN_DEC_KERNELS_FOR(X, dt)                                                                 \
  X(KILN_K_ATTN_FWD_DEC_##dt##_D64, "kiln_attn_fwd_decode_" #dt "_d64", "attention_decode_sm90")        \
  X(KILN_K_ATTN_FWD_DEC_##dt##_D128, "kiln_attn_fwd_decode_" #dt "_d128", "attention_decode_sm90")      \
  X(KILN_K_ATTN_FWD_DEC_##dt##_D256, "kiln_attn_fwd_decode_" #dt "_d256", "attention_decode_sm90")
#define KILN_ATTN_SH_KERNELS_FOR(X, dt)                                                          \
  X(KILN_K_ATTN_FWD_SH_##dt##_D64, "kiln_attn_fwd_short_" #dt "_d64", "attention_sm90")         \
  X(KILN_K_ATTN_FWD_SH_##dt##_D128, "kiln_attn_fwd_short_" #dt "_d128", "attention_sm90")

/* Attention backward (FLASH, sm_80+): the delta kernel, then dK/dV and dQ per dtype and DP. */
/* The CUDA-core attention kernels (any dtype and layout): each role at 32 rows, then at 16
 * (head dims above 128), so the host adds 1 for 16. */
#define KILN_ATTN_SIMT_KERNELS(X)                                                    \
  X(KILN_K_ATTN_SIMT_FWD_R32, "kiln_attn_simt_fwd_r32", "attention_simt")          \
  X(KILN_K_ATTN_SIMT_FWD_R16, "kiln_attn_simt_fwd_r16", "attention_simt")          \
  X(KILN_K_ATTN_SIMT_DKDV_R32, "kiln_attn_simt_dkdv_r32", "attention_simt")        \
  X(KILN_K_ATTN_SIMT_DKDV_R16, "kiln_attn_simt_dkdv_r16", "attention_simt")        \
  X(KILN_K_ATTN_SIMT_DQ_R32, "kiln_attn_simt_dq_r32", "attention_simt")            \
  X(KILN_K_ATTN_SIMT_DQ_R16, "kiln_attn_simt_dq_r16", "attention_simt")

#define KILN_ATTN_BWD_KERNELS_FOR(X, dt)                                                          \
  X(KILN_K_ATTN_BWD_DKDV_##dt##_D64, "kiln_attn_bwd_dkdv_" #dt "_d64", "attention_bwd_sm80")   \
  X(KILN_K_ATTN_BWD_DKDV_##dt##_D128, "kiln_attn_bwd_dkdv_" #dt "_d128", "attention_bwd_sm80") \
  X(KILN_K_ATTN_BWD_DKDV_##dt##_D256, "kiln_attn_bwd_dkdv_" #dt "_d256", "attention_bwd_sm80") \
  X(KILN_K_ATTN_BWD_DQ_##dt##_D64, "kiln_attn_bwd_dq_" #dt "_d64", "attention_bwd_sm80")       \
  X(KILN_K_ATTN_BWD_DQ_##dt##_D128, "kiln_attn_bwd_dq_" #dt "_d128", "attention_bwd_sm80")     \
  X(KILN_K_ATTN_BWD_DQ_##dt##_D256, "kiln_attn_bwd_dq_" #dt "_d256", "attention_bwd_sm80")

/* W8A8 (kiln_matmul_int8): dtype i8, names as the GEMMs above; cp.async (sm_80+) and WGMMA
 * (sm_90a, tile widths 256 / 128 / 64) only for kk. */
#define KILN_INT8_KERNELS(X)                                                        \
  KILN_GEMM_KERNELS_FOR(X, mma, i8, , "gemm_int8_sm80")                             \
  KILN_GEMM_KERNELS_FOR(X, mma, i8, _scalar, "gemm_int8_sm80")                      \
  X(KILN_K_GEMM_cpasync_i8_KK, "kiln_gemm_cpasync_i8_kk", "gemm_int8_sm80")         \
  X(KILN_K_GEMM_wgmma256_i8_KK, "kiln_gemm_wgmma256_i8_kk", "gemm_int8_sm90")       \
  X(KILN_K_GEMM_wgmma128_i8_KK, "kiln_gemm_wgmma128_i8_kk", "gemm_int8_sm90")       \
  X(KILN_K_GEMM_wgmma64_i8_KK, "kiln_gemm_wgmma64_i8_kk", "gemm_int8_sm90")       \
  KILN_INT8_PAIR_KERNELS(X)

#define KILN_KERNELS(X)                                          \
  X(KILN_K_CAST, "kiln_cast", "cast")                            \
  X(KILN_K_QWEIGHT_SORT, "kiln_qweight_sort", "qweight")         \
  X(KILN_K_QWEIGHT_IMPORT, "kiln_qweight_import", "qweight")     \
  X(KILN_K_QWEIGHT_QUANTIZE, "kiln_qweight_quantize", "qweight") \
  X(KILN_K_QWEIGHT_DEQUANT, "kiln_qweight_dequant", "qweight")   \
  X(KILN_K_INT8_QUANTIZE, "kiln_int8_quantize", "int8_quantize") \
  KILN_INT8_KERNELS(X)                                           \
  KILN_GEMM_KERNELS_FOR(X, mma, f16, , "gemm_sm80")              \
  KILN_GEMM_KERNELS_FOR(X, mma, bf16, , "gemm_sm80")             \
  KILN_GEMM_KERNELS_FOR(X, mma, f16, _scalar, "gemm_sm80")       \
  KILN_GEMM_KERNELS_FOR(X, mma, bf16, _scalar, "gemm_sm80")      \
  KILN_GEMM_KERNELS_FOR(X, cpasync, f16, , "gemm_sm80")          \
  KILN_GEMM_KERNELS_FOR(X, cpasync, bf16, , "gemm_sm80")         \
  KILN_GEMM_KERNELS_FOR(X, wgmma256, f16, , "gemm_sm90")         \
  KILN_GEMM_KERNELS_FOR(X, wgmma256, bf16, , "gemm_sm90")        \
  KILN_GEMM_KERNELS_FOR(X, wgmma256k, f16, , "gemm_sm90")        \
  KILN_GEMM_KERNELS_FOR(X, wgmma256k, bf16, , "gemm_sm90")       \
  KILN_GEMM_KERNELS_FOR(X, wgmma128, f16, , "gemm_sm90")         \
  KILN_GEMM_KERNELS_FOR(X, wgmma128, bf16, , "gemm_sm90")        \
  KILN_GEMM_KERNELS_FOR(X, wgmma64, f16, , "gemm_sm90")          \
  KILN_GEMM_KERNELS_FOR(X, wgmma64, bf16, , "gemm_sm90")         \
  KILN_WGMMA_PAIR_KERNELS(X)                                     \
  KILN_ATTN_KERNELS_FOR(X, f16)                                  \
  KILN_ATTN_KERNELS_FOR(X, bf16)                                 \
  KILN_ATTN_WG_KERNELS_FOR(X, f16)                               \
  KILN_ATTN_WG_KERNELS_FOR(X, bf16)                              \
  KILN_ATTN_WD_KERNELS_FOR(X, f16)                               \
  KILN_ATTN_WD_KERNELS_FOR(X, bf16)                              \
  KILN_ATTN_SH_KERNELS_FOR(X, f16)                               \
  KILN_ATTN_SH_KERNELS_FOR(X, bf16)                              \
  KILN_ATTN_DEC_KERNELS_FOR(X, f16)                              \
  KILN_ATTN_DEC_KERNELS_FOR(X, bf16)                             \
  X(KILN_K_ATTN_BWD_DELTA, "kiln_attn_bwd_delta", "attention_bwd_sm80") \
  KILN_ATTN_SIMT_KERNELS(X)                                      \
  KILN_ATTN_BWD_KERNELS_FOR(X, f16)                              \
  KILN_ATTN_BWD_KERNELS_FOR(X, bf16)                             \
  KILN_ATTN_WG_BWD_KERNELS_FOR(X, f16)                           \
  KILN_ATTN_WG_BWD_KERNELS_FOR(X, bf16)                          \
  X(KILN_K_ATTN_BWD_DQ_CONVERT, "kiln_attn_bwd_dq_convert", "attention_bwd_sm90") \
  X(KILN_K_W4A16_DECODE_F16_M8, "kiln_w4a16_decode_f16_m8", "wa16_decode_sm80") \
  X(KILN_K_W4A16_DECODE_F16_M16, "kiln_w4a16_decode_f16_m16", "wa16_decode_sm80") \
  X(KILN_K_W4A16_DECODE_BF16_M8, "kiln_w4a16_decode_bf16_m8", "wa16_decode_sm80") \
  X(KILN_K_W4A16_DECODE_BF16_M16, "kiln_w4a16_decode_bf16_m16", "wa16_decode_sm80") \
  X(KILN_K_W4A16_TMA_F16, "kiln_w4a16_tma_f16", "wa16_decode_sm90") \
  X(KILN_K_W4A16_TMA_BF16, "kiln_w4a16_tma_bf16", "wa16_decode_sm90") \
  X(KILN_K_W8A16_TMA_F16, "kiln_w8a16_tma_f16", "wa16_decode_sm90") \
  X(KILN_K_W8A16_TMA_BF16, "kiln_w8a16_tma_bf16", "wa16_decode_sm90") \
  X(KILN_K_W8A16_TMA_F16_N16, "kiln_w8a16_tma_f16_n16", "wa16_decode_sm90") \
  X(KILN_K_W8A16_TMA_BF16_N16, "kiln_w8a16_tma_bf16_n16", "wa16_decode_sm90") \
  X(KILN_K_W4A16_WGMMA256_F16, "kiln_w4a16_wgmma256_f16", "w4_prefill_sm90") \
  X(KILN_K_W4A16_WGMMA256_BF16, "kiln_w4a16_wgmma256_bf16", "w4_prefill_sm90") \
  X(KILN_K_W4A16_WGMMA128_F16, "kiln_w4a16_wgmma128_f16", "w4_prefill_sm90") \
  X(KILN_K_W4A16_WGMMA128_BF16, "kiln_w4a16_wgmma128_bf16", "w4_prefill_sm90") \
  X(KILN_K_W8A16_WGMMA256_F16, "kiln_w8a16_wgmma256_f16", "w4_prefill_sm90") \
  X(KILN_K_W8A16_WGMMA256_BF16, "kiln_w8a16_wgmma256_bf16", "w4_prefill_sm90") \
  X(KILN_K_W8A16_WGMMA128_F16, "kiln_w8a16_wgmma128_f16", "w4_prefill_sm90") \
  X(KILN_K_W8A16_WGMMA128_BF16, "kiln_w8a16_wgmma128_bf16", "w4_prefill_sm90") \
  X(KILN_K_W4_DEQUANT_F16, "kiln_w4_dequant_f16", "w4_dequant") \
  X(KILN_K_W4_DEQUANT_BF16, "kiln_w4_dequant_bf16", "w4_dequant") \
  X(KILN_K_W8_DEQUANT_F16, "kiln_w8_dequant_f16", "w8_dequant") \
  X(KILN_K_W8_DEQUANT_BF16, "kiln_w8_dequant_bf16", "w8_dequant") \
  X(KILN_K_W8A16_DECODE_F16_M8, "kiln_w8a16_decode_f16_m8", "wa16_decode_sm80") \
  X(KILN_K_W8A16_DECODE_F16_M16, "kiln_w8a16_decode_f16_m16", "wa16_decode_sm80") \
  X(KILN_K_W8A16_DECODE_BF16_M8, "kiln_w8a16_decode_bf16_m8", "wa16_decode_sm80") \
  X(KILN_K_W8A16_DECODE_BF16_M16, "kiln_w8a16_decode_bf16_m16", "wa16_decode_sm80")

#endif /* KILN_KERNEL_LIST_H */
