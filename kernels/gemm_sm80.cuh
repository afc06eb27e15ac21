/*
 * gemm_sm80.cuh — the pieces of kiln's sm_80+ tensor-core GEMMs: PTX wrappers, the tile loader,
 * warp fragment loads, the MMA step and the epilogue. gemm_sm80.cu assembles them into the
 * MMA_SYNC and CP_ASYNC kernels; later kernels (quantized, attention) reuse the same pieces.
 *
 * The math. mma.sync.m16n8k16 multiplies a 16x16 A fragment by a 16x8 B fragment into a 16x8
 * fp32 accumulator held 4 floats per lane. A warp owns a 64x64 (or 64x32) patch of C: 4 x 8
 * of those fragments, 128 fp32 registers; 8 warps (2 along M, 4 along N) own the block's tile.
 * Each BK slice of K is BK/16 k16 steps; per step a 64x64 warp issues 4 ldmatrix.x4 for A, 4
 * for B and 32 MMAs, so shared-memory traffic per MMA is a quarter of a naive fragment load.
 *
 * Layouts. Every operand is consumed in its global orientation: a tile whose contiguous global
 * dimension is K is stored [MN][BK] and read with ldmatrix; one whose contiguous dimension is
 * M (or N) is stored [BK][MN] and read with ldmatrix.trans, which transposes 8x8 blocks on the
 * way into registers. So a transposed view (e.g. x @ W.T) costs nothing.
 *
 * Edges. The loader zero-fills every element outside [0, rows) x [0, cols) of the operand, so
 * partial tiles in M, N and K contribute zeros to the sums; the epilogue predicates every store.
 *
 * 8-bit operands (gemm_int8_sm80.cu, mma.sync m16n8k32 s8): in bytes, an m16 x k32 int8 A
 * fragment is exactly an m16 x k16 f16 one (and likewise for B), so the same loaders and
 * ldmatrix (non-transposed) serve them, with element type, chunk and pad counted in bytes.
 * ldmatrix.trans moves 16-bit elements and cannot transpose bytes, so an int8 operand whose
 * contiguous dimension is M or N goes through TransposingLoader (registers, byte permutes)
 * and lands in shared memory k-major like the others.
 */
#pragma once
#include "common.cuh"

