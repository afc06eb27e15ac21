/*
 * qweight.cu — kiln_qweight on a GPU context: the importers (reference, GPTQ v1 / v2, AWQ), the
 * round-to-nearest quantizer and the dequantizer of src/ops/qweight.c, bit for bit (the CPU code
 * is what the GPU tests compare with). These are one-time conversions of a checkpoint, so they
 * favour plain index math over bandwidth: one thread per output item, grid-stride loops, scalar
 * accesses at any source strides (the host checks natural alignment).
 *
 * Act-order (GPTQ g_idx): stored row i of the native layout is logical row perm[i], the rows
 * stably sorted by group, so the codes can be gathered only once perm exists. kiln_qweight_sort
 * writes it without scratch memory or atomics: block b owns key b (group b; key K/G collects
 * every index outside 0..K/G-1), counts the rows of smaller keys (where its rows start), then
 * walks the rows in order and writes those of key b to consecutive positions. Each row has one
 * key and the keys' ranges tile [0, K), so perm is a permutation of 0..K-1 whatever g_idx holds.
 * An invalid g_idx (a group without exactly G rows, an index out of range: only a CPU import
 * can refuse it, since a GPU op may not read data back) gives wrong values, never a later
 * kernel's read out of bounds. Cost: (K/G + 1) · 2K reads of g_idx, from L2 (K = 28672, G = 32:
 * 51 M reads, tens of microseconds).
 */
#include "common.cuh"

#define KILN_QWEIGHT_THREADS 256 /* src/ops/qweight.c launches every kernel here with this many */

#define KILN_GRID_STRIDE(i, total)                                                                    \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (total); \
       i += (int64_t)gridDim.x * blockDim.x)

/* Row k's sort key: its group, or `groups` for an index outside 0..groups-1. */
KILN_DEVICE int64_t sort_key(const kiln_qweight_args &a, int64_t k, int64_t groups) {
  const int32_t g = a.g_idx[k * a.g_idx_s];
  return g >= 0 && g < groups ? g : groups;
}

extern "C" __global__ void __launch_bounds__(KILN_QWEIGHT_THREADS) kiln_qweight_sort(const kiln_qweight_args a) {
  constexpr int WARPS = KILN_QWEIGHT_THREADS / 32;
  __shared__ int32_t warp_rows[WARPS];
  const int64_t groups = a.k / a.group;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t key = blockIdx.x; key <= groups; key += gridDim.x) { /* uniform in the block */
    int64_t pos = 0; /* rows of smaller keys: this key's first position */
    for (int64_t base = 0; base < a.k; base += KILN_QWEIGHT_THREADS) {
      const int64_t k = base + threadIdx.x;
      pos += __syncthreads_count(k < a.k && sort_key(a, k, groups) < key);
    }
    for (int64_t base = 0; base < a.k; base += KILN_QWEIGHT_THREADS) {
      const int64_t k = base + threadIdx.x;
      const bool mine = k < a.k && sort_key(a, k, groups) == key;
      const unsigned ballot = __ballot_sync(0xffffffffu, mine);
      if (lane == 0) warp_rows[warp] = __popc(ballot);
      __syncthreads();
      int before = __popc(ballot & ((1u << lane) - 1u)), rows = 0; /* rows of this key before k, in this round */
#pragma unroll
      for (int w = 0; w < WARPS; w++) {
        before += w < warp ? warp_rows[w] : 0;
        rows += warp_rows[w];
      }
      if (mine) a.perm[pos + before] = (int32_t)k;
      pos += rows;
      __syncthreads(); /* warp_rows is rewritten in the next round */
    }
  }
}

/* AWQ packs column 8c + {0, 2, 4, 6, 1, 3, 5, 7}[i] into nibble i: column 8c + j sits in nibble
 * (j % 2)·4 + j / 2. */
KILN_DEVICE int awq_nibble(int64_t n) { return (int)(n % 2) * 4 + (int)(n % 8) / 2; }

KILN_DEVICE uint32_t src_word(const kiln_qweight_args &a, int64_t r, int64_t c) {
  return ((const uint32_t *)a.src)[r * a.src_rs + c * a.src_cs];
}

/* The source's code of logical row k, column n, as a native code 0..15. */
KILN_DEVICE uint32_t source_code(const kiln_qweight_args &a, int64_t k, int64_t n) {
  switch (a.format) {
    case KILN_QF_REFERENCE: /* one dense N-major buffer: word (k/8) + n·(K/8); signed −8..7 stored + 8 */
      return ((((const uint32_t *)a.src)[k / 8 + n * (a.k / 8)] >> (4 * (k % 8))) & 15u) ^ 8u;
    case KILN_QF_AWQ: return (src_word(a, k, n / 8) >> (4 * awq_nibble(n))) & 15u;
    default: return (src_word(a, k / 8, n) >> (4 * (k % 8))) & 15u; /* GPTQ */
  }
}

/* The zero point of group g, column n: GPTQ v1 stores zero − 1; the reference format has none. */
KILN_DEVICE uint8_t source_zero(const kiln_qweight_args &a, int64_t g, int64_t n) {
  if (a.format == KILN_QF_REFERENCE) return 8;
  const uint32_t w = a.qzeros[g * a.qzeros_rs + n / 8 * a.qzeros_cs];
  const uint32_t v = (w >> (4 * (a.format == KILN_QF_AWQ ? awq_nibble(n) : (int)(n % 8)))) & 15u;
  return (uint8_t)(a.format == KILN_QF_GPTQ_V1 ? v + 1 : v);
}

