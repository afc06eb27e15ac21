/*
 * gemm_sm80.cu — kiln_matmul's sm_80+ kernels: C = alpha·A·B + beta·C, fp16/bf16 in, fp32 acc.
 *
 * Two ways to feed the same tensor-core inner loop (gemm_sm80.cuh):
 *   MMA_SYNC  — global -> registers -> shared, double-buffered: the loads of slice k+1 are issued
 *               before the MMAs of slice k and stored to the other shared buffer after them, so
 *               their latency hides behind the math. Works on any alignment (_scalar variants
 *               load element by element when rows are not 16-byte aligned).
 *   CP_ASYNC  — cp.async copies global -> shared without passing through registers, in a ring of
 *               KILN_GEMM_CPA_STAGES slices kept in flight; needs 16-byte aligned rows.
 * Both: 8 warps, BK = 32, one __syncthreads per K slice; tile sizes in kiln_abi.h.
 *
 * Floors at 4096^3 on an H200: 137 GFLOP at 989 TFLOP/s = 139 us; bytes 3 x 32 MiB at 4.3 TB/s
 * = 23 us. Compute-bound; mma.sync reaches about 60-65% of the dense peak on Hopper.
 */
#include "gemm_sm80.cuh"

namespace kiln {

constexpr int THREADS = KILN_GEMM_THREADS, WARPS_M = 2, WARPS_N = 4;
static_assert(WARPS_M * WARPS_N * 32 == THREADS, "8 warps");

/* The operand loaders of a tile shape: A is [BM][BK] (k-major) or [BK][BM]; B is [BN][BK]
 * (k-major) or [BK][BN]. slice() places them on the K slice starting at k0. */
template <int BM, int BN, int BK, bool A_K, bool B_K>
struct Operands {
  TileLoader<A_K ? BM : BK, A_K ? BK : BM, THREADS> a;
  TileLoader<B_K ? BN : BK, B_K ? BK : BN, THREADS> b;