namespace kiln {

/* ---------------------------------------------------------------------------------------- */
/* PTX wrappers                                                                               */
/* ---------------------------------------------------------------------------------------- */
KILN_DEVICE uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

template <bool TRANS>
KILN_DEVICE void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  if (TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* d += a * b for one m16n8k32 fragment of int8 (s8 x s8 -> s32). Without .satfinite the s32
 * accumulation wraps modulo 2^32 (kiln_matmul_int8 relies on it for the one sum of 2^31). */
KILN_DEVICE void mma_16832_s8(int32_t (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* The MMA of a GEMM: its shared-memory element, accumulator, k per instruction, and the call. */
template <bool BF16>
struct MmaF16 {
  using Elem = uint16_t;
  using Acc = float;
  static constexpr int K = 16;
  static KILN_DEVICE void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) { mma_16816<BF16>(d, a, b); }
};
struct MmaS8 {
  using Elem = uint8_t; /* bytes (int8 bit patterns): never sign-extended while staging */
  using Acc = int32_t;
  static constexpr int K = 32;
  static KILN_DEVICE void mma(int32_t (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) { mma_16832_s8(d, a, b); }
};

/* 16-byte global->shared copy that reads only src_bytes (0..16) and zero-fills the rest. */
KILN_DEVICE void cp_async_16(uint32_t dst, const void *src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
KILN_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
KILN_DEVICE void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* mbarriers (sm_80+; try_wait on sm_90, test_wait before), for the sm_80 GEMMs' ring and the
 * sm_90a kernels' TMA rings (gemm_sm90.cuh). The sm_80 ring: `full` completes when every
 * thread's part of a slice has landed (with cp.async each thread arrives through its own copies,
 * noinc), `empty` when every thread has finished reading the slice. The "memory" clobbers keep
 * the compiler from moving shared-memory accesses across an arrive or a wait. */
KILN_DEVICE void mbar_init(uint64_t *bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count));
}
/* (The arrive's state goes to a scratch register: with the `_` sink the sm_80 GEMMs' SASS changed
 * on sm_89 / sm_90a; this form leaves every kernel's SASS as it was before the wrappers merged.) */
KILN_DEVICE void mbar_arrive(uint64_t *bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared.b64 st, [%0];\n}\n" ::"r"(smem_u32(bar)) : "memory");
}
/* Arrives on bar once all of this thread's earlier cp.async copies have completed. */
KILN_DEVICE void mbar_arrive_on_copies(uint64_t *bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
KILN_DEVICE void mbar_wait(uint64_t *bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT_%=:\n"
#if __CUDA_ARCH__ >= 900
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
#else
      "mbarrier.test_wait.parity.shared::cta.b64 done, [%0], %1;\n"
#endif
      "@!done bra WAIT_%=;\n}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}
KILN_DEVICE void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

/* ---------------------------------------------------------------------------------------- */
/* Tile loader: a [ROWS][COLS] window of a matrix whose COLS dimension is contiguous in global */
/* memory, copied into shared memory rows of pitch COLS + 16 bytes (KILN_GEMM_PAD elements of */
/* 16 bits). Work is split into 16-byte chunks (EPC elements: 8 of 16 bits, 16 of 8 bits),     */
/* ITERS per thread. T is uint16_t (f16/bf16) or uint8_t (int8 bit patterns).                 */
/* ---------------------------------------------------------------------------------------- */
template <int ROWS, int COLS, int THREADS, class T = uint16_t>
struct TileLoader {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2, "8- or 16-bit elements");
  static constexpr int EPC = 16 / (int)sizeof(T); /* elements per 16-byte chunk */
  static constexpr int EPW = 4 / (int)sizeof(T);  /* elements per 32-bit word */
  static constexpr int PITCH = COLS + EPC;        /* one chunk of padding: KILN_GEMM_PAD for 16 bits */
  static constexpr int SMEM_ELEMS = ROWS * PITCH; /* shared-memory elements of one tile */
  static constexpr bool TRANSPOSES = false;       /* shared memory keeps the global orientation */
  static constexpr int CHUNKS_PER_ROW = COLS / EPC;
  static constexpr int ITERS = ROWS * CHUNKS_PER_ROW / THREADS;
  static_assert(ROWS * CHUNKS_PER_ROW % THREADS == 0, "tile chunks must divide among the threads");
  using Regs = uint4[ITERS];

  /* Window origin g (element (0,0) of the tile), leading dimension ld, and how many rows/cols
   * of the window lie inside the matrix (may be <= 0 or larger than the tile). */
  const T *g;
  int64_t ld;
  int rows_left, cols_left;

  KILN_DEVICE int chunk_row(int tid, int it) const { return (tid + it * THREADS) / CHUNKS_PER_ROW; }
  KILN_DEVICE int chunk_col(int tid, int it) const { return (tid + it * THREADS) % CHUNKS_PER_ROW * EPC; }
  /* cp.async path: needs 16-byte aligned rows (checked by the host). Branch-free: a full chunk
   * is one 16-byte cp.async, any other chunk a zero-fill cp.async (src-size 0 reads nothing; g
   * is a valid address). Chunks cut by the edge are then completed by patch_edge() once their
   * zero fill has landed. Why not a partial cp.async (0 < src-size < 16)? compute-sanitizer
   * memcheck reports one at the very end of an allocation as a 16-byte read out of bounds. And
   * why not branch per chunk here? Branching (element loads for edge chunks) cost CP_ASYNC 20 %
   * at 4096^3, and a separate interior-tile path pushed it past 255 registers into spills.
   * Counts are compared unclamped, as in load() below. */
  KILN_DEVICE void async_copy(T *s, int tid) const {
#pragma unroll
    for (int it = 0; it < ITERS; it++) {
      const int r = chunk_row(tid, it), c = chunk_col(tid, it);
      const bool full = r < rows_left && cols_left - c >= EPC;
      cp_async_16(smem_u32(s + r * PITCH + c), full ? g + r * ld + c : g, full ? 16 : 0);
    }
  }
  /* Whether the whole window lies inside the matrix (every chunk full). Uniform across the block:
   * interior tiles, nearly all of a large product, take the *_interior copies below. */
  KILN_DEVICE bool interior() const { return rows_left >= ROWS && cols_left >= COLS; }
  /* The chunks of an interior window. THREADS is a multiple of CHUNKS_PER_ROW, so this thread's
   * chunk `it` lies STEP rows below its chunk it-1, in the same column: one base pointer and a
   * constant stride (one 64-bit add per chunk) replace async_copy's per-chunk row and column
   * arithmetic, bounds test and source select, ~180 of the ~330 instructions a warp issued per
   * 128x256x64 slice (sm_90a SASS), all before the slice's first MMA. */
  static constexpr int STEP = THREADS / CHUNKS_PER_ROW;
  static_assert(THREADS % CHUNKS_PER_ROW == 0, "a thread's chunks share a column");
  /* This thread's first chunk in global memory (its chunk it: + it·STEP·ld). */
  KILN_DEVICE const T *interior_src(int tid) const {
    return g + (int64_t)(tid / CHUNKS_PER_ROW) * ld + tid % CHUNKS_PER_ROW * EPC;
  }
  KILN_DEVICE void async_copy_interior(T *s, int tid) const {
    const T *src = interior_src(tid);
    const uint32_t dst = smem_u32(s + tid / CHUNKS_PER_ROW * PITCH + tid % CHUNKS_PER_ROW * EPC);
    const int64_t step = STEP * ld;
#pragma unroll
    for (int it = 0; it < ITERS; it++)
      cp_async_16(dst + (uint32_t)(it * STEP * PITCH * (int)sizeof(T)), src + it * step, 16);
  }
  /* Whether the window's column edge cuts a chunk: only then has patch_edge() work. Uniform
   * across the block. */
  KILN_DEVICE bool has_partial_chunks() const { return cols_left < COLS && cols_left % EPC != 0; }
  /* Writes the valid elements of the chunks cut by the column edge (zeros were written by
   * async_copy). Call after this thread's copies of the slice have completed (cp.async.wait),
   * before the barrier that publishes the slice. Rare, so the element loop stays rolled. */
  KILN_DEVICE void patch_edge(T *s, int tid) const {
#pragma unroll 1
    for (int it = 0; it < ITERS; it++) {
      const int r = chunk_row(tid, it), c = chunk_col(tid, it);
      const int left = cols_left - c;
      if (r < rows_left && left > 0 && left < EPC) {
        const T *src = g + r * ld + c;
        for (int i = 0; i < left; i++) s[r * PITCH + c + i] = src[i];
      }
    }
  }

  /* An interior window's chunks into registers, from this thread's first chunk src (interior_src,
   * or a pointer the caller advances slice by slice). */
  KILN_DEVICE void load_interior(Regs &regs, const T *src) const {
    const int64_t step = STEP * ld;
#pragma unroll
    for (int it = 0; it < ITERS; it++)
      asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(regs[it].x), "=r"(regs[it].y), "=r"(regs[it].z), "=r"(regs[it].w)
                   : "l"(src + it * step));
  }
  /* Register-staged path: VEC uses one 16-byte load per full chunk (aligned rows); otherwise
   * (and for chunks cut by the edge) elements are loaded one by one. Words are assembled in
   * 32-bit registers from a zeroed start, so an element never loaded is exactly zero.
   * The full-chunk test uses the unclamped count: with `valid(...) == 8` (a clamp to 0..8, then
   * a compare), ptxas (sm_90a) fused both into one VIMNMX predicate, and compute-sanitizer saw edge chunks
   * past K (negative counts) take the vector branch and read outside the matrix. The vector
   * load is volatile inline PTX so that it stays inside its branch. */
  template <bool VEC>
  static KILN_DEVICE uint4 load_chunk(const T *src, int left) {
    uint4 val = make_uint4(0u, 0u, 0u, 0u);
    if (VEC && left >= EPC) {
      asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(val.x), "=r"(val.y), "=r"(val.z), "=r"(val.w)
                   : "l"(src));
    } else if (left > 0) {
      uint32_t w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
      for (int i = 0; i < EPC; i++)
        if (i < left) w[i / EPW] |= (uint32_t)src[i] << (8 * (int)sizeof(T) * (i % EPW));
      val = make_uint4(w[0], w[1], w[2], w[3]);
    }
    return val;
  }
  template <bool VEC>
  KILN_DEVICE void load(Regs &regs, int tid) const {
    if (VEC && interior()) { /* as async_copy_interior: one pointer, a constant stride, no tests */
      load_interior(regs, interior_src(tid));
      return;
    }
#pragma unroll
    for (int it = 0; it < ITERS; it++) {
      const int r = chunk_row(tid, it), c = chunk_col(tid, it);
      const int left = r < rows_left ? cols_left - c : 0; /* elements of this chunk's row left, may be < 0 or > EPC */
      const T *src = g + r * ld + c;
      regs[it] = load_chunk<VEC>(src, left);
    }
  }
  KILN_DEVICE void store(T *s, const Regs &regs, int tid) const {
#pragma unroll
    for (int it = 0; it < ITERS; it++)
      *reinterpret_cast<uint4 *>(s + chunk_row(tid, it) * PITCH + chunk_col(tid, it)) = regs[it];
  }
  /* load<VEC>() along this thread's column of chunks (chunk it STEP rows below chunk it-1), for
   * callers short of registers: one pointer and a stride instead of a row and column per chunk. */
  template <bool VEC>
  KILN_DEVICE void load_stepped(Regs &regs, int tid) const {
    const int r0 = tid / CHUNKS_PER_ROW, c = tid % CHUNKS_PER_ROW * EPC;
    const T *src0 = g + (int64_t)r0 * ld + c;
    const int64_t step = STEP * ld;
#pragma unroll
    for (int it = 0; it < ITERS; it++) {
      const int left = r0 + it * STEP < rows_left ? cols_left - c : 0;
      const T *src = src0 + it * step;
      regs[it] = load_chunk<VEC>(src, left);
    }
  }
  /* store() at one address plus constant offsets: chunk it lies STEP rows below chunk it-1. */
  KILN_DEVICE void store_stepped(T *s, const Regs &regs, int tid) const {
    T *d = s + tid / CHUNKS_PER_ROW * PITCH + tid % CHUNKS_PER_ROW * EPC;
#pragma unroll
    for (int it = 0; it < ITERS; it++) *reinterpret_cast<uint4 *>(d + it * STEP * PITCH) = regs[it];
  }
};

