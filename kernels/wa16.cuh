/*
 * wa16.cuh — what the W·A16 decode kernels share (wa16_decode_sm80.cu: weights streamed through
 * registers, sm_80+; wa16_decode_sm90.cu: weights streamed through shared memory by TMA, sm_90a):
 * the lane arithmetic, the weight policies (how a lane turns its codes into MMA fragments), x's
 * loads, and the block's final reduction and store.
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
 */
#pragma once
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

/* The same for two bytes of one word: f16 takes the magic exponent from prmt's second operand,
 * (u | 0x6400) in one prmt instead of a prmt and a LOP3 (2 instructions a pair, not 3). */
template <bool BF16, int IA, int IB>
KILN_DEVICE uint32_t i8x2w(uint32_t w) {
  static_assert(IA < 4 && IB < 4, "bytes of one word");
  if (BF16) return i8x2<true, IA, IB>(w, w);
  return sub2<false>(prmt(w, 0x64646464u, IA | 4 << 4 | IB << 8 | 4 << 12), 0x64806480u);
}

KILN_DEVICE uint32_t flip8(uint32_t w) { return w ^ 0x80808080u; }

/* ---- the projection of a block -------------------------------------------------------------- */

/* The projection (and its block of `cols` columns) of grid column `blk`: blocks of projection 0
 * first. */
KILN_DEVICE int find_proj_index(const kiln_qkv_args &a, int &blk, int cols = COLS) {
#pragma unroll
  for (int i = 0; i < 2; i++) {
    const int blocks = (a.proj[i].n + cols - 1) / cols;
    if (blk < blocks) return i;
    blk -= blocks;
  }
  return 2;
}
KILN_DEVICE const kiln_qkv_proj &find_proj(const kiln_qkv_args &a, int &blk) { return a.proj[find_proj_index(a, blk)]; }

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

/* int4 codes into MMA fragments, whatever brought them to the lane (registers straight from
 * global memory in wa16_decode_sm80.cu, shared memory in wa16_decode_sm90.cu). A lane holds one
 * word row of its 4 columns 4g .. 4g+3 (8 k each) and the current group's zeros and scales of
 * those columns. */
template <bool BF16>
struct W4Frag {
  uint32_t zz[4]; /* current group: magic | zero in both halves, per column */
  uint32_t zh[4]; /* f16: -(64 + zero) in both halves, for the high nibbles (a_frag) */
  uint2 sc;       /* current group's scales */

