/*
 * w4a16_sm80.cu — W4A16 for small M (decode): y = x·W with x f16/bf16 [M, K], W 4-bit in kiln's
 * native layout (kiln.h), on sm_80+ tensor cores. Serves kiln_matmul_int4 (one projection) and
 * kiln_qkv_project_int4 (three projections, one launch): the grid walks the 32-column groups of
 * the projections one after the other.
 *
 * Floors. Decode reads every weight byte once: K·N/2 bytes of codes + K/G·N·3 bytes of scales
 * and zeros; at 4096 x 12288 that is 25 MB + 1.2 MB (G = 128), 6 µs at the H200's ~4.3 TB/s
 * copy bandwidth, while the FLOPs (2·M·K·N, M <= 16) take < 2 µs even on mma.sync. So the
 * kernel is a streaming loop whose only job is to keep enough loads in flight and to spend few
 * instructions per byte.
 *
 * Work split. A block (16 warps) owns 32 columns of one projection and 8 or 16 rows of x (two
 * variants: M <= 8 skips the x loads and MMA rows of the second 8); its warps split K, each
 * summing its share of the chunks of 32 k in a fixed order, and the block adds the 16 partial
 * tiles in shared memory in a fixed order (deterministic; no atomics, no workspace).
 * A lane loads one 16-byte vector of codes per chunk: words (k-row 4u + lane%4, columns
 * 4·(lane/4) .. +3), so a warp's load covers 4 word rows x 128 contiguous bytes.
 * Latency. Everything a chunk needs (codes, x, its group's zeros and scales) is loaded into a
 * ring of U register slots U chunks before its use, and a slot is refilled as soon as it is
 * consumed: a warp always has U chunks in flight, 16·32·U·16 = 32 KB of codes per SM for U = 4 (3 when
 * M > 8, whose x takes 4 more registers a slot),
 * which Little's law asks for at ~4 TB/s and ~1 µs of loaded DRAM latency. (v1 loaded zeros and
 * scales only when a group began and ended: two dependent DRAM round trips per group, 19 % of
 * the copy bandwidth at 4096 x 4096.)
 * Tensor cores without a shuffle. mma.m16n8k16 wants, per lane, B elements (k = 2c, 2c+1) and
 * (2c+8, 2c+9) of column g (c = lane%4, g = lane/4). A sum over k does not care about the order
 * of k, so each chunk maps MMA k-indices onto real k so that a lane's B elements are nibbles of
 * the one word it loaded, word row 4u + c, in the pairs that one mask extracts: step 0 takes
 * nibbles (0, 4) and (1, 5), step 1 (2, 6) and (3, 7). x's A fragment (rows g, g+8) is permuted
 * the same way, from the 8 consecutive x values k = 32u + 8c .. +7 (one 16-byte load per row,
 * then byte permutes). Column g of n8 tile t is real column base + 4g + t, so the 4 words of
 * the lane's vector feed the 4 n8 tiles.
 * Dequantization is (q | magic) − (z | magic) in 16-bit: magic 0x6400 (1024.0) for f16, 0x4300
 * (128.0) for bf16, so both values are exact and so is their difference q − z. The group's
 * scale multiplies the f32 MMA accumulator once per group (G >= 32 is a whole number of
 * chunks; G = K may end in a partial chunk, whose missing rows load as zeros): exact products,
 * fp32 sums, y = Σ_groups scale · Σ_k x·(q − z).
 */
#include "common.cuh"

namespace kiln {
namespace w4 {

constexpr int THREADS = KILN_W4A16_THREADS, WARPS = THREADS / 32, COLS = 32, CHUNK = 32;

KILN_DEVICE uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}

/* (bits & 0x000F000F) | magic in one LOP3. */
KILN_DEVICE uint32_t nibbles_to_16(uint32_t bits, uint32_t magic2) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;\n" : "=r"(r) : "r"(bits), "n"(0x000F000F), "r"(magic2)); /* (a & b) | c */
  return r;
}

