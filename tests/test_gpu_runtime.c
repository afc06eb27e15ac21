/*
 * test_gpu_runtime.c — the runtime on a real GPU: the context's device info, device tensors and
 * copies on a kiln stream, kiln_cast on the GPU checked bit for bit against the CPU context's
 * kiln_cast (every f32/f16/bf16 pair, compact and strided views, special values), device and
 * context validation, two contexts on one device, and one context used from two threads.
 *
 * Exits 77 (CTest: skipped) with a SKIP line when there is no usable GPU, before cmocka runs.
 */
#include <inttypes.h>
#include <pthread.h>

#include "test_util.h"

static kiln_context *g_ctx; /* the ordinal-0 CUDA context, made in main() */
static kiln_context *g_cpu; /* the CPU context, the reference for kiln_cast */

/* ---------------------------------------------------------------------------------------- */
/* Helpers                                                                                  */
/* ---------------------------------------------------------------------------------------- */
static const DLDataType *const DTYPES[3] = {&TEST_F32, &TEST_F16, &TEST_BF16};
static const char *dt_name(DLDataType dt) {
  return dt.bits == 32 ? "f32" : dt.code == kDLBfloat ? "bf16" : "f16";
}
static size_t dt_size(DLDataType dt) { return dt.bits / 8; }

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
static uint64_t rng_u64(void) { /* the xorshift64* of test_util.h, all 64 bits */
  uint64_t x = test_rng_state;
  x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
  test_rng_state = x;
  return x * 2685821657736338717ull;
}

/* The bits of element i of a buffer of dtype dt, and whether they are a NaN. */
static uint32_t elem_bits(const void *p, DLDataType dt, int64_t i) {
  return dt.bits == 32 ? ((const uint32_t *)p)[i] : ((const uint16_t *)p)[i];
}
static int bits_are_nan(uint32_t b, DLDataType dt) {
  if (dt.bits == 32) return (b & 0x7fffffffu) > 0x7f800000u;
  if (dt.code == kDLBfloat) return (b & 0x7fffu) > 0x7f80u;
  return (b & 0x7fffu) > 0x7c00u;
}

/* A device buffer of n elements: a compact 1-D kiln tensor. */
static DLManagedTensorVersioned *dev_alloc(kiln_context *ctx, DLDataType dt, int64_t n) {
  DLManagedTensorVersioned *t = NULL;
  int64_t shape[1] = {n};
  assert_kiln_ok(kiln_tensor_empty(ctx, 1, shape, dt, &t));
  assert_non_null(t);
  return t;
}
/* Host <-> device copies of a whole 1-D buffer on `stream`, finished before returning. */
static void upload(kiln_context *ctx, const void *host, DLManagedTensorVersioned *dev, CUstream stream) {
  test_tensor h = test_host_tensor((void *)host, dev->dl_tensor.dtype, 1, dev->dl_tensor.shape);
  assert_kiln_ok(kiln_tensor_copy(ctx, test_dl(&h), &dev->dl_tensor, stream));
  assert_kiln_ok(kiln_stream_synchronize(ctx, stream));
}
static void download(kiln_context *ctx, DLManagedTensorVersioned *dev, void *host, CUstream stream) {
  assert_kiln_ok(kiln_stream_synchronize(ctx, stream));
  test_tensor h = test_host_tensor(host, dev->dl_tensor.dtype, 1, dev->dl_tensor.shape);
  assert_kiln_ok(kiln_tensor_copy(ctx, &dev->dl_tensor, test_dl(&h), stream));
  assert_kiln_ok(kiln_stream_synchronize(ctx, stream));
}

/* ---------------------------------------------------------------------------------------- */
/* Cast inputs: random data with the values where conversions go wrong                      */
/* ---------------------------------------------------------------------------------------- */
static const uint32_t F32_SPECIALS[] = {
    0x00000000u, 0x80000000u,                           /* +-0 */
    0x7f800000u, 0xff800000u,                           /* +-inf */
    0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, /* quiet / signalling NaNs, both signs */
    0x7fa00000u, 0x7f801234u, 0x7f80e000u, 0xffbfffffu, /* NaN payloads (some only in low bits) */
    0x00000001u, 0x80000001u, 0x00400000u, 0x007fffffu, /* f32 subnormals */
    0x807fffffu, 0x00800000u, 0x80800000u,              /* f32 min normal */
    0x477fe000u, 0xc77fe000u,                           /* 65504, f16 max */
    0x477ff000u, 0xc77ff000u,                           /* 65520: a tie, overflows f16 to inf */
    0x477fefffu, 0x477ff001u, 0x47800000u,              /* just below / above 65520, 65536 */
    0x7f7fffffu, 0xff7fffffu,                           /* FLT_MAX: bf16 overflows to inf */
    0x7f7f8000u, 0x7f7f7fffu, 0x7f7f8001u,              /* bf16 overflow tie and around it */
    0x33800000u, 0xb3800000u,                           /* 2^-24, smallest f16 subnormal */
    0x33000000u, 0xb3000000u, 0x33000001u, 0x32ffffffu, /* 2^-25: tie to 0, and around it */
    0x33c00000u, 0x34200000u,                           /* 1.5 * 2^-24 and 2.5 * 2^-24: ties */
    0x38800000u, 0x387fc000u, 0x387fe000u, 0x387ff000u, /* f16 min normal, around it */
    0x3f801000u, 0x3f803000u, 0xbf801000u,              /* 1 + 2^-11, 1 + 3*2^-11: f16 ties */
    0x3f808000u, 0x3f818000u, 0xbf808000u,              /* 1 + 2^-8, 1 + 3*2^-8: bf16 ties */
    0x3f800001u, 0x3f7fffffu, 0x3effffffu, 0x3f800000u, 0xbf800000u,
};
#define N_F32_SPECIALS (sizeof F32_SPECIALS / sizeof F32_SPECIALS[0])

