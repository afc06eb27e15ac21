/*
 * wgmma.c — the host half of the WGMMA kernels (kernels/gemm_sm90.cuh), shared by kiln_matmul
 * (f16/bf16) and kiln_matmul_int8 (s8): TMA descriptors for the operands, the tile width for a
 * problem, and the persistent launch. The kernels read 128-byte rows of K (64 f16 or 128 int8),
 * so everything here is in bytes and the same for both element types.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "ops.h"

/* Operands TMA can load: data pointer, leading dimension (also over a dimension of size 1,
 * whose normalized value is the other extent: a product with such an operand, e.g. a gradient
 * with N = 1, was wrong through TMA on the H200) and batch stride all multiples of 16 bytes. */
bool kiln_wgmma_operand_ok(const kiln_matrix *m) {
  const int64_t e = (int64_t)m->elem;
  return (uintptr_t)m->data % 16 == 0 && (kiln_matrix_ld(m) * e) % 16 == 0 && (m->bs * e) % 16 == 0;
}

/* L2 promotion of every TMA map (a tuning switch, KILN_TUNE_DEFS: 0 none, 1 64 B, 2 128 B, 3 256 B) */
#ifndef KILN_TMA_L2_PROMOTION
#define KILN_TMA_L2_PROMOTION CU_TENSOR_MAP_L2_PROMOTION_L2_256B
#endif

