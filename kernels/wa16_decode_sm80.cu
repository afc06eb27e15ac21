/*
 * wa16_decode_sm80.cu — weight-only quantized products for small M (decode), y = x·W with x
 * f16/bf16 [M, K] and W 4-bit (kiln's native layout, kiln.h) or int8, on sm_80+ tensor cores.
 * Serves kiln_matmul_int4 (one projection), kiln_qkv_project_int4 and kiln_qkv_project_int8
 * (three projections, one launch): the grid walks the 32-column blocks of the projections one
 * after the other. The weight formats differ only in how a lane loads its codes and turns them
 * into MMA fragments (the policies W4, W8R, W8C below); the pipeline, the split of K over the
 * warps, the reduction and the epilogue are one piece of code.
 *
 * Floors. Decode reads every weight byte once: at 4096 x 12288, 25 MB of int4 codes + 1.2 MB of
 * scales and zeros (G = 128), 6 µs at the H200's ~4.3 TB/s copy bandwidth, while 2·M·K·N FLOPs
 * (M <= 16) take < 2 µs even on mma.sync. So the kernel is a streaming loop whose jobs are to
 * keep enough loads in flight and to spend few instructions per byte: an SM must take ~16 B a
 * cycle, and issues at most 4 warp instructions a cycle.
 *
 * Tensor cores with the roles swapped. mma.m16n8k16 computes D[16, 8] += A[16, 16]·B[16, 8].
 * A is the weight (its 16 rows are 16 output columns n), B is x (its 8 columns are 8 rows of x),
 * D holds y transposed. For M <= 8 no MMA row is wasted (with x as A, rows 8..15 were zeros and
 * took half of every MMA: v3 issued twice the MMAs for the same bytes); M <= 16 runs two MMAs
 * per A fragment, one per 8 rows of x.
 * Any k order. A lane's A fragment is (row g, k slots 2c, 2c+1, 2c+8, 2c+9) and (row g+8, same
 * slots), its B fragment (x row g, the same slots), g = lane / 4, c = lane % 4. A sum over k
 * does not care which real k a slot stands for, as long as A and B agree, so each policy maps
 * slots to the k's that its lane has in one register: nibbles of one word for int4, bytes of
 * one word (column-major) or of four k-rows' words (row-major) for int8. No shuffles, no shared
 * memory on the way to the MMA. MMA rows map to columns the same way: A row g of tile t is
 * column 4g + 2t of the block, row g + 8 is column 4g + 2t + 1, so a lane's loads cover the four
 * adjacent columns 4g .. 4g+3 (32 columns per warp).
 * Exact dequantization. 16-bit floats built by OR-ing a code into the mantissa of a magic number
 * and subtracting the magic number (with the zero point or the int8 sign offset folded in) are
 * exact: int4 q − z in f16 (magic 1024) and bf16 (magic 128); int8 in f16 (1024 + (v + 128) −
 * 1152). bf16 has 8 bits of precision, too few for 256 + u, so int8 → bf16 goes through f32
 * (2^23 + u − (2^23 + 128), then a packing conversion that is exact). Products are exact in
 * the MMA's fp32, so y = Σ_groups scale · Σ_k x·(q − z) (int4: the group's scale multiplies the
 * fp32 partial once per group) or y = scale · Σ_k x·w (int8, in the epilogue).
 *
 * Work split. A block owns 32 columns of one projection and 8 or 16 rows of x; its warps (1 to 16,
 * blockDim.x / 32, chosen by the host) split K into equal runs of chunks and sum their share in a
 * fixed order, and the block adds the partial tiles in shared memory in warp order
 * (deterministic; no atomics, no workspace). The host gives a block as many warps as fill the GPU
 * with ~16 warps per SM: a narrow weight (few blocks) splits K 16 ways, a wide one needs fewer
 * warps per block, so each warp streams a longer run of K with fewer pipeline ramps and drains
 * (v4 used 16 warps always: at K = 4096 a warp's run was 8 chunks, half of them in ramp or drain).
 * Latency. Everything a chunk needs is loaded into a ring of U register slots U chunks before
 * its use, and a slot is refilled as soon as it is consumed, so a warp always has U chunks in
 * flight: ~32 KB per SM at U = 4, which Little's law asks for at ~4 TB/s and ~1 µs of loaded
 * DRAM latency. int4 zeros and scales are loaded with the first chunk of their group only.
 */
#include "common.cuh"

