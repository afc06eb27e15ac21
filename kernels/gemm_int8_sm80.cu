/*
 * gemm_int8_sm80.cu — kiln_matmul_int8's sm_80+ kernels (W8A8): C = float(A·B in int32) · scale
 * · row_scale[i] · col_scale[j], A [M,K] and B [K,N] int8, C f32/f16/bf16.
 *
 * The math. mma.sync.m16n8k32.row.col.s32.s8.s8.s32 multiplies a 16x32 int8 A fragment by a
 * 32x8 B fragment into a 16x8 int32 accumulator (4 per lane). In bytes these fragments are the
 * f16 m16n8k16 ones (16 rows x 32 bytes), so everything of gemm_sm80.cuh serves: the tile
 * loaders (element = byte, 16-byte chunks of 16 k), ldmatrix.x4 fragment loads, the K loop of
 * gemm_block and the epilogue's index math; only the MMA and the value stored differ.
 *
 * Tiles: the f16 kernels' block, 128 x 256 with 8 warps of 64 x 64 (4 x 8 fragments, 128 int32
 * accumulators per lane): the largest warp tile that fits the register file, i.e. the most MMAs
 * per byte loaded from shared memory (per k32 step a warp issues 8 ldmatrix.x4 and 32 IMMA).
 * BK is counted in bytes: 64 for the register-staged kernels (2 stages) and 128 for cp.async
 * (3 stages), the byte sizes of the f16 kernels' measured-best slices (kiln_abi.h).
 *
 * Layouts. IMMA wants both operands k-contiguous per row (A "row", B "col"), and ldmatrix.trans
 * transposes 16-bit elements, not bytes. k-major operands (x row-major, W.T of a Linear weight)
 * are copied as they are; an m-major A or n-major B goes through TransposingLoader (global ->
 * registers -> 8 byte permutes per 4x4 block -> shared, k-major), so every layout reads its
 * fragments the same way. Kernels, as kernel_list.h names them:
 *   kiln_gemm_cpasync_i8_kk            both k-major, 16-byte aligned rows: cp.async ring;
 *   kiln_gemm_mma_i8_{kk,kn,mk,mn}     register-staged, 16-byte aligned rows (vector loads);
 *   kiln_gemm_mma_i8_*_scalar          any alignment: element loads.
 * Edges: the loaders zero-fill outside [0,M)x[0,K) and [0,K)x[0,N), so any M, N, K >= 1.
 *
 * Exactness. The s32 accumulation wraps modulo 2^32 (no .satfinite); |sum| <= 2^31 for
 * K <= 2^17 and only 2^31 itself wraps (to INT32_MIN), which the epilogue reads as +2^31, as
 * the CPU path does (src/cpu/matmul_int8_cpu.c). Then, in f32 and in this order,
 * v = (float)sum (RNE); v *= scale; v *= row_scale[i]; v *= col_scale[j] with __fmul_rn (never
 * contracted or reordered), and one RNE rounding to C's dtype (__float2half_rn /
 * __float2bfloat16_rn, like kiln_f32_to_f16 / _bf16 on the host): bit-identical to the CPU.
 * C is written row-major (pairs of columns as one store); the host computes a column-major C
 * as Cᵀ = Bᵀ·Aᵀ with kiln_int8_args.transposed set, which keeps the scales' order.
 *
 * Floors at 4096^3 on an H200: 2·4096^3 = 137 G int8 ops; at the 1979 TOPS dense int8 peak
 * (wgmma only) 69 us; bytes 16 + 16 MiB in and 64 MiB of f32 out at 4.3 TB/s, 23 us:
 * compute-bound. mma.sync cannot reach that peak on Hopper: the f16 kernels of the same shape
 * run at 0.28-0.31 of the f16 peak (CP_ASYNC, docs/performance.md); if IMMA keeps twice HMMA's
 * rate per instruction as on Ampere, expect ~500-600 TOPS from cpasync_i8_kk (0.6-0.7x
 * cuBLASLt's 866), less for the transposing layouts (their shared stores are 4-way bank
 * conflicted). The SPEC's 1.2x cuBLASLt needs int8 wgmma (sm_90a), a separate kernel.
 */
#include "gemm_int8.cuh"

namespace kiln {

template <bool A_K, bool B_K, Feed FEED>
__device__ __forceinline__ void gemm_s8(const kiln_int8_args &p) {
  constexpr bool CPA = FEED == Feed::CpAsync;
  static_assert(!CPA || (A_K && B_K), "cp.async copies k-major tiles only (no transposing on the way)");
  constexpr int BK = CPA ? KILN_GEMM_I8_CPA_BK : KILN_GEMM_I8_MMA_BK;
  constexpr int STAGES = CPA ? KILN_GEMM_I8_CPA_STAGES : 2;
  gemm_block<MmaS8, KILN_GEMM_I8_BM, KILN_GEMM_I8_BN, BK, STAGES, FEED, A_K, B_K, true, StoreInt8>(
      p, KILN_GEMM_I8_GROUP_M);
}

} /* namespace kiln */

/* The exported kernels, named as kernel_list.h says (A layout k/m, B layout k/n). */
#define KILN_GEMM_I8_ENTRY(name, ak, bk, feed)                                                 \
  extern "C" __global__ void __launch_bounds__(KILN_GEMM_THREADS, 1) name(const kiln_int8_args args) { \
    kiln::gemm_s8<ak, bk, kiln::Feed::feed>(args);                                             \
  }
#define KILN_GEMM_I8_LAYOUTS(prefix, suffix, feed)              \
  KILN_GEMM_I8_ENTRY(prefix##_kk##suffix, true, true, feed)     \
  KILN_GEMM_I8_ENTRY(prefix##_kn##suffix, true, false, feed)    \
  KILN_GEMM_I8_ENTRY(prefix##_mk##suffix, false, true, feed)    \
  KILN_GEMM_I8_ENTRY(prefix##_mn##suffix, false, false, feed)

KILN_GEMM_I8_LAYOUTS(kiln_gemm_mma_i8, , RegisterStaged)
KILN_GEMM_I8_LAYOUTS(kiln_gemm_mma_i8, _scalar, RegisterStagedScalar)
KILN_GEMM_I8_ENTRY(kiln_gemm_cpasync_i8_kk, true, true, CpAsync)