kiln_status kiln_tma_map(const kiln_context *ctx, const char *op, int type, uint32_t rank, const void *data,
                         const uint64_t *dims, const uint64_t *strides, const uint32_t *box, int swizzle,
                         kiln_tensor_map *map) {
  const uint32_t unit[5] = {1, 1, 1, 1, 1};
  CUresult r = ctx->cu->cuTensorMapEncodeTiled(map, type, rank, (void *)(uintptr_t)data, dims, strides, box, unit,
                                               CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, KILN_TMA_L2_PROMOTION,
                                               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? KILN_OK : kiln_cuda_fail(ctx->cu, r, op, "cuTensorMapEncodeTiled");
}

/* TMA's element type for an operand or C: bytes (int8), f32, or the 16-bit float dtype */
static int tma_dtype(const kiln_matrix *m) {
  return m->elem == 1             ? CU_TENSOR_MAP_DATA_TYPE_UINT8
         : m->elem == 4           ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
         : KILN_IS_BF16(m->dtype) ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                  : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
}

kiln_status kiln_wgmma_operand_map(const kiln_context *ctx, const char *op, const char *name, const kiln_matrix *m,
                                   uint32_t box_outer, kiln_tensor_map *map) {
  const bool cols_contiguous = m->cs == 1;
  uint64_t dims[3] = {(uint64_t)(cols_contiguous ? m->cols : m->rows), (uint64_t)(cols_contiguous ? m->rows : m->cols),
                      (uint64_t)m->batch};
  uint64_t strides[2] = {(uint64_t)(kiln_matrix_ld(m) * (int64_t)m->elem), (uint64_t)(m->bs * (int64_t)m->elem)};
  /* TMA wants every stride a multiple of 16 bytes, even one over a dimension of size 1, which
   * addresses nothing: round it up. */
  strides[0] = (strides[0] + 15) & ~15ull;
  strides[1] = (strides[1] + 15) & ~15ull;
  const uint32_t rank = m->bs != 0 ? 3 : 2;
  const uint32_t box[3] = {(uint32_t)(128 / m->elem), box_outer, 1};
  if (strides[0] >= (1ull << 40) || strides[1] >= (1ull << 40) || dims[0] > UINT32_MAX || dims[1] > UINT32_MAX)
    return kiln_fail(KILN_ERROR_UNSUPPORTED,
                     "%s: algo WGMMA: %s's strides (%" PRIu64 " and %" PRIu64 " bytes) exceed what TMA addresses "
                     "(2^40); use algo AUTO",
                     op, name, strides[0], strides[1]);
  return kiln_tma_map(ctx, op, tma_dtype(m), rank, m->data, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B, map);
}

/* Tuning (KILN_TUNE_DEFS): 0 launches the WGMMA kernels after the stream's previous kernel has
 * ended, 1 as its programmatic dependent */
#ifndef KILN_WGMMA_PDL
#define KILN_WGMMA_PDL 1
#endif

/* The widest tile whose 128-row tiles still give enough blocks. 128 x 256 tiles load the fewest
 * bytes per FLOP, but at 1024^3 they are 32 blocks for 132 SMs; 128 x 64 tiles make it 128.
 * "Enough" is half the SMs, or a fifth when M <= 64: then the A tile is mostly TMA's
 * out-of-bounds fill and each block's time is its stream of B, so wider tiles (less fill per
 * byte of B) win as long as some 27 blocks share the stream (H200: 1 x 4096 x 4096 runs in
 * 27 us at width 128 against 33 at 64; 16 x 12288 x 4096 in 47 us at 256 against 51 at 128).
 * docs/performance.md has the measurements. */
int kiln_wgmma_tile_n(int64_t m, int64_t n, int64_t batch, int sms) {
  const int64_t rows = (m + KILN_GEMM_WG_BM - 1) / KILN_GEMM_WG_BM * batch;
  const int64_t need = m <= 64 ? (sms + 4) / 5 : (sms + 1) / 2;
  if (rows * ((n + 255) / 256) >= need) return 256;
  if (rows * ((n + 127) / 128) >= need) return 128;
  return 64;
}

/* Tuning (KILN_TUNE_DEFS): 0 keeps every WGMMA GEMM's C on the direct stores of store_tile */
#ifndef KILN_GEMM_TMA_STORE
#define KILN_GEMM_TMA_STORE 1
#endif

/* A TMA store writes whole 16-byte chunks: with rows of C->cols elements not a multiple of 16
 * bytes it would overwrite what lies past each row's end (a padded view's gap), so such a C keeps
 * the direct stores. */
bool kiln_wgmma_c_staged(const kiln_matrix *C, float beta) {
  const int64_t e = (int64_t)C->elem;
  return KILN_GEMM_TMA_STORE && beta == 0.f && C->cs == 1 && kiln_matrix_aligned16(C) && C->cols * e % 16 == 0 &&
         (uint64_t)(C->rs * e) < (1ull << 40) && (C->batch == 1 || (C->bs > 0 && (uint64_t)(C->bs * e) < (1ull << 40)));
}

/* C's map for the staged epilogue (kernels/gemm_sm90.cuh, store_staged_as): [batch][M][N],
 * boxes of 64 rows by 128 bytes in the 128-byte swizzle */
static kiln_status wgmma_c_map(const kiln_context *ctx, const char *op, const kiln_matrix *C, kiln_tensor_map *map) {
  const uint64_t e = (uint64_t)C->elem;
  const uint64_t dims[3] = {(uint64_t)C->cols, (uint64_t)C->rows, (uint64_t)C->batch};
  const uint64_t strides[2] = {(uint64_t)C->rs * e, (uint64_t)C->bs * e};
  const uint32_t box[3] = {(uint32_t)(128 / e), 64, 1};
  return kiln_tma_map(ctx, op, tma_dtype(C), C->batch > 1 ? 3 : 2, C->data, dims, strides, box,
                      CU_TENSOR_MAP_SWIZZLE_128B, map);
}

int64_t kiln_wgmma_items(const kiln_context *ctx, int bn, int64_t tiles_m, int64_t tiles_n, int64_t batch, bool *pair) {
  *pair = KILN_WGMMA_PAIRS && bn == 256 && tiles_m >= 2 && ctx->wg_pair_clusters > 0;
  return (*pair ? (tiles_m + 1) / 2 : tiles_m) * tiles_n * batch;
}

/* The SMs a persistent WGMMA grid of single CTAs covers (one block per SM) */
static int64_t wgmma_slots(const kiln_context *ctx) { return ctx->info.sm_count > 0 ? ctx->info.sm_count : 1; }

/* Why stream-K: with one block per SM, a walk of T tiles on G SMs takes ceil(T / G) tile times,
 * so at 8192^3 (2048 tiles of 128 x 256 on 132 SMs) the last wave leaves 64 SMs idle for a
 * sixteenth of the run. Dealing the last T mod G tiles out as even runs of K slices instead
 * makes every block's work equal to within one slice: the longest block does nk - ceil(rest ·
 * nk / G) slices fewer. It costs, measured on the H200 and the H100 (docs/performance.md):
 *   - a 128 x 256 partial (128 KB) a block, written and read through L2: ~10 us, the time of
 *     13-18 slices (4096^3 saves 7 and ran 2-3 % slower; 13-15 saved lost 0.3-0.5 %);
 *   - nothing of the L2's reuse, now that each run walks its head first (Walk): the split wave's
 *     blocks stay at two K offsets (with the tail first they spread over the whole K and
 *     2048 x 8192 x 28672 ran 15 % slower; head first it gained 2 %).
 * Hence the rule: at least KILN_WGMMA_SK_MIN_SLICES saved, after at least
 * KILN_WGMMA_SK_MIN_WAVES whole waves (every measured shape meeting both gained 1-3.5 %
 * paired; none was measured with no whole wave). Only the 256-wide tiles have the kernels. */
#ifndef KILN_WGMMA_SK_MIN_SLICES
#define KILN_WGMMA_SK_MIN_SLICES 24
#endif
#ifndef KILN_WGMMA_SK_MIN_WAVES
#define KILN_WGMMA_SK_MIN_WAVES 1
#endif
kiln_wgmma_sk kiln_wgmma_stream_k(const kiln_context *ctx, int64_t items, int64_t nk, int bn, int mode) {
  kiln_wgmma_sk plan = {0, 0, 0, 0};
  const int64_t grid = wgmma_slots(ctx), rest = items % grid, waves = items / grid;
  const int64_t saved = nk - (rest * nk + grid - 1) / grid;
  const bool pays = waves >= KILN_WGMMA_SK_MIN_WAVES && saved >= KILN_WGMMA_SK_MIN_SLICES;
  if (mode < 0 || bn != 256 || rest == 0 || nk < 2 || rest * nk > INT32_MAX || (mode == 0 && !pays)) return plan;
  plan.items = rest, plan.tile_n = bn;
  plan.flags_bytes = ((size_t)grid * 2 * sizeof(uint64_t) + 255) & ~(size_t)255;
  plan.bytes = plan.flags_bytes + (size_t)grid * KILN_GEMM_WG_BM * (size_t)bn * 4; /* 2 warpgroups x 64 rows x bn */
  return plan;
}

/* A new epoch for each stream-K launch: the flags a launch raises hold its epoch, so flags that
 * earlier launches (or whatever held the memory before) left behind never match. splitmix64 of a
 * counter seeded from the clock and the process makes them unpredictable values, never 0. */
static uint64_t wgmma_epoch(void) {
  static _Atomic uint64_t seed, counter;
  uint64_t s = atomic_load(&seed);
  if (s == 0) { /* first launch of the process; racing first launches agree on one seed */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const uint64_t fresh = (((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^ (uint64_t)getpid() << 40) | 1;
    if (atomic_compare_exchange_strong(&seed, &s, fresh)) s = fresh;
  }
  uint64_t z = s + atomic_fetch_add(&counter, 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return z ? z : 1;
}

void kiln_wgmma_sk_args(const kiln_wgmma_sk *plan, void *ws, kiln_stream_k *out) {
  *out = (kiln_stream_k){.partials = (char *)ws + plan->flags_bytes, .flags = (uint64_t *)ws, .epoch = wgmma_epoch(),
                         .items = (int32_t)plan->items, .tile_n = plan->tile_n};
}

kiln_status kiln_wgmma_launch(const kiln_context *ctx, const char *op, kiln_kernel_id kernel, const kiln_matrix *A,
                              const kiln_matrix *B, const kiln_matrix *C, int bn, bool pair, int64_t items,
                              bool stream_k, void *args, CUstream stream) {
  kiln_tensor_map map_a, map_b, map_c = {0}; /* map_c unused (zero) when C is NULL */
  kiln_status st;
  const bool a_k = A->cs == 1, b_k = B->rs == 1;
  /* a k-major operand is one box of [rows][128 bytes]; an m/n-major one boxes of [64 k][64 mn].
   * A k-major B box covers the tile's columns, or with a pair the half each CTA loads. */
  const uint32_t b_box = b_k ? (uint32_t)(pair ? bn / 2 : bn) : 64;
  if ((st = kiln_wgmma_operand_map(ctx, op, "A", A, a_k ? KILN_GEMM_WG_BM : 64, &map_a)) ||
      (st = kiln_wgmma_operand_map(ctx, op, "B", B, b_box, &map_b)) ||
      (C && (st = wgmma_c_map(ctx, op, C, &map_c))))
    return st;
  void *params[] = {args, &map_a, &map_b, &map_c};
  /* persistent grid: one block (or pair) per work item up to what is resident at once */
  const int64_t slots = pair ? ctx->wg_pair_clusters : wgmma_slots(ctx);
  const int64_t grid = (stream_k || items >= slots ? slots : items) * (pair ? 2 : 1);
  /* single CTAs as programmatic dependents of the stream's previous kernel: their launch and
   * barrier setup overlap its end (the kernel waits before touching memory; pairs carry their
   * cluster shape and launch plainly) */
  if (KILN_WGMMA_PDL && !pair)
    return kiln_launch_dependent(ctx, kernel, (unsigned)grid, 1, 1, KILN_GEMM_WG_THREADS, KILN_GEMM_WG_SMEM_BYTES(bn),
                                 stream, params, op);
  return kiln_launch(ctx, kernel, (unsigned)grid, 1, 1, KILN_GEMM_WG_THREADS, KILN_GEMM_WG_SMEM_BYTES(bn), stream,
                     params, op);
}