/* ---------------------------------------------------------------------------------------- */
/* Transposing tile loader (8-bit elements): a [KROWS][MN] window of a matrix whose MN         */
/* dimension is contiguous in global memory (an m-major A or n-major B), stored k-major as     */
/* [MN][KROWS + 16] bytes, the layout of the k-major int8 tiles, so that the same ldmatrix     */
/* fragment loads serve every layout.                                                          */
/*                                                                                             */
/* Why registers: ldmatrix.trans transposes 16-bit elements, not bytes, and an int8 fragment   */
/* word must hold 4 consecutive k of one row. A thread loads a unit of 4 k-rows x 8 bytes      */
/* (four 8-byte loads) and, when storing, turns it with 8 byte permutes (prmt) per 4x4 block   */
/* into 8 words of 4 k each, one per m, written as 32-bit shared stores. The permutes run in   */
/* store(), after the MMAs of the slice, so the loads' latency stays hidden.                   */
/* Unit order: 8 consecutive units walk K (lanes along k write consecutive words of a row),     */
/* then MN. Rows 8 apart share banks whatever the 16-byte-multiple pitch, so the stores of a   */
/* warp (4 rows 8 apart x 8 words) are 4-way conflicted; walking MN first would coalesce the   */
/* global loads better but make the stores 16-way conflicted. Each warp load instruction       */
/* reads 8 rows x 32 contiguous bytes (whole sectors).                                         */
/* ---------------------------------------------------------------------------------------- */
template <int KROWS, int MN, int THREADS>
struct TransposingLoader {
  static constexpr int PITCH = KROWS + 16;      /* bytes per shared row (one m or n) */
  static constexpr int SMEM_ELEMS = MN * PITCH; /* shared-memory bytes of one tile */
  static constexpr bool TRANSPOSES = true;      /* stored k-major whatever the global layout */
  static constexpr int KG = KROWS / 4, MC = MN / 8; /* units: KG along k, MC along mn */
  static constexpr int LANES_K = KG < 8 ? KG : 8;
  static constexpr int ITERS = KG * MC / THREADS;
  static_assert(KROWS % 4 == 0 && MN % 8 == 0 && KG % LANES_K == 0, "whole units");
  static_assert(KG * MC % THREADS == 0, "tile units must divide among the threads");
  using Regs = uint2[ITERS * 4]; /* per unit: 4 k-rows of 8 bytes */

  /* As in TileLoader: window origin (k0, mn0), leading dimension (between k-rows), and the
   * k-rows / mn columns of the window inside the matrix. */
  const uint8_t *g;
  int64_t ld;
  int rows_left, cols_left;

  KILN_DEVICE void unit(int tid, int it, int &kg, int &mc) const {
    const int u = tid + it * THREADS, rest = u / LANES_K;
    mc = rest % MC;
    kg = rest / MC * LANES_K + u % LANES_K;
  }
  /* VEC: one 8-byte load per full row of a unit (16-byte aligned rows, checked by the host);
   * otherwise, and at the mn edge, byte by byte. Rows past K and bytes past MN are zero. */
  template <bool VEC>
  KILN_DEVICE void load(Regs &regs, int tid) const {
#pragma unroll
    for (int it = 0; it < ITERS; it++) {
      int kg, mc;
      unit(tid, it, kg, mc);
      const int left = cols_left - mc * 8; /* bytes of the unit's rows inside the matrix, may be < 0 or > 8 */
#pragma unroll
      for (int r = 0; r < 4; r++) {
        const int k = kg * 4 + r;
        const uint8_t *src = g + k * ld + mc * 8;
        uint2 val = make_uint2(0u, 0u);
        if (k < rows_left) {
          if (VEC && left >= 8) {
            asm volatile("ld.global.v2.u32 {%0, %1}, [%2];\n" : "=r"(val.x), "=r"(val.y) : "l"(src));
          } else if (left > 0) {
            uint32_t w[2] = {0u, 0u};
#pragma unroll
            for (int i = 0; i < 8; i++)
              if (i < left) w[i / 4] |= (uint32_t)src[i] << (8 * (i % 4));
            val = make_uint2(w[0], w[1]);
          }
        }
        regs[it * 4 + r] = val;
      }
    }
  }
  KILN_DEVICE void store(uint8_t *s, const Regs &regs, int tid) const {
#pragma unroll
    for (int it = 0; it < ITERS; it++) {
      int kg, mc;
      unit(tid, it, kg, mc);
#pragma unroll
      for (int h = 0; h < 2; h++) { /* bytes 0-3, then 4-7 of each row: a 4x4 block (k x m) */
        const uint32_t r0 = h ? regs[it * 4].y : regs[it * 4].x, r1 = h ? regs[it * 4 + 1].y : regs[it * 4 + 1].x;
        const uint32_t r2 = h ? regs[it * 4 + 2].y : regs[it * 4 + 2].x, r3 = h ? regs[it * 4 + 3].y : regs[it * 4 + 3].x;
        /* byte j of word w = element (k = w, m = j); interleave k pairs, then k quads */
        const uint32_t t0 = __byte_perm(r0, r1, 0x5140), t1 = __byte_perm(r0, r1, 0x7362);
        const uint32_t u0 = __byte_perm(r2, r3, 0x5140), u1 = __byte_perm(r2, r3, 0x7362);
        const uint32_t col[4] = {__byte_perm(t0, u0, 0x5410), __byte_perm(t0, u0, 0x7632), __byte_perm(t1, u1, 0x5410),
                                 __byte_perm(t1, u1, 0x7632)}; /* col[j]: k 0..3 of m = j */
#pragma unroll
        for (int j = 0; j < 4; j++)
          *reinterpret_cast<uint32_t *>(s + (mc * 8 + h * 4 + j) * PITCH + kg * 4) = col[j];
      }
    }
  }
};

