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

/* d += a * b for one m16n8k16 fragment; BF16 selects the bf16 instruction. */
template <bool BF16>
KILN_DEVICE void mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  if (BF16)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* 16-byte global->shared copy that reads only src_bytes (0..16) and zero-fills the rest. */
KILN_DEVICE void cp_async_16(uint32_t dst, const void *src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
KILN_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
KILN_DEVICE void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* ---------------------------------------------------------------------------------------- */
/* Tile loader: a [ROWS][COLS] window of a matrix whose COLS dimension is contiguous in global */
/* memory, copied into shared memory rows of pitch COLS + KILN_GEMM_PAD. Work is split into   */
/* 16-byte chunks (8 elements), ITERS per thread.                                              */
/* ---------------------------------------------------------------------------------------- */
template <int ROWS, int COLS, int THREADS>
struct TileLoader {
  static constexpr int PITCH = COLS + KILN_GEMM_PAD;
  static constexpr int CHUNKS_PER_ROW = COLS / 8;
  static constexpr int ITERS = ROWS * CHUNKS_PER_ROW / THREADS;
  static_assert(ROWS * CHUNKS_PER_ROW % THREADS == 0, "tile chunks must divide among the threads");

  /* Window origin g (element (0,0) of the tile), leading dimension ld, and how many rows/cols
   * of the window lie inside the matrix (may be <= 0 or larger than the tile). */
  const uint16_t *g;
  int64_t ld;
  int rows_left, cols_left;

  KILN_DEVICE int chunk_row(int tid, int it) const { return (tid + it * THREADS) / CHUNKS_PER_ROW; }
  KILN_DEVICE int chunk_col(int tid, int it) const { return (tid + it * THREADS) % CHUNKS_PER_ROW * 8; }
  /* cp.async path: needs 16-byte aligned rows (checked by the host). Branch-free: a full chunk
   * is one 16-byte cp.async, any other chunk a zero-fill cp.async (src-size 0 reads nothing; g
   * is a valid address). Chunks cut by the edge are then completed by patch_edge() once their
   * zero fill has landed. Why not a partial cp.async (0 < src-size < 16)? compute-sanitizer
   * memcheck reports one at the very end of an allocation as a 16-byte read out of bounds. And
   * why not branch per chunk here? Branching (element loads for edge chunks) cost CP_ASYNC 20 %
   * at 4096^3, and a separate interior-tile path pushed it past 255 registers into spills.
   * Counts are compared unclamped, as in load() below. */
  KILN_DEVICE void async_copy(uint16_t *s, int tid) const {
#pragma unroll
    for (int it = 0; it < ITERS; it++) {
      const int r = chunk_row(tid, it), c = chunk_col(tid, it);
      const bool full = r < rows_left && cols_left - c >= 8;
      cp_async_16(smem_u32(s + r * PITCH + c), full ? g + r * ld + c : g, full ? 16 : 0);
    }
  }
  /* Whether the window's column edge cuts a chunk: only then has patch_edge() work. Uniform
   * across the block. */
  KILN_DEVICE bool has_partial_chunks() const { return cols_left < COLS && cols_left % 8 != 0; }
  /* Writes the valid elements of the chunks cut by the column edge (zeros were written by
   * async_copy). Call after this thread's copies of the slice have completed (cp.async.wait),
   * before the barrier that publishes the slice. Rare, so the element loop stays rolled. */
  KILN_DEVICE void patch_edge(uint16_t *s, int tid) const {
#pragma unroll 1
    for (int it = 0; it < ITERS; it++) {
      const int r = chunk_row(tid, it), c = chunk_col(tid, it);
      const int left = cols_left - c;
      if (r < rows_left && left > 0 && left < 8) {
        const uint16_t *src = g + r * ld + c;
        for (int i = 0; i < left; i++) s[r * PITCH + c + i] = src[i];
      }
    }
  }

  /* Register-staged path: VEC uses one 16-byte load per full chunk (aligned rows); otherwise
   * (and for chunks cut by the edge) elements are loaded one by one. Words are assembled in
   * 32-bit registers from a zeroed start, so an element never loaded is exactly zero.
   * The full-chunk test uses the unclamped count: with `valid(...) == 8` (a clamp to 0..8, then
   * a compare), ptxas (sm_90a) fused both into one VIMNMX predicate, and compute-sanitizer saw edge chunks
   * past K (negative counts) take the vector branch and read outside the matrix. The vector
   * load is volatile inline PTX so that it stays inside its branch. */
  template <bool VEC>
  KILN_DEVICE void load(uint4 (&regs)[ITERS], int tid) const {
#pragma unroll
    for (int it = 0; it < ITERS; it++) {
      const int r = chunk_row(tid, it), c = chunk_col(tid, it);
      const int left = r < rows_left ? cols_left - c : 0; /* elements of this chunk's row left, may be < 0 or > 8 */
      const uint16_t *src = g + r * ld + c;
      uint4 val = make_uint4(0u, 0u, 0u, 0u);
      if (VEC && left >= 8) {
        asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(val.x), "=r"(val.y), "=r"(val.z), "=r"(val.w)
                     : "l"(src));
      } else if (left > 0) {
        uint32_t w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
        for (int i = 0; i < 8; i++)
          if (i < left) w[i / 2] |= (uint32_t)src[i] << (16 * (i % 2));
        val = make_uint4(w[0], w[1], w[2], w[3]);
      }
      regs[it] = val;
    }
  }
  KILN_DEVICE void store(uint16_t *s, const uint4 (&regs)[ITERS], int tid) const {
#pragma unroll
    for (int it = 0; it < ITERS; it++)
      *reinterpret_cast<uint4 *>(s + chunk_row(tid, it) * PITCH + chunk_col(tid, it)) = regs[it];
  }
};