  /* A group begins: its zeros (z: one byte per column) into 16-bit pairs (magic | z, both
   * halves), its f16 scales (s: two per word) kept. */
  KILN_DEVICE void begin_group(uint32_t z, uint2 s) {
    const uint32_t magic2 = BF16 ? 0x43004300u : 0x64006400u;
#pragma unroll
    for (int t = 0; t < 4; t++) {
      zz[t] = magic2 | prmt(z, 0u, t | 4 << 4 | t << 8 | 4 << 12);
      if (!BF16) zh[t] = sub2<false>(0x63806380u, zz[t]); /* 960 − (1024 + z) = −(64 + z), exact */
    }
    sc = s;
  }
  KILN_DEVICE float scale(int i) const { /* column 4g + i */
    const uint32_t w = i < 2 ? sc.x : sc.y;
    return __half2float(__ushort_as_half((uint16_t)(w >> (16 * (i % 2)))));
  }
  /* tile t: rows g, g+8 = words 2t, 2t+1 of w; step s: nibbles (2s, 2s+4) then (2s+1, 2s+5).
   * f16 takes the high nibbles in place: (q << 4) | 0x6400 is 1024 + 16q, and
   * (1024 + 16q)·(1/16) − (64 + z) = q − z in one exact fma, no shift (bf16's 8-bit mantissa
   * cannot hold 128 + 16q, so bf16 shifts). */
  KILN_DEVICE void a_frag(uint32_t (&a)[4], const uint4 &w, int t, int s) const {
    const uint32_t magic2 = BF16 ? 0x43004300u : 0x64006400u;
    const uint32_t lo = (t ? w.z : w.x) >> (8 * s), hi = (t ? w.w : w.y) >> (8 * s);
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
  W4Frag<BF16> f; /* the current group */

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
  KILN_DEVICE void begin_group(const Codes &cd) { f.begin_group(cd.z, cd.s); }
  KILN_DEVICE float scale(int i) const { return f.scale(i); }
  KILN_DEVICE void a_frag(uint32_t (&a)[4], const Codes &cd, int t, int s) const { f.a_frag(a, cd.w, t, s); }
  static KILN_DEVICE void b_frag(uint32_t &b0, uint32_t &b1, const uint32_t (&xw)[4], int s) {
    W4Frag<BF16>::b_frag(b0, b1, xw, s);
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
  static KILN_DEVICE void a_frag(uint32_t (&a)[4], const Codes &cd, int t, int s) {
    const uint32_t lo = s ? cd.w[2 * t].y : cd.w[2 * t].x, hi = s ? cd.w[2 * t + 1].y : cd.w[2 * t + 1].x;
    a[0] = i8x2w<BF16, 0, 2>(lo), a[1] = i8x2w<BF16, 0, 2>(hi);
    a[2] = i8x2w<BF16, 1, 3>(lo), a[3] = i8x2w<BF16, 1, 3>(hi);
  }
  /* x words (k0,k1) (k2,k3) of step s at xw[2s], xw[2s+1]: slots want (k0, k2) and (k1, k3) */
  static KILN_DEVICE void b_frag(uint32_t &b0, uint32_t &b1, const uint32_t (&xw)[4], int s) {
    b0 = prmt(xw[2 * s], xw[2 * s + 1], 0x5410), b1 = prmt(xw[2 * s], xw[2 * s + 1], 0x7632);
  }
};

/* ---- the block's result ------------------------------------------------------------------------
 * Each of `warps` warps holds a partial [8 or 16 rows of x][16·T columns] tile in mma.sync's D
 * layout (acc[h][t][e]: x rows 8h.., MMA tile t < T, element e; T = 2 but in the sm_90a int8
 * kernel's 16-column tiles). They are added in warp order (deterministic, no atomics) through
 * red ([warps][NACC][32] floats) by the block's `threads` participating threads (tid 0 ..
 * threads-1), which `sync` makes wait for each other; ungrouped (int8) sums are multiplied by
 * their column's scale, then rounded once into y. */
template <bool M16, int T = 2, class Sync>
KILN_DEVICE void store_block(const float (&acc)[M16 ? 2 : 1][T][4], float *red_, int warp, int warps, int tid,
                             int threads, Sync sync, const kiln_qkv_args &a, const kiln_qkv_proj &p, int m0, int base,
                             bool col_scale) {
  constexpr int NACC = T * 4 * (M16 ? 2 : 1);
  float(&red)[WARPS][NACC][32] = *reinterpret_cast<float(*)[WARPS][NACC][32]>(red_); /* [warps] used */
  const int lane = tid % 32;
#pragma unroll
  for (int h = 0; h < (M16 ? 2 : 1); h++)
#pragma unroll
    for (int t = 0; t < T; t++)
#pragma unroll
      for (int e = 0; e < 4; e++) red[warp][4 * T * h + 4 * t + e][lane] = acc[h][t][e];
  sync();
  for (int idx = tid; idx < NACC * 32; idx += threads) {
    const int i = idx / 32, l = idx % 32, h = i / (4 * T), t = i / 4 % T, e = i % 4;
    float y = 0.f;
    for (int v = 0; v < warps; v++) y += red[v][i][l];
    /* element e of tile t in lane l: column 2T(l/4) + 2t + e/2, x row 8h + 2(l%4) + e%2 */
    const int row = m0 + 8 * h + 2 * (l % 4) + e % 2, col = base + 2 * T * (l / 4) + 2 * t + e / 2;
    if (row < a.m && col < p.n) {
      if (col_scale) y *= __ldg(p.scale + col * p.scale_stride);
      kiln_store_from_f32(p.y, row * p.y_rs + col * p.y_cs, a.y_dtype, y);
    }
  }
}

} /* namespace wa16 */
} /* namespace kiln */