/* ---------------------------------------------------------------------------------------- */
/* Warp fragments                                                                             */
/* ---------------------------------------------------------------------------------------- */
/* A fragment for rows [m0, m0+16) and k [k0, k0+16) of the block's A tile (k [k0, k0+32) of
 * an 8-bit one: the same 16 x 32 bytes). K_MAJOR: the tile is stored [BM][BK+pad]; else
 * [BK][BM+PAD] and read transposed (16-bit elements only). */
template <bool K_MAJOR, int BM, int BK, class T = uint16_t>
KILN_DEVICE void load_a_frag(uint32_t (&a)[4], const T *s, int m0, int k0, int lane) {
  constexpr int EPC = 16 / (int)sizeof(T); /* elements per 16 bytes: the pad and the k offset of matrices 2-3 */
  if (K_MAJOR) {
    constexpr int P = BK + EPC;
    ldmatrix_x4<false>(a, smem_u32(s + (m0 + lane % 16) * P + k0 + lane / 16 * EPC));
  } else {
    static_assert(K_MAJOR || sizeof(T) == 2, "ldmatrix.trans transposes 16-bit elements only");
    constexpr int P = BM + KILN_GEMM_PAD;
    int j = lane / 8, r = lane % 8;
    ldmatrix_x4<true>(a, smem_u32(s + (k0 + r + j / 2 * 8) * P + m0 + j % 2 * 8));
  }
}

/* B fragments for columns [n0, n0+16) (two n8 fragments) and k [k0, k0+16) (8-bit: k0+32).
 * K_MAJOR: stored [BN][BK+pad]; else [BK][BN+PAD] and read transposed (16-bit only). */
template <bool K_MAJOR, int BN, int BK, class T = uint16_t>
KILN_DEVICE void load_b_frag_pair(uint32_t (&b0)[2], uint32_t (&b1)[2], const T *s, int n0, int k0, int lane) {
  constexpr int EPC = 16 / (int)sizeof(T);
  uint32_t r4[4];
  int j = lane / 8, r = lane % 8;
  if (K_MAJOR) {
    constexpr int P = BK + EPC;
    ldmatrix_x4<false>(r4, smem_u32(s + (n0 + r + j / 2 * 8) * P + k0 + j % 2 * EPC));
  } else {
    static_assert(K_MAJOR || sizeof(T) == 2, "ldmatrix.trans transposes 16-bit elements only");
    constexpr int P = BN + KILN_GEMM_PAD;
    ldmatrix_x4<true>(r4, smem_u32(s + (k0 + r + j % 2 * 8) * P + n0 + j / 2 * 8));
  }
  b0[0] = r4[0];
  b0[1] = r4[1];
  b1[0] = r4[2];
  b1[1] = r4[3];
}

/* One BK slice of the warp's (MT*16 x NT*8) product from the stage's A and B tiles (A_K / B_K:
 * how the tiles are stored in shared memory). With NB = 2 fragments are double-buffered across
 * the k steps (Mma::K elements each): step ks+1's ldmatrix are issued before step ks's MMAs, so
 * shared-memory latency overlaps the tensor-core work. NB = 1 loads each step's fragments right
 * before its MMAs, leaving that latency to the scheduler's other warp, for 32 registers fewer
 * (MT = 4, NT = 8), which a feed short of registers can spend better (gemm_block). */
template <class Mma, bool A_K, bool B_K, int BM, int BN, int BK, int MT, int NT, int NB = 2>
KILN_DEVICE void warp_mma_slice(typename Mma::Acc (&acc)[MT][NT][4], const typename Mma::Elem *sa,
                                const typename Mma::Elem *sb, int wm0, int wn0, int lane) {
  static_assert(NB == 1 || NB == 2, "one or two fragment buffers");
  uint32_t a[NB][MT][4], b[NB][NT][2];
  auto load = [&](int buf, int ks) {
#pragma unroll
    for (int i = 0; i < MT; i++) load_a_frag<A_K, BM, BK>(a[buf][i], sa, wm0 + i * 16, ks, lane);
#pragma unroll
    for (int j = 0; j < NT; j += 2)
      load_b_frag_pair<B_K, BN, BK>(b[buf][j], b[buf][j + 1], sb, wn0 + j * 8, ks, lane);
  };
  load(0, 0);
#pragma unroll
  for (int step = 0; step < BK / Mma::K; step++) {
    const int cur = step % NB;
    if (NB == 1 && step > 0) load(0, step * Mma::K);
    if (NB == 2 && step + 1 < BK / Mma::K) load(cur ^ 1, (step + 1) * Mma::K);
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
      for (int j = 0; j < NT; j++) Mma::mma(acc[i][j], a[cur][i], b[cur][j]);
  }
}

/* ---------------------------------------------------------------------------------------- */
/* Epilogue: every store predicated, converted to C's dtype (round to nearest even).           */
/* Lane l holds rows (l/4, l/4+8) and columns (2(l%4), 2(l%4)+1) of each 16x8 fragment.        */
/* ---------------------------------------------------------------------------------------- */
/* Typed element access for the epilogues: RNE to 16-bit, pairs as one 4- or 8-byte store. */
KILN_DEVICE void put(float *c, float v) { *c = v; }
KILN_DEVICE void put(__half *c, float v) { *c = __float2half_rn(v); }
KILN_DEVICE void put(__nv_bfloat16 *c, float v) { *c = __float2bfloat16_rn(v); }
KILN_DEVICE void put2(float *c, float v0, float v1) { *reinterpret_cast<float2 *>(c) = make_float2(v0, v1); }
KILN_DEVICE void put2(__half *c, float v0, float v1) { *reinterpret_cast<__half2 *>(c) = __floats2half2_rn(v0, v1); }
KILN_DEVICE void put2(__nv_bfloat16 *c, float v0, float v1) {
  *reinterpret_cast<__nv_bfloat162 *>(c) = __floats2bfloat162_rn(v0, v1);
}
/* Two floats rounded (RNE) to one register of 16-bit values, lo in the low half. */
template <bool BF16>
KILN_DEVICE uint32_t pack2(float lo, float hi) {
  if (BF16) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
  }
}
KILN_DEVICE float to_f32(float v) { return v; }
KILN_DEVICE float to_f32(__half v) { return __half2float(v); }
KILN_DEVICE float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