/* ---------------------------------------------------------------------------------------- */
/* Warp fragments                                                                             */
/* ---------------------------------------------------------------------------------------- */
/* A fragment for rows [m0, m0+16) and k [k0, k0+16) of the block's A tile. K_MAJOR: the tile is
 * stored [BM][BK+PAD]; else [BK][BM+PAD] and read transposed. */
template <bool K_MAJOR, int BM, int BK>
KILN_DEVICE void load_a_frag(uint32_t (&a)[4], const uint16_t *s, int m0, int k0, int lane) {
  if (K_MAJOR) {
    constexpr int P = BK + KILN_GEMM_PAD;
    ldmatrix_x4<false>(a, smem_u32(s + (m0 + lane % 16) * P + k0 + lane / 16 * 8));
  } else {
    constexpr int P = BM + KILN_GEMM_PAD;
    int j = lane / 8, r = lane % 8;
    ldmatrix_x4<true>(a, smem_u32(s + (k0 + r + j / 2 * 8) * P + m0 + j % 2 * 8));
  }
}

/* B fragments for columns [n0, n0+16) (two n8 fragments) and k [k0, k0+16). K_MAJOR: stored
 * [BN][BK+PAD]; else [BK][BN+PAD] and read transposed. */
template <bool K_MAJOR, int BN, int BK>
KILN_DEVICE void load_b_frag_pair(uint32_t (&b0)[2], uint32_t (&b1)[2], const uint16_t *s, int n0, int k0, int lane) {
  uint32_t r4[4];
  int j = lane / 8, r = lane % 8;
  if (K_MAJOR) {
    constexpr int P = BK + KILN_GEMM_PAD;
    ldmatrix_x4<false>(r4, smem_u32(s + (n0 + r + j / 2 * 8) * P + k0 + j % 2 * 8));
  } else {
    constexpr int P = BN + KILN_GEMM_PAD;
    ldmatrix_x4<true>(r4, smem_u32(s + (k0 + r + j % 2 * 8) * P + n0 + j / 2 * 8));
  }
  b0[0] = r4[0];
  b0[1] = r4[1];
  b1[0] = r4[2];
  b1[1] = r4[3];
}

/* One BK slice of the warp's (MT*16 x NT*8) product from the stage's A and B tiles.
 * Fragments are double-buffered across the k16 steps: step ks+1's ldmatrix are issued before
 * step ks's MMAs, so shared-memory latency overlaps the tensor-core work. */