namespace kiln {
namespace wa16 {

constexpr int THREADS = KILN_WA16_THREADS, WARPS = THREADS / 32, COLS = 32; /* WARPS: the most per block */

/* ---- lane arithmetic ------------------------------------------------------------------------ */

KILN_DEVICE uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}

/* (a & b) | c and (a & b) ^ c in one LOP3 each. */
KILN_DEVICE uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;\n" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}
KILN_DEVICE uint32_t and_xor(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0x6a;\n" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}

/* a − b on 16-bit pairs (exact here: small integers). */
template <bool BF16>
KILN_DEVICE uint32_t sub2(uint32_t a, uint32_t b) {
  uint32_t r;
  if (BF16) /* sub.bf16x2 needs sm_90; fma with -1 is exact too and exists on sm_80 */
    asm("fma.rn.bf16x2 %0, %2, %3, %1;\n" : "=r"(r) : "r"(a), "r"(b), "r"(0xBF80BF80u));
  else
    asm("sub.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

/* a·b + c on f16 pairs. */
KILN_DEVICE uint32_t fma16(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t r;
  asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}

template <bool BF16>
KILN_DEVICE void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if (BF16)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two int8 weights as a 16-bit pair, exactly: byte IA of (a, b) (0..7, prmt numbering) in the low
 * half, byte IB in the high half. Words arrive sign-flipped (w ^ 0x80808080, see flip8): the
 * bytes are u = v + 128. f16: (u | 0x6400) − 0x6480 = 1024 + u − 1152. bf16: via f32 2^23 + u. */
template <bool BF16, int IA, int IB>
KILN_DEVICE uint32_t i8x2(uint32_t a, uint32_t b) {
  if (!BF16) {
    const uint32_t t = prmt(a, b, IA | IB << 8);
    return sub2<false>(and_or(t, 0x00FF00FFu, 0x64006400u), 0x64806480u);
  }
  /* f32 2^23 + u: byte I in the low byte, then 0x00, 0x00, 0x4B; the magic word is a or b's
   * stand-in, so select from (word, magic) pairs. */
  const uint32_t magic = 0x4B000000u;
  const uint32_t wa = IA < 4 ? a : b, wb = IB < 4 ? a : b;
  const float fa = __uint_as_float(prmt(wa, magic, (IA & 3) | 0x7440)) - 8388736.f;
  const float fb = __uint_as_float(prmt(wb, magic, (IB & 3) | 0x7440)) - 8388736.f;
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(fb), "f"(fa)); /* first operand: high half */
  return r;
}

KILN_DEVICE uint32_t flip8(uint32_t w) { return w ^ 0x80808080u; }

/* ---- the projection of a block -------------------------------------------------------------- */

/* The projection (and its 32-column block) of grid column `blk`: blocks of projection 0 first. */
KILN_DEVICE const kiln_qkv_proj &find_proj(const kiln_qkv_args &a, int &blk) {
#pragma unroll
  for (int i = 0; i < 2; i++) {
    const int blocks = (a.proj[i].n + COLS - 1) / COLS;
    if (blk < blocks) return a.proj[i];
    blk -= blocks;
  }
  return a.proj[2];
}

/* ---- x ---------------------------------------------------------------------------------------- */

/* V consecutive x values x[row, k .. k+V-1] (through the act-order permutation when perm) as V/2
 * words of 16-bit pairs, zeros beyond M or K. vec: x rows are contiguous, 16-byte aligned.
 * FAST (x contiguous and aligned, no perm, K a multiple of the chunk): rows beyond M read row
 * M - 1 instead of zeros: they only feed MMA columns (rows of y) that are never stored. */
template <int V, bool FAST>
KILN_DEVICE void load_x(uint32_t (&w)[V / 2], const kiln_qkv_args &a, const int32_t *perm, int row, uint32_t row_off,
                        int k, bool vec) {
#pragma unroll
  for (int i = 0; i < V / 2; i++) w[i] = 0u;
  if (!FAST && row >= a.m) return;
  /* FAST: 32-bit offsets (the block checked that they fit; row_off = min(row, M-1)·x_rs) */
  const uint16_t *xrow = (const uint16_t *)a.x + (int64_t)row * a.x_rs;
  const uint16_t *x = FAST ? (const uint16_t *)a.x + (row_off + (uint32_t)k) : xrow + k;
  if (FAST || (vec && k + V <= a.k)) {
    if (V == 4) {
      const uint2 v = __ldg(reinterpret_cast<const uint2 *>(x));
      w[0] = v.x, w[1] = v.y;
    } else {
#pragma unroll
      for (int i = 0; i < V / 8; i++) {
        const uint4 v = __ldg(reinterpret_cast<const uint4 *>(x) + i);
        w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
      }
    }
  } else { /* element by element (an else, not code after a return: FAST instances have no such path) */
#pragma unroll
    for (int i = 0; i < V; i++)
      if (k + i < a.k) {
        const int64_t c = perm ? perm[k + i] : k + i;
        w[i / 2] |= (uint32_t)__ldg(xrow + c * a.x_cs) << (16 * (i % 2));
      }
  }
}

/* ---- weight policies ---------------------------------------------------------------------------
 * Each gives: KC (k per chunk), STEPS (MMA k-steps of 16 per chunk), XV (consecutive x values
 * per x segment), NXS (x segments per chunk) and xk(ch, c, j) (the first k of segment j),
 * Codes (the registers of one chunk), load(codes, ch) and a_frag(codes, t, s) (the A fragment of
 * tile t, k-step s), b_frag(xw, s) (x's B fragment for step s, from the lane's x words), and
 * for grouped formats the group bookkeeping. */

/* int4, kiln's native layout: codes u32 [K/8, N], word (r, n) = k 8r .. 8r+7 of column n. A lane
 * loads word row 4·ch + c of its 4 columns (16 bytes; a warp: 4 rows x 128 contiguous bytes).
 * Step s takes nibbles (2s, 2s+4) and (2s+1, 2s+5) of each word: real k 8c + those, so x is the
 * 8 values k = 32·ch + 8c .. +7. */
template <bool BF16>
struct W4 {
  static constexpr int KC = 32, STEPS = 2, XV = 8, NXS = 1;
  static constexpr bool GROUPED = true;
  struct Codes {
    uint4 w;    /* word row 4·ch + c, columns 4g .. 4g+3 */
    uint32_t z; /* zeros of those columns (group-start chunks only) */
    uint2 s;    /* f16 scales of those columns (group-start chunks only) */
  };
  const uint32_t *codes; /* the weight's */
  const uint8_t *zeros;
  const uint16_t *scales;
  int64_t lane, row4; /* this lane's first word (row c, column 4g); words between chunks (4 rows) */
  uint32_t lane32, row4_32; /* the same, FAST (32-bit offsets) */
  int n, col, words_k, gshift;
  uint32_t gmask; /* chunk ch starts a group iff (ch & gmask) == 0 */
  bool vec_w, vec_z, vec_s;
  uint32_t zz[4]; /* current group: magic | zero in both halves, per column */
  uint32_t zh[4]; /* f16: -(64 + zero) in both halves, for the high nibbles (a_frag) */
  uint2 sc;       /* current group's scales */

  KILN_DEVICE W4(const kiln_qkv_proj &p, int k, int base, int g, int c) {
    n = p.n, col = base + 4 * g, words_k = k / 8;
    codes = p.codes, zeros = p.zeros, scales = p.scales, lane = (int64_t)c * n + col;
    lane32 = (uint32_t)lane, row4_32 = 4u * (uint32_t)n;
    row4 = 4 * (int64_t)n;
    vec_w = n % 4 == 0 && (uintptr_t)p.codes % 16 == 0 && col + 4 <= n;
    vec_z = n % 4 == 0 && (uintptr_t)p.zeros % 4 == 0 && col + 4 <= n;
    vec_s = n % 4 == 0 && (uintptr_t)p.scales % 8 == 0 && col + 4 <= n;
    /* group of chunk ch = ch >> gshift: G = 32, 64, 128 are 1, 2, 4 chunks; G = K (one group,
     * any multiple of 8) shifts everything away */
    gshift = p.group == 32 ? 0 : p.group == 64 ? 1 : p.group == 128 && p.group != k ? 2 : 31;
    gmask = (1u << gshift) - 1u;
  }
  /* every lane of the block on the vector path, K a whole number of 4-chunk units (ALIGNED in
   * decode_block) and G <= 4 chunks, offsets < 2^31 */
  static KILN_DEVICE bool fast_layout(const kiln_qkv_proj &p, int k, int base) {
    return p.n % 4 == 0 && base + COLS <= p.n && k % (4 * KC) == 0 && (int64_t)(k / 8) * p.n < INT32_MAX &&
           (p.group == 32 || p.group == 64 || (p.group == 128 && k != 128)) &&
           (uintptr_t)p.codes % 16 == 0 && (uintptr_t)p.zeros % 4 == 0 && (uintptr_t)p.scales % 8 == 0;
  }
  KILN_DEVICE bool group_start(int ch, int c_begin) const { return ch == c_begin || ((unsigned)ch & gmask) == 0; }
  KILN_DEVICE bool group_end(int ch, int c_end) const { return ch + 1 == c_end || ((unsigned)(ch + 1) & gmask) == 0; }
  static KILN_DEVICE int xk(int ch, int c, int) { return ch * KC + 8 * c; }

  template <bool FAST>
  KILN_DEVICE void load(Codes &cd, int ch, int c, bool first) const {
    const int r = ch * 4 + c;
    const uint32_t *src = FAST ? codes + (lane32 + (uint32_t)ch * row4_32) : codes + lane + ch * row4;
    if (!FAST && r >= words_k) {
      cd.w = make_uint4(0u, 0u, 0u, 0u);
    } else if (FAST || vec_w) {
      asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
          : "=r"(cd.w.x), "=r"(cd.w.y), "=r"(cd.w.z), "=r"(cd.w.w)
          : "l"(src));
    } else {
      uint32_t w[4];
#pragma unroll
      for (int t = 0; t < 4; t++) w[t] = col + t < n ? __ldg(src + t) : 0u;
      cd.w = make_uint4(w[0], w[1], w[2], w[3]);
    }
    if (!first) return;
    const int64_t at = FAST ? (int64_t)((uint32_t)(ch >> gshift) * (uint32_t)n + (uint32_t)col)
                            : (int64_t)(ch >> gshift) * n + col;
    if (FAST || vec_z) {
      cd.z = __ldg(reinterpret_cast<const uint32_t *>(zeros + at));
    } else {
      cd.z = 0;
#pragma unroll
      for (int t = 0; t < 4; t++)
        if (col + t < n) cd.z |= (uint32_t)__ldg(zeros + at + t) << (8 * t);
    }
    if (FAST || vec_s) {
      cd.s = __ldg(reinterpret_cast<const uint2 *>(scales + at));
    } else {
      uint32_t s[2] = {0u, 0u};
#pragma unroll
      for (int t = 0; t < 4; t++)
        if (col + t < n) s[t / 2] |= (uint32_t)__ldg(scales + at + t) << (16 * (t % 2));
      cd.s = make_uint2(s[0], s[1]);
    }
  }
  /* A group begins: its zeros into 16-bit pairs (magic | z, both halves), its scales kept. */
  KILN_DEVICE void begin_group(const Codes &cd) {
    const uint32_t magic2 = BF16 ? 0x43004300u : 0x64006400u;
#pragma unroll
    for (int t = 0; t < 4; t++) {
      zz[t] = magic2 | prmt(cd.z, 0u, t | 4 << 4 | t << 8 | 4 << 12);
      if (!BF16) zh[t] = sub2<false>(0x63806380u, zz[t]); /* 960 − (1024 + z) = −(64 + z), exact */
    }
    sc = cd.s;
  }
  KILN_DEVICE float scale(int i) const { /* column 4g + i */
    const uint32_t w = i < 2 ? sc.x : sc.y;
    return __half2float(__ushort_as_half((uint16_t)(w >> (16 * (i % 2)))));
  }
  /* tile t: rows g, g+8 = words 2t, 2t+1; step s: nibbles (2s, 2s+4) then (2s+1, 2s+5).
   * f16 takes the high nibbles in place: (q << 4) | 0x6400 is 1024 + 16q, and
   * (1024 + 16q)·(1/16) − (64 + z) = q − z in one exact fma, no shift (bf16's 8-bit mantissa
   * cannot hold 128 + 16q, so bf16 shifts). */
  KILN_DEVICE void a_frag(uint32_t (&a)[4], const Codes &cd, int t, int s) const {
    const uint32_t magic2 = BF16 ? 0x43004300u : 0x64006400u;
    const uint32_t lo = (t ? cd.w.z : cd.w.x) >> (8 * s), hi = (t ? cd.w.w : cd.w.y) >> (8 * s);
    a[0] = sub2<BF16>(and_or(lo, 0x000F000Fu, magic2), zz[2 * t]);
    a[1] = sub2<BF16>(and_or(hi, 0x000F000Fu, magic2), zz[2 * t + 1]);
    if (BF16) {
      a[2] = sub2<BF16>(and_or(lo >> 4, 0x000F000Fu, magic2), zz[2 * t]);
      a[3] = sub2<BF16>(and_or(hi >> 4, 0x000F000Fu, magic2), zz[2 * t + 1]);
    } else {
      a[2] = fma16(and_or(lo, 0x00F000F0u, magic2), 0x2C002C00u, zh[2 * t]); /* 0x2C00 = 1/16 */
      a[3] = fma16(and_or(hi, 0x00F000F0u, magic2), 0x2C002C00u, zh[2 * t + 1]);
    }
  }
  /* x words (k0,k1) (k2,k3) (k4,k5) (k6,k7): step s wants (k2s, k2s+4) and (k2s+1, k2s+5) */
  static KILN_DEVICE void b_frag(uint32_t &b0, uint32_t &b1, const uint32_t (&xw)[4], int s) {
    b0 = prmt(xw[s], xw[s + 2], 0x5410), b1 = prmt(xw[s], xw[s + 2], 0x7632);
  }
};

/* int8, row-major [K, N] (w_cs == 1, any w_rs): a lane loads one word (columns 4g .. 4g+3) of
 * each k-row 16·s + 4c .. +3 of the chunk, 8 words. Slots (2c, 2c+1) are k-rows 4c, 4c+1 of the
 * step, (2c+8, 2c+9) rows 4c+2, 4c+3, so x is 4 consecutive values per step, taken as is. */
template <bool BF16>
struct W8R {
  static constexpr int KC = 32, STEPS = 2, XV = 4, NXS = 2;
  static constexpr bool GROUPED = false;
  struct Codes {
    uint32_t w[2][4]; /* [step][k-row]: columns 4g .. 4g+3, flipped */
  };
  const int8_t *w, *w0; /* this lane's column 4g; the weight's */
  int64_t rs, cs;
  int n, k, col, c4;
  bool vec;
  KILN_DEVICE W8R(const kiln_qkv_proj &p, int k_, int base, int g, int c) {
    n = p.n, k = k_, col = base + 4 * g, c4 = 4 * c, rs = p.w_rs, cs = p.w_cs;
    w0 = p.w, w = p.w + (int64_t)col * cs;
    vec = cs == 1 && rs % 4 == 0 && (uintptr_t)p.w % 4 == 0 && col + 4 <= n;
  }
  static KILN_DEVICE bool fast_layout(const kiln_qkv_proj &p, int k, int base) {
    return p.w_cs == 1 && p.w_rs % 4 == 0 && (uintptr_t)p.w % 4 == 0 && base + COLS <= p.n && k % KC == 0 &&
           (int64_t)k * p.w_rs < INT32_MAX;
  }
  static KILN_DEVICE int xk(int ch, int c, int j) { return ch * KC + 16 * j + 4 * c; }
  template <bool FAST>
  KILN_DEVICE void load(Codes &cd, int ch, int, bool) const {
#pragma unroll
    for (int s = 0; s < STEPS; s++)
#pragma unroll
      for (int r = 0; r < 4; r++) {
        const int kr = ch * KC + 16 * s + c4 + r;
        uint32_t v = 0u;
        if (FAST || kr < k) {
          const int8_t *src = FAST ? w0 + ((uint32_t)kr * (uint32_t)rs + (uint32_t)col) : w + kr * rs;
          if (FAST || vec) {
            v = __ldg(reinterpret_cast<const uint32_t *>(src));
          } else {
#pragma unroll
            for (int t = 0; t < 4; t++)
              if (col + t < n) v |= (uint32_t)(uint8_t)__ldg(src + t * cs) << (8 * t);
          }
        }
        cd.w[s][r] = flip8(v); /* rows past K: flipped zeros, i.e. weight 0 */
      }
  }
  /* tile t: rows g, g+8 = columns 2t, 2t+1 (bytes of the row words) */
  KILN_DEVICE void a_frag(uint32_t (&a)[4], const Codes &cd, int t, int s) const {
    const uint32_t(&r)[4] = cd.w[s];
    if (t == 0) {
      a[0] = i8x2<BF16, 0, 4>(r[0], r[1]), a[1] = i8x2<BF16, 1, 5>(r[0], r[1]);
      a[2] = i8x2<BF16, 0, 4>(r[2], r[3]), a[3] = i8x2<BF16, 1, 5>(r[2], r[3]);
    } else {
      a[0] = i8x2<BF16, 2, 6>(r[0], r[1]), a[1] = i8x2<BF16, 3, 7>(r[0], r[1]);
      a[2] = i8x2<BF16, 2, 6>(r[2], r[3]), a[3] = i8x2<BF16, 3, 7>(r[2], r[3]);
    }
  }
  /* x words: segment s = (k0,k1) (k2,k3) of the step, in xw[2s], xw[2s+1] */
  static KILN_DEVICE void b_frag(uint32_t &b0, uint32_t &b1, const uint32_t (&xw)[4], int s) {
    b0 = xw[2 * s], b1 = xw[2 * s + 1];
  }
};

/* int8, column-major ([N, K] storage: a Linear weight's transposed view; w_rs == 1, any w_cs): a
 * lane loads 8 consecutive k (32·ch + 8c ..) of each of its 4 columns, 4 x 8 bytes (a warp: 32
 * contiguous bytes of each of 32 columns). Step s takes word s of each: bytes (0, 2) for slots
 * (2c, 2c+1), (1, 3) for (2c+8, 2c+9); x is the 8 values k = 32·ch + 8c .. +7. (16 k per column
 * and lane halved the load instructions but needed 2 slots of 32 registers at M16: spills.) */
template <bool BF16>
struct W8C {
  static constexpr int KC = 32, STEPS = 2, XV = 8, NXS = 1;
  static constexpr bool GROUPED = false;
  struct Codes {
    uint2 w[4]; /* [column 4g + i]: k 32·ch + 8c .. +7, flipped */
  };
  const int8_t *w, *w0; /* this lane's column 4g; the weight's */
  int64_t cs;
  int n, k, col, c8;
  bool vec;
  KILN_DEVICE W8C(const kiln_qkv_proj &p, int k_, int base, int g, int c) {
    n = p.n, k = k_, col = base + 4 * g, c8 = 8 * c, cs = p.w_cs;
    w0 = p.w, w = p.w + (int64_t)col * cs;
    vec = p.w_rs == 1 && cs % 8 == 0 && (uintptr_t)p.w % 8 == 0;
  }
  static KILN_DEVICE bool fast_layout(const kiln_qkv_proj &p, int k, int base) {
    return p.w_rs == 1 && p.w_cs % 8 == 0 && (uintptr_t)p.w % 8 == 0 && base + COLS <= p.n && k % KC == 0 &&
           (int64_t)p.n * p.w_cs < INT32_MAX;
  }
  static KILN_DEVICE int xk(int ch, int c, int) { return ch * KC + 8 * c; }
  template <bool FAST>
  KILN_DEVICE void load(Codes &cd, int ch, int, bool) const {
    const int k0 = ch * KC + c8;
#pragma unroll
    for (int i = 0; i < 4; i++) {
      uint32_t v[2] = {0u, 0u};
      if (FAST || col + i < n) {
        const int8_t *src = FAST ? w0 + ((uint32_t)(col + i) * (uint32_t)cs + (uint32_t)k0) : w + i * cs + k0;
        if (FAST || (vec && k0 + 8 <= k)) {
          const uint2 u = __ldg(reinterpret_cast<const uint2 *>(src));
          v[0] = u.x, v[1] = u.y;
        } else {
#pragma unroll
          for (int j = 0; j < 8; j++)
            if (k0 + j < k) v[j / 4] |= (uint32_t)(uint8_t)__ldg(src + j) << (8 * (j % 4));
        }
      }
      cd.w[i] = make_uint2(flip8(v[0]), flip8(v[1])); /* past K or N: flipped zeros, weight 0 */
    }
  }
  KILN_DEVICE void a_frag(uint32_t (&a)[4], const Codes &cd, int t, int s) const {
    const uint32_t lo = s ? cd.w[2 * t].y : cd.w[2 * t].x, hi = s ? cd.w[2 * t + 1].y : cd.w[2 * t + 1].x;
    a[0] = i8x2<BF16, 0, 2>(lo, lo), a[1] = i8x2<BF16, 0, 2>(hi, hi);
    a[2] = i8x2<BF16, 1, 3>(lo, lo), a[3] = i8x2<BF16, 1, 3>(hi, hi);
  }
  /* x words (k0,k1) (k2,k3) of step s at xw[2s], xw[2s+1]: slots want (k0, k2) and (k1, k3) */
  static KILN_DEVICE void b_frag(uint32_t &b0, uint32_t &b1, const uint32_t (&xw)[4], int s) {
    b0 = prmt(xw[2 * s], xw[2 * s + 1], 0x5410), b1 = prmt(xw[2 * s], xw[2 * s + 1], 0x7632);
  }
};

/* ---- the shared pipeline ---------------------------------------------------------------------- */

template <class W, bool M16>
struct Slot {
  typename W::Codes cd;
  uint32_t xa[W::NXS * W::XV / 2]; /* x row g: the chunk's segments, back to back */
  uint32_t xb[M16 ? W::NXS * W::XV / 2 : 1]; /* x row g + 8 (M16) */
};

/* Slots in the ring: as many as 128 registers hold without spills (ptxas -v; the int8 kernel
 * holds both int8 policies; the guarded int4 path at M16 fits only 2). Bytes in flight per warp:
 * int4 U·512, int8 U·1024. */
template <class W, bool M16, bool FAST>
struct Ring {
  static constexpr int U = W::GROUPED ? (M16 ? (FAST ? 3 : 2) : 4) : (M16 ? 2 : 3);
};

template <template <bool> class WT, bool BF16, bool M16, bool FAST>
__device__ __forceinline__ void decode_block(const kiln_qkv_args &a, const kiln_qkv_proj &p, int blk, float *red_) {
  using W = WT<BF16>;
  constexpr int ROWS = M16 ? 16 : 8, U = Ring<W, M16, FAST>::U, XW = W::NXS * W::XV / 2;
  constexpr int NACC = 2 * 4 * (M16 ? 2 : 1); /* [x rows 8h][tile][fragment element] */
  float(&red)[WARPS][NACC][32] = *reinterpret_cast<float(*)[WARPS][NACC][32]>(red_); /* [warps] used */
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32, g = lane / 4, c = lane % 4;
  const int base = blk * COLS, m0 = blockIdx.y * ROWS;
  W w(p, a.k, base, g, c);
  const bool vec_x = !p.perm && a.x_cs == 1 && a.x_rs % 8 == 0 && (uintptr_t)a.x % 16 == 0;
  const uint32_t xa_off = (uint32_t)min(m0 + g, a.m - 1) * (uint32_t)a.x_rs; /* FAST's x rows */
  const uint32_t xb_off = (uint32_t)min(m0 + g + 8, a.m - 1) * (uint32_t)a.x_rs;

  /* ALIGNED (FAST int4 with a 4-slot ring; fast_layout made K a multiple of 4 chunks and G one of
   * 32, 64, 128): warps split K in whole units of 4 chunks, so slot u always holds a chunk at
   * position u of its unit and whether it begins or ends a group is (u & gmask) — decided per
   * slot, not tested per chunk — and the ring refills all 4 slots or none. */
  constexpr bool ALIGNED = FAST && W::GROUPED && U == 4;
  /* This warp's chunks: an even split of ceil(K / KC) (ALIGNED: of the 4-chunk units) */
  const int unit = ALIGNED ? 4 : 1, chunks = (a.k + W::KC - 1) / W::KC, units = chunks / unit;
  const int c_begin = unit * (int)((int64_t)units * warp / warps);
  const int c_end = unit * (int)((int64_t)units * (warp + 1) / warps);
  auto starts = [&](int ch, int u) {
    if constexpr (W::GROUPED) return ALIGNED ? (u & w.gmask) == 0 : w.group_start(ch, c_begin);
    return false;
  };

  Slot<W, M16> slot[U];
  auto issue = [&](Slot<W, M16> &sl, int ch, int u) {
    if (!ALIGNED && ch >= c_end) return;
    const bool first = starts(ch, u);
    w.template load<FAST>(sl.cd, ch, c, first);
#pragma unroll
    for (int j = 0; j < W::NXS; j++) {
      uint32_t(&xa)[W::XV / 2] = *reinterpret_cast<uint32_t(*)[W::XV / 2]>(sl.xa + j * (W::XV / 2));
      load_x<W::XV, FAST>(xa, a, p.perm, m0 + g, xa_off, W::xk(ch, c, j), vec_x);
      if (M16) {
        uint32_t(&xb)[W::XV / 2] = *reinterpret_cast<uint32_t(*)[W::XV / 2]>(sl.xb + j * (W::XV / 2));
        load_x<W::XV, FAST>(xb, a, p.perm, m0 + g + 8, xb_off, W::xk(ch, c, j), vec_x);
      }
    }
  };
#pragma unroll
  for (int u = 0; u < U; u++)
    if (!ALIGNED || c_begin < c_end) issue(slot[u], c_begin + u, u);

  float acc[M16 ? 2 : 1][2][4], part[M16 ? 2 : 1][2][4]; /* [x rows 8h][tile][element]: total, group's */
#pragma unroll
  for (int h = 0; h < (M16 ? 2 : 1); h++)
#pragma unroll
    for (int t = 0; t < 2; t++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[h][t][e] = part[h][t][e] = 0.f;
  float(&sum)[M16 ? 2 : 1][2][4] = W::GROUPED ? part : acc; /* ungrouped: the MMAs add into acc */

  for (int c0 = c_begin; c0 < c_end; c0 += U) {
    const bool refill = c0 + U < c_end; /* ALIGNED: the next round is whole or absent */
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int ch = c0 + u;
      if (!ALIGNED && ch >= c_end) break;
      Slot<W, M16> &sl = slot[u];
      if constexpr (W::GROUPED)
        if (starts(ch, u)) w.begin_group(sl.cd);
#pragma unroll
      for (int s = 0; s < W::STEPS; s++) {
        uint32_t b0, b1, b2 = 0, b3 = 0;
        W::b_frag(b0, b1, sl.xa, s);
        if (M16) W::b_frag(b2, b3, *reinterpret_cast<const uint32_t(*)[XW]>(sl.xb), s);
#pragma unroll
        for (int t = 0; t < 2; t++) {
          uint32_t af[4];
          w.a_frag(af, sl.cd, t, s);
          mma<BF16>(sum[0][t], af, b0, b1);
          if (M16) mma<BF16>(sum[M16 ? 1 : 0][t], af, b2, b3);
        }
      }
      if constexpr (W::GROUPED) {
        /* the group ends here: its partial · the group's scales into acc. Element e of tile t
         * is column 4g + 2t + e/2. */
        if (ALIGNED ? ((u + 1) & w.gmask) == 0 : w.group_end(ch, c_end)) {
#pragma unroll
          for (int t = 0; t < 2; t++)
#pragma unroll
            for (int e2 = 0; e2 < 2; e2++) {
              const float sc = w.scale(2 * t + e2);
#pragma unroll
              for (int h = 0; h < (M16 ? 2 : 1); h++)
#pragma unroll
                for (int e1 = 0; e1 < 2; e1++) {
                  acc[h][t][2 * e2 + e1] += part[h][t][2 * e2 + e1] * sc;
                  part[h][t][2 * e2 + e1] = 0.f;
                }
            }
        }
      }
      if (!ALIGNED || refill) issue(sl, ch + U, u);
    }
  }

  /* the warps' tiles, added in warp order */
#pragma unroll
  for (int h = 0; h < (M16 ? 2 : 1); h++)
#pragma unroll
    for (int t = 0; t < 2; t++)
#pragma unroll
      for (int e = 0; e < 4; e++) red[warp][8 * h + 4 * t + e][lane] = acc[h][t][e];
  __syncthreads();
  for (int idx = threadIdx.x; idx < NACC * 32; idx += blockDim.x) {
    const int i = idx / 32, l = idx % 32, h = i / 8, t = i / 4 % 2, e = i % 4;
    float y = 0.f;
    for (int v = 0; v < warps; v++) y += red[v][i][l];
    /* element e of tile t in lane l: column 4(l/4) + 2t + e/2, x row 8h + 2(l%4) + e%2 */
    const int row = m0 + 8 * h + 2 * (l % 4) + e % 2, col = base + 4 * (l / 4) + 2 * t + e / 2;
    if (row < a.m && col < p.n) {
      if (!W::GROUPED) y *= __ldg(p.scale + col * p.scale_stride);
      kiln_store_from_f32(p.y, row * p.y_rs + col * p.y_cs, a.y_dtype, y);
    }
  }
}

/* FAST when every load of the block can be an unguarded vector load (the common case: aligned
 * weights and x, a full 32-column block, K a whole number of chunks, no act-order): its loop has
 * no bounds checks, element-wise fallbacks or branches around them (ncu, v5: 177 instructions
 * per 512-byte int4 chunk, ~3x the dequantization and MMAs). Block-uniform, as mma.sync needs. */
template <template <bool> class WT, bool BF16, bool M16>
__device__ __forceinline__ void decode(const kiln_qkv_args &a, const kiln_qkv_proj &p, int blk, float *red) {
  const bool x_fast = !p.perm && a.x_cs == 1 && a.x_rs % 8 == 0 && (uintptr_t)a.x % 16 == 0 &&
                      (int64_t)(a.m - 1) * a.x_rs + a.k < INT32_MAX;
  if (x_fast && WT<BF16>::fast_layout(p, a.k, blk * COLS))
    decode_block<WT, BF16, M16, true>(a, p, blk, red);
  else
    decode_block<WT, BF16, M16, false>(a, p, blk, red);
}

/* The block's reduction buffer, [warp][accumulator][lane] floats: dynamic shared memory sized by
 * the host for the block's warps (src/ops/wa16_gpu.c), one for whichever policy runs. */
extern __shared__ float wa16_red[];

template <bool BF16, bool M16>
__device__ __forceinline__ void decode_int4(const kiln_qkv_args &a) {
  int blk = blockIdx.x;
  const kiln_qkv_proj &p = find_proj(a, blk);
  decode<W4, BF16, M16>(a, p, blk, wa16_red);
}

/* Each projection's layout picks its policy (block-uniform). */
template <bool BF16, bool M16>
__device__ __forceinline__ void decode_int8(const kiln_qkv_args &a) {
  int blk = blockIdx.x;
  const kiln_qkv_proj &p = find_proj(a, blk);
  if (p.w_cs == 1 || p.w_rs != 1)
    decode<W8R, BF16, M16>(a, p, blk, wa16_red);
  else
    decode<W8C, BF16, M16>(a, p, blk, wa16_red);
}

} /* namespace wa16 */
} /* namespace kiln */

#define KILN_WA16_ENTRY(name, fn, bf16, m16)                                                          \
  extern "C" __global__ void __launch_bounds__(kiln::wa16::THREADS) name(const kiln_qkv_args args) {      \
    kiln::wa16::fn<bf16, m16>(args);                                                                   \
  }
KILN_WA16_ENTRY(kiln_w4a16_decode_f16_m8, decode_int4, false, false)
KILN_WA16_ENTRY(kiln_w4a16_decode_f16_m16, decode_int4, false, true)
KILN_WA16_ENTRY(kiln_w4a16_decode_bf16_m8, decode_int4, true, false)
KILN_WA16_ENTRY(kiln_w4a16_decode_bf16_m16, decode_int4, true, true)
KILN_WA16_ENTRY(kiln_w8a16_decode_f16_m8, decode_int8, false, false)
KILN_WA16_ENTRY(kiln_w8a16_decode_f16_m16, decode_int8, false, true)
KILN_WA16_ENTRY(kiln_w8a16_decode_bf16_m8, decode_int8, true, false)
KILN_WA16_ENTRY(kiln_w8a16_decode_bf16_m16, decode_int8, true, true)