/* A C with any column stride (below): every GEMM writes C row-major (the hosts transpose a
 * column-major C), and its epilogue stays exactly that code. */
struct StridedC {
  int32_t m, n, c_dtype;
  int64_t c_rs, c_cs;
};
template <class P>
constexpr bool kStridedC = false;
template <>
constexpr bool kStridedC<StridedC> = true;

/* Stores the warp's fragments into C (p.m x p.n: element (row, col) at row·p.c_rs + col, or
 * + col·p.c_cs for a StridedC), dtype p.c_dtype. Value turns the
 * accumulators into the floats to store, its per-row and per-column work hoisted out of the
 * per-element loop:
 *   Value::row(p, row, in)   -> Value::Row, once per row of the lane (in: row < p.m)
 *   Value::col(p, col, both) -> Value::Col, once per column pair (both: col + 1 < p.n)
 *   Value::get(p, Row, Col, q, both, a0, a1, v0, v1): the values of (row, col) and (row, col + 1),
 *     q pointing at (row, col) in C; the second is stored only when both.
 * C's dtype is chosen once, outside the unrolled loops: with a switch over dtypes and pair or
 * scalar stores inside the loop over a warp's 128 accumulators, every kernel's epilogue was
 * ~10 k instructions, and the int8 WGMMA kernel spent 43 % of its stalls on instruction fetch
 * (H200, docs/performance.md). */
template <class Value, class OUT, int MT, int NT, class Acc, class P>
KILN_DEVICE void store_tile_as(const Acc (&acc)[MT][NT][4], const P &p, OUT *c, int row0, int col0, int lane) {
  int64_t cs = 1; /* C's column stride */
  if constexpr (kStridedC<P>) cs = p.c_cs;
  const bool pair_ok = cs == 1 && (uintptr_t)c % (2 * sizeof(OUT)) == 0 && p.c_rs % 2 == 0;
  OUT *crow[MT][2];
  typename Value::Row rv[MT][2];
  bool rin[MT][2];
#pragma unroll
  for (int i = 0; i < MT; i++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int row = row0 + i * 16 + lane / 4 + h * 8;
      rin[i][h] = row < p.m;
      crow[i][h] = c + (int64_t)row * p.c_rs;
      rv[i][h] = Value::row(p, row, rin[i][h]);
    }
#pragma unroll
  for (int j = 0; j < NT; j++) {
    const int col = col0 + j * 8 + lane % 4 * 2;
    if (col >= p.n) continue;
    const bool both = col + 1 < p.n, vec = both && pair_ok;
    const typename Value::Col cv = Value::col(p, col, both);
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        if (!rin[i][h]) continue;
        OUT *q = kStridedC<P> ? crow[i][h] + (int64_t)col * cs : crow[i][h] + col;
        float v0, v1;
        Value::get(p, rv[i][h], cv, q, both, acc[i][j][2 * h], acc[i][j][2 * h + 1], v0, v1);
        if (vec) {
          put2(q, v0, v1);
        } else {
          put(q, v0);
          if (both) put(kStridedC<P> ? q + cs : q + 1, v1);
        }
      }
  }
}
/* opaque_zero() (below) added to the first row and column keeps ptxas from hoisting the row
 * pointers and factors out of the batch loop, where they stayed live across the K loop: the
 * register-staged f16 kernels spilled 1.5 KB without it. */
KILN_DEVICE int opaque_zero();
template <class Value, int MT, int NT, class Acc, class P>
KILN_DEVICE void store_tile(const Acc (&acc)[MT][NT][4], const P &p, void *c, int row0, int col0, int lane) {
  const int z = opaque_zero();
  if (p.c_dtype == KILN_DT_F32)
    store_tile_as<Value>(acc, p, (float *)c, row0 + z, col0 + z, lane);
  else if (p.c_dtype == KILN_DT_F16)
    store_tile_as<Value>(acc, p, (__half *)c, row0 + z, col0 + z, lane);
  else
    store_tile_as<Value>(acc, p, (__nv_bfloat16 *)c, row0 + z, col0 + z, lane);
}

/* 0, produced where it is called (volatile asm stays inside its loop). Added to an epilogue's
 * first row and column, it keeps ptxas from hoisting the epilogue's address arithmetic out of
 * the batch loop, where it would stay live across the K loop (int8 on sm_80: 140-184 bytes
 * of spills without it, none with it). */
KILN_DEVICE int opaque_zero() {
  int z;
  asm volatile("mov.u32 %0, 0;\n" : "=r"(z));
  return z;
}

/* A Value without row or column factors (store_tile_as hoists nothing for it): its Row and Col
 * are empty, for the epilogue arguments P. */
template <class P>
struct NoFactors {
  struct Row {};
  struct Col {};
  static KILN_DEVICE Row row(const P &, int, bool) { return {}; }
  static KILN_DEVICE Col col(const P &, int, bool) { return {}; }
};

/* kiln_matmul's epilogue: C = alpha * acc + beta * C. */
struct GemmValue : NoFactors<kiln_gemm_args> {
  template <class OUT>
  static KILN_DEVICE void get(const kiln_gemm_args &p, Row, Col, const OUT *q, bool both, float a0, float a1, float &v0,
                              float &v1) {
    v0 = p.alpha * a0;
    v1 = p.alpha * a1;
    if (p.beta != 0.f) {
      v0 += p.beta * to_f32(q[0]);
      if (both) v1 += p.beta * to_f32(q[1]);
    }
  }
};
/* StridedC's values: the accumulators as they are. The fused int4 PREFILL
 * (w4_prefill_sm90.cu) stores its yᵀ tile so, the columns (rows of y) y_rs apart. */
struct PlainValue : NoFactors<StridedC> {
  template <class OUT>
  static KILN_DEVICE void get(const StridedC &, Row, Col, const OUT *, bool, float a0, float a1, float &v0, float &v1) {
    v0 = a0, v1 = a1;
  }
};