/* Items: the K/8 · N code words, then the K/G · N scales and zeros, then (perm wanted, no g_idx)
 * the K entries of the identity permutation. With a g_idx, perm holds kiln_qweight_sort's. */
extern "C" __global__ void __launch_bounds__(KILN_QWEIGHT_THREADS) kiln_qweight_import(const kiln_qweight_args a) {
  const int64_t words = a.k / 8 * a.n, params = a.k / a.group * a.n;
  const int64_t total = words + params + (a.perm && !a.g_idx ? a.k : 0);
  KILN_GRID_STRIDE(i, total) {
    if (i < words) {
      const int64_t r = i / a.n, n = i % a.n;
      uint32_t word = 0;
#pragma unroll
      for (int j = 0; j < 8; j++) word |= source_code(a, a.g_idx ? a.perm[8 * r + j] : 8 * r + j, n) << (4 * j);
      a.codes[i] = word;
    } else if (i < words + params) {
      const int64_t p = i - words, g = p / a.n, n = p % a.n;
      a.scales[p] = a.src_scales[g * a.src_scales_rs + n * a.src_scales_cs];
      a.zeros[p] = source_zero(a, g, n);
    } else {
      a.perm[i - words - params] = (int32_t)(i - words - params);
    }
  }
}

/* w[k, n] = f16_to_f32(scale) · (q − zero) in the native row order, into src (f32 / f16 / bf16,
 * rounded once). Zero points are not checked here (the CPU refuses any above 16); every byte
 * gives a finite value. */
extern "C" __global__ void __launch_bounds__(KILN_QWEIGHT_THREADS) kiln_qweight_dequant(const kiln_qweight_args a) {
  KILN_GRID_STRIDE(i, a.k * a.n) {
    const int64_t k = i / a.n, n = i % a.n, p = k / a.group * a.n + n;
    const int q = (int)((a.codes[k / 8 * a.n + n] >> (4 * (k % 8))) & 15u);
    const float v = __half2float(__ushort_as_half(a.scales[p])) * (float)(q - (int)a.zeros[p]);
    kiln_store_from_f32(a.src, k * a.src_rs + n * a.src_cs, a.dtype, v);
  }
}

/* A float clamped to 0..15; NaN gives 0 (the CPU refuses non-finite weights before this point). */
KILN_DEVICE uint32_t clamp_code(float v) { return v >= 0.0f ? (v <= 15.0f ? (uint32_t)v : 15u) : 0u; }

/* One thread per group and column: the group's scale and zero, then its G/8 whole code words.
 * The arithmetic is the CPU's, operation for operation (IEEE division, round half to even), so
 * the results match it bit for bit. Non-finite weights, which the CPU refuses, are not checked
 * here: they give that group some scale and codes still 0..15. */
extern "C" __global__ void __launch_bounds__(KILN_QWEIGHT_THREADS) kiln_qweight_quantize(const kiln_qweight_args a) {
  KILN_GRID_STRIDE(i, a.k / a.group * a.n) {
    const int64_t g = i / a.n, n = i % a.n, k0 = g * a.group;
    const char *w = (const char *)a.src;
    float lo = INFINITY, hi = -INFINITY;
    for (int64_t k = k0; k < k0 + a.group; k++) {
      const float v = kiln_load_as_f32(w, k * a.src_rs + n * a.src_cs, a.dtype);
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
    }
    float scale;
    int zero;
    if (a.symmetric) {
      scale = fmaxf(fabsf(lo), fabsf(hi)) / 7.0f;
      zero = 8;
    } else { /* min and max include 0, as on the CPU */
      lo = fminf(lo, 0.0f), hi = fmaxf(hi, 0.0f);
      scale = (hi - lo) / 15.0f;
      zero = 0;
    }
    uint16_t s16 = __half_as_ushort(__float2half_rn(scale));
    if (scale == 0.0f) s16 = 0x3c00u;                         /* all-zero group: scale 1, codes = zero */
    else if ((s16 & 0x7fffu) == 0) s16 = 0x0001u;            /* underflow: the smallest subnormal */
    else if ((s16 & 0x7fffu) == 0x7c00u) s16 = 0x7bffu;      /* just beyond 65504: the largest */
    const float sf = __half2float(__ushort_as_half(s16));
    if (!a.symmetric && scale != 0.0f) zero = (int)clamp_code(rintf(-lo / sf));
    a.scales[i] = s16;
    a.zeros[i] = (uint8_t)zero;
    for (int64_t r = k0 / 8; r < (k0 + a.group) / 8; r++) {
      uint32_t word = 0;
#pragma unroll
      for (int j = 0; j < 8; j++) {
        const float v = kiln_load_as_f32(w, (8 * r + j) * a.src_rs + n * a.src_cs, a.dtype);
        word |= clamp_code(rintf(v / sf) + (float)zero) << (4 * j);
      }
      a.codes[r * a.n + n] = word;
    }
  }
}