  KILN_DEVICE Operands(const kiln_gemm_args &p, int m0, int n0) {
    /* Extent left in the M / N direction; the K extent is set per slice. */
    if (A_K) {
      a.ld = p.a_rs;
      a.rows_left = p.m - m0;
    } else {
      a.ld = p.a_cs;
      a.cols_left = p.m - m0;
    }
    if (B_K) {
      b.ld = p.b_cs;
      b.rows_left = p.n - n0;
    } else {
      b.ld = p.b_rs;
      b.cols_left = p.n - n0;
    }
  }
  KILN_DEVICE void slice(const uint16_t *A, const uint16_t *B, const kiln_gemm_args &p, int m0, int n0, int k0) {
    if (A_K) {
      a.g = A + m0 * p.a_rs + k0;
      a.cols_left = p.k - k0;
    } else {
      a.g = A + k0 * p.a_cs + m0;
      a.rows_left = p.k - k0;
    }
    if (B_K) {
      b.g = B + n0 * p.b_cs + k0;
      b.cols_left = p.k - k0;
    } else {
      b.g = B + k0 * p.b_rs + n0;
      b.rows_left = p.k - k0;
    }
  }
};

enum class Feed { RegisterStaged, RegisterStagedScalar, CpAsync };

template <bool BF16, bool A_K, bool B_K, Feed FEED>
__device__ __forceinline__ void gemm(const kiln_gemm_args &p) {
  constexpr bool CPA = FEED == Feed::CpAsync;
  constexpr int BM = CPA ? KILN_GEMM_CPA_BM : KILN_GEMM_MMA_BM, BN = CPA ? KILN_GEMM_CPA_BN : KILN_GEMM_MMA_BN;
  constexpr int BK = CPA ? KILN_GEMM_CPA_BK : KILN_GEMM_MMA_BK;
  constexpr int STAGES = CPA ? KILN_GEMM_CPA_STAGES : KILN_GEMM_MMA_STAGES;
  constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N, MT = WM / 16, NT = WN / 8;
  constexpr int A_ELEMS = KILN_GEMM_TILE_ELEMS(BM, BK, A_K), B_ELEMS = KILN_GEMM_TILE_ELEMS(BN, BK, B_K);
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t *sa = smem, *sb = smem + STAGES * A_ELEMS;

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm0 = warp / WARPS_N * WM, wn0 = warp % WARPS_N * WN;
  int tm, tn;
  tile_coords(p, blockIdx.x, BM, BN, tm, tn);
  const int m0 = tm * BM, n0 = tn * BN;
  const int nk = (p.k + BK - 1) / BK;

  for (int batch = blockIdx.z; batch < p.batch; batch += gridDim.z) {
    const uint16_t *A = (const uint16_t *)p.a + batch * p.a_bs;
    const uint16_t *B = (const uint16_t *)p.b + batch * p.b_bs;
    void *C = (char *)p.c + batch * p.c_bs * (p.c_dtype == KILN_DT_F32 ? 4 : 2);

    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
      for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;

    Operands<BM, BN, BK, A_K, B_K> op(p, m0, n0);

    if constexpr (FEED == Feed::CpAsync) {
      /* Prologue: STAGES-1 slices in flight. A group is committed every step, even an empty one,
       * so that wait_group<STAGES-2> always means "slice kt has landed". */
#pragma unroll
      for (int s = 0; s < STAGES - 1; s++) {
        if (s < nk) {
          op.slice(A, B, p, m0, n0, s * BK);
          op.a.async_copy(sa + s * A_ELEMS, tid);
          op.b.async_copy(sb + s * B_ELEMS, tid);
        }
        cp_async_commit();
      }
      for (int kt = 0; kt < nk; kt++) {
        cp_async_wait<STAGES - 2>();
        const int s = kt % STAGES;
        op.slice(A, B, p, m0, n0, kt * BK); /* chunks cut by an edge: see TileLoader::async_copy */
        if (op.a.has_partial_chunks()) op.a.patch_edge(sa + s * A_ELEMS, tid);
        if (op.b.has_partial_chunks()) op.b.patch_edge(sb + s * B_ELEMS, tid);
        __syncthreads(); /* slice kt visible to all; slice kt-1's buffer free for refill */
        const int pf = kt + STAGES - 1;
        if (pf < nk) {
          op.slice(A, B, p, m0, n0, pf * BK);
          op.a.async_copy(sa + pf % STAGES * A_ELEMS, tid);
          op.b.async_copy(sb + pf % STAGES * B_ELEMS, tid);
        }
        cp_async_commit();
        warp_mma_slice<BF16, A_K, B_K, BM, BN, BK, MT, NT>(acc, sa + s * A_ELEMS, sb + s * B_ELEMS, wm0, wn0, lane);
      }
      cp_async_wait<0>();
    } else {
      constexpr bool VEC = FEED == Feed::RegisterStaged;
      uint4 ra[decltype(op.a)::ITERS], rb[decltype(op.b)::ITERS];
      op.slice(A, B, p, m0, n0, 0);
      op.a.template load<VEC>(ra, tid);
      op.b.template load<VEC>(rb, tid);
      op.a.store(sa, ra, tid);
      op.b.store(sb, rb, tid);
      __syncthreads();
      for (int kt = 0; kt < nk; kt++) {
        const bool more = kt + 1 < nk;
        if (more) { /* issue slice kt+1's loads; they complete while the MMAs below run */
          op.slice(A, B, p, m0, n0, (kt + 1) * BK);
          op.a.template load<VEC>(ra, tid);
          op.b.template load<VEC>(rb, tid);
        }
        const int s = kt % 2;
        warp_mma_slice<BF16, A_K, B_K, BM, BN, BK, MT, NT>(acc, sa + s * A_ELEMS, sb + s * B_ELEMS, wm0, wn0, lane);
        if (more) {
          op.a.store(sa + (s ^ 1) * A_ELEMS, ra, tid);
          op.b.store(sb + (s ^ 1) * B_ELEMS, rb, tid);
        }
        __syncthreads();
      }
    }
    store_c<MT, NT>(acc, p, C, m0 + wm0, n0 + wn0, lane);
    if (gridDim.z < p.batch) __syncthreads(); /* the next batch reuses shared memory */
  }
}

} /* namespace kiln */

/* The exported kernels: one per (algo, dtype, A layout, B layout), named as kernel_list.h says. */
#define KILN_GEMM_ENTRY(name, bf16, ak, bk, feed)                                                       \
  extern "C" __global__ void __launch_bounds__(                                                         \
      KILN_GEMM_THREADS, kiln::Feed::feed == kiln::Feed::CpAsync ? KILN_GEMM_CPA_BLOCKS_PER_SM            \
                                                                 : KILN_GEMM_MMA_BLOCKS_PER_SM)           \
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