template <int MT, int NT>
KILN_DEVICE void store_c(const float (&acc)[MT][NT][4], const kiln_gemm_args &p, void *c, int row0, int col0,
                         int lane) {
  store_tile<GemmValue>(acc, p, c, row0, col0, lane);
}

/* Tile order: tile pid of a batch, in bands of group_m tile-rows walked column by column, so
 * consecutive tiles share B tiles and a band's A tiles stay in L2. */
KILN_DEVICE void tile_coords(int m, int n, int group_m, int pid, int bm, int bn, int &tm, int &tn) {
  const int tiles_m = (m + bm - 1) / bm, tiles_n = (n + bn - 1) / bn;
  const int group = group_m > 0 ? group_m : 1;
  const int per_group = group * tiles_n;
  const int first_m = pid / per_group * group;
  const int size_m = min(tiles_m - first_m, group);
  tm = first_m + pid % per_group % size_m;
  tn = pid % per_group / size_m;
}
KILN_DEVICE void tile_coords(const kiln_gemm_args &p, int pid, int bm, int bn, int &tm, int &tn) {
  tile_coords(p.m, p.n, p.group_m, pid, bm, bn, tm, tn);
}

/* ---------------------------------------------------------------------------------------- */
/* The block of the sm_80 GEMMs (gemm_sm80.cu, gemm_int8_sm80.cu): a BM x BN tile of C with   */
/* 8 warps (2 along M x 4 along N), stepping through K in BK slices, for every batch.         */
/* ---------------------------------------------------------------------------------------- */
constexpr int GEMM_THREADS = KILN_GEMM_THREADS, GEMM_WARPS_M = 2, GEMM_WARPS_N = 4;
static_assert(GEMM_WARPS_M * GEMM_WARPS_N * 32 == GEMM_THREADS, "8 warps");

/* How slices reach shared memory: through registers (16-byte vector loads on aligned rows, or
 * element by element), or with cp.async (aligned rows; no transposing loader). */
enum class Feed { RegisterStaged, RegisterStagedScalar, CpAsync };

template <bool C, class X, class Y>
struct Pick {
  using type = X;
};
template <class X, class Y>
struct Pick<false, X, Y> {
  using type = Y;
};

/* The operand loaders of a tile shape: A is [BM][BK] (k-major) or [BK][BM]; B is [BN][BK]
 * (k-major) or [BK][BN]. With TRANSPOSE (8-bit elements) an m/n-major operand goes through
 * TransposingLoader and is stored k-major too. slice() places them on the K slice at k0.
 * P is kiln_gemm_args or kiln_int8_args (same stride and size fields). THREADS: the threads that
 * share the loads (the block's, or the producer warpgroup's in the warp-specialized form). */
template <class T, int BM, int BN, int BK, bool A_K, bool B_K, bool TRANSPOSE, int THREADS = GEMM_THREADS>
struct Operands {
  using LA = typename Pick<A_K || !TRANSPOSE, TileLoader<A_K ? BM : BK, A_K ? BK : BM, THREADS, T>,
                           TransposingLoader<BK, BM, THREADS>>::type;
  using LB = typename Pick<B_K || !TRANSPOSE, TileLoader<B_K ? BN : BK, B_K ? BK : BN, THREADS, T>,
                           TransposingLoader<BK, BN, THREADS>>::type;
  static constexpr bool SA_K = A_K || LA::TRANSPOSES, SB_K = B_K || LB::TRANSPOSES; /* shared orientation */
  LA a;
  LB b;

  template <class P>
  KILN_DEVICE Operands(const P &p, int m0, int n0) {
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
  /* The cp.async copies of the current slice (CpAsync feeds: TileLoaders only). */
  KILN_DEVICE void copy_async(T *sa, T *sb, int tid) const {
    if (a.interior())
      a.async_copy_interior(sa, tid);
    else
      a.async_copy(sa, tid);
    if (b.interior())
      b.async_copy_interior(sb, tid);
    else
      b.async_copy(sb, tid);
  }
  /* The K extent left from k0 (what interior() needs), without the windows' origins. */
  template <class P>
  KILN_DEVICE void extent(const P &p, int k0) {
    if (A_K) a.cols_left = p.k - k0;
    else a.rows_left = p.k - k0;
    if (B_K) b.cols_left = p.k - k0;
    else b.rows_left = p.k - k0;
  }
  /* Elements between the windows of consecutive K slices. */
  template <class P>
  static KILN_DEVICE int64_t a_advance(const P &p) { return A_K ? BK : (int64_t)BK * p.a_cs; }
  template <class P>
  static KILN_DEVICE int64_t b_advance(const P &p) { return B_K ? BK : (int64_t)BK * p.b_rs; }
  /* Slice kt into registers (register-staged feeds) for a thread whose first chunks at slice 0
   * are a_src / b_src (interior_src): interior windows load from those pointers advanced by kt
   * slices, without rebuilding the window origins; edge windows (and every window without VEC)
   * take the loaders' element path, along the thread's column of chunks with STEPPED. */
  template <bool VEC, bool STEPPED, class P>
  KILN_DEVICE void fetch(typename LA::Regs &ra, typename LB::Regs &rb, const T *A, const T *B, const P &p, int m0,
                         int n0, int kt, const T *a_src, const T *b_src, int tid) {
    extent(p, kt * BK);
    const bool ia = VEC && a.interior(), ib = VEC && b.interior();
    if (!ia || !ib) slice(A, B, p, m0, n0, kt * BK);
    if (ia) a.load_interior(ra, a_src + kt * a_advance(p));
    else if constexpr (STEPPED) a.template load_stepped<VEC>(ra, tid);
    else a.template load<VEC>(ra, tid);
    if (ib) b.load_interior(rb, b_src + kt * b_advance(p));
    else if constexpr (STEPPED) b.template load_stepped<VEC>(rb, tid);
    else b.template load<VEC>(rb, tid);
  }
  template <class P>
  KILN_DEVICE void slice(const T *A, const T *B, const P &p, int m0, int n0, int k0) {
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

/* The register split of the warp-specialized MMA_SYNC (sm_90a: setmaxnreg), kiln_abi.h. */
KILN_DEVICE void fill_warps_registers() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(KILN_GEMM_MMA_WS_FILL_REGS));
#endif
}
KILN_DEVICE void mma_warps_registers() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(KILN_GEMM_MMA_WS_MMA_REGS));
#endif
}