static const uint16_t H16_SPECIALS[] = {
    0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0xfe00,
    0x7c01, 0x7d00, 0x3c00, 0x3c01, 0x3c04, 0x3c0c, 0x007f, 0x0080, 0x7f7f, 0xff7f, 0x7f80, 0xff80,
    0x7fc0, 0xffc0, 0x7f81, 0x477f, 0x4780, 0x3380, 0x3300, 0x3f80, 0x3f81, 0x0200, 0x8200,
};
#define N_H16_SPECIALS (sizeof H16_SPECIALS / sizeof H16_SPECIALS[0])

/* Fills n elements of dtype dt: specials, ties of both narrower formats, values around the f16
 * range and subnormals, random bit patterns. For 16-bit dtypes a buffer of >= 65536 elements
 * holds every bit pattern (i * an odd constant permutes the 16-bit patterns). */
static void fill_cast_source(void *p, DLDataType dt, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    if (dt.bits == 16) {
      uint16_t v = (uint16_t)((uint64_t)i * 0x9E37u + 0x1234u);
      if (i % 7 == 3) v = H16_SPECIALS[(i / 7) % N_H16_SPECIALS];
      ((uint16_t *)p)[i] = v;
      continue;
    }
    uint32_t u;
    uint64_t r = rng_u64();
    switch (i % 6) {
    case 0: u = F32_SPECIALS[(i / 6) % N_F32_SPECIALS]; break;
    case 1: u = (uint32_t)(r >> 32); break; /* any pattern */
    case 2: { /* the exact midpoint of two adjacent finite f16 values */
      uint16_t h = (uint16_t)((r >> 40) % 0x7bffu);
      double mid = ((double)kiln_f16_to_f32(h) + (double)kiln_f16_to_f32((uint16_t)(h + 1))) / 2;
      u = f32_bits((float)mid) | (uint32_t)(r & 0x80000000u);
      if (r & 0x100) u += (r & 0x200) ? 1u : (uint32_t)-1; /* just off the tie, half the time */
      break;
    }
    case 3: { /* the exact midpoint of two adjacent finite bf16 values */
      uint32_t b = (uint32_t)((r >> 40) % 0x7f7fu) | (uint32_t)(r & 0x8000u);
      u = b << 16 | 0x8000u;
      if (r & 0x100) u += (r & 0x200) ? 1u : (uint32_t)-1;
      break;
    }
    case 4: { /* around the f16 subnormal range */
      int e = (int)((r >> 32) % 16) - 28;
      u = f32_bits(ldexpf(test_uniform(), e));
      break;
    }
    default: { /* ordinary magnitudes, some beyond f16's range */
      int e = (int)((r >> 32) % 40) - 20;
      u = f32_bits(ldexpf(test_uniform(), e));
      break;
    }
    }
    ((uint32_t *)p)[i] = u;
  }
}
/* A value that is not a NaN and that no conversion produces from these inputs by accident in
 * the same place: the "untouched" marker of destination buffers. */
static void fill_sentinel(void *p, DLDataType dt, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    if (dt.bits == 32) ((uint32_t *)p)[i] = 0x5a5a5a5au;
    else ((uint16_t *)p)[i] = 0x5a5a;
  }
}

/* ---------------------------------------------------------------------------------------- */
/* Strided views for kiln_cast                                                              */
/* ---------------------------------------------------------------------------------------- */
typedef struct view {
  int ndim;
  int64_t shape[4], strides[4]; /* strides in elements */
  int64_t off;                  /* element offset (byte_offset = off * element size) */
  int null_strides;             /* pass strides = NULL (compact) */
} view;

static view compact_view(int ndim, const int64_t *shape, int null_strides) {
  view v;
  memset(&v, 0, sizeof v);
  v.ndim = ndim;
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    v.shape[d] = shape[d];
    v.strides[d] = s;
    s *= shape[d];
  }
  v.null_strides = null_strides;
  return v;
}
static int64_t view_numel(const view *v) {
  int64_t n = 1;
  for (int d = 0; d < v->ndim; d++) n *= v->shape[d];
  return n;
}
/* Buffer elements the view needs, plus a few past its end that must stay untouched. */
static int64_t view_buffer(const view *v) {
  int64_t last = v->off;
  for (int d = 0; d < v->ndim; d++) last += (v->shape[d] - 1) * v->strides[d];
  return view_numel(v) ? last + 1 + 3 : v->off + 3;
}
static DLTensor view_tensor(view *v, void *data, DLDevice dev, DLDataType dt) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device = dev;
  t.ndim = v->ndim;
  t.dtype = dt;
  t.shape = v->shape;
  t.strides = v->null_strides ? NULL : v->strides;
  t.byte_offset = (uint64_t)v->off * dt_size(dt);
  return t;
}

/* Casts src-view -> dst-view on the GPU and on the CPU context from the same source buffer and
 * the same sentinel-filled destination buffer; the whole destination buffers (elements outside
 * the view included) must agree bit for bit, NaN matching any NaN. Returns mismatches. */
