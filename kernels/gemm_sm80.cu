/*
 * gemm_sm80.cu — kiln_matmul's sm_80+ kernels: C = alpha·A·B + beta·C, fp16/bf16 in, fp32 acc.
 *
 * Two ways to feed the same tensor-core inner loop (gemm_sm80.cuh):
 *   MMA_SYNC  — global -> registers -> shared: the loads of slice k+STAGES-1 are issued before
 *               the MMAs of slice k and stored to their stage after them, so their latency hides
 *               behind the math. Works on any alignment (_scalar variants load element by
 *               element when rows are not 16-byte aligned).
 *   CP_ASYNC  — cp.async copies global -> shared without passing through registers; needs
 *               16-byte aligned rows.
 * Both: 8 warps, a ring of KILN_GEMM_STAGES slices whose stages complete on mbarriers (no
 * __syncthreads per slice, gemm_sm80.cuh's gemm_block); tile sizes in kiln_abi.h.
 *
 * Floors at 4096^3 on an H200: 137 GFLOP at 989 TFLOP/s = 139 us; bytes 3 x 32 MiB at 4.3 TB/s
 * = 23 us. Compute-bound; mma.sync reaches about 60-65% of the dense peak on Hopper.
 */
#include "gemm_sm80.cuh"

namespace kiln {

struct StoreC {
  template <int MT, int NT>
  static KILN_DEVICE void store(const float (&acc)[MT][NT][4], const kiln_gemm_args &p, void *C, int row0, int col0,
                                int lane) {
    store_c(acc, p, C, row0, col0, lane);
  }
};

/* The block's tile and feed for an algo; the K loop, loaders and epilogue are gemm_sm80.cuh's. */
template <bool BF16, bool A_K, bool B_K, Feed FEED>
__device__ __forceinline__ void gemm(const kiln_gemm_args &p) {
  constexpr bool CPA = FEED == Feed::CpAsync;
  constexpr int BM = CPA ? KILN_GEMM_CPA_BM : KILN_GEMM_MMA_BM, BN = CPA ? KILN_GEMM_CPA_BN : KILN_GEMM_MMA_BN;
  constexpr int BK = CPA ? KILN_GEMM_CPA_BK : KILN_GEMM_MMA_BK;
  constexpr int STAGES = KILN_GEMM_STAGES(CPA, KILN_IMAGE_ARCH);
  gemm_block<MmaF16<BF16>, BM, BN, BK, STAGES, FEED, A_K, B_K, false, StoreC>(p, p.group_m);
}

} /* namespace kiln */

/* The exported kernels: one per (algo, dtype, A layout, B layout), named as kernel_list.h says. */
#define KILN_GEMM_ENTRY(name, bf16, ak, bk, feed)                                                       \
  extern "C" __global__ void __launch_bounds__(                                                         \
      kiln::Feed::feed == kiln::Feed::CpAsync ? KILN_GEMM_THREADS : KILN_GEMM_MMA_THREADS(KILN_IMAGE_ARCH), \
      kiln::Feed::feed == kiln::Feed::CpAsync ? KILN_GEMM_CPA_BLOCKS_PER_SM : KILN_GEMM_MMA_BLOCKS_PER_SM)   \
      name(const kiln_gemm_args args) {                                                                 \
    kiln::gemm<bf16, ak, bk, kiln::Feed::feed>(args);                                                   \
  }
#define KILN_GEMM_LAYOUTS(prefix, bf16, suffix, feed)               \
  KILN_GEMM_ENTRY(prefix##_kk##suffix, bf16, true, true, feed)      \
  KILN_GEMM_ENTRY(prefix##_kn##suffix, bf16, true, false, feed)     \
  KILN_GEMM_ENTRY(prefix##_mk##suffix, bf16, false, true, feed)     \
  KILN_GEMM_ENTRY(prefix##_mn##suffix, bf16, false, false, feed)

KILN_GEMM_LAYOUTS(kiln_gemm_mma_f16, false, , RegisterStaged)
KILN_GEMM_LAYOUTS(kiln_gemm_mma_bf16, true, , RegisterStaged)
KILN_GEMM_LAYOUTS(kiln_gemm_mma_f16, false, _scalar, RegisterStagedScalar)
KILN_GEMM_LAYOUTS(kiln_gemm_mma_bf16, true, _scalar, RegisterStagedScalar)
KILN_GEMM_LAYOUTS(kiln_gemm_cpasync_f16, false, , CpAsync)
KILN_GEMM_LAYOUTS(kiln_gemm_cpasync_bf16, true, , CpAsync)