template <bool BF16, bool A_K, bool B_K, int BM, int BN, int BK, int MT, int NT>
KILN_DEVICE void warp_mma_slice(float (&acc)[MT][NT][4], const uint16_t *sa, const uint16_t *sb, int wm0, int wn0,
                                int lane) {
  uint32_t a[2][MT][4], b[2][NT][2];
  auto load = [&](int buf, int ks) {
#pragma unroll
    for (int i = 0; i < MT; i++) load_a_frag<A_K, BM, BK>(a[buf][i], sa, wm0 + i * 16, ks, lane);
#pragma unroll
    for (int j = 0; j < NT; j += 2)
      load_b_frag_pair<B_K, BN, BK>(b[buf][j], b[buf][j + 1], sb, wn0 + j * 8, ks, lane);
  };
  load(0, 0);
#pragma unroll
  for (int step = 0; step < BK / 16; step++) {
    const int cur = step % 2;
    if (step + 1 < BK / 16) load(cur ^ 1, (step + 1) * 16);
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
      for (int j = 0; j < NT; j++) mma_16816<BF16>(acc[i][j], a[cur][i], b[cur][j]);
  }
}

/* ---------------------------------------------------------------------------------------- */
/* Epilogue: C = alpha * acc + beta * C, converted to C's dtype, every store predicated.       */
/* Lane l holds rows (l/4, l/4+8) and columns (2(l%4), 2(l%4)+1) of each 16x8 fragment.        */
/* ---------------------------------------------------------------------------------------- */
template <int MT, int NT>
KILN_DEVICE void store_c(const float (&acc)[MT][NT][4], const kiln_gemm_args &p, void *c, int row0, int col0,
                         int lane) {
  const int dt = p.c_dtype;
  const int esize = dt == KILN_DT_F32 ? 4 : 2;
  /* Pairs of adjacent columns go out as one 4- or 8-byte store when C's rows allow it. */
  const bool pair_ok = ((uintptr_t)c % (2 * esize) == 0) && p.c_rs % 2 == 0;
#pragma unroll
  for (int i = 0; i < MT; i++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int row = row0 + i * 16 + lane / 4 + h * 8;
      if (row >= p.m) continue;
#pragma unroll
      for (int j = 0; j < NT; j++) {
        const int col = col0 + j * 8 + lane % 4 * 2;
        if (col >= p.n) continue;
        const int64_t idx = (int64_t)row * p.c_rs + col;
        float v0 = p.alpha * acc[i][j][2 * h], v1 = p.alpha * acc[i][j][2 * h + 1];
        const bool both = col + 1 < p.n;
        if (p.beta != 0.f) {
          v0 += p.beta * kiln_load_as_f32(c, idx, dt);
          if (both) v1 += p.beta * kiln_load_as_f32(c, idx + 1, dt);
        }
        if (both && pair_ok) {
          if (dt == KILN_DT_F32)
            *reinterpret_cast<float2 *>((float *)c + idx) = make_float2(v0, v1);
          else if (dt == KILN_DT_F16)
            *reinterpret_cast<__half2 *>((__half *)c + idx) = __floats2half2_rn(v0, v1);
          else
            *reinterpret_cast<__nv_bfloat162 *>((__nv_bfloat16 *)c + idx) = __floats2bfloat162_rn(v0, v1);
        } else {
          kiln_store_from_f32(c, idx, dt, v0);
          if (both) kiln_store_from_f32(c, idx + 1, dt, v1);
        }
      }
    }
}

/* Tile order: tile pid of a batch, in bands of group_m tile-rows walked column by column, so
 * consecutive tiles share B tiles and a band's A tiles stay in L2. */
KILN_DEVICE void tile_coords(const kiln_gemm_args &p, int pid, int bm, int bn, int &tm, int &tn) {
  const int tiles_m = (p.m + bm - 1) / bm, tiles_n = (p.n + bn - 1) / bn;
  const int group = p.group_m > 0 ? p.group_m : 1;
  const int per_group = group * tiles_n;
  const int first_m = pid / per_group * group;
  const int size_m = min(tiles_m - first_m, group);
  tm = first_m + pid % per_group % size_m;
  tn = pid % per_group / size_m;
}

} /* namespace kiln */