static int64_t cast_case(const char *name, view src_v, DLDataType sdt, view dst_v, DLDataType ddt, CUstream stream) {
  kiln_context *ctx = g_ctx;
  const int64_t ns = view_buffer(&src_v), nd = view_buffer(&dst_v);
  void *hs = malloc((size_t)ns * dt_size(sdt)), *hd_gpu = malloc((size_t)nd * dt_size(ddt)),
       *hd_cpu = malloc((size_t)nd * dt_size(ddt));
  assert_non_null(hs);
  assert_non_null(hd_gpu);
  assert_non_null(hd_cpu);
  fill_cast_source(hs, sdt, ns);
  fill_sentinel(hd_cpu, ddt, nd);
  DLManagedTensorVersioned *ds = dev_alloc(ctx, sdt, ns), *dd = dev_alloc(ctx, ddt, nd);
  upload(ctx, hs, ds, stream);
  upload(ctx, hd_cpu, dd, stream);

  DLDevice gpu = {kDLCUDA, 0}, cpu = {kDLCPU, 0};
  DLTensor gs = view_tensor(&src_v, ds->dl_tensor.data, gpu, sdt), gd = view_tensor(&dst_v, dd->dl_tensor.data, gpu, ddt);
  assert_kiln_ok(kiln_cast(ctx, &gs, &gd, stream));
  download(ctx, dd, hd_gpu, stream);

  DLTensor cs = view_tensor(&src_v, hs, cpu, sdt), cd = view_tensor(&dst_v, hd_cpu, cpu, ddt);
  assert_kiln_ok(kiln_cast(g_cpu, &cs, &cd, NULL));

  int64_t bad = 0;
  for (int64_t i = 0; i < nd; i++) {
    uint32_t g = elem_bits(hd_gpu, ddt, i), c = elem_bits(hd_cpu, ddt, i);
    if (g == c || (bits_are_nan(g, ddt) && bits_are_nan(c, ddt))) continue;
    if (bad < 8)
      print_message("  %s %s->%s: dst element %" PRId64 ": GPU 0x%0*x, CPU 0x%0*x\n", name, dt_name(sdt),
                    dt_name(ddt), i, (int)ddt.bits / 4, g, (int)ddt.bits / 4, c);
    bad++;
  }
  if (bad) print_message("  %s %s->%s: %" PRId64 " of %" PRId64 " elements differ\n", name, dt_name(sdt), dt_name(ddt),
                         bad, nd);
  kiln_tensor_free(ds);
  kiln_tensor_free(dd);
  free(hs);
  free(hd_gpu);
  free(hd_cpu);
  return bad;
}

/* ---------------------------------------------------------------------------------------- */
/* Tests                                                                                    */
/* ---------------------------------------------------------------------------------------- */
static void context_info_is_sane(void **state) {
  (void)state;
  int count = 0;
  assert_kiln_ok(kiln_device_count(&count));
  assert_true(count >= 1);
  assert_true(kiln_build_has_kernels());
  kiln_device_info info;
  memset(&info, 0xff, sizeof info);
  assert_kiln_ok(kiln_context_info(g_ctx, &info));
  print_message("  device 0: %s, sm_%d%d, %d SMs, smem optin %zu, L2 %zu, memory %zu, driver %d\n", info.name,
                info.cc_major, info.cc_minor, info.sm_count, info.smem_per_block_optin, info.l2_bytes,
                info.total_memory, info.driver_version);
  assert_true(strlen(info.name) > 0 && strlen(info.name) < sizeof info.name);
  assert_int_equal(info.ordinal, 0);
  assert_true(info.cc_major >= 8); /* compute capability >= 8.0 */
  assert_true(info.cc_major < 100 && info.cc_minor >= 0 && info.cc_minor < 10);
  assert_true(info.sm_count > 0);
  assert_true(info.smem_per_block_optin >= 100 * 1024);
  assert_true(info.l2_bytes > 0);
  assert_true(info.total_memory > 0);
  assert_true(info.driver_version >= 12000);
  assert_int_equal(info.has_kernels, 1);
}