/* The loaders of the warp-specialized MMA_SYNC (sm_90; rungs v18, v22): the ftid-th of
 * KILN_GEMM_MMA_WS_THREADS threads walks the block's slices of every batch in the MMA warps'
 * order, loading each into registers (ld.global; every edge handled here) and, once the MMA warps
 * have read the stage's previous slice (`empty`), storing it there and arriving on `full`.
 * Why two slices in flight: with one, a loader pays a whole load latency per slice (~1800 cycles
 * under load, rung v18: 13 % slower than the plain form), more than the MMA warps need a slice
 * for; with two, slice kt+1's loads are issued before slice kt is stored, so a latency is paid
 * once per two slices. Two slices are 96 registers, so the loader keeps little else: interior
 * windows load from per-thread pointers set once per tile (as gemm_block's PTRS), edge windows
 * along the thread's column of chunks (load_stepped), and the stores use one shared address plus
 * constant offsets (store_stepped). */
template <class T, int BM, int BN, int BK, int STAGES, Feed FEED, bool A_K, bool B_K, bool TRANSPOSE, class P>
KILN_DEVICE void gemm_fill(const P &p, int m0, int n0, int nk, T *sa, T *sb, uint64_t *ring, int ftid) {
  fill_warps_registers();
  using Ops = Operands<T, BM, BN, BK, A_K, B_K, TRANSPOSE, KILN_GEMM_MMA_WS_THREADS>;
  constexpr int A_ELEMS = Ops::LA::SMEM_ELEMS, B_ELEMS = Ops::LB::SMEM_ELEMS;
  constexpr bool VEC = FEED == Feed::RegisterStaged;
  uint32_t slices = 0;
  for (int batch = blockIdx.z; batch < p.batch; batch += gridDim.z) {
    const T *A = (const T *)p.a + batch * p.a_bs;
    const T *B = (const T *)p.b + batch * p.b_bs;
    Ops op(p, m0, n0);
    op.slice(A, B, p, m0, n0, 0);
    const T *a_src = op.a.interior_src(ftid), *b_src = op.b.interior_src(ftid);
    typename Ops::LA::Regs ra[2];
    typename Ops::LB::Regs rb[2];
    auto fetch = [&](int kt, int set) {
      op.template fetch<VEC, true>(ra[set], rb[set], A, B, p, m0, n0, kt, a_src, b_src, ftid);
    };
    auto put = [&](int kt, int set) {
      const uint32_t g = slices + kt;
      const int st = g % STAGES;
      if (g >= STAGES) mbar_wait(&ring[STAGES + st], (g / STAGES - 1) & 1);
      op.a.store_stepped(sa + st * A_ELEMS, ra[set], ftid);
      op.b.store_stepped(sb + st * B_ELEMS, rb[set], ftid);
      mbar_arrive(&ring[st]);
    };
    if (nk > 0) fetch(0, 0);
#pragma unroll 1
    for (int kt = 0; kt < nk; kt += 2) { /* the sets alternate: slice kt is in set 0 */
      if (kt + 1 < nk) fetch(kt + 1, 1);
      put(kt, 0);
      if (kt + 1 < nk) {
        if (kt + 2 < nk) fetch(kt + 2, 0);
        put(kt + 1, 1);
      }
    }
    slices += nk;
  }
}

/* Computes the block's tile (blockIdx.x in the order of tile_coords) of every batch
 * (blockIdx.z, step gridDim.z) and hands the accumulators to Epilogue::store(acc, p, C of the
 * batch, first row, first column, lane) (stateless, as Value in store_tile), feeding the MMAs
 * through a ring of STAGES slices in shared memory (below). */
template <class Mma, int BM, int BN, int BK, int STAGES, Feed FEED, bool A_K, bool B_K, bool TRANSPOSE, class Epilogue,
          class P>