template <bool BF16>
KILN_DEVICE uint32_t sub2(uint32_t a, uint32_t b) {
  uint32_t r;
  if (BF16) /* sub.bf16x2 needs sm_90; fma with -1 is exact too and exists on sm_80 */
    asm("fma.rn.bf16x2 %0, %2, %3, %1;\n" : "=r"(r) : "r"(a), "r"(b), "r"(0xBF80BF80u));
  else
    asm("sub.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

template <bool BF16>
KILN_DEVICE void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
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

/* One projection's view for this block. */
struct Proj {
  const uint32_t *codes;
  const uint16_t *scales;
  const uint8_t *zeros;
  const int32_t *perm;
  void *y;
  int64_t y_rs, y_cs;
  int n, group;
};

/* The projection (and column group) of block column `blk`: groups of projection 0 first. */
KILN_DEVICE Proj find_proj(const kiln_qkv_args &a, int &blk) {
  Proj p;
#pragma unroll
  for (int i = 0; i < 3; i++) {
    const kiln_qkv_proj &q = a.proj[i];
    const int groups = (q.n + COLS - 1) / COLS;
    if (blk < groups || i == 2) {
      p.codes = q.codes, p.scales = q.scales, p.zeros = q.zeros, p.perm = q.perm, p.y = q.y;
      p.y_rs = q.y_rs, p.y_cs = q.y_cs, p.n = q.n, p.group = q.group;
      return p;
    }
    blk -= groups;
  }
  return p; /* not reached: the grid covers the groups exactly */
}

/* 8 consecutive x values x[row, k .. k+7] (after the act-order permutation) as 4 words of
 * 16-bit pairs, zeros beyond M or K. */
KILN_DEVICE uint4 load_x8(const kiln_qkv_args &a, const int32_t *perm, int row, int k, bool vec) {
  uint4 v = make_uint4(0u, 0u, 0u, 0u);
  if (row >= a.m) return v;
  const uint16_t *x = (const uint16_t *)a.x + (int64_t)row * a.x_rs;
  if (vec && k + 8 <= a.k) return __ldg(reinterpret_cast<const uint4 *>(x + k));
  uint32_t w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
  for (int i = 0; i < 8; i++)
    if (k + i < a.k) {
      const int64_t c = perm ? perm[k + i] : k + i;
      w[i / 2] |= (uint32_t)__ldg(x + c * a.x_cs) << (16 * (i % 2));
    }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

/* The 4 words (word row r, columns col .. col+3) of the codes, zeros outside. */
KILN_DEVICE uint4 load_codes(const Proj &p, int words_k, int r, int col, bool vec) {
  if (r >= words_k) return make_uint4(0u, 0u, 0u, 0u);
  const uint32_t *src = p.codes + (int64_t)r * p.n + col;
  if (vec && col + 4 <= p.n) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(src));
    return v;
  }
  uint32_t w[4];
#pragma unroll
  for (int t = 0; t < 4; t++) w[t] = col + t < p.n ? __ldg(src + t) : 0u;
  return make_uint4(w[0], w[1], w[2], w[3]);
}

/* Zeros of group grp for columns col .. col+3, one byte each (0 outside). */
KILN_DEVICE uint32_t load_zeros4(const Proj &p, int grp, int col, bool vec) {
  const uint8_t *src = p.zeros + (int64_t)grp * p.n + col;
  if (vec && col + 4 <= p.n) return __ldg(reinterpret_cast<const uint32_t *>(src));
  uint32_t z = 0;
#pragma unroll
  for (int t = 0; t < 4; t++)
    if (col + t < p.n) z |= (uint32_t)__ldg(src + t) << (8 * t);
  return z;
}

/* f16 scales of group grp for columns col .. col+7 (0 outside). */
KILN_DEVICE uint4 load_scales8(const Proj &p, int grp, int col, bool vec) {
  const uint16_t *src = p.scales + (int64_t)grp * p.n + col;
  if (vec && col + 8 <= p.n) return __ldg(reinterpret_cast<const uint4 *>(src));
  uint32_t w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
  for (int i = 0; i < 8; i++)
    if (col + i < p.n) w[i / 2] |= (uint32_t)__ldg(src + i) << (16 * (i % 2));
  return make_uint4(w[0], w[1], w[2], w[3]);
}

/* Everything one chunk (32 k) needs, loaded U chunks ahead of its use. */
template <bool M16>
struct Slot {
  uint4 codes;  /* word row 4u + c, columns base + 4g .. +3 */
  uint4 xa, xb; /* x rows g and (M16) g + 8, k = k0 + 8c .. +7 */
  uint32_t z;   /* zeros of the chunk's group, B columns base + 4g .. +3 */
  uint4 s;      /* scales of the chunk's group, C columns base + 8c .. +7 */
};

template <bool BF16, bool M16>
__device__ __forceinline__ void decode(const kiln_qkv_args &a) {
  constexpr int ROWS = M16 ? 16 : 8, U = 3; /* slots: as many as 128 registers hold without spills */
  __shared__ float red[WARPS][32][16];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, c = lane % 4;
  int blk = blockIdx.x;
  const Proj p = find_proj(a, blk);
  const int base = blk * COLS, m0 = blockIdx.y * ROWS;
  const uint32_t magic = BF16 ? 0x4300u : 0x6400u, magic2 = magic * 0x10001u;

  /* This warp's chunks: an even split of ceil(K / 32) */
  const int chunks = (a.k + CHUNK - 1) / CHUNK, words_k = a.k / 8;
  const int c_begin = (int)((int64_t)chunks * warp / WARPS), c_end = (int)((int64_t)chunks * (warp + 1) / WARPS);
  const bool vec_w = p.n % 4 == 0 && (uintptr_t)p.codes % 16 == 0;
  const bool vec_z = p.n % 4 == 0 && (uintptr_t)p.zeros % 4 == 0;
  const bool vec_s = p.n % 8 == 0 && (uintptr_t)p.scales % 16 == 0;
  const bool vec_x = !p.perm && a.x_cs == 1 && a.x_rs % 8 == 0 && (uintptr_t)a.x % 16 == 0;
  /* group of chunk ch = ch >> gshift: G = 32, 64, 128 are 1, 2, 4 chunks; G = K (one group, any
   * multiple of 8) shifts everything away. No integer division per chunk (ncu: v2 issued ~4x the
   * instructions per byte that the MMA and dequantization need). */
  const int gshift = p.group == 32 ? 0 : p.group == 64 ? 1 : p.group == 128 && p.group != a.k ? 2 : 31;

  Slot<M16> slot[U];
  auto issue = [&](Slot<M16> &sl, int ch) {
    if (ch >= c_end) return;
    const int k0 = ch * CHUNK, grp = ch >> gshift;
    sl.codes = load_codes(p, words_k, ch * 4 + c, base + 4 * g, vec_w);
    sl.xa = load_x8(a, p.perm, m0 + g, k0 + 8 * c, vec_x);
    if (M16) sl.xb = load_x8(a, p.perm, m0 + g + 8, k0 + 8 * c, vec_x);
    sl.z = load_zeros4(p, grp, base + 4 * g, vec_z);
    sl.s = load_scales8(p, grp, base + 8 * c, vec_s);
  };
#pragma unroll
  for (int u = 0; u < U; u++) issue(slot[u], c_begin + u);

  float acc[4][4], part[4][4]; /* [n8 tile][fragment element]: total, and the current group's */
#pragma unroll
  for (int t = 0; t < 4; t++)
#pragma unroll
    for (int e = 0; e < 4; e++) acc[t][e] = part[t][e] = 0.f;

  for (int c0 = c_begin; c0 < c_end; c0 += U) {
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int ch = c0 + u;
      if (ch >= c_end) break;
      Slot<M16> &sl = slot[u];
      /* A fragments: step 0 uses k pairs (0,4),(1,5); step 1 (2,6),(3,7); rows g+8 zero unless M16 */
      uint32_t af[2][4];
      const uint4 xa = sl.xa, xb = M16 ? sl.xb : make_uint4(0u, 0u, 0u, 0u);
      af[0][0] = prmt(xa.x, xa.z, 0x5410), af[0][1] = prmt(xb.x, xb.z, 0x5410);
      af[0][2] = prmt(xa.x, xa.z, 0x7632), af[0][3] = prmt(xb.x, xb.z, 0x7632);
      af[1][0] = prmt(xa.y, xa.w, 0x5410), af[1][1] = prmt(xb.y, xb.w, 0x5410);
      af[1][2] = prmt(xa.y, xa.w, 0x7632), af[1][3] = prmt(xb.y, xb.w, 0x7632);
      const uint32_t words[4] = {sl.codes.x, sl.codes.y, sl.codes.z, sl.codes.w};
#pragma unroll
      for (int t = 0; t < 4; t++) {
        const uint32_t z = sl.z >> (8 * t) & 0xFFu, zz = magic2 | z | z << 16;
#pragma unroll
        for (int step = 0; step < 2; step++) {
          const uint32_t bits = words[t] >> (8 * step);
          uint32_t b[2];
          b[0] = sub2<BF16>(nibbles_to_16(bits, magic2), zz);
          b[1] = sub2<BF16>(nibbles_to_16(bits >> 4, magic2), zz);
          mma<BF16>(part[t], af[step], b);
        }
      }
      /* group ends here: part · scales (C columns base + 8c + 4e + t) into acc */
      if (ch + 1 == c_end || (ch + 1) >> gshift != ch >> gshift) {
        const uint32_t sw[4] = {sl.s.x, sl.s.y, sl.s.z, sl.s.w};
#pragma unroll
        for (int t = 0; t < 4; t++)
#pragma unroll
          for (int e = 0; e < 2; e++) {
            const int i = 4 * e + t; /* column base + 8c + i */
            const float sc = __half2float(__ushort_as_half((uint16_t)(sw[i / 2] >> (16 * (i % 2)))));
            acc[t][e] += part[t][e] * sc;
            acc[t][2 + e] += part[t][2 + e] * sc;
            part[t][e] = part[t][2 + e] = 0.f;
          }
      }
      issue(sl, ch + U);
    }
  }

  /* the warps' tiles, added in warp order */
#pragma unroll
  for (int t = 0; t < 4; t++)
#pragma unroll
    for (int e = 0; e < 4; e++) red[warp][lane][4 * t + e] = acc[t][e];
  __syncthreads();
  for (int idx = threadIdx.x; idx < 32 * 16; idx += THREADS) {
    const int l = idx / 16, i = idx % 16, t = i / 4, e = i % 4;
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; w++) sum += red[w][l][i];
    /* element e of n8 tile t of lane l: row l/4 (+8 for e >= 2), C column 2(l%4) + e%2 */
    const int row = m0 + l / 4 + 8 * (e / 2), col = base + 8 * (l % 4) + 4 * (e % 2) + t;
    if (row < a.m && row < m0 + ROWS && col < p.n)
      kiln_store_from_f32(p.y, row * p.y_rs + col * p.y_cs, a.y_dtype, sum);
  }
}

} /* namespace w4 */
} /* namespace kiln */

#define KILN_W4A16_ENTRY(name, bf16, m16)                                                            \
  extern "C" __global__ void __launch_bounds__(kiln::w4::THREADS) name(const kiln_qkv_args args) {        \
    kiln::w4::decode<bf16, m16>(args);                                                                   \
  }
KILN_W4A16_ENTRY(kiln_w4a16_decode_f16_m8, false, false)
KILN_W4A16_ENTRY(kiln_w4a16_decode_f16_m16, false, true)
KILN_W4A16_ENTRY(kiln_w4a16_decode_bf16_m8, true, false)
KILN_W4A16_ENTRY(kiln_w4a16_decode_bf16_m16, true, true)