static void tensor_empty_and_copy_round_trip(void **state) {
  (void)state;
  kiln_context *ctx = g_ctx;
  CUstream s = NULL;
  assert_kiln_ok(kiln_stream_create(ctx, &s));
  assert_non_null(s);
  const DLDataType u8 = {kDLUInt, 8, 1};
  const struct {
    int ndim;
    int64_t shape[3];
    DLDataType dt;
  } cases[] = {
      {1, {1}, TEST_F32},        {1, {1000003}, TEST_F16}, {2, {37, 41}, TEST_BF16},
      {3, {3, 17, 29}, TEST_F32}, {2, {5, 7}, u8},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    DLManagedTensorVersioned *d1 = NULL, *d2 = NULL;
    assert_kiln_ok(kiln_tensor_empty(ctx, cases[c].ndim, cases[c].shape, cases[c].dt, &d1));
    assert_kiln_ok(kiln_tensor_empty(ctx, cases[c].ndim, cases[c].shape, cases[c].dt, &d2));
    DLTensor *t = &d1->dl_tensor;
    assert_int_equal(t->device.device_type, kDLCUDA);
    assert_int_equal(t->device.device_id, 0);
    assert_int_equal(t->ndim, cases[c].ndim);
    assert_int_equal(t->byte_offset, 0);
    assert_int_equal((uintptr_t)t->data % 256, 0);
    assert_non_null(t->strides);
    assert_int_equal(d1->version.major, 1);
    int64_t n = 1;
    for (int d = cases[c].ndim - 1; d >= 0; d--) {
      assert_int_equal(t->shape[d], cases[c].shape[d]);
      if (cases[c].shape[d] != 1 && n > 0) assert_int_equal(t->strides[d], n);
      n *= cases[c].shape[d];
    }
    size_t bytes = (size_t)n * (cases[c].dt.bits / 8);
    unsigned char *src = malloc(bytes + 1), *back = malloc(bytes + 1);
    assert_non_null(src);
    assert_non_null(back);
    for (size_t i = 0; i < bytes; i++) src[i] = (unsigned char)(rng_u64() >> 56);
    memset(back, 0xee, bytes + 1);
    test_tensor hs = test_host_tensor(src, cases[c].dt, cases[c].ndim, cases[c].shape);
    test_tensor hb = test_host_tensor(back, cases[c].dt, cases[c].ndim, cases[c].shape);
    /* host -> device -> device -> host, all enqueued on s, one synchronization at the end */
    assert_kiln_ok(kiln_tensor_copy(ctx, test_dl(&hs), &d1->dl_tensor, s));
    assert_kiln_ok(kiln_tensor_copy(ctx, &d1->dl_tensor, &d2->dl_tensor, s));
    assert_kiln_ok(kiln_tensor_copy(ctx, &d2->dl_tensor, test_dl(&hb), s));
    assert_kiln_ok(kiln_stream_synchronize(ctx, s));
    if (bytes) assert_memory_equal(src, back, bytes);
    assert_int_equal(back[bytes], 0xee); /* nothing written past the end */
    free(src);
    free(back);
    kiln_tensor_free(d1);
    kiln_tensor_free(d2);
  }
  /* copy refuses a dtype change on the GPU too */
  int64_t shape[1] = {16};
  DLManagedTensorVersioned *a = NULL, *b = NULL;
  assert_kiln_ok(kiln_tensor_empty(ctx, 1, shape, TEST_F32, &a));
  assert_kiln_ok(kiln_tensor_empty(ctx, 1, shape, TEST_F16, &b));
  assert_kiln_fails(kiln_tensor_copy(ctx, &a->dl_tensor, &b->dl_tensor, s), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_copy", "kiln_cast");
  kiln_tensor_free(a);
  kiln_tensor_free(b);
  assert_kiln_ok(kiln_stream_destroy(ctx, s));
}

/* Every (src, dst) dtype pair, over compact views of rank 1..4 and strided ones (transposed,
 * permuted, byte_offset, step strides) on either side. */
static void cast_matches_cpu_bit_for_bit(void **state) {
  (void)state;
  CUstream s = NULL;
  assert_kiln_ok(kiln_stream_create(g_ctx, &s));
  test_seed(1234);

  view srcs[12], dsts[12];
  const char *names[12];
  int nc = 0;
  {
    int64_t sh1[1] = {(1 << 20) + 3}; /* several grid-stride rounds; every 16-bit pattern */
    names[nc] = "rank1 compact";
    srcs[nc] = compact_view(1, sh1, 1), dsts[nc++] = compact_view(1, sh1, 1);
    int64_t sh2[2] = {37, 41};
    names[nc] = "rank2 compact";
    srcs[nc] = compact_view(2, sh2, 1), dsts[nc++] = compact_view(2, sh2, 0);
    int64_t sh3[3] = {3, 17, 29};
    names[nc] = "rank3 compact";
    srcs[nc] = compact_view(3, sh3, 0), dsts[nc++] = compact_view(3, sh3, 1);
    int64_t sh4[4] = {3, 5, 7, 11};
    names[nc] = "rank4 compact";
    srcs[nc] = compact_view(4, sh4, 1), dsts[nc++] = compact_view(4, sh4, 1);
  }
  { /* a transposed source: a [67, 45] buffer seen as [45, 67] */
    int64_t sh[2] = {45, 67};
    view t = compact_view(2, sh, 0);
    t.strides[0] = 1, t.strides[1] = 45;
    names[nc] = "rank2 transposed src";
    srcs[nc] = t, dsts[nc++] = compact_view(2, sh, 1);
    names[nc] = "rank2 transposed dst";
    srcs[nc] = compact_view(2, sh, 1), dsts[nc++] = t;
  }
  { /* rank 3 permuted source (a [6, 10, 14] buffer as [14, 6, 10]) into a byte_offset dst */
    int64_t sh[3] = {14, 6, 10};
    view p = compact_view(3, sh, 0);
    p.strides[0] = 1, p.strides[1] = 140, p.strides[2] = 14;
    view d = compact_view(3, sh, 0);
    d.off = 5;
    names[nc] = "rank3 permuted src, byte_offset dst";
    srcs[nc] = p, dsts[nc++] = d;
  }
  { /* rank 4 byte_offset with step strides on both sides */
    view a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    a.ndim = b.ndim = 4;
    int64_t sh[4] = {2, 3, 4, 5}, sa[4] = {200, 50, 11, 2}, sb[4] = {130, 40, 9, 1};
    memcpy(a.shape, sh, sizeof sh), memcpy(b.shape, sh, sizeof sh);
    memcpy(a.strides, sa, sizeof sa), memcpy(b.strides, sb, sizeof sb);
    a.off = 7, b.off = 3;
    names[nc] = "rank4 byte_offset + steps";
    srcs[nc] = a, dsts[nc++] = b;
  }
  { /* rank 1 with a step and an offset on the source */
    int64_t sh[1] = {1000};
    view a = compact_view(1, sh, 0);
    a.strides[0] = 3, a.off = 1;
    view b = compact_view(1, sh, 0);
    b.off = 9;
    names[nc] = "rank1 step 3 + byte_offset";
    srcs[nc] = a, dsts[nc++] = b;
  }
  { /* rank 2 slices of wider buffers on both sides (rows 3.., cols 5..) */
    view a = compact_view(2, (int64_t[2]){32, 40}, 0), b = compact_view(2, (int64_t[2]){32, 40}, 0);
    a.strides[0] = 50, a.off = 3 * 50 + 5;
    b.strides[0] = 43, b.off = 2 * 43 + 1;
    names[nc] = "rank2 slices";
    srcs[nc] = a, dsts[nc++] = b;
  }
  { /* a transposed, offset source into a transposed dst of another pitch (rank 3) */
    view a = compact_view(3, (int64_t[3]){4, 9, 13}, 0), b = compact_view(3, (int64_t[3]){4, 9, 13}, 0);
    a.strides[0] = 130, a.strides[1] = 1, a.strides[2] = 10, a.off = 2;
    b.strides[0] = 9 * 16, b.strides[1] = 1, b.strides[2] = 11, b.off = 1;
    names[nc] = "rank3 transposed both";
    srcs[nc] = a, dsts[nc++] = b;
  }

  int64_t bad = 0;
  for (int c = 0; c < nc; c++)
    for (int si = 0; si < 3; si++)
      for (int di = 0; di < 3; di++) bad += cast_case(names[c], srcs[c], *DTYPES[si], dsts[c], *DTYPES[di], s);
  assert_kiln_ok(kiln_stream_destroy(g_ctx, s));
  if (bad) fail_msg("%" PRId64 " elements differ between the GPU and the CPU kiln_cast (listed above)", bad);
}

/* Empty tensors (a dimension of size 0): kiln_tensor_empty makes them, and copying one is a
 * no-op that succeeds, whatever strides kiln_tensor_empty gave the empty dimension. */
static void copy_of_empty_tensors_is_a_no_op(void **state) {
  (void)state;
  kiln_context *ctx = g_ctx;
  const int64_t shapes[3][3] = {{2, 0, 5}, {0, 4, 4}, {3, 5, 0}};
  int failures = 0;
  for (int c = 0; c < 3; c++) {
    DLManagedTensorVersioned *d1 = NULL, *d2 = NULL;
    assert_kiln_ok(kiln_tensor_empty(ctx, 3, shapes[c], TEST_F16, &d1));
    assert_kiln_ok(kiln_tensor_empty(ctx, 3, shapes[c], TEST_F16, &d2));
    uint16_t host[1] = {0x1234};
    test_tensor h = test_host_tensor(host, TEST_F16, 3, shapes[c]);
    const DLTensor *pairs[3][2] = {{test_dl(&h), &d1->dl_tensor}, {&d1->dl_tensor, &d2->dl_tensor}, {&d2->dl_tensor, &h.t}};
    static const char *names[3] = {"host -> device", "device -> device", "device -> host"};
    for (int k = 0; k < 3; k++) {
      kiln_status st = kiln_tensor_copy(ctx, pairs[k][0], pairs[k][1], NULL);
      if (st != KILN_OK) {
        print_message("FAILED kiln_tensor_copy %s of an empty [%" PRId64 ", %" PRId64 ", %" PRId64
                      "] tensor (device strides %" PRId64 ", %" PRId64 ", %" PRId64 "): %s: %s\n",
                      names[k], shapes[c][0], shapes[c][1], shapes[c][2], d1->dl_tensor.strides[0],
                      d1->dl_tensor.strides[1], d1->dl_tensor.strides[2], kiln_status_string(st), kiln_last_error());
        failures++;
      }
    }
    assert_kiln_ok(kiln_stream_synchronize(ctx, NULL));
    assert_int_equal(host[0], 0x1234);
    kiln_tensor_free(d1);
    kiln_tensor_free(d2);
  }
  if (failures) fail_msg("%d copies of empty tensors failed (listed above)", failures);
}

/* A cast of 0 elements succeeds and writes nothing: compact (strides NULL, as DLPack allows),
 * with PyTorch-style explicit strides, with or without data pointers. */
static void cast_of_zero_elements_is_a_no_op(void **state) {
  (void)state;
  kiln_context *ctx = g_ctx;
  const int64_t n = 64;
  DLManagedTensorVersioned *ds = dev_alloc(ctx, TEST_F32, n), *dd = dev_alloc(ctx, TEST_F16, n);
  uint16_t marker[64], back[64];
  for (int i = 0; i < n; i++) marker[i] = (uint16_t)(0x1000 + i);
  upload(ctx, marker, dd, NULL);
  int64_t shapes[4][3] = {{0, 0, 0}, {4, 0, 3}, {3, 5, 0}, {0, 7, 2}};
  int64_t torch_strides[4][3] = {{1, 1, 1}, {3, 3, 1}, {1, 1, 1}, {14, 2, 1}}; /* what torch.empty gives */
  int failures = 0;
  for (int c = 0; c < 4; c++)
    for (int variant = 0; variant < 3; variant++) {
      DLTensor src = {.data = ds->dl_tensor.data, .device = {kDLCUDA, 0}, .ndim = 3, .dtype = TEST_F32,
                      .shape = shapes[c]};
      DLTensor dst = src;
      dst.data = dd->dl_tensor.data;
      dst.dtype = TEST_F16;
      if (variant == 1) src.strides = dst.strides = torch_strides[c];
      if (variant == 2) src.data = dst.data = NULL; /* no elements: no data needed */
      kiln_status st = kiln_cast(ctx, &src, &dst, NULL);
      if (st != KILN_OK) {
        print_message("FAILED kiln_cast of shape [%" PRId64 ", %" PRId64 ", %" PRId64 "] with %s: %s: %s\n",
                      shapes[c][0], shapes[c][1], shapes[c][2],
                      variant == 1 ? "explicit strides" : variant == 2 ? "NULL strides and NULL data" : "NULL strides",
                      kiln_status_string(st), kiln_last_error());
        failures++;
      }
    }
  int64_t s0[1] = {0};
  DLTensor a = {.data = NULL, .device = {kDLCUDA, 0}, .ndim = 1, .dtype = TEST_BF16, .shape = s0};
  DLTensor b = a;
  b.dtype = TEST_F32;
  assert_kiln_ok(kiln_cast(ctx, &a, &b, NULL));
  download(ctx, dd, back, NULL);
  assert_memory_equal(marker, back, sizeof marker);
  kiln_tensor_free(ds);
  kiln_tensor_free(dd);
  if (failures) fail_msg("%d zero-element casts failed (listed above)", failures);
}

static void wrong_device_tensors_are_rejected(void **state) {
  (void)state;
  kiln_context *ctx = g_ctx;
  DLManagedTensorVersioned *ds = dev_alloc(ctx, TEST_F32, 32), *dd = dev_alloc(ctx, TEST_F16, 32);
  int64_t shape[1] = {32};
  DLTensor src = {.data = ds->dl_tensor.data, .device = {kDLCUDA, 0}, .ndim = 1, .dtype = TEST_F32, .shape = shape};
  DLTensor dst = {.data = dd->dl_tensor.data, .device = {kDLCUDA, 0}, .ndim = 1, .dtype = TEST_F16, .shape = shape};
  float ones[32];
  for (int i = 0; i < 32; i++) ones[i] = 1.0f;
  upload(ctx, ones, ds, NULL); /* the cast below reads it (initcheck flagged the uninitialized read) */
  assert_kiln_ok(kiln_cast(ctx, &src, &dst, NULL));

  /* the right kind of device, the wrong ordinal */
  DLTensor other = src;
  other.device.device_id = 1;
  assert_kiln_fails(kiln_cast(ctx, &other, &dst, NULL), KILN_ERROR_INVALID_ARGUMENT, "kiln_cast", "src",
                    "kDLCUDA:1", "kDLCUDA:0");
  other = dst;
  other.device.device_id = 1;
  assert_kiln_fails(kiln_cast(ctx, &src, &other, NULL), KILN_ERROR_INVALID_ARGUMENT, "kiln_cast", "dst",
                    "kDLCUDA:1", "kDLCUDA:0");
  other = src;
  other.device.device_id = 1;
  assert_kiln_fails(kiln_tensor_copy(ctx, &other, &ds->dl_tensor, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_copy");

  /* a host tensor given to the CUDA context */
  float host[32] = {0};
  DLTensor h = src;
  h.data = host;
  h.device = (DLDevice){kDLCPU, 0};
  assert_kiln_fails(kiln_cast(ctx, &h, &dst, NULL), KILN_ERROR_INVALID_ARGUMENT, "kiln_cast", "src", "kDLCPU",
                    "kDLCUDA:0");
  uint16_t host16[32];
  DLTensor h16 = dst;
  h16.data = host16;
  h16.device = (DLDevice){kDLCPU, 0};
  assert_kiln_fails(kiln_cast(ctx, &src, &h16, NULL), KILN_ERROR_INVALID_ARGUMENT, "kiln_cast", "dst", "kDLCPU",
                    "kDLCUDA:0");
  /* ... and a GPU tensor to the CPU context */
  assert_kiln_fails(kiln_cast(g_cpu, &src, &h16, NULL), KILN_ERROR_INVALID_ARGUMENT, "kiln_cast", "kDLCUDA:0",
                    "CPU");
  kiln_tensor_free(ds);
  kiln_tensor_free(dd);
}

/* Runs one f32 -> f16 / bf16 cast pair on ctx with tensors from owner and returns mismatches
 * against the CPU result. */
static int64_t cast_on(kiln_context *ctx, kiln_context *owner, const float *src, const uint16_t *want16,
                       const uint16_t *wantbf, int64_t n, CUstream stream) {
  DLManagedTensorVersioned *ds = dev_alloc(owner, TEST_F32, n), *dh = dev_alloc(owner, TEST_F16, n),
                           *db = dev_alloc(owner, TEST_BF16, n);
  upload(ctx, src, ds, stream);
  assert_kiln_ok(kiln_cast(ctx, &ds->dl_tensor, &dh->dl_tensor, stream));
  assert_kiln_ok(kiln_cast(ctx, &ds->dl_tensor, &db->dl_tensor, stream));
  uint16_t *h = malloc((size_t)n * 2), *b = malloc((size_t)n * 2);
  assert_non_null(h);
  assert_non_null(b);
  download(ctx, dh, h, stream);
  download(ctx, db, b, stream);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) bad += (h[i] != want16[i]) + (b[i] != wantbf[i]);
  free(h);
  free(b);
  kiln_tensor_free(ds);
  kiln_tensor_free(dh);
  kiln_tensor_free(db);
  return bad;
}

static void two_contexts_on_one_device(void **state) {
  (void)state;
  const int64_t n = 100000;
  float *src = malloc(sizeof(float) * (size_t)n);
  uint16_t *w16 = malloc(2 * (size_t)n), *wbf = malloc(2 * (size_t)n);
  assert_non_null(src);
  assert_non_null(w16);
  assert_non_null(wbf);
  test_seed(77);
  for (int64_t i = 0; i < n; i++) {
    src[i] = ldexpf(test_uniform(), (int)(i % 30) - 15);
    w16[i] = kiln_f32_to_f16(src[i]);
    wbf[i] = kiln_f32_to_bf16(src[i]);
  }
  kiln_context *c2 = NULL;
  assert_kiln_ok(kiln_context_create(kDLCUDA, 0, &c2));
  assert_non_null(c2);
  assert_ptr_not_equal(c2, g_ctx);
  kiln_device_info i1, i2;
  assert_kiln_ok(kiln_context_info(g_ctx, &i1));
  assert_kiln_ok(kiln_context_info(c2, &i2));
  assert_string_equal(i1.name, i2.name);
  assert_int_equal(i1.sm_count, i2.sm_count);
  assert_int_equal(i2.has_kernels, 1);
  CUstream s1 = NULL, s2 = NULL;
  assert_kiln_ok(kiln_stream_create(g_ctx, &s1));
  assert_kiln_ok(kiln_stream_create(c2, &s2));
  /* each context with its own tensors, and with the other's (same device, same primary context) */
  assert_int_equal(cast_on(g_ctx, g_ctx, src, w16, wbf, n, s1), 0);
  assert_int_equal(cast_on(c2, c2, src, w16, wbf, n, s2), 0);
  assert_int_equal(cast_on(c2, g_ctx, src, w16, wbf, n, s2), 0);
  assert_int_equal(cast_on(g_ctx, c2, src, w16, wbf, n, s1), 0);
  assert_int_equal(cast_on(c2, c2, src, w16, wbf, n, NULL), 0);
  assert_kiln_ok(kiln_stream_destroy(c2, s2));
  kiln_context_destroy(c2); /* unloads c2's kernels only */
  assert_int_equal(cast_on(g_ctx, g_ctx, src, w16, wbf, n, s1), 0);
  /* create and destroy another one; the first still works */
  assert_kiln_ok(kiln_context_create(kDLCUDA, 0, &c2));
  kiln_context_destroy(c2);
  assert_int_equal(cast_on(g_ctx, g_ctx, src, w16, wbf, n, s1), 0);
  assert_kiln_ok(kiln_stream_destroy(g_ctx, s1));
  free(src);
  free(w16);
  free(wbf);
}

/* One thread's share of the concurrency test: repeated allocations and casts on its own stream
 * (or the NULL stream), compared with the CPU's answer (NaN matching any NaN). Reports through
 * the struct: cmocka's assertions are not for other threads. */
typedef struct worker {
  const float *src;
  const uint16_t *want16, *wantbf;
  int64_t n;
  int iterations, use_null_stream, make_error;
  pthread_barrier_t *start;
  int64_t mismatches;
  kiln_status status;
  char message[512];
  char error_after[256]; /* this thread's kiln_last_error() at the end */
} worker;

static int64_t mismatches16(const uint16_t *got, const uint16_t *want, int64_t n, DLDataType dt) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++)
    bad += got[i] != want[i] && !(bits_are_nan(got[i], dt) && bits_are_nan(want[i], dt));
  return bad;
}