KILN_DEVICE void gemm_block(const P &p, int group_m) {
  using T = typename Mma::Elem;
  using Ops = Operands<T, BM, BN, BK, A_K, B_K, TRANSPOSE>;
  constexpr int WM = BM / GEMM_WARPS_M, WN = BN / GEMM_WARPS_N, MT = WM / 16, NT = WN / 8;
  constexpr int A_ELEMS = Ops::LA::SMEM_ELEMS, B_ELEMS = Ops::LB::SMEM_ELEMS;
  static_assert(STAGES >= 2, "a ring of 2+ slices");
  extern __shared__ __align__(128) uint16_t smem[];
  T *sa = reinterpret_cast<T *>(smem), *sb = sa + STAGES * A_ELEMS;

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm0 = warp / GEMM_WARPS_N * WM, wn0 = warp % GEMM_WARPS_N * WN;
  int tm, tn;
  tile_coords(p.m, p.n, group_m, blockIdx.x, BM, BN, tm, tn);
  const int m0 = tm * BM, n0 = tn * BN;
  const int nk = (p.k + BK - 1) / BK;
  static_assert(2 * STAGES * 8 <= KILN_GEMM_RING_BYTES, "the host counts KILN_GEMM_RING_BYTES for the ring");
  __shared__ uint64_t ring[2 * STAGES]; /* full[STAGES], then empty[STAGES] */
  uint32_t slices = 0;                  /* slices this block has consumed so far */
  /* Warp-specialized on sm_90 (KILN_GEMM_MMA_WS, 16-bit MMA_SYNC; rungs v18, v22): a fourth
   * warpgroup (warps 8-11, gemm_fill) does every load (ld.global into registers, st.shared into
   * the ring), the 8 MMA warps only wait, ldmatrix and mma. Why: in the plain form below each
   * warp holds its accumulator, its fragments and a slice in flight, and the register file, not
   * the instruction count, bounded it (rungs v15-v20); split, the loaders keep two slices in
   * flight and the MMA warps keep their addresses. 3-5 % faster at 4096^3 on an H100. */
  constexpr bool WS = KILN_GEMM_MMA_WS_ON(FEED != Feed::CpAsync, KILN_IMAGE_ARCH) && sizeof(T) == 2;
  constexpr int FILLERS = WS ? KILN_GEMM_MMA_WS_THREADS : GEMM_THREADS; /* threads that fill a stage */
  if (tid == 0)
    for (int i = 0; i < 2 * STAGES; i++) mbar_init(&ring[i], i < STAGES ? FILLERS : GEMM_THREADS);
  __syncthreads();
  if constexpr (WS) {
    if (warp >= GEMM_THREADS / 32) {
      gemm_fill<T, BM, BN, BK, STAGES, FEED, A_K, B_K, TRANSPOSE>(p, m0, n0, nk, sa, sb, ring, tid - GEMM_THREADS);
      return;
    }
    mma_warps_registers();
  }

  for (int batch = blockIdx.z; batch < p.batch; batch += gridDim.z) {
    const T *A = (const T *)p.a + batch * p.a_bs;
    const T *B = (const T *)p.b + batch * p.b_bs;
    void *C = (char *)p.c + batch * p.c_bs * (p.c_dtype == KILN_DT_F32 ? 4 : 2);

    typename Mma::Acc acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
      for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[i][j][e] = 0;

    Ops op(p, m0, n0);

    if constexpr (WS) { /* the fillers (gemm_fill) load; these warps only consume */
#pragma unroll 1
      for (int kt = 0; kt < nk; kt++) {
        const uint32_t g = slices + kt;
        const int st = g % STAGES;
        mbar_wait(&ring[st], (g / STAGES) & 1);
        warp_mma_slice<Mma, Ops::SA_K, Ops::SB_K, BM, BN, BK, MT, NT, 1>(acc, sa + st * A_ELEMS, sb + st * B_ELEMS,
                                                                         wm0, wn0, lane);
        mbar_arrive(&ring[STAGES + st]);
      }
      slices += nk;
      Epilogue::store(acc, p, C, m0 + wm0, n0 + wn0, lane);
      continue; /* no block barrier: the fillers have left; the ring orders every stage's reuse */
    }
    /* The ring through mbarriers (rungs v10, v11): no block-wide barrier per slice. A warp waits
     * only for the slice it reads (`full`) and, before refilling a stage, for every thread to have
     * read the stage's previous slice (`empty`), so warps drift apart (below) and their ldmatrix
     * bursts and barrier waits no longer line up at every slice.
     * Slice g of the block (counted across batches) uses stage g % STAGES, parity g / STAGES % 2.
     * Slice kt+AHEAD is fetched before slice kt's MMAs (register-staged feeds: loaded into
     * registers) and put into its stage after them (cp.async: copied; registers: stored), once
     * every thread has read slice kt+AHEAD-STAGES there: warps may drift STAGES-AHEAD slices
     * apart. AHEAD = STAGES-1 keeps the most slices in flight; register-staged feeds hold one
     * slice in registers whatever AHEAD, so a smaller AHEAD only buys drift (kiln_abi.h). */
    constexpr int AHEAD_SET = FEED == Feed::CpAsync ? KILN_GEMM_CPA_AHEAD : KILN_GEMM_MMA_AHEAD;
    constexpr int AHEAD = AHEAD_SET > 0 && AHEAD_SET < STAGES ? AHEAD_SET : STAGES - 1;
    constexpr bool VEC = FEED == Feed::RegisterStaged;
    typename Ops::LA::Regs ra;
    typename Ops::LB::Regs rb;
    /* The 16-bit register-staged feed (MMA_SYNC f16 / bf16) is bounded by registers: its warps
     * hold a 64 x 64 accumulator, the fragments and a slice in flight, and ptxas rebuilds
     * addresses every slice rather than keep them (rungs v15-v19). So it single-buffers the
     * fragments (FRAG_BUFFERS) and spends registers on PTRS instead: its vector loads of interior
     * windows start from this thread's first chunk at slice 0, advanced by kt slices, rather than
     * rebuilding the window origin and the thread's offset in 64-bit arithmetic every slice; edge
     * windows load as before (rung v20: 1-5 % faster at 4096^3 on an H100, docs/performance.md;
     * either part alone gains nothing or loses; CP_ASYNC lost 3-5 % with one fragment buffer, and
     * the _scalar variants, which cannot use PTRS, keep two). */
    constexpr bool PTRS = FEED == Feed::RegisterStaged && sizeof(T) == 2;
    constexpr int FRAG_BUFFERS = PTRS ? 1 : 2;
    const T *a_src = nullptr, *b_src = nullptr;
    if constexpr (PTRS) {
      op.slice(A, B, p, m0, n0, 0);
      a_src = op.a.interior_src(tid);
      b_src = op.b.interior_src(tid);
    }
    auto fetch = [&](int kt) {
      if constexpr (PTRS) {
        op.template fetch<VEC, false>(ra, rb, A, B, p, m0, n0, kt, a_src, b_src, tid);
      } else if constexpr (FEED != Feed::CpAsync) {
        op.slice(A, B, p, m0, n0, kt * BK);
        op.a.template load<VEC>(ra, tid);
        op.b.template load<VEC>(rb, tid);
      }
    };
    auto put = [&](uint32_t g, int kt) {
      const int st = g % STAGES;
      if (g >= STAGES) mbar_wait(&ring[STAGES + st], (g / STAGES - 1) & 1);
      if constexpr (FEED == Feed::CpAsync) {
        op.slice(A, B, p, m0, n0, kt * BK);
        op.copy_async(sa + st * A_ELEMS, sb + st * B_ELEMS, tid);
        if (!op.a.has_partial_chunks() && !op.b.has_partial_chunks()) {
          mbar_arrive_on_copies(&ring[st]);
          return;
        }
        cp_async_wait_all(); /* rare: chunks cut by an edge, see TileLoader::async_copy */
        if (op.a.has_partial_chunks()) op.a.patch_edge(sa + st * A_ELEMS, tid);
        if (op.b.has_partial_chunks()) op.b.patch_edge(sb + st * B_ELEMS, tid);
      } else {
        op.a.store(sa + st * A_ELEMS, ra, tid);
        op.b.store(sb + st * B_ELEMS, rb, tid);
      }
      mbar_arrive(&ring[st]);
    };
#pragma unroll 1
    for (int s = 0; s < AHEAD && s < nk; s++) {
      fetch(s);
      put(slices + s, s);
    }
#pragma unroll 1
    for (int kt = 0; kt < nk; kt++) {
      const uint32_t g = slices + kt;
      const int st = g % STAGES;
      const bool more = kt + AHEAD < nk;
      if (more) fetch(kt + AHEAD); /* register loads complete while the MMAs below run */
      mbar_wait(&ring[st], (g / STAGES) & 1);
      warp_mma_slice<Mma, Ops::SA_K, Ops::SB_K, BM, BN, BK, MT, NT, FRAG_BUFFERS>(acc, sa + st * A_ELEMS,
                                                                                  sb + st * B_ELEMS, wm0, wn0, lane);
      mbar_arrive(&ring[STAGES + st]);
      if (more) put(g + AHEAD, kt + AHEAD);
    }
    slices += nk;
    Epilogue::store(acc, p, C, m0 + wm0, n0 + wn0, lane);
    if (gridDim.z < p.batch) __syncthreads(); /* the next batch reuses shared memory */
  }
}

} /* namespace kiln */