static void *worker_run(void *arg) {
  worker *w = arg;
  kiln_context *ctx = g_ctx;
  CUstream s = NULL;
  kiln_status st = KILN_OK;
  DLManagedTensorVersioned *ds = NULL, *dh = NULL, *db = NULL;
  uint16_t *h = malloc((size_t)w->n * 2), *b = malloc((size_t)w->n * 2);
  int64_t shape[1] = {w->n};
  pthread_barrier_wait(w->start);
#define W_TRY(call)                                                                  \
  do {                                                                               \
    if ((st = (call)) != KILN_OK) {                                                  \
      snprintf(w->message, sizeof w->message, "%s: %s", #call, kiln_last_error());   \
      goto done;                                                                     \
    }                                                                                \
  } while (0)
  if (!h || !b) {
    snprintf(w->message, sizeof w->message, "out of host memory");
    st = KILN_ERROR_OUT_OF_MEMORY;
    goto done;
  }
  if (!w->use_null_stream) W_TRY(kiln_stream_create(ctx, &s));
  for (int it = 0; it < w->iterations; it++) {
    W_TRY(kiln_tensor_empty(ctx, 1, shape, TEST_F32, &ds));
    W_TRY(kiln_tensor_empty(ctx, 1, shape, TEST_F16, &dh));
    W_TRY(kiln_tensor_empty(ctx, 1, shape, TEST_BF16, &db));
    test_tensor hs = test_host_tensor((void *)w->src, TEST_F32, 1, shape);
    test_tensor hh = test_host_tensor(h, TEST_F16, 1, shape), hb = test_host_tensor(b, TEST_BF16, 1, shape);
    memset(h, 0, (size_t)w->n * 2);
    memset(b, 0, (size_t)w->n * 2);
    W_TRY(kiln_tensor_copy(ctx, test_dl(&hs), &ds->dl_tensor, s));
    W_TRY(kiln_stream_synchronize(ctx, s));
    W_TRY(kiln_cast(ctx, &ds->dl_tensor, &dh->dl_tensor, s));
    W_TRY(kiln_cast(ctx, &ds->dl_tensor, &db->dl_tensor, s));
    W_TRY(kiln_stream_synchronize(ctx, s));
    W_TRY(kiln_tensor_copy(ctx, &dh->dl_tensor, test_dl(&hh), s));
    W_TRY(kiln_tensor_copy(ctx, &db->dl_tensor, test_dl(&hb), s));
    W_TRY(kiln_stream_synchronize(ctx, s));
    w->mismatches += mismatches16(h, w->want16, w->n, TEST_F16) + mismatches16(b, w->wantbf, w->n, TEST_BF16);
    kiln_tensor_free(ds), ds = NULL;
    kiln_tensor_free(dh), dh = NULL;
    kiln_tensor_free(db), db = NULL;
    if (w->make_error && it == w->iterations / 2) /* sets this thread's message only */
      if (kiln_context_info(NULL, NULL) == KILN_OK) snprintf(w->message, sizeof w->message, "NULL ctx accepted");
  }
done:
#undef W_TRY
  snprintf(w->error_after, sizeof w->error_after, "%s", kiln_last_error());
  w->status = st;
  kiln_tensor_free(ds);
  kiln_tensor_free(dh);
  kiln_tensor_free(db);
  if (s) kiln_stream_destroy(ctx, s);
  free(h);
  free(b);
  return NULL;
}

static void one_context_from_two_threads(void **state) {
  (void)state;
  const int64_t n = 1 << 18;
  float *src = malloc(sizeof(float) * (size_t)n);
  uint16_t *w16 = malloc(2 * (size_t)n), *wbf = malloc(2 * (size_t)n);
  assert_non_null(src);
  assert_non_null(w16);
  assert_non_null(wbf);
  test_seed(4242);
  fill_cast_source(src, TEST_F32, n);
  int64_t shape[1] = {n};
  test_tensor s32 = test_host_tensor(src, TEST_F32, 1, shape), s16 = test_host_tensor(w16, TEST_F16, 1, shape),
              sbf = test_host_tensor(wbf, TEST_BF16, 1, shape);
  assert_kiln_ok(kiln_cast(g_cpu, test_dl(&s32), test_dl(&s16), NULL));
  assert_kiln_ok(kiln_cast(g_cpu, test_dl(&s32), test_dl(&sbf), NULL));

  /* this thread's last error before the threads start: the other thread's failure must not
   * replace it */
  kiln_context *dummy = NULL;
  assert_int_equal(kiln_context_create(kDLVulkan, 0, &dummy), KILN_ERROR_INVALID_ARGUMENT);
  char mine[256];
  snprintf(mine, sizeof mine, "%s", kiln_last_error());

  pthread_barrier_t start;
  assert_int_equal(pthread_barrier_init(&start, NULL, 2), 0);
  worker a = {.src = src, .want16 = w16, .wantbf = wbf, .n = n, .iterations = 20, .start = &start};
  worker b = a;
  b.use_null_stream = 1, b.make_error = 1;
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, worker_run, &b), 0);
  worker_run(&a); /* this thread does the same work at the same time, on its own stream */
  assert_int_equal(pthread_join(t, NULL), 0);
  pthread_barrier_destroy(&start);
  if (a.status != KILN_OK) fail_msg("main thread: %s", a.message);
  if (b.status != KILN_OK) fail_msg("second thread: %s", b.message);
  if (a.mismatches || b.mismatches)
    fail_msg("results differ from the CPU's: %" PRId64 " elements on the main thread, %" PRId64 " on the second",
             a.mismatches, b.mismatches);
  assert_non_null(strstr(b.error_after, "kiln_context_info"));
  assert_string_equal(a.error_after, mine);
  assert_string_equal(kiln_last_error(), mine);
  free(src);
  free(w16);
  free(wbf);
}

int main(int argc, char **argv) {
  test_apply_filter(argc, argv);
  g_ctx = test_gpu_context_or_skip(); /* exits 77 (skipped) without a usable GPU */
  if (kiln_context_create(kDLCPU, 0, &g_cpu) != KILN_OK) {
    printf("FAIL: the CPU context: %s\n", kiln_last_error());
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(context_info_is_sane),
      cmocka_unit_test(tensor_empty_and_copy_round_trip),
      cmocka_unit_test(copy_of_empty_tensors_is_a_no_op),
      cmocka_unit_test(cast_matches_cpu_bit_for_bit),
      cmocka_unit_test(cast_of_zero_elements_is_a_no_op),
      cmocka_unit_test(wrong_device_tensors_are_rejected),
      cmocka_unit_test(two_contexts_on_one_device),
      cmocka_unit_test(one_context_from_two_threads),
  };
  int failed = cmocka_run_group_tests_name("gpu_runtime", tests, NULL, NULL);
  kiln_context_destroy(g_cpu);
  kiln_context_destroy(g_ctx);
  return failed;
}
