/*
 * test_driver_faults.c — how kiln reports a driver or device it cannot use. Each case runs as its
 * own CTest entry (the driver is loaded once per process) with KILN_LIBCUDA pointing at
 * tests/fake/fake_libcuda.c built as a shared library and FAKE_CUDA_MODE choosing the fault.
 * Usage: test_driver_faults old|missing|nodevice|healthy|oom|noimage|badordinal|launchfail|twodev
 *
 * old, missing, nodevice: the driver itself is unusable (driver_fault below).
 * The other modes: the fake impersonates one working sm_90 device (twodev: two), with one fault
 * injected (fake_device below). What these check past kiln_context_create needs a build with embedded
 * kernels (a CPU-only build fails context creation with KILN_ERROR_NO_KERNEL_IMAGE before any
 * image is loaded); a CPU-only build checks that much, and that the failed creation leaves
 * nothing retained, then exits 77 (CTest: skipped, with the reason).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>

#include "kiln_abi.h" /* KILN_ATTN_BWD_FUSED */
#include "test_util.h"

static const char *fault;

static void driver_fault(void **state) {
  (void)state;
  int n = 7;
  kiln_context *ctx = (kiln_context *)0x1;
  if (!strcmp(fault, "old")) {
    assert_kiln_fails(kiln_device_count(&n), KILN_ERROR_DRIVER_TOO_OLD, "kiln_device_count", "version 11.8",
                      "CUDA 12.0 or newer");
    assert_kiln_fails(kiln_context_create(kDLCUDA, 0, &ctx), KILN_ERROR_DRIVER_TOO_OLD, "kiln_context_create");
  } else if (!strcmp(fault, "missing")) {
    assert_kiln_fails(kiln_device_count(&n), KILN_ERROR_DRIVER_TOO_OLD, "no entry point cuLibraryLoadData",
                      "CUDA 12.0 or newer");
    assert_kiln_fails(kiln_context_create(kDLCUDA, 0, &ctx), KILN_ERROR_DRIVER_TOO_OLD, "kiln_context_create",
                      "cuLibraryLoadData");
  } else {
    /* A driver without devices: zero devices, and a context request names the ordinal. */
    assert_kiln_ok(kiln_device_count(&n));
    assert_int_equal(n, 0);
    assert_kiln_fails(kiln_context_create(kDLCUDA, 0, &ctx), KILN_ERROR_NO_DEVICE, "kiln_context_create", "cuInit",
                      "CUDA_ERROR_NO_DEVICE");
  }
  if (strcmp(fault, "nodevice")) assert_int_equal(n, 0);
  assert_null(ctx);
  /* The CPU is unaffected by a broken driver. */
  assert_kiln_ok(kiln_context_create(kDLCPU, 0, &ctx));
  kiln_context_destroy(ctx);
}

/* ---- one fake device ------------------------------------------------------------------------- */
#define FAKE_NAME "Fake H200" /* the start of the name fake_libcuda.c reports */

/* The fake's bookkeeping (fake_cuda_* in fake_libcuda.c), read from the library kiln loaded. */
static void *fake_lib;
static int fake(const char *counter) {
  char name[64];
  snprintf(name, sizeof name, "fake_cuda_%s", counter);
  int (*fn)(void) = NULL;
  *(void **)&fn = dlsym(fake_lib, name);
  if (!fn) fail_msg("the fake driver exports no %s", name);
  return fn();
}

/* Declares a buffer to the fake (fake_cuda_declare; NULL, 0 forgets them all): while any are
 * declared, every kernel operand must lie in one. */
static void fake_declare(const void *p, size_t bytes) {
  int (*fn)(const void *, size_t) = NULL;
  *(void **)&fn = dlsym(fake_lib, "fake_cuda_declare");
  if (!fn) fail_msg("the fake driver exports no fake_cuda_declare");
  fn(p, bytes);
}

/* Everything kiln took from the driver is given back: no device allocation, loaded library,
 * primary-context retain, stream or event left, and this thread's context stack as it was. */
#define assert_fake_clean()                                    \
  do {                                                         \
    assert_int_equal(fake("live_allocations"), 0);             \
    assert_int_equal(fake("live_libraries"), 0);               \
    assert_int_equal(fake("primary_retains"), 0);              \
    assert_int_equal(fake("live_streams"), 0);                 \
    assert_int_equal(fake("live_events"), 0);                  \
    assert_int_equal(fake("context_depth"), 0);                \
  } while (0)

/* A rows x cols tensor of ctx's device (ordinal `ordinal`). */
static DLManagedTensorVersioned *empty_on(kiln_context *ctx, int ordinal, DLDataType dt, int64_t rows, int64_t cols) {
  int64_t shape[2] = {rows, cols};
  DLManagedTensorVersioned *t = NULL;
  assert_kiln_ok(kiln_tensor_empty(ctx, 2, shape, dt, &t));
  assert_non_null(t);
  assert_int_equal(t->dl_tensor.device.device_type, kDLCUDA);
  assert_int_equal(t->dl_tensor.device.device_id, ordinal);
  assert_int_equal((uintptr_t)t->dl_tensor.data % 256, 0);
  return t;
}
static DLManagedTensorVersioned *empty(kiln_context *ctx, DLDataType dt, int64_t rows, int64_t cols) {
  return empty_on(ctx, 0, dt, rows, cols);
}

/* The context works: allocate, copy there and back (the fake's device memory is host memory, so
 * the bytes really travel), cast and multiply (the fake's launches do nothing but check their
 * arguments), synchronize; then everything is freed. */
static void assert_context_usable(kiln_context *ctx, CUstream stream) {
  const int allocations = fake("live_allocations");
  DLManagedTensorVersioned *a = empty(ctx, TEST_F16, 64, 64), *b = empty(ctx, TEST_F16, 64, 64);
  DLManagedTensorVersioned *c = empty(ctx, TEST_F32, 64, 64);
  assert_int_equal(fake("live_allocations"), allocations + 3);
  static uint16_t host[64 * 64], back[64 * 64];
  int64_t shape[2] = {64, 64};
  test_fill(host, TEST_F16, 64 * 64);
  test_tensor h = test_host_tensor(host, TEST_F16, 2, shape), r = test_host_tensor(back, TEST_F16, 2, shape);
  assert_kiln_ok(kiln_tensor_copy(ctx, test_dl(&h), &a->dl_tensor, stream));
  assert_kiln_ok(kiln_tensor_copy(ctx, &a->dl_tensor, &b->dl_tensor, stream));
  assert_kiln_ok(kiln_tensor_copy(ctx, &b->dl_tensor, test_dl(&r), stream));
  assert_kiln_ok(kiln_stream_synchronize(ctx, stream));
  assert_memory_equal(host, back, sizeof host);
  assert_kiln_ok(kiln_cast(ctx, &a->dl_tensor, &c->dl_tensor, stream));
  assert_kiln_ok(kiln_matmul(ctx, &a->dl_tensor, &b->dl_tensor, &c->dl_tensor, NULL, stream));
  kiln_matmul_opts opts = kiln_matmul_opts_default();
  opts.algo = KILN_MATMUL_CP_ASYNC;
  assert_kiln_ok(kiln_matmul(ctx, &a->dl_tensor, &b->dl_tensor, &c->dl_tensor, &opts, stream));
  assert_kiln_ok(kiln_stream_synchronize(ctx, stream));
  kiln_tensor_free(a);
  kiln_tensor_free(b);
  kiln_tensor_free(c);
  assert_int_equal(fake("live_allocations"), allocations);
  assert_int_equal(fake("context_depth"), 0);
}

/* kiln_matmul_int8's and kiln_qkv_project_int8's host paths on the fake sm_90 (run in CI, no
 * GPU): AUTO and WGMMA encode UINT8 TMA descriptors and launch the WGMMA kernels, MMA_SYNC the
 * IMMA ones; WGMMA refuses an n-major B by name; the int8 QKV PREFILL refuses a missing workspace
 * and one that overlaps a weight, and runs with the size its query gives; with enough tiles and
 * column-major weights it runs in one kernel, without a workspace under AUTO. */
static void int8_paths(kiln_context *ctx) {
  const DLDataType I8 = {kDLInt, 8, 1};
  const int allocations = fake("live_allocations");
  DLManagedTensorVersioned *a = empty(ctx, I8, 64, 128), *w = empty(ctx, I8, 96, 128), *b = empty(ctx, I8, 128, 96);
  DLManagedTensorVersioned *c = empty(ctx, TEST_F32, 64, 96);
  DLTensor wt = w->dl_tensor; /* W [96, 128] seen as W.T [128, 96]: k-major */
  int64_t wt_shape[2] = {128, 96}, wt_strides[2] = {1, 128};
  wt.shape = wt_shape, wt.strides = wt_strides;
  kiln_matmul_int8_opts o = kiln_matmul_int8_opts_default();
  const kiln_int8_algo algos[3] = {KILN_INT8_AUTO, KILN_INT8_MMA_SYNC, KILN_INT8_WGMMA};
  for (int i = 0; i < 3; i++) {
    o.algo = algos[i];
    assert_kiln_ok(kiln_matmul_int8(ctx, &a->dl_tensor, &wt, &c->dl_tensor, &o, NULL));
  }
  /* WGMMA's C leaves by TMA stores (a third map) only when its rows are whole 16-byte chunks: a
   * 94-wide view of c's 96-wide rows keeps the direct stores (a TMA store would write the gap) */
  DLTensor wt94 = wt, c94 = c->dl_tensor;
  int64_t wt94_shape[2] = {128, 94}, c94_shape[2] = {64, 94}, c94_strides[2] = {96, 1};
  wt94.shape = wt94_shape, c94.shape = c94_shape, c94.strides = c94_strides;
  for (int i = 0; i < 2; i++) {
    const int maps = fake("tensor_maps");
    assert_kiln_ok(kiln_matmul_int8(ctx, &a->dl_tensor, i ? &wt94 : &wt, i ? &c94 : &c->dl_tensor, &o, NULL));
    assert_int_equal(fake("tensor_maps") - maps, i ? 2 : 3);
  }
  assert_kiln_fails(kiln_matmul_int8(ctx, &a->dl_tensor, &b->dl_tensor, &c->dl_tensor, &o, NULL),
                    KILN_ERROR_UNSUPPORTED, "kiln_matmul_int8: algo KILN_INT8_WGMMA on " FAKE_NAME, "k-major",
                    "use KILN_INT8_AUTO or _MMA_SYNC");
  o.algo = KILN_INT8_AUTO; /* an n-major B takes the IMMA kernels */
  assert_kiln_ok(kiln_matmul_int8(ctx, &a->dl_tensor, &b->dl_tensor, &c->dl_tensor, &o, NULL));

  /* x [64, 128] f16; wq, wk, wv = b [128, 96] int8 with per-column scales; q, k, v [64, 96] */
  DLManagedTensorVersioned *x = empty(ctx, TEST_F16, 64, 128), *s = empty(ctx, TEST_F32, 1, 96);
  DLManagedTensorVersioned *y[3] = {empty(ctx, TEST_F16, 64, 96), empty(ctx, TEST_F16, 64, 96),
                                    empty(ctx, TEST_F16, 64, 96)};
  DLTensor sv = s->dl_tensor;
  int64_t sv_shape[1] = {96};
  sv.ndim = 1, sv.shape = sv_shape, sv.strides = NULL;
  const DLTensor *B = &b->dl_tensor;
  size_t bytes = 0;
  assert_kiln_ok(kiln_qkv_project_int8_workspace_size(ctx, &x->dl_tensor, B, B, B, &sv, &sv, &sv, &y[0]->dl_tensor,
                                                      &y[1]->dl_tensor, &y[2]->dl_tensor, &bytes));
  assert_int_equal(bytes, 128 * 96 * 2); /* separate outputs: the largest weight as f16 */
  kiln_qkv_opts q = kiln_qkv_opts_default();
  q.algo = KILN_QKV_PREFILL;
  assert_kiln_fails(kiln_qkv_project_int8(ctx, &x->dl_tensor, B, B, B, &sv, &sv, &sv, &y[0]->dl_tensor,
                                          &y[1]->dl_tensor, &y[2]->dl_tensor, &q, NULL),
                    KILN_ERROR_WORKSPACE, "kiln_qkv_project_int8: algo KILN_QKV_PREFILL needs 24576 bytes",
                    "(workspace NULL)", "kiln_qkv_project_int8_workspace_size");
  /* a workspace over the weights' own buffer (an arena of twice the workspace: the span must not
   * reach into whatever the allocator placed after the weight, e.g. x under valgrind) */
  DLManagedTensorVersioned *arena = empty(ctx, I8, 2, (int64_t)bytes);
  DLTensor in_arena = *B;
  in_arena.data = arena->dl_tensor.data;
  q.workspace = arena->dl_tensor.data, q.workspace_bytes = bytes;
  assert_kiln_fails(kiln_qkv_project_int8(ctx, &x->dl_tensor, &in_arena, &in_arena, &in_arena, &sv, &sv, &sv,
                                          &y[0]->dl_tensor, &y[1]->dl_tensor, &y[2]->dl_tensor, &q, NULL),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_qkv_project_int8: opts->workspace overlaps wq");
  kiln_tensor_free(arena);
  DLManagedTensorVersioned *ws = empty(ctx, TEST_F16, 128, 96);
  q.workspace = ws->dl_tensor.data;
  assert_kiln_ok(kiln_qkv_project_int8(ctx, &x->dl_tensor, B, B, B, &sv, &sv, &sv, &y[0]->dl_tensor,
                                       &y[1]->dl_tensor, &y[2]->dl_tensor, &q, NULL));
  /* DECODE at M = 4, K = 256 with column-major weights (W [96, 256] seen as [256, 96]): the sm_90a
   * TMA kernel's rank-4, 128-byte swizzled weight descriptors and its launch */
  DLManagedTensorVersioned *x4 = empty(ctx, TEST_F16, 4, 256), *w2 = empty(ctx, I8, 96, 256);
  DLManagedTensorVersioned *y4[3] = {empty(ctx, TEST_F16, 4, 96), empty(ctx, TEST_F16, 4, 96),
                                     empty(ctx, TEST_F16, 4, 96)};
  DLTensor w2t = w2->dl_tensor;
  int64_t w2t_shape[2] = {256, 96}, w2t_strides[2] = {1, 256};
  w2t.shape = w2t_shape, w2t.strides = w2t_strides;
  q = kiln_qkv_opts_default();
  assert_kiln_ok(kiln_qkv_project_int8(ctx, &x4->dl_tensor, &w2t, &w2t, &w2t, &sv, &sv, &sv, &y4[0]->dl_tensor,
                                       &y4[1]->dl_tensor, &y4[2]->dl_tensor, &q, NULL));
  /* PREFILL in one kernel (kernels/w4_prefill_sm90.cu, int8): x [256, 64], three column-major
   * 12288-wide weights (96 tiles each, one launch: x's map and one per weight), with the
   * workspace explicit or AUTO without one; a row-major weight keeps the workspace path */
  DLManagedTensorVersioned *x256 = empty(ctx, TEST_F16, 256, 64), *w3 = empty(ctx, I8, 12288, 64),
                           *s3 = empty(ctx, TEST_F32, 1, 12288), *y3[3], *ws3 = empty(ctx, TEST_F16, 64, 12288);
  for (int i = 0; i < 3; i++) y3[i] = empty(ctx, TEST_F16, 256, 12288);
  DLTensor w3t = w3->dl_tensor, s3v = s3->dl_tensor;
  int64_t w3t_shape[2] = {64, 12288}, w3t_strides[2] = {1, 64}, s3_shape[1] = {12288};
  w3t.shape = w3t_shape, w3t.strides = w3t_strides;
  s3v.ndim = 1, s3v.shape = s3_shape, s3v.strides = NULL;
  q = kiln_qkv_opts_default();
  q.algo = KILN_QKV_PREFILL, q.workspace = ws3->dl_tensor.data, q.workspace_bytes = 64 * 12288 * 2;
  for (int i = 0; i < 2; i++) {
    const int maps = fake("tensor_maps"), launches = fake("launches_0");
    assert_kiln_ok(kiln_qkv_project_int8(ctx, &x256->dl_tensor, &w3t, &w3t, &w3t, &s3v, &s3v, &s3v, &y3[0]->dl_tensor,
                                         &y3[1]->dl_tensor, &y3[2]->dl_tensor, i ? NULL : &q, NULL));
    assert_int_equal(fake("tensor_maps") - maps, 4);
    assert_int_equal(fake("launches_0") - launches, 1);
  }
  DLTensor w3r = w3t; /* the same bytes seen as a row-major [64, 12288] */
  int64_t w3r_strides[2] = {12288, 1};
  w3r.strides = w3r_strides;
  int maps = fake("tensor_maps");
  assert_kiln_ok(kiln_qkv_project_int8(ctx, &x256->dl_tensor, &w3r, &w3r, &w3r, &s3v, &s3v, &s3v, &y3[0]->dl_tensor,
                                       &y3[1]->dl_tensor, &y3[2]->dl_tensor, &q, NULL));
  assert_int_equal(fake("tensor_maps") - maps, 9); /* three dequantizations and GEMMs: A, B and C each */
  DLManagedTensorVersioned *all[] = {a, w, b, c, x, s, y[0], y[1], y[2], ws, x4, w2, y4[0], y4[1], y4[2],
                                     x256, w3, s3, ws3, y3[0], y3[1], y3[2]};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kiln_tensor_free(all[i]);
  assert_int_equal(fake("live_allocations"), allocations);
  assert_int_equal(fake("context_depth"), 0);
}

/* kiln_matmul_int4's and kiln_qkv_project_int4's PREFILL on the fake sm_90 (run in CI, no GPU),
 * told apart by the TMA descriptors a call encodes: at M = 128 with N = 12288 (96 tiles for the
 * fake's 132 SMs) the one-kernel path (four: x, codes, scales, zeros; wa16_gpu.c), with the
 * workspace or, under AUTO, without one; at N = 96 too few tiles for it, so the dequantized copy
 * and kiln_matmul's WGMMA (two), and AUTO without a workspace DECODE (none at M > 8); the fused
 * QKV call with three such projections in one launch (ten: x once, then three per projection),
 * explicit or AUTO without a workspace at M = 256; and with narrow K and V projections
 * (12288 + 96 + 96 at M = 128): too few tiles for either alone, enough together; and with
 * 8192 + 96 + 96 at M = 256, where only 128-row tiles are enough. */
static void int4_prefill_paths(kiln_context *ctx) {
  const DLDataType U8 = {kDLUInt, 8, 1}, U32 = {kDLUInt, 32, 1};
  const int allocations = fake("live_allocations");
  const int64_t K = 64, G = 64, Ns[2] = {12288, 96};
  DLManagedTensorVersioned *x = empty(ctx, TEST_F16, 256, K), *ws = empty(ctx, TEST_F16, K, Ns[0]);
  for (int i = 0; i < 2; i++) {
    const int64_t N = Ns[i];
    DLManagedTensorVersioned *codes = empty(ctx, U32, K / 8, N), *scales = empty(ctx, TEST_F16, K / G, N),
                             *zeros = empty(ctx, U8, K / G, N), *y = empty(ctx, TEST_F16, 256, N);
    /* x and y as their first 128 rows */
    int64_t shape128[2] = {128, K}, yshape128[2] = {128, N};
    DLTensor x128 = x->dl_tensor, y128 = y->dl_tensor;
    x128.shape = shape128, y128.shape = yshape128;
    kiln_qweight w = {.k = K, .n = N, .group = G, .codes = codes->dl_tensor.data, .scales = scales->dl_tensor.data,
                      .zeros = zeros->dl_tensor.data, .perm = NULL, .device = codes->dl_tensor.device};
    kiln_matmul_int4_opts o = kiln_matmul_int4_opts_default();
    o.algo = KILN_INT4_PREFILL, o.workspace = ws->dl_tensor.data, o.workspace_bytes = (size_t)(K * Ns[0] * 2);
    int maps = fake("tensor_maps");
    assert_kiln_ok(kiln_matmul_int4(ctx, &x128, &w, &y128, &o, NULL));
    assert_int_equal(fake("tensor_maps") - maps, i == 0 ? 4 : 3); /* the copy's GEMM: A, B and C */
    maps = fake("tensor_maps");
    assert_kiln_ok(kiln_matmul_int4(ctx, &x128, &w, &y128, NULL, NULL)); /* AUTO, no workspace */
    assert_int_equal(fake("tensor_maps") - maps, i == 0 ? 4 : 0);
    if (i == 0) {
      DLManagedTensorVersioned *y2 = empty(ctx, TEST_F16, 256, N), *y3 = empty(ctx, TEST_F16, 256, N);
      kiln_qkv_opts q = kiln_qkv_opts_default();
      q.algo = KILN_QKV_PREFILL, q.workspace = ws->dl_tensor.data, q.workspace_bytes = (size_t)(K * Ns[0] * 2);
      maps = fake("tensor_maps");
      DLTensor y2_128 = y2->dl_tensor, y3_128 = y3->dl_tensor;
      y2_128.shape = y3_128.shape = yshape128;
      int launches = fake("launches_0");
      assert_kiln_ok(kiln_qkv_project_int4(ctx, &x128, &w, &w, &w, &y128, &y2_128, &y3_128, &q, NULL));
      assert_int_equal(fake("tensor_maps") - maps, 10);
      assert_int_equal(fake("launches_0") - launches, 1);
      /* AUTO without a workspace: the one-kernel path from M = 256 (288 tiles of 256 rows) */
      maps = fake("tensor_maps");
      assert_kiln_ok(kiln_qkv_project_int4(ctx, &x->dl_tensor, &w, &w, &w, &y->dl_tensor, &y2->dl_tensor,
                                           &y3->dl_tensor, NULL, NULL));
      assert_int_equal(fake("tensor_maps") - maps, 10);
      /* K and V 96 wide (the i == 1 weights' shape), Q 12288: 96 + 1 + 1 tiles of 128 rows in one
       * launch, where each narrow projection alone would go through the copy + GEMM */
      const int64_t Nn = Ns[1];
      DLManagedTensorVersioned *nc = empty(ctx, U32, K / 8, Nn), *ns = empty(ctx, TEST_F16, K / G, Nn),
                               *nz = empty(ctx, U8, K / G, Nn), *yk = empty(ctx, TEST_F16, 128, Nn),
                               *yv = empty(ctx, TEST_F16, 128, Nn);
      kiln_qweight wn = {.k = K, .n = Nn, .group = G, .codes = nc->dl_tensor.data, .scales = ns->dl_tensor.data,
                         .zeros = nz->dl_tensor.data, .perm = NULL, .device = nc->dl_tensor.device};
      maps = fake("tensor_maps"), launches = fake("launches_0");
      assert_kiln_ok(kiln_qkv_project_int4(ctx, &x128, &w, &wn, &wn, &y128, &yk->dl_tensor, &yv->dl_tensor, &q, NULL));
      assert_int_equal(fake("tensor_maps") - maps, 10);
      assert_int_equal(fake("launches_0") - launches, 1);
      /* Q 8192 wide at M = 256: 64 + 1 + 1 tiles of 256 rows, too few, so 132 of 128 rows (one
       * launch), not the copy + GEMM */
      DLManagedTensorVersioned *qc = empty(ctx, U32, K / 8, 8192), *qs = empty(ctx, TEST_F16, K / G, 8192),
                               *qz = empty(ctx, U8, K / G, 8192), *yq = empty(ctx, TEST_F16, 256, 8192),
                               *yk2 = empty(ctx, TEST_F16, 256, Nn), *yv2 = empty(ctx, TEST_F16, 256, Nn);
      kiln_qweight wq = {.k = K, .n = 8192, .group = G, .codes = qc->dl_tensor.data, .scales = qs->dl_tensor.data,
                         .zeros = qz->dl_tensor.data, .perm = NULL, .device = qc->dl_tensor.device};
      maps = fake("tensor_maps"), launches = fake("launches_0");
      assert_kiln_ok(kiln_qkv_project_int4(ctx, &x->dl_tensor, &wq, &wn, &wn, &yq->dl_tensor, &yk2->dl_tensor,
                                           &yv2->dl_tensor, NULL, NULL));
      assert_int_equal(fake("tensor_maps") - maps, 10);
      assert_int_equal(fake("launches_0") - launches, 1);
      DLManagedTensorVersioned *more[] = {qc, qs, qz, yq, yk2, yv2};
      for (size_t j = 0; j < sizeof more / sizeof more[0]; j++) kiln_tensor_free(more[j]);
      kiln_tensor_free(nc), kiln_tensor_free(ns), kiln_tensor_free(nz), kiln_tensor_free(yk), kiln_tensor_free(yv);
      kiln_tensor_free(y2), kiln_tensor_free(y3);
    }
    kiln_tensor_free(codes), kiln_tensor_free(scales), kiln_tensor_free(zeros), kiln_tensor_free(y);
  }
  kiln_tensor_free(x), kiln_tensor_free(ws);
  assert_int_equal(fake("live_allocations"), allocations);
  assert_int_equal(fake("context_depth"), 0);
}

/* kiln_matmul_int4's and the fused QKV calls' DECODE on the fake sm_90 (run in CI, no GPU), told
 * apart by the TMA descriptors a call encodes (src/ops/wa16_gpu.c): the sm_90a kernel takes
 * M <= 8 (x's map, then codes, scales and zeros per projection), with a ring that wraps when the
 * stages outnumber its slots (K = 65536 in one tile) and per-column scales (G = K: one group row
 * per stage); M = 9, an act-order weight, or a misaligned x fall back to the sm_80 kernel (no
 * map). int8 at M = 8 and K = 8192 runs 48 KB slots in a 3-slot ring (12 consumers), and at M = 1
 * may take 16-column tiles; the launch checks each smem size against the fake's opt-in limit. */
static void decode_paths(kiln_context *ctx) {
  const DLDataType I8 = {kDLInt, 8, 1}, U8 = {kDLUInt, 8, 1}, U32 = {kDLUInt, 32, 1}, I32 = {kDLInt, 32, 1};
  const int allocations = fake("live_allocations");
  struct {
    int64_t m, k, n, group;
    DLDataType dt;
    bool perm, offset_x; /* an act-order weight; x one element past an aligned address */
    int maps;            /* TMA descriptors the call encodes: 4 for the sm_90a kernel, 0 for sm_80's */
  } cases[] = {
      {1, 1024, 64, 128, TEST_F16, false, false, 4},   {8, 2048, 96, 32, TEST_BF16, false, false, 4},
      {3, 2048, 32, 2048, TEST_F16, false, false, 4},  {1, 65536, 32, 128, TEST_F16, false, false, 4},
      {9, 1024, 64, 128, TEST_F16, false, false, 0},   {1, 1024, 64, 128, TEST_F16, true, false, 0},
      {1, 1024, 64, 128, TEST_BF16, false, true, 0},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const int64_t M = cases[c].m, K = cases[c].k, N = cases[c].n, G = cases[c].group;
    DLManagedTensorVersioned *x = empty(ctx, cases[c].dt, M, K + 8), *y = empty(ctx, cases[c].dt, M, N);
    DLManagedTensorVersioned *codes = empty(ctx, U32, K / 8, N), *scales = empty(ctx, TEST_F16, K / G, N),
                             *zeros = empty(ctx, U8, K / G, N), *perm = empty(ctx, I32, 1, K);
    int64_t x_shape[2] = {M, K}, x_strides[2] = {K + 8, 1};
    DLTensor xv = x->dl_tensor;
    xv.shape = x_shape, xv.strides = x_strides, xv.byte_offset = cases[c].offset_x ? 2 : 0;
    kiln_qweight w = {.k = K, .n = N, .group = G, .codes = codes->dl_tensor.data, .scales = scales->dl_tensor.data,
                      .zeros = zeros->dl_tensor.data, .perm = cases[c].perm ? perm->dl_tensor.data : NULL,
                      .device = codes->dl_tensor.device};
    kiln_matmul_int4_opts o = kiln_matmul_int4_opts_default();
    o.algo = KILN_INT4_DECODE;
    const int maps = fake("tensor_maps"), launches = fake("launches_0");
    assert_kiln_ok(kiln_matmul_int4(ctx, &xv, &w, &y->dl_tensor, &o, NULL));
    assert_int_equal(fake("tensor_maps") - maps, cases[c].maps);
    assert_int_equal(fake("launches_0") - launches, 1);
    kiln_tensor_free(x), kiln_tensor_free(y), kiln_tensor_free(codes), kiln_tensor_free(scales);
    kiln_tensor_free(zeros), kiln_tensor_free(perm);
  }
  /* the fused int4 QKV with grouped-query widths (64 + 32 + 32) at M = 1: x's map and three per
   * projection, one launch */
  const int64_t K = 1024, G = 128, widths[3] = {64, 32, 32};
  DLManagedTensorVersioned *x = empty(ctx, TEST_F16, 1, K), *part[3][4];
  kiln_qweight w[3];
  for (int i = 0; i < 3; i++) {
    const int64_t N = widths[i];
    part[i][0] = empty(ctx, U32, K / 8, N), part[i][1] = empty(ctx, TEST_F16, K / G, N);
    part[i][2] = empty(ctx, U8, K / G, N), part[i][3] = empty(ctx, TEST_F16, 1, N);
    w[i] = (kiln_qweight){.k = K, .n = N, .group = G, .codes = part[i][0]->dl_tensor.data,
                          .scales = part[i][1]->dl_tensor.data, .zeros = part[i][2]->dl_tensor.data,
                          .device = part[i][0]->dl_tensor.device};
  }
  kiln_qkv_opts q = kiln_qkv_opts_default();
  q.algo = KILN_QKV_DECODE;
  int maps = fake("tensor_maps"), launches = fake("launches_0");
  assert_kiln_ok(kiln_qkv_project_int4(ctx, &x->dl_tensor, &w[0], &w[1], &w[2], &part[0][3]->dl_tensor,
                                       &part[1][3]->dl_tensor, &part[2][3]->dl_tensor, &q, NULL));
  assert_int_equal(fake("tensor_maps") - maps, 10);
  assert_int_equal(fake("launches_0") - launches, 1);
  /* int8, column-major weights W [96, 8192] seen as [8192, 96] with per-column scales, at M = 8
   * (48 KB slots) and M = 1; one map for x and one per weight */
  const int64_t K8 = 8192;
  DLManagedTensorVersioned *x8 = empty(ctx, TEST_F16, 8, K8), *w8 = empty(ctx, I8, 96, K8),
                           *s8 = empty(ctx, TEST_F32, 1, 96), *y8 = empty(ctx, TEST_F16, 3 * 8, 96);
  DLTensor wt = w8->dl_tensor, sv = s8->dl_tensor, yv[3], x1 = x8->dl_tensor;
  int64_t wt_shape[2] = {K8, 96}, wt_strides[2] = {1, K8}, s_shape[1] = {96}, y_shape[2] = {8, 96},
          x1_shape[2] = {1, K8}, y1_shape[2] = {1, 96};
  wt.shape = wt_shape, wt.strides = wt_strides;
  sv.ndim = 1, sv.shape = s_shape, sv.strides = NULL;
  x1.shape = x1_shape;
  for (int rows = 8; rows >= 1; rows -= 7) {
    for (int i = 0; i < 3; i++) {
      yv[i] = y8->dl_tensor;
      yv[i].shape = rows == 8 ? y_shape : y1_shape;
      yv[i].byte_offset = (uint64_t)i * 8 * 96 * 2;
    }
    maps = fake("tensor_maps"), launches = fake("launches_0");
    assert_kiln_ok(kiln_qkv_project_int8(ctx, rows == 8 ? &x8->dl_tensor : &x1, &wt, &wt, &wt, &sv, &sv, &sv, &yv[0],
                                         &yv[1], &yv[2], &q, NULL));
    assert_int_equal(fake("tensor_maps") - maps, 4);
    assert_int_equal(fake("launches_0") - launches, 1);
  }
  kiln_tensor_free(x), kiln_tensor_free(x8), kiln_tensor_free(w8), kiln_tensor_free(s8), kiln_tensor_free(y8);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++) kiln_tensor_free(part[i][j]);
  assert_int_equal(fake("live_allocations"), allocations);
  assert_int_equal(fake("context_depth"), 0);
}

/* kiln_attention's forward on the fake sm_90 (run in CI, no GPU): AUTO, FLASH, FLASH_WGMMA and
 * SMEM encode rank-4 TMA maps of q, k, v (B = 1: its normalized stride 0 must become a valid
 * one) and launch a WGMMA kernel (SMEM and AUTO at this length the short-sequence one);
 * FLASH_MMA_SYNC launches the mma.sync one; FLASH_WGMMA and SMEM refuse K/V heads repeated with
 * stride 0, which FLASH sends to mma.sync; at D = 256 FLASH_WGMMA's forward runs (64-key blocks)
 * and its backward and SMEM refuse, FLASH's backward taking the mma.sync kernels. */
static void attention_paths(kiln_context *ctx) {
  const int allocations = fake("live_allocations");
  DLManagedTensorVersioned *buf[7]; /* q, k, v, o, then dq, dk, dv */
  for (int i = 0; i < 7; i++) buf[i] = empty(ctx, TEST_F16, 2 * 100, 256); /* room for every view below */
  int64_t shape[4] = {1, 2, 100, 64}, kv_shape[4] = {1, 2, 100, 64}, kv_strides[4] = {0, 6400, 64, 1};
  DLTensor t[7];
  for (int i = 0; i < 7; i++) t[i] = (DLTensor){buf[i]->dl_tensor.data, {kDLCUDA, 0}, 4, TEST_F16, shape, NULL, 0};
  kiln_attention_opts o = kiln_attention_opts_default();
  const kiln_attention_algo algos[5] = {KILN_ATTENTION_AUTO, KILN_ATTENTION_FLASH, KILN_ATTENTION_FLASH_MMA_SYNC,
                                        KILN_ATTENTION_FLASH_WGMMA, KILN_ATTENTION_SMEM};
  for (int i = 0; i < 5; i++) {
    o.algo = algos[i];
    assert_kiln_ok(kiln_attention(ctx, &t[0], &t[1], &t[2], &t[3], NULL, &o, NULL));
  }
  /* the backward: delta, then the WGMMA dK/dV and dQ kernels (their four maps), or in a build
   * with the fused kernel (kiln_abi.h KILN_ATTN_BWD_FUSED) at D = 64 with opts.deterministic 0
   * that kernel (every algo but MMA_SYNC), whose f32 dQ accumulator (2 heads x one block of
   * 128 x 64) the size query counts on top of 1024 bytes of delta (2 x 100 rows of f32, rounded
   * up); a dO repeated over the sequence (stride 0, as autograd hands for a sum) is copied into
   * the workspace: 2 x 100 x 64 f16 more */
  const size_t acc = KILN_ATTN_BWD_FUSED ? 2 * 128 * 64 * 4 : 0;
  DLManagedTensorVersioned *lse_buf = empty(ctx, TEST_F32, 2, 100), *ws = empty(ctx, TEST_F32, 2 * 100, 128);
  int64_t lse_shape[3] = {1, 2, 100}, do_strides[4] = {0, 64, 0, 1};
  DLTensor lse = {lse_buf->dl_tensor.data, {kDLCUDA, 0}, 3, TEST_F32, lse_shape, NULL, 0}, dout = t[3];
  dout.data = buf[0]->dl_tensor.data;
  size_t bytes = 0;
  for (int i = 0; i < 5; i++) {
    o.algo = algos[i];
    assert_kiln_ok(kiln_attention_backward_workspace_size(ctx, &t[0], &t[1], &t[2], &t[3], &lse, &dout, &t[4], &t[5],
                                                          &t[6], &o, &bytes));
    assert_int_equal(bytes, 1024 + (algos[i] == KILN_ATTENTION_FLASH_MMA_SYNC ? 0 : acc));
    assert_kiln_ok(kiln_attention_backward(ctx, &t[0], &t[1], &t[2], &t[3], &lse, &dout, &t[4], &t[5], &t[6],
                                           ws->dl_tensor.data, bytes, &o, NULL));
  }
  dout.strides = do_strides;
  assert_kiln_ok(kiln_attention_backward_workspace_size(ctx, &t[0], &t[1], &t[2], &t[3], &lse, &dout, &t[4], &t[5],
                                                        &t[6], &o, &bytes));
  assert_int_equal(bytes, 1024 + 2 * 100 * 64 * 2 + acc); /* o.algo SMEM: fused where built */
  assert_kiln_ok(kiln_attention_backward(ctx, &t[0], &t[1], &t[2], &t[3], &lse, &dout, &t[4], &t[5], &t[6],
                                         ws->dl_tensor.data, bytes, &o, NULL));
  kiln_tensor_free(lse_buf), kiln_tensor_free(ws);
  t[1].shape = t[2].shape = kv_shape, t[1].strides = t[2].strides = kv_strides;
  kv_strides[1] = 0; /* one K/V head seen as two */
  o.algo = KILN_ATTENTION_FLASH_WGMMA;
  assert_kiln_fails(kiln_attention(ctx, &t[0], &t[1], &t[2], &t[3], NULL, &o, NULL), KILN_ERROR_UNSUPPORTED,
                    "kiln_attention: algo FLASH_WGMMA cannot run this problem", "non-zero stride");
  o.algo = KILN_ATTENTION_SMEM;
  assert_kiln_fails(kiln_attention(ctx, &t[0], &t[1], &t[2], &t[3], NULL, &o, NULL), KILN_ERROR_UNSUPPORTED,
                    "kiln_attention: algo SMEM cannot run this problem", "non-zero stride",
                    "use KILN_ATTENTION_AUTO or _FLASH");
  o.algo = KILN_ATTENTION_FLASH;
  assert_kiln_ok(kiln_attention(ctx, &t[0], &t[1], &t[2], &t[3], NULL, &o, NULL));
  shape[3] = kv_shape[3] = 256, kv_strides[1] = 25600, kv_strides[2] = 256;
  assert_kiln_ok(kiln_attention(ctx, &t[0], &t[1], &t[2], &t[3], NULL, &o, NULL));
  o.algo = KILN_ATTENTION_FLASH_WGMMA; /* D = 256: the forward's 64-key configuration (3 maps), and the backward */
  int maps = fake("tensor_maps");
  assert_kiln_ok(kiln_attention(ctx, &t[0], &t[1], &t[2], &t[3], NULL, &o, NULL));
  assert_int_equal(fake("tensor_maps") - maps, 3);
  {
    DLManagedTensorVersioned *l256 = empty(ctx, TEST_F32, 2, 100), *w256 = empty(ctx, TEST_F32, 2 * 100, 128);
    DLTensor lse256 = {l256->dl_tensor.data, {kDLCUDA, 0}, 3, TEST_F32, lse_shape, NULL, 0};
    size_t wbytes = 0;
    assert_kiln_ok(kiln_attention_backward_workspace_size(ctx, &t[0], &t[1], &t[2], &t[3], &lse256, &t[3], &t[4],
                                                          NULL, NULL, &o, &wbytes));
    for (int i = 0; i < 2; i++) { /* FLASH_WGMMA, then FLASH, which takes the same kernels */
      maps = fake("tensor_maps");
      assert_kiln_ok(kiln_attention_backward(ctx, &t[0], &t[1], &t[2], &t[3], &lse256, &t[3], &t[4], NULL, NULL,
                                             w256->dl_tensor.data, wbytes, &o, NULL));
      assert_int_equal(fake("tensor_maps") - maps, 4); /* dQ alone: its q, k, v and dO maps */
      o.algo = KILN_ATTENTION_FLASH;
    }
    kiln_tensor_free(l256), kiln_tensor_free(w256);
  }
  o.algo = KILN_ATTENTION_SMEM;
  assert_kiln_fails(kiln_attention(ctx, &t[0], &t[1], &t[2], &t[3], NULL, &o, NULL), KILN_ERROR_UNSUPPORTED,
                    "kiln_attention: algo SMEM cannot run this problem: it takes head dims up to 128");
  /* past the grid's 65535 in y (query heads) or z (batch): one query row per head, q, k and v one
   * row repeated by zero strides, O 1 MiB; refused before any launch, naming what to split */
  DLManagedTensorVersioned *wide = empty(ctx, TEST_F16, 65536, 8);
  int64_t many[4] = {1, 65536, 1, 8}, kv1[4] = {1, 1, 1, 8}, rep[4] = {0, 0, 8, 1};
  DLTensor q = {buf[0]->dl_tensor.data, {kDLCUDA, 0}, 4, TEST_F16, many, rep, 0}, kv = q, out = q;
  kv.shape = kv1, out.data = wide->dl_tensor.data, out.strides = NULL;
  o.algo = KILN_ATTENTION_AUTO;
  const int launches = fake("launches_0");
  assert_kiln_fails(kiln_attention(ctx, &q, &kv, &kv, &out, NULL, &o, NULL), KILN_ERROR_UNSUPPORTED,
                    "kiln_attention: 65536 query heads and batch 1; the GPU grid takes at most 65535 of each; split "
                    "the heads into calls of at most 65535");
  many[0] = 65536, many[1] = 1, kv1[0] = 65536;
  assert_kiln_fails(kiln_attention(ctx, &q, &kv, &kv, &out, NULL, &o, NULL), KILN_ERROR_UNSUPPORTED,
                    "kiln_attention: 1 query heads and batch 65536", "split the batch");
  assert_int_equal(fake("launches_0"), launches);
  kiln_tensor_free(wide);
  for (int i = 0; i < 7; i++) kiln_tensor_free(buf[i]);
  assert_int_equal(fake("live_allocations"), allocations);
  assert_int_equal(fake("context_depth"), 0);
}

/* kiln_matmul's and kiln_matmul_int8's layouts on the fake sm_90 (run in CI, no GPU): a
 * column-major C is computed as Cᵀ = Bᵀ·Aᵀ (one launch, every algo); rows of 60 f16 (120 bytes)
 * are refused by WGMMA (TMA) and CP_ASYNC (cp.async of 16-byte chunks), naming the leading
 * dimensions, before any launch, and run on MMA_SYNC's scalar loader under AUTO. */
static void matmul_layouts(kiln_context *ctx) {
  const DLDataType I8 = {kDLInt, 8, 1};
  const int allocations = fake("live_allocations");
  DLManagedTensorVersioned *a = empty(ctx, TEST_F16, 64, 64), *b = empty(ctx, TEST_F16, 64, 64),
                           *c = empty(ctx, TEST_F32, 64, 64), *a8 = empty(ctx, I8, 64, 64), *b8 = empty(ctx, I8, 64, 64);
  int64_t shape[2] = {64, 64}, col_major[2] = {1, 64}, narrow[2] = {64, 60};
  DLTensor ct = c->dl_tensor, b8t = b8->dl_tensor;
  ct.shape = shape, ct.strides = col_major;
  b8t.strides = col_major; /* k-major B, as WGMMA wants */
  kiln_matmul_opts o = kiln_matmul_opts_default();
  const kiln_matmul_algo algos[4] = {KILN_MATMUL_AUTO, KILN_MATMUL_MMA_SYNC, KILN_MATMUL_CP_ASYNC, KILN_MATMUL_WGMMA};
  for (int i = 0; i < 4; i++) {
    o.algo = algos[i];
    const int launches = fake("launches_0");
    assert_kiln_ok(kiln_matmul(ctx, &a->dl_tensor, &b->dl_tensor, &ct, &o, NULL));
    assert_int_equal(fake("launches_0") - launches, 1);
  }
  kiln_matmul_int8_opts o8 = kiln_matmul_int8_opts_default();
  const kiln_int8_algo algos8[3] = {KILN_INT8_AUTO, KILN_INT8_MMA_SYNC, KILN_INT8_WGMMA};
  for (int i = 0; i < 3; i++) { /* Cᵀ = Bᵀ·Aᵀ: Bᵀ row-major and Aᵀ k-major, as WGMMA wants */
    o8.algo = algos8[i];
    const int launches = fake("launches_0");
    assert_kiln_ok(kiln_matmul_int8(ctx, &a8->dl_tensor, &b8t, &ct, &o8, NULL));
    assert_int_equal(fake("launches_0") - launches, 1);
  }
  /* A [64, 60]: rows 60 elements (120 bytes) apart */
  DLTensor an = a->dl_tensor, bn = b->dl_tensor;
  int64_t an_strides[2] = {60, 1}, bn_strides[2] = {64, 1}, bn_shape[2] = {60, 64};
  an.shape = narrow, an.strides = an_strides;
  bn.shape = bn_shape, bn.strides = bn_strides;
  const int launches = fake("launches_0");
  o.algo = KILN_MATMUL_WGMMA;
  assert_kiln_fails(kiln_matmul(ctx, &an, &bn, &c->dl_tensor, &o, NULL), KILN_ERROR_UNSUPPORTED,
                    "kiln_matmul: algo WGMMA loads tiles with TMA", "but A has ld 60 and B has ld 64",
                    "use KILN_MATMUL_AUTO or _MMA_SYNC, or pad the leading dimension to a multiple of 8");
  o.algo = KILN_MATMUL_CP_ASYNC;
  assert_kiln_fails(kiln_matmul(ctx, &an, &bn, &c->dl_tensor, &o, NULL), KILN_ERROR_UNSUPPORTED,
                    "kiln_matmul: algo CP_ASYNC needs 16-byte aligned operand rows", "but A has ld 60 and B has ld 64");
  assert_int_equal(fake("launches_0"), launches);
  o.algo = KILN_MATMUL_AUTO;
  assert_kiln_ok(kiln_matmul(ctx, &an, &bn, &c->dl_tensor, &o, NULL));
  assert_int_equal(fake("launches_0") - launches, 1);
  kiln_tensor_free(a), kiln_tensor_free(b), kiln_tensor_free(c), kiln_tensor_free(a8), kiln_tensor_free(b8);
  assert_int_equal(fake("live_allocations"), allocations);
  assert_int_equal(fake("context_depth"), 0);
}

/* kiln_matmul's stream-K workspace on the fake H200 (132 SMs): 53 x 20 = 1060 tiles of 128 x 256
 * with 32 K slices each are eight waves and 4 tiles, whose split saves the longest block 31
 * slices, which the rule takes (as with half the rows: four waves and 12 tiles, 29 saved; not
 * at width 128: no kernels; nor with K = 512: 8 slices a tile, 7 saved); the query's size is
 * the flags (2 a block, padded to 256 bytes) and a 128 x 256 f32 partial a block. The
 * workspace is refused, naming it and before any launch, when misaligned or overlapping an
 * operand, and when too small for stream_k 1; stream_k 0 with too little runs unsplit. (A fuzz
 * build's fake also holds the kernel's flags and partials to the declared workspace.) */
static void matmul_stream_k(kiln_context *ctx) {
  const DLDataType U8 = {kDLUInt, 8, 1};
  const int allocations = fake("live_allocations");
  DLManagedTensorVersioned *a = empty(ctx, TEST_F16, 6784, 2048), *b = empty(ctx, TEST_F16, 2048, 5120),
                           *c = empty(ctx, TEST_F16, 6784, 5120);
  kiln_matmul_opts o = kiln_matmul_opts_default();
  o.algo = KILN_MATMUL_WGMMA;
  size_t need = 1;
  assert_kiln_ok(kiln_matmul_workspace_size(ctx, &a->dl_tensor, &b->dl_tensor, &c->dl_tensor, &o, &need));
  assert_int_equal(need, 2304 + 132 * 128 * 256 * 4);
  o.tile_n = 128; /* 2120 tiles: no stream-K kernels at this width */
  assert_kiln_ok(kiln_matmul_workspace_size(ctx, &a->dl_tensor, &b->dl_tensor, &c->dl_tensor, &o, &need));
  assert_int_equal(need, 0);
  o.tile_n = 0;
  DLTensor half = a->dl_tensor, c_half = c->dl_tensor; /* 3392 rows: 27 x 20 = 540 tiles, four waves */
  int64_t a_shape[2] = {3392, 2048}, c_shape[2] = {3392, 5120};
  half.shape = a_shape, c_half.shape = c_shape;
  assert_kiln_ok(kiln_matmul_workspace_size(ctx, &half, &b->dl_tensor, &c_half, &o, &need));
  assert_int_equal(need, 2304 + 132 * 128 * 256 * 4);
  DLTensor short_a = half, short_b = b->dl_tensor; /* K = 512: the first 512 columns of a, rows of b */
  int64_t sa_shape[2] = {3392, 512}, sa_strides[2] = {2048, 1}, sb_shape[2] = {512, 5120};
  short_a.shape = sa_shape, short_a.strides = sa_strides, short_b.shape = sb_shape;
  assert_kiln_ok(kiln_matmul_workspace_size(ctx, &short_a, &short_b, &c_half, &o, &need));
  assert_int_equal(need, 0);
  o.tile_n = 0, o.stream_k = -1;
  assert_kiln_ok(kiln_matmul_workspace_size(ctx, &a->dl_tensor, &b->dl_tensor, &c->dl_tensor, &o, &need));
  assert_int_equal(need, 0);
  o.stream_k = 0, need = 2304 + 132 * 128 * 256 * 4;
  DLManagedTensorVersioned *ws = empty(ctx, U8, 1, (int64_t)need + 256);
  char *w = ws->dl_tensor.data;
  const int launches = fake("launches_0");
  o.workspace = w + 16, o.workspace_bytes = need;
  assert_kiln_fails(kiln_matmul(ctx, &a->dl_tensor, &b->dl_tensor, &c->dl_tensor, &o, NULL),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_matmul: opts->workspace", "is not 256-byte aligned");
  o.workspace = c->dl_tensor.data;
  assert_kiln_fails(kiln_matmul(ctx, &a->dl_tensor, &b->dl_tensor, &c->dl_tensor, &o, NULL),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_matmul: opts->workspace overlaps c in memory");
  o.workspace = w, o.workspace_bytes = need - 1, o.stream_k = 1;
  assert_kiln_fails(kiln_matmul(ctx, &a->dl_tensor, &b->dl_tensor, &c->dl_tensor, &o, NULL), KILN_ERROR_WORKSPACE,
                    "kiln_matmul: opts->stream_k is 1 and this walk splits 4 tiles", "but opts give 17303807",
                    "kiln_matmul_workspace_size");
  o.workspace = NULL;
  assert_kiln_fails(kiln_matmul(ctx, &a->dl_tensor, &b->dl_tensor, &c->dl_tensor, &o, NULL), KILN_ERROR_WORKSPACE,
                    "(workspace NULL)");
  assert_int_equal(fake("launches_0"), launches);
  o.workspace = w, o.stream_k = 0; /* too small: unsplit */
  assert_kiln_ok(kiln_matmul(ctx, &a->dl_tensor, &b->dl_tensor, &c->dl_tensor, &o, NULL));
  o.workspace_bytes = need; /* the split, its flags and partials inside the declared workspace */
  fake_declare(NULL, 0);
  fake_declare(a->dl_tensor.data, 6784 * 2048 * 2), fake_declare(b->dl_tensor.data, 2048 * 5120 * 2);
  fake_declare(c->dl_tensor.data, 6784 * 5120 * 2), fake_declare(w, need);
  assert_kiln_ok(kiln_matmul(ctx, &a->dl_tensor, &b->dl_tensor, &c->dl_tensor, &o, NULL));
  fake_declare(NULL, 0);
  assert_int_equal(fake("launches_0") - launches, 2);
  kiln_tensor_free(a), kiln_tensor_free(b), kiln_tensor_free(c), kiln_tensor_free(ws);
  assert_int_equal(fake("live_allocations"), allocations);
  assert_int_equal(fake("context_depth"), 0);
}

/* kiln_matmul_backward on the fake sm_90 (run in CI, no GPU): an f32 dC is converted into the
 * workspace (one cast), then dA = dC·Bᵀ and dB = Aᵀ·dC (one GEMM each, through transposed
 * views); NULL skips a gradient; a B broadcast over a batch of 3 sums dB over it, one GEMM per
 * batch. The workspace is refused before any launch when missing, misaligned or overlapping an
 * argument, naming it. */
static void matmul_backward_paths(kiln_context *ctx) {
  const int allocations = fake("live_allocations");
  DLManagedTensorVersioned *a = empty(ctx, TEST_F16, 3 * 64, 32), *b = empty(ctx, TEST_F16, 32, 48),
                           *dc = empty(ctx, TEST_F32, 3 * 64, 48), *da = empty(ctx, TEST_F16, 3 * 64, 32),
                           *db = empty(ctx, TEST_F32, 32, 48), *ws = empty(ctx, TEST_F16, 3 * 64, 64);
  size_t bytes = 0;
  assert_kiln_ok(kiln_matmul_backward_workspace_size(ctx, &a->dl_tensor, &b->dl_tensor, &dc->dl_tensor,
                                                     &da->dl_tensor, &db->dl_tensor, &bytes));
  assert_int_equal(bytes, 3 * 64 * 48 * 2); /* dC as f16 */
  int launches = fake("launches_0");
  assert_kiln_ok(kiln_matmul_backward(ctx, &a->dl_tensor, &b->dl_tensor, &dc->dl_tensor, &da->dl_tensor,
                                      &db->dl_tensor, ws->dl_tensor.data, bytes, NULL, NULL));
  assert_int_equal(fake("launches_0") - launches, 3);
  launches = fake("launches_0");
  assert_kiln_ok(kiln_matmul_backward(ctx, &a->dl_tensor, &b->dl_tensor, &dc->dl_tensor, NULL, &db->dl_tensor,
                                      ws->dl_tensor.data, bytes, NULL, NULL));
  assert_int_equal(fake("launches_0") - launches, 2);
  /* the batch: A [3, 64, 32] · B [32, 48] (broadcast) = C [3, 64, 48]; dB [32, 48] f32 sums the three */
  int64_t a3[3] = {3, 64, 32}, c3[3] = {3, 64, 48};
  DLTensor A3 = a->dl_tensor, C3 = dc->dl_tensor, DA3 = da->dl_tensor;
  A3.ndim = DA3.ndim = C3.ndim = 3, A3.shape = DA3.shape = a3, C3.shape = c3;
  A3.strides = DA3.strides = C3.strides = NULL;
  assert_kiln_ok(kiln_matmul_backward_workspace_size(ctx, &A3, &b->dl_tensor, &C3, &DA3, &db->dl_tensor, &bytes));
  launches = fake("launches_0");
  assert_kiln_ok(kiln_matmul_backward(ctx, &A3, &b->dl_tensor, &C3, &DA3, &db->dl_tensor, ws->dl_tensor.data, bytes,
                                      NULL, NULL));
  assert_int_equal(fake("launches_0") - launches, 1 + 1 + 3);
  /* the workspace refused */
  launches = fake("launches_0");
  assert_kiln_fails(kiln_matmul_backward(ctx, &A3, &b->dl_tensor, &C3, &DA3, &db->dl_tensor, NULL, bytes, NULL, NULL),
                    KILN_ERROR_WORKSPACE, "kiln_matmul_backward: workspace is", "(NULL) but this call needs",
                    "kiln_matmul_backward_workspace_size");
  assert_kiln_fails(kiln_matmul_backward(ctx, &A3, &b->dl_tensor, &C3, &DA3, &db->dl_tensor, ws->dl_tensor.data,
                                         bytes - 1, NULL, NULL),
                    KILN_ERROR_WORKSPACE, "kiln_matmul_backward: workspace is", "but this call needs");
  assert_kiln_fails(kiln_matmul_backward(ctx, &A3, &b->dl_tensor, &C3, &DA3, &db->dl_tensor,
                                         (char *)ws->dl_tensor.data + 16, bytes, NULL, NULL),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_matmul_backward: workspace", "is not 256-byte aligned");
  assert_kiln_fails(kiln_matmul_backward(ctx, &A3, &b->dl_tensor, &C3, &DA3, &db->dl_tensor, da->dl_tensor.data,
                                         bytes, NULL, NULL),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_matmul_backward: workspace overlaps da in memory");
  assert_int_equal(fake("launches_0"), launches);
  kiln_tensor_free(a), kiln_tensor_free(b), kiln_tensor_free(dc), kiln_tensor_free(da), kiln_tensor_free(db);
  kiln_tensor_free(ws);
  assert_int_equal(fake("live_allocations"), allocations);
  assert_int_equal(fake("context_depth"), 0);
}

/* The fused QKV calls' PREFILL through the workspace on the fake sm_90 (run in CI, no GPU), where
 * the one-kernel path has too few tiles (N = 96: one tile a projection): with separate outputs,
 * each weight is dequantized into the workspace and multiplied in turn (six launches); with
 * outputs side by side in one [M, 3·96] buffer, the three weights are dequantized side by side
 * and one kiln_matmul writes all three (four launches), which the size query accounts for. */
static void qkv_prefill_copies(kiln_context *ctx) {
  const DLDataType I8 = {kDLInt, 8, 1}, U8 = {kDLUInt, 8, 1}, U32 = {kDLUInt, 32, 1};
  const int allocations = fake("live_allocations");
  const int64_t M = 64, K = 128, N = 96, G = 64;
  DLManagedTensorVersioned *x = empty(ctx, TEST_F16, M, K), *y = empty(ctx, TEST_F16, M, 3 * N),
                           *ws = empty(ctx, TEST_F16, K, 3 * N), *codes = empty(ctx, U32, K / 8, N),
                           *scales = empty(ctx, TEST_F16, K / G, N), *zeros = empty(ctx, U8, K / G, N),
                           *w8 = empty(ctx, I8, K, N), *s8 = empty(ctx, TEST_F32, 1, N);
  kiln_qweight w = {.k = K, .n = N, .group = G, .codes = codes->dl_tensor.data, .scales = scales->dl_tensor.data,
                    .zeros = zeros->dl_tensor.data, .device = codes->dl_tensor.device};
  int64_t y_shape[2] = {M, N}, y_strides[2] = {3 * N, 1}, s_shape[1] = {N};
  DLTensor side[3], apart[3], sv = s8->dl_tensor;
  sv.ndim = 1, sv.shape = s_shape, sv.strides = NULL;
  for (int i = 0; i < 3; i++) {
    side[i] = y->dl_tensor, side[i].shape = y_shape, side[i].strides = y_strides;
    side[i].byte_offset = (uint64_t)i * N * 2;
    apart[i] = side[i], apart[i].byte_offset = (uint64_t)(2 - i) * N * 2; /* v, k, q: not in order */
  }
  kiln_qkv_opts q = kiln_qkv_opts_default();
  q.algo = KILN_QKV_PREFILL, q.workspace = ws->dl_tensor.data;
  for (int int8 = 0; int8 < 2; int8++)
    for (int merged = 0; merged < 2; merged++) {
      const DLTensor *out = merged ? side : apart, *W = &w8->dl_tensor;
      size_t bytes = 0;
      assert_kiln_ok(int8 ? kiln_qkv_project_int8_workspace_size(ctx, &x->dl_tensor, W, W, W, &sv, &sv, &sv, &out[0],
                                                                 &out[1], &out[2], &bytes)
                          : kiln_qkv_project_int4_workspace_size(ctx, &x->dl_tensor, &w, &w, &w, &out[0], &out[1],
                                                                 &out[2], &bytes));
      assert_int_equal(bytes, (size_t)(K * (merged ? 3 * N : N) * 2));
      q.workspace_bytes = bytes;
      const int launches = fake("launches_0");
      assert_kiln_ok(int8 ? kiln_qkv_project_int8(ctx, &x->dl_tensor, W, W, W, &sv, &sv, &sv, &out[0], &out[1],
                                                  &out[2], &q, NULL)
                          : kiln_qkv_project_int4(ctx, &x->dl_tensor, &w, &w, &w, &out[0], &out[1], &out[2], &q,
                                                  NULL));
      assert_int_equal(fake("launches_0") - launches, merged ? 4 : 6);
    }
  DLManagedTensorVersioned *all[] = {x, y, ws, codes, scales, zeros, w8, s8};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kiln_tensor_free(all[i]);
  assert_int_equal(fake("live_allocations"), allocations);
  assert_int_equal(fake("context_depth"), 0);
}

/* The split-KV decode forward on the fake sm_90 (132 SMs): one launch in clusters whose size
 * fills two blocks per SM, without TMA maps. AUTO and FLASH take it where a K/V head's query
 * heads x Sq fit one 16-row tile (here 4 x 1 and 8 x 2) with at least 1024 keys, for GQA, or
 * for MHA whose B·Hq blocks leave SMs idle; else the other kernels (fewer keys, 24 rows, MHA on
 * 132 heads); FLASH_DECODE takes any shape (D = 256, K/V heads repeated with stride 0, 4 x 100
 * rows); its backward is FLASH's (no cluster). Cluster sizes are checked by the fake: 1..8,
 * dividing the grid. */
static void attention_decode_paths(kiln_context *ctx) {
  const int allocations = fake("live_allocations");
  DLManagedTensorVersioned *buf[5]; /* q, k, v, o, dq */
  for (int i = 0; i < 5; i++) buf[i] = empty(ctx, TEST_F16, 1100, 1024);
  DLManagedTensorVersioned *lse_buf = empty(ctx, TEST_F32, 8, 100), *ws = empty(ctx, TEST_F32, 8 * 100, 128);
  struct {
    int64_t hq, hkv, sq, sk, d, kv_head_stride; /* kv_head_stride 0: one K/V head seen as hkv */
    kiln_attention_algo algo;
    int decode; /* 1: the decode kernel runs */
  } cases[] = {
      {8, 2, 1, 700, 128, -1, KILN_ATTENTION_AUTO, 0},   {8, 2, 1, 1500, 64, -1, KILN_ATTENTION_AUTO, 1},
      {8, 1, 2, 1300, 64, -1, KILN_ATTENTION_FLASH, 1},  {8, 1, 3, 1300, 64, -1, KILN_ATTENTION_AUTO, 0},
      {4, 1, 100, 90, 128, -1, KILN_ATTENTION_FLASH_DECODE, 1}, {2, 2, 1, 50, 256, -1, KILN_ATTENTION_FLASH_DECODE, 1},
      {4, 4, 1, 64, 256, -1, KILN_ATTENTION_AUTO, 0},    {2, 2, 1, 1100, 64, -1, KILN_ATTENTION_AUTO, 1},
      {132, 132, 1, 1024, 8, -1, KILN_ATTENTION_AUTO, 0}, {131, 131, 1, 1024, 8, -1, KILN_ATTENTION_AUTO, 1},
      {4, 2, 4, 99, 64, 0, KILN_ATTENTION_FLASH_DECODE, 1},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int64_t qs[4] = {1, cases[c].hq, cases[c].sq, cases[c].d}, ks[4] = {1, cases[c].hkv, cases[c].sk, cases[c].d},
            ls[3] = {1, cases[c].hq, cases[c].sq};
    int64_t kst[4] = {0, cases[c].kv_head_stride ? cases[c].sk * cases[c].d : 0, cases[c].d, 1};
    DLTensor q = {buf[0]->dl_tensor.data, {kDLCUDA, 0}, 4, TEST_F16, qs, NULL, 0}, o = q, k = q, v = q, dq = q;
    o.data = buf[3]->dl_tensor.data, dq.data = buf[4]->dl_tensor.data;
    k.data = buf[1]->dl_tensor.data, v.data = buf[2]->dl_tensor.data, k.shape = v.shape = ks;
    k.strides = v.strides = kst;
    DLTensor lse = {lse_buf->dl_tensor.data, {kDLCUDA, 0}, 3, TEST_F32, ls, NULL, 0};
    kiln_attention_opts opts = kiln_attention_opts_default();
    opts.algo = cases[c].algo;
    const int clustered = fake("clustered_launches"), launches = fake("launches_0"), maps = fake("tensor_maps");
    assert_kiln_ok(kiln_attention(ctx, &q, &k, &v, &o, &lse, &opts, NULL));
    assert_int_equal(fake("clustered_launches") - clustered, cases[c].decode);
    assert_int_equal(fake("launches_0") - launches, 1);
    if (cases[c].decode) assert_int_equal(fake("tensor_maps"), maps);
    size_t bytes = 0;
    assert_kiln_ok(kiln_attention_backward_workspace_size(ctx, &q, &k, &v, &o, &lse, &o, &dq, NULL, NULL, &opts,
                                                          &bytes));
    assert_kiln_ok(kiln_attention_backward(ctx, &q, &k, &v, &o, &lse, &o, &dq, NULL, NULL, ws->dl_tensor.data, bytes,
                                           &opts, NULL));
    assert_int_equal(fake("clustered_launches") - clustered, cases[c].decode); /* the backward is unclustered */
  }
  /* a device whose GPCs hold clusters of at most 2 (FAKE_CUDA_MAX_CLUSTER, read by the occupancy
   * query at context creation): B = 1 with 8 K/V heads (1100 keys) wants clusters of 8 to fill 132 SMs and
   * gets 2 (the fake refuses a launch in larger ones) */
  setenv("FAKE_CUDA_MAX_CLUSTER", "2", 1);
  kiln_context *small = NULL;
  assert_kiln_ok(kiln_context_create(kDLCUDA, 0, &small));
  DLManagedTensorVersioned *sbuf[4];
  for (int i = 0; i < 4; i++) sbuf[i] = empty(small, TEST_F16, 8 * 1100, 128);
  int64_t qs[4] = {1, 32, 1, 128}, ks[4] = {1, 8, 1100, 128};
  DLTensor q = {sbuf[0]->dl_tensor.data, {kDLCUDA, 0}, 4, TEST_F16, qs, NULL, 0}, o = q, k = q, v = q;
  k.data = sbuf[1]->dl_tensor.data, v.data = sbuf[2]->dl_tensor.data, o.data = sbuf[3]->dl_tensor.data;
  k.shape = v.shape = ks;
  const int clustered = fake("clustered_launches");
  assert_kiln_ok(kiln_attention(small, &q, &k, &v, &o, NULL, NULL, NULL));
  assert_int_equal(fake("clustered_launches"), clustered + 1);
  for (int i = 0; i < 4; i++) kiln_tensor_free(sbuf[i]);
  kiln_context_destroy(small);
  unsetenv("FAKE_CUDA_MAX_CLUSTER");
  kiln_tensor_free(lse_buf), kiln_tensor_free(ws);
  for (int i = 0; i < 5; i++) kiln_tensor_free(buf[i]);
  assert_int_equal(fake("live_allocations"), allocations);
  assert_int_equal(fake("context_depth"), 0);
}

/* What the tensor-core attention kernels cannot take, on the fake sm_90 (run in CI, no GPU): an
 * explicit FLASH_MMA_SYNC or FLASH_WGMMA names the misfit (float32 inputs, D not a multiple of
 * 8, a strided head dimension, a misaligned q) before any launch, while AUTO and FLASH run the
 * problem on the CUDA-core kernels, forward (one launch) and backward (delta, dK/dV, dQ; dQ
 * skipped when NULL). tile_m 192 (the wide sm_90a forward and dQ kernel) takes D <= 64 only. */
static void attention_refusals(kiln_context *ctx) {
  const int allocations = fake("live_allocations");
  DLManagedTensorVersioned *buf[8]; /* q, k, v, o, dout, dq, dk, dv: room for [1, 2, 64, 128] f32 */
  for (int i = 0; i < 8; i++) buf[i] = empty(ctx, TEST_F32, 2 * 64, 128);
  DLManagedTensorVersioned *lse_buf = empty(ctx, TEST_F32, 2, 64), *ws = empty(ctx, TEST_F32, 2 * 64, 256);
  int64_t shape[4] = {1, 2, 64, 64}, lse_shape[3] = {1, 2, 64}, strided[4] = {2 * 64 * 128, 64 * 128, 128, 2};
  DLTensor t[8], lse = {lse_buf->dl_tensor.data, {kDLCUDA, 0}, 3, TEST_F32, lse_shape, NULL, 0};
  const struct {
    DLDataType dt;
    int64_t d;
    bool strided, offset; /* q's head dimension at stride 2; q 2 bytes past its buffer's start */
    const char *why;
  } misfits[] = {
      {TEST_F32, 64, false, false, "q, k and v are float32, but the tensor-core kernels take float16 and bfloat16"},
      {TEST_F16, 60, false, false, "need D == Dv and D a multiple of 8, but D is 60 and Dv is 60"},
      {TEST_BF16, 64, true, false, "contiguous head dimension (stride 1) in q, k, v and o, but their strides there "
                                   "are 2, 1, 1 and 1"},
      {TEST_F16, 64, false, true, "need 16-byte aligned data"},
  };
  const kiln_attention_algo named[2] = {KILN_ATTENTION_FLASH_MMA_SYNC, KILN_ATTENTION_FLASH_WGMMA};
  const char *names[2] = {"algo FLASH_MMA_SYNC", "algo FLASH_WGMMA"};
  for (size_t m = 0; m < sizeof misfits / sizeof misfits[0]; m++) {
    shape[3] = misfits[m].d;
    for (int i = 0; i < 8; i++)
      t[i] = (DLTensor){buf[i]->dl_tensor.data, {kDLCUDA, 0}, 4, misfits[m].dt, shape, NULL, 0};
    if (misfits[m].strided) t[0].strides = strided;
    if (misfits[m].offset) t[0].byte_offset = 2;
    kiln_attention_opts o = kiln_attention_opts_default();
    int launches = fake("launches_0");
    for (int a = 0; a < 2; a++) {
      o.algo = named[a];
      assert_kiln_fails(kiln_attention(ctx, &t[0], &t[1], &t[2], &t[3], &lse, &o, NULL), KILN_ERROR_UNSUPPORTED,
                        "kiln_attention: ", names[a], misfits[m].why,
                        "KILN_ATTENTION_FLASH and _AUTO run it on the CUDA-core kernels");
      assert_kiln_fails(kiln_attention_backward(ctx, &t[0], &t[1], &t[2], &t[3], &lse, &t[4], &t[5], &t[6], &t[7],
                                                ws->dl_tensor.data, 2 * 64 * 256 * 4, &o, NULL),
                        KILN_ERROR_UNSUPPORTED, "kiln_attention_backward: ", names[a], misfits[m].why);
    }
    assert_int_equal(fake("launches_0"), launches);
    o.algo = KILN_ATTENTION_FLASH;
    assert_kiln_ok(kiln_attention(ctx, &t[0], &t[1], &t[2], &t[3], &lse, &o, NULL));
    assert_int_equal(fake("launches_0") - launches, 1);
    o.algo = KILN_ATTENTION_AUTO, launches = fake("launches_0");
    assert_kiln_ok(kiln_attention_backward(ctx, &t[0], &t[1], &t[2], &t[3], &lse, &t[4], &t[5], &t[6], &t[7],
                                           ws->dl_tensor.data, 2 * 64 * 256 * 4, &o, NULL));
    assert_int_equal(fake("launches_0") - launches, 3);
    launches = fake("launches_0");
    assert_kiln_ok(kiln_attention_backward(ctx, &t[0], &t[1], &t[2], &t[3], &lse, &t[4], NULL, &t[6], &t[7],
                                           ws->dl_tensor.data, 2 * 64 * 256 * 4, &o, NULL));
    assert_int_equal(fake("launches_0") - launches, 2);
  }
  /* tile_m: 192 runs the wide configurations at D = 64 (the forward's, and the backward's dQ
   * kernel after delta and dK/dV) and is refused at D = 128 before any launch */
  shape[3] = 64;
  for (int i = 0; i < 8; i++) t[i] = (DLTensor){buf[i]->dl_tensor.data, {kDLCUDA, 0}, 4, TEST_F16, shape, NULL, 0};
  kiln_attention_opts o = kiln_attention_opts_default();
  o.algo = KILN_ATTENTION_FLASH_WGMMA, o.tile_m = 192;
  assert_kiln_ok(kiln_attention(ctx, &t[0], &t[1], &t[2], &t[3], NULL, &o, NULL));
  int launches = fake("launches_0");
  assert_kiln_ok(kiln_attention_backward(ctx, &t[0], &t[1], &t[2], &t[3], &lse, &t[4], &t[5], &t[6], &t[7],
                                         ws->dl_tensor.data, 2 * 64 * 256 * 4, &o, NULL));
  assert_int_equal(fake("launches_0") - launches, 3);
  shape[3] = 128;
  assert_kiln_fails(kiln_attention(ctx, &t[0], &t[1], &t[2], &t[3], NULL, &o, NULL), KILN_ERROR_UNSUPPORTED,
                    "kiln_attention: opts->tile_m is 192 but D is 128",
                    "the wide sm_90a forward takes head dims <= 64; use tile_m 0 or 128");
  launches = fake("launches_0");
  assert_kiln_fails(kiln_attention_backward(ctx, &t[0], &t[1], &t[2], &t[3], &lse, &t[4], &t[5], &t[6], &t[7],
                                            ws->dl_tensor.data, 2 * 64 * 256 * 4, &o, NULL),
                    KILN_ERROR_UNSUPPORTED, "kiln_attention_backward: opts->tile_m is 192 but D is 128",
                    "the wide sm_90a dQ kernel takes head dims <= 64; use tile_m 0 or 128");
  assert_int_equal(fake("launches_0"), launches);
  for (int i = 0; i < 8; i++) kiln_tensor_free(buf[i]);
  kiln_tensor_free(lse_buf), kiln_tensor_free(ws);
  assert_int_equal(fake("live_allocations"), allocations);
  assert_int_equal(fake("context_depth"), 0);
}

static kiln_context *create_device_0(void) {
  kiln_context *ctx = NULL;
  assert_kiln_ok(kiln_context_create(kDLCUDA, 0, &ctx));
  kiln_device_info info;
  assert_kiln_ok(kiln_context_info(ctx, &info));
  assert_non_null(strstr(info.name, FAKE_NAME));
  assert_int_equal(info.ordinal, 0);
  assert_int_equal(info.cc_major, 9);
  assert_int_equal(info.cc_minor, 0);
  assert_int_equal(info.sm_count, 132);
  assert_int_equal(info.has_kernels, 1);
  assert_int_equal(info.driver_version, 13000);
  /* every image loaded and kept; the primary context retained once; nothing left pushed */
  assert_true(fake("library_loads") > 0);
  assert_int_equal(fake("live_libraries"), fake("library_loads"));
  assert_int_equal(fake("primary_retains"), 1);
  assert_int_equal(fake("context_depth"), 0);
  return ctx;
}

/* The weight conversions on a CUDA context (kernels/qweight.cu, int8_quantize.cu): what each
 * call launches, and what only a GPU context refuses (a g_idx without perm, which a CPU import
 * would read to decide). */
static void weight_conversion_paths(kiln_context *ctx) {
  const int64_t K = 256, N = 64, G = 64;
  const DLDataType i32 = {kDLInt, 32, 1}, u8 = {kDLUInt, 8, 1}, s8 = {kDLInt, 8, 1};
  DLManagedTensorVersioned *qweight = empty(ctx, i32, K / 8, N), *qzeros = empty(ctx, i32, K / G, N / 8),
                           *scales = empty(ctx, TEST_F16, K / G, N), *w = empty(ctx, TEST_F16, K, N),
                           *q8 = empty(ctx, s8, K, N), *s8c = empty(ctx, TEST_F32, 1, N);
  int64_t k1 = K;
  DLManagedTensorVersioned *g_idx = NULL;
  assert_kiln_ok(kiln_tensor_empty(ctx, 1, &k1, i32, &g_idx));
  size_t cb, sb, zb, pb;
  assert_kiln_ok(kiln_qweight_bytes(K, N, G, &cb, &sb, &zb, &pb));
  DLManagedTensorVersioned *native = NULL;
  const int64_t bytes = (int64_t)(cb + sb + zb + pb);
  assert_kiln_ok(kiln_tensor_empty(ctx, 1, &bytes, u8, &native));
  char *p = native->dl_tensor.data;
  kiln_qweight qw = {.k = K, .n = N, .group = G, .codes = (uint32_t *)p, .scales = (uint16_t *)(p + cb),
                     .zeros = (uint8_t *)(p + cb + sb), .perm = NULL, .device = {kDLCUDA, 0}};
  int launches = fake("launches_0");
  assert_kiln_fails(kiln_qweight_import(ctx, KILN_QFORMAT_GPTQ_V1, &qweight->dl_tensor, &qzeros->dl_tensor,
                                        &scales->dl_tensor, &g_idx->dl_tensor, &qw, NULL),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_qweight_import: g_idx is given but out->perm is NULL",
                    "without reading it back");
  assert_kiln_ok(kiln_qweight_import(ctx, KILN_QFORMAT_GPTQ_V1, &qweight->dl_tensor, &qzeros->dl_tensor,
                                     &scales->dl_tensor, NULL, &qw, NULL));
  assert_int_equal(fake("launches_0"), launches + 1);
  qw.perm = (int32_t *)(p + cb + sb + zb);
  assert_kiln_ok(kiln_qweight_import(ctx, KILN_QFORMAT_GPTQ_V1, &qweight->dl_tensor, &qzeros->dl_tensor,
                                     &scales->dl_tensor, &g_idx->dl_tensor, &qw, NULL));
  assert_int_equal(fake("launches_0"), launches + 3); /* the sort, then the import */
  assert_kiln_ok(kiln_qweight_quantize(ctx, &w->dl_tensor, 0, &qw, NULL));
  assert_kiln_ok(kiln_qweight_dequantize(ctx, &qw, &w->dl_tensor, NULL));
  assert_int_equal(fake("launches_0"), launches + 5);
  DLTensor col = s8c->dl_tensor, one = s8c->dl_tensor; /* [N] and [1] views of the [1, N] buffer */
  int64_t n1 = N, one1 = 1;
  col.ndim = 1, col.shape = &n1, col.strides = NULL;
  one.ndim = 1, one.shape = &one1, one.strides = NULL;
  assert_kiln_ok(kiln_quantize_int8(ctx, &w->dl_tensor, &q8->dl_tensor, &col, 1, NULL));
  assert_int_equal(fake("launches_0"), launches + 6);
  assert_kiln_ok(kiln_quantize_int8(ctx, &w->dl_tensor, &q8->dl_tensor, &one, 0, NULL));
  assert_int_equal(fake("launches_0"), launches + 10); /* zero, maxima, codes, scale */
  assert_int_equal(fake("context_depth"), 0);
  DLManagedTensorVersioned *all[] = {qweight, qzeros, scales, w, q8, s8c, g_idx, native};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kiln_tensor_free(all[i]);
}

static void healthy(void) {
  kiln_context *ctx = create_device_0();
  assert_context_usable(ctx, NULL);
  matmul_layouts(ctx);
  matmul_stream_k(ctx);
  int8_paths(ctx);
  matmul_backward_paths(ctx);
  qkv_prefill_copies(ctx);
  decode_paths(ctx);
  int4_prefill_paths(ctx);
  attention_paths(ctx);
  attention_decode_paths(ctx);
  attention_refusals(ctx);
  weight_conversion_paths(ctx);
  CUstream s = NULL;
  assert_kiln_ok(kiln_stream_create(ctx, &s));
  assert_non_null(s);
  assert_int_equal(fake("live_streams"), 1);
  assert_context_usable(ctx, s);
  /* A destroyed stream. kiln keeps no list of streams (a CUstream is the caller's handle, often
   * a framework's), so it cannot tell a destroyed one from a live one: it passes the handle on
   * and reports what the driver answers. This fake answers CUDA_ERROR_INVALID_HANDLE, as the
   * real driver may; the real driver does not promise to detect it (the handle may already
   * name a new stream), so using a destroyed stream stays the caller's error. */
  assert_kiln_ok(kiln_stream_destroy(ctx, s));
  assert_int_equal(fake("live_streams"), 0);
  DLManagedTensorVersioned *src = empty(ctx, TEST_F32, 16, 16), *dst = empty(ctx, TEST_F16, 16, 16);
  assert_kiln_fails(kiln_cast(ctx, &src->dl_tensor, &dst->dl_tensor, s), KILN_ERROR_CUDA, "kiln_cast",
                    "cuLaunchKernel", "CUDA_ERROR_INVALID_HANDLE", "is the stream valid", FAKE_NAME, "ordinal 0");
  assert_kiln_fails(kiln_tensor_copy(ctx, &src->dl_tensor, &src->dl_tensor, s), KILN_ERROR_CUDA,
                    "kiln_tensor_copy", "cuMemcpyAsync", "CUDA_ERROR_INVALID_HANDLE");
  assert_kiln_fails(kiln_stream_synchronize(ctx, s), KILN_ERROR_CUDA, "kiln_stream_synchronize",
                    "cuStreamSynchronize", "CUDA_ERROR_INVALID_HANDLE");
  assert_kiln_fails(kiln_stream_destroy(ctx, s), KILN_ERROR_CUDA, "kiln_stream_destroy", "cuStreamDestroy",
                    "CUDA_ERROR_INVALID_HANDLE");
  assert_int_equal(fake("context_depth"), 0);
  kiln_tensor_free(src);
  kiln_tensor_free(dst);
  /* ... and the context is unharmed */
  assert_context_usable(ctx, NULL);
  /* Two contexts on one device share the primary context, each with its own retain. */
  const int images = fake("live_libraries"); /* one context's images */
  kiln_context *second = NULL;
  assert_kiln_ok(kiln_context_create(kDLCUDA, 0, &second));
  assert_int_equal(fake("primary_retains"), 2);
  assert_int_equal(fake("live_libraries"), 2 * images);
  kiln_context_destroy(second);
  assert_int_equal(fake("primary_retains"), 1);
  assert_int_equal(fake("live_libraries"), images);
  kiln_context_destroy(ctx);
}

static void oom(void) {
  kiln_context *ctx = create_device_0();
  /* The fake device has 1 MiB: 4 MiB fail, as does a request far beyond any device. */
  int64_t shape[2] = {1024, 1024};
  DLManagedTensorVersioned *t = (DLManagedTensorVersioned *)0x1;
  assert_kiln_fails(kiln_tensor_empty(ctx, 2, shape, TEST_F32, &t), KILN_ERROR_OUT_OF_MEMORY, "kiln_tensor_empty",
                    "out of device memory", "4194304 bytes", FAKE_NAME);
  assert_null(t);
  shape[0] = (int64_t)1 << 40;
  shape[1] = 1;
  t = (DLManagedTensorVersioned *)0x1;
  assert_kiln_fails(kiln_tensor_empty(ctx, 2, shape, TEST_F16, &t), KILN_ERROR_OUT_OF_MEMORY, "kiln_tensor_empty",
                    "2199023255552 bytes");
  assert_null(t);
  assert_int_equal(fake("live_allocations"), 0);
  assert_int_equal(fake("context_depth"), 0);
  /* The context stays usable: what fits is allocated, copied, cast, multiplied, freed. */
  assert_context_usable(ctx, NULL);
  /* 1 MiB in use: the next allocation of any size fails, and freeing one makes room again. */
  shape[0] = 1024;
  shape[1] = 256;
  DLManagedTensorVersioned *full = NULL;
  assert_kiln_ok(kiln_tensor_empty(ctx, 2, shape, TEST_F32, &full));
  shape[0] = shape[1] = 1;
  assert_kiln_fails(kiln_tensor_empty(ctx, 2, shape, TEST_F32, &t), KILN_ERROR_OUT_OF_MEMORY, "kiln_tensor_empty",
                    "4 bytes");
  kiln_tensor_free(full);
  assert_kiln_ok(kiln_tensor_empty(ctx, 2, shape, TEST_F32, &t));
  kiln_tensor_free(t);
  kiln_context_destroy(ctx);
}

static void noimage(void) {
  /* The third image has no code for the device: creation fails naming the device and its
   * architecture, and the two images already loaded are unloaded again. */
  for (int attempt = 1; attempt <= 2; attempt++) {
    kiln_context *ctx = (kiln_context *)0x1;
    assert_kiln_fails(kiln_context_create(kDLCUDA, 0, &ctx), KILN_ERROR_NO_KERNEL_IMAGE, "kiln_context_create",
                      "kernel image", "has no code for " FAKE_NAME, "sm_90", "error 209");
    assert_null(ctx);
    assert_int_equal(fake("library_loads"), 2 * attempt);
    assert_fake_clean();
  }
}

/* Context creation stops at a fault in the driver's kernel loading (modes loadfail, nokernel,
 * nofunction): a precise error, no context, and every image loaded so far unloaded again and the
 * primary context released, on each of two attempts. */
static void load_fault(kiln_status status, const char *what, const char *detail) {
  for (int attempt = 1; attempt <= 2; attempt++) {
    kiln_context *ctx = (kiln_context *)0x1;
    assert_kiln_fails(kiln_context_create(kDLCUDA, 0, &ctx), status, "kiln_context_create", what, detail);
    assert_null(ctx);
    assert_fake_clean();
  }
}

static void badordinal(void) {
  /* The ordinal exists: a tensor that claims device 3 is refused by ops and copies, naming both
   * ordinals. */
  kiln_context *ctx = create_device_0();
  DLManagedTensorVersioned *src = empty(ctx, TEST_F32, 8, 8), *dst = empty(ctx, TEST_F16, 8, 8);
  DLTensor on3 = src->dl_tensor;
  on3.device.device_id = 3;
  assert_kiln_fails(kiln_cast(ctx, &on3, &dst->dl_tensor, NULL), KILN_ERROR_INVALID_ARGUMENT, "kiln_cast", "src",
                    "kDLCUDA:3", "kDLCUDA:0");
  assert_kiln_fails(kiln_tensor_copy(ctx, &on3, &src->dl_tensor, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_copy", "src", "kDLCUDA:3", "kDLCUDA:0");
  on3 = dst->dl_tensor;
  on3.device.device_id = 3;
  assert_kiln_fails(kiln_tensor_copy(ctx, &dst->dl_tensor, &on3, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_copy", "dst", "kDLCUDA:3", "kDLCUDA:0");
  /* memory of another kind of device is neither the GPU's nor host memory: refused, never given
   * to cuMemcpyAsync (it once was, as anything but kDLCUDA counted as host memory) */
  on3 = dst->dl_tensor;
  on3.device = (DLDevice){kDLROCM, 0};
  assert_kiln_fails(kiln_tensor_copy(ctx, &dst->dl_tensor, &on3, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_copy: dst is on kDLROCM:0; kiln_tensor_copy copies between host memory (kDLCPU, "
                    "kDLCUDAHost) and the context's GPU (kDLCUDA:0)");
  kiln_tensor_free(src);
  kiln_tensor_free(dst);
  kiln_context_destroy(ctx);
}

/* An sm_89 device (mode sm89: FAKE_CUDA_CC=89, as an L40S or RTX 4090), which grants a block
 * 99 KB of shared memory where sm_80 grants 163 and sm_90 227. AUTO used to pick CP_ASYNC for
 * aligned f16 operands there, whose 3-stage ring takes 162 KB: the launch failed with
 * CUDA_ERROR_INVALID_VALUE (found by fuzz_validation's fake L40S run). */
static void sm89(void) {
  setenv("FAKE_CUDA_CC", "89", 1);
  setenv("FAKE_CUDA_SMS", "142", 1);
  kiln_context *ctx = NULL;
  assert_kiln_ok(kiln_context_create(kDLCUDA, 0, &ctx));
  kiln_device_info info;
  assert_kiln_ok(kiln_context_info(ctx, &info));
  assert_int_equal(info.cc_major, 8);
  assert_int_equal(info.cc_minor, 9);
  assert_int_equal(info.smem_per_block_optin, 101376);
  DLManagedTensorVersioned *a = empty(ctx, TEST_F16, 64, 64), *b = empty(ctx, TEST_F16, 64, 64),
                           *c = empty(ctx, TEST_F32, 64, 64);
  const int launches = fake("launches_0");
  assert_kiln_ok(kiln_matmul(ctx, &a->dl_tensor, &b->dl_tensor, &c->dl_tensor, NULL, NULL)); /* MMA_SYNC */
  assert_int_equal(fake("launches_0"), launches + 1);
  kiln_matmul_opts o = kiln_matmul_opts_default();
  o.algo = KILN_MATMUL_MMA_SYNC;
  assert_kiln_ok(kiln_matmul(ctx, &a->dl_tensor, &b->dl_tensor, &c->dl_tensor, &o, NULL));
  o.algo = KILN_MATMUL_CP_ASYNC;
  assert_kiln_fails(kiln_matmul(ctx, &a->dl_tensor, &b->dl_tensor, &c->dl_tensor, &o, NULL), KILN_ERROR_UNSUPPORTED,
                    "kiln_matmul: algo CP_ASYNC needs 156800 bytes of shared memory per block but", "(sm_89) grants "
                    "101376; use KILN_MATMUL_AUTO or _MMA_SYNC");
  o.algo = KILN_MATMUL_WGMMA;
  assert_kiln_fails(kiln_matmul(ctx, &a->dl_tensor, &b->dl_tensor, &c->dl_tensor, &o, NULL), KILN_ERROR_UNSUPPORTED,
                    "algo WGMMA needs an sm_90 GPU");
  assert_int_equal(fake("launches_0"), launches + 2);
  /* int8 checked the grant all along: AUTO takes the register-staged kernel there */
  const DLDataType s8 = {kDLInt, 8, 1};
  DLManagedTensorVersioned *a8 = empty(ctx, s8, 64, 64), *b8 = empty(ctx, s8, 64, 64);
  DLTensor bt = b8->dl_tensor; /* B as a Linear weight's transposed view: k-major, as CP_ASYNC wants */
  int64_t bt_strides[2] = {1, 64};
  bt.strides = bt_strides;
  assert_kiln_ok(kiln_matmul_int8(ctx, &a8->dl_tensor, &bt, &c->dl_tensor, NULL, NULL));
  assert_int_equal(fake("launches_0"), launches + 3);
  /* attention: the sm_80 kernels (FLASH sends sm_89 there) at D = 64, 128 and 256, forward and
   * backward. The backward's dQ kernel takes 102 KB at D = 128 and both take 132 KB at 256: AUTO
   * and FLASH run the CUDA-core kernels there (their launch used to fail), FLASH_MMA_SYNC says why
   * it cannot. */
  int64_t shape[4] = {1, 2, 100, 0}, lse_shape[3] = {1, 2, 100};
  DLManagedTensorVersioned *buf[8]; /* q, k, v, o, dout, dq, dk, dv */
  for (int i = 0; i < 8; i++) buf[i] = empty(ctx, TEST_F16, 200, 256);
  DLManagedTensorVersioned *lse_buf = empty(ctx, TEST_F32, 2, 100), *ws = empty(ctx, TEST_F32, 200, 256);
  DLTensor lse = {lse_buf->dl_tensor.data, {kDLCUDA, 0}, 3, TEST_F32, lse_shape, NULL, 0};
  kiln_attention_opts ao = kiln_attention_opts_default();
  for (int64_t d = 64; d <= 256; d *= 2) {
    shape[3] = d;
    DLTensor t[8];
    for (int i = 0; i < 8; i++) t[i] = (DLTensor){buf[i]->dl_tensor.data, {kDLCUDA, 0}, 4, TEST_F16, shape, NULL, 0};
    const kiln_attention_algo algos[3] = {KILN_ATTENTION_AUTO, KILN_ATTENTION_FLASH, KILN_ATTENTION_FLASH_MMA_SYNC};
    for (int i = 0; i < 3; i++) {
      ao.algo = algos[i];
      assert_kiln_ok(kiln_attention(ctx, &t[0], &t[1], &t[2], &t[3], &lse, &ao, NULL));
      size_t bytes = 0;
      const kiln_status st = kiln_attention_backward_workspace_size(ctx, &t[0], &t[1], &t[2], &t[3], &lse, &t[4],
                                                                    &t[5], &t[6], &t[7], &ao, &bytes);
      assert_kiln_ok(st);
      const int launches_before = fake("launches_0");
      if (d > 64 && algos[i] == KILN_ATTENTION_FLASH_MMA_SYNC) {
        assert_kiln_fails(kiln_attention_backward(ctx, &t[0], &t[1], &t[2], &t[3], &lse, &t[4], &t[5], &t[6], &t[7],
                                                  ws->dl_tensor.data, bytes, &ao, NULL),
                          KILN_ERROR_UNSUPPORTED, "kiln_attention_backward: algo FLASH_MMA_SYNC (backward) needs",
                          d == 128 ? "104448 bytes" : "135680 bytes", "(sm_89) grants 101376",
                          "use KILN_ATTENTION_AUTO or _FLASH");
        assert_int_equal(fake("launches_0"), launches_before); /* refused before any launch */
      } else {
        assert_kiln_ok(kiln_attention_backward(ctx, &t[0], &t[1], &t[2], &t[3], &lse, &t[4], &t[5], &t[6], &t[7],
                                               ws->dl_tensor.data, bytes, &ao, NULL));
      }
    }
  }
  /* FLASH_DECODE needs sm_90's clusters; AUTO at a decode shape runs the sm_80 kernel, unclustered */
  shape[2] = lse_shape[2] = 1, shape[3] = 128;
  DLTensor t[4];
  for (int i = 0; i < 4; i++) t[i] = (DLTensor){buf[i]->dl_tensor.data, {kDLCUDA, 0}, 4, TEST_F16, shape, NULL, 0};
  ao.algo = KILN_ATTENTION_FLASH_DECODE;
  const int clustered = fake("clustered_launches"), before = fake("launches_0");
  assert_kiln_fails(kiln_attention(ctx, &t[0], &t[1], &t[2], &t[3], &lse, &ao, NULL), KILN_ERROR_UNSUPPORTED,
                    "kiln_attention: algo FLASH_DECODE cannot run this problem: it needs an sm_90 GPU",
                    "is sm_89; 1 query heads per K/V head, Sq 1)", "use KILN_ATTENTION_AUTO or _FLASH");
  ao.algo = KILN_ATTENTION_AUTO;
  assert_kiln_ok(kiln_attention(ctx, &t[0], &t[1], &t[2], &t[3], &lse, &ao, NULL));
  assert_int_equal(fake("launches_0"), before + 1);
  assert_int_equal(fake("clustered_launches"), clustered);
  for (int i = 0; i < 8; i++) kiln_tensor_free(buf[i]);
  kiln_tensor_free(lse_buf), kiln_tensor_free(ws);
  kiln_tensor_free(a), kiln_tensor_free(b), kiln_tensor_free(c), kiln_tensor_free(a8), kiln_tensor_free(b8);
  kiln_context_destroy(ctx);
  unsetenv("FAKE_CUDA_CC"), unsetenv("FAKE_CUDA_SMS");
}

/* Two devices (mode twodev; issue 12's checks that need no second GPU): contexts on ordinals 0
 * and 1 in one process, each op launching on its own context's device; tensors of the other
 * device, or inputs mixed across devices, refused by name before any launch; two threads driving
 * the two contexts at once, each launching exactly what it does alone. */
typedef struct {
  kiln_context *ctx;
  DLManagedTensorVersioned *a, *b, *c;
  int calls;
  kiln_status status;
} device_worker;
static void *drive_device(void *arg) {
  device_worker *w = arg;
  w->status = KILN_OK;
  for (int i = 0; i < w->calls && !w->status; i++)
    w->status = kiln_matmul(w->ctx, &w->a->dl_tensor, &w->b->dl_tensor, &w->c->dl_tensor, NULL, NULL);
  return NULL;
}
static void twodev(void) {
  kiln_context *ctx[2] = {create_device_0(), NULL};
  assert_kiln_ok(kiln_context_create(kDLCUDA, 1, &ctx[1]));
  kiln_device_info info;
  assert_kiln_ok(kiln_context_info(ctx[1], &info));
  assert_int_equal(info.ordinal, 1);
  DLManagedTensorVersioned *a[2], *b[2], *c[2];
  for (int d = 0; d < 2; d++) {
    a[d] = empty_on(ctx[d], d, TEST_F16, 64, 64), b[d] = empty_on(ctx[d], d, TEST_F16, 64, 64);
    c[d] = empty_on(ctx[d], d, TEST_F32, 64, 64);
  }
  /* each op on its own device's context launches there, on the legacy stream or its own */
  int l0 = fake("launches_0"), l1 = fake("launches_1");
  CUstream s1 = NULL;
  assert_kiln_ok(kiln_stream_create(ctx[1], &s1));
  assert_kiln_ok(kiln_matmul(ctx[1], &a[1]->dl_tensor, &b[1]->dl_tensor, &c[1]->dl_tensor, NULL, NULL));
  assert_kiln_ok(kiln_cast(ctx[1], &a[1]->dl_tensor, &c[1]->dl_tensor, s1));
  assert_kiln_ok(kiln_stream_synchronize(ctx[1], s1));
  const int per_matmul_and_cast = fake("launches_1") - l1;
  assert_true(per_matmul_and_cast >= 2);
  assert_int_equal(fake("launches_0"), l0);
  /* the other device's tensors, or inputs of both, are refused before any launch */
  l0 = fake("launches_0"), l1 = fake("launches_1");
  assert_kiln_fails(kiln_matmul(ctx[0], &a[1]->dl_tensor, &b[1]->dl_tensor, &c[1]->dl_tensor, NULL, NULL),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_matmul", "kDLCUDA:1", "kDLCUDA:0");
  assert_kiln_fails(kiln_matmul(ctx[1], &a[1]->dl_tensor, &b[0]->dl_tensor, &c[1]->dl_tensor, NULL, NULL),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_matmul", "kDLCUDA:0", "kDLCUDA:1");
  assert_kiln_fails(kiln_cast(ctx[1], &a[0]->dl_tensor, &c[1]->dl_tensor, s1), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_cast", "src", "kDLCUDA:0", "kDLCUDA:1");
  assert_kiln_fails(kiln_tensor_copy(ctx[0], &a[0]->dl_tensor, &a[1]->dl_tensor, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_copy", "dst", "kDLCUDA:1", "kDLCUDA:0");
  assert_int_equal(fake("launches_0"), l0);
  assert_int_equal(fake("launches_1"), l1);
  /* both devices at once from two threads: each launches what it would alone */
  l0 = fake("launches_0");
  assert_kiln_ok(kiln_matmul(ctx[0], &a[0]->dl_tensor, &b[0]->dl_tensor, &c[0]->dl_tensor, NULL, NULL));
  const int per_matmul = fake("launches_0") - l0;
  assert_true(per_matmul >= 1);
  l0 = fake("launches_0"), l1 = fake("launches_1");
  device_worker w[2];
  pthread_t th[2];
  for (int d = 0; d < 2; d++) {
    w[d] = (device_worker){ctx[d], a[d], b[d], c[d], 500, KILN_OK};
    assert_int_equal(pthread_create(&th[d], NULL, drive_device, &w[d]), 0);
  }
  for (int d = 0; d < 2; d++) {
    assert_int_equal(pthread_join(th[d], NULL), 0);
    assert_kiln_ok(w[d].status);
  }
  assert_int_equal(fake("launches_0") - l0, 500 * per_matmul);
  assert_int_equal(fake("launches_1") - l1, 500 * per_matmul);
  assert_int_equal(fake("context_depth"), 0);
  assert_kiln_ok(kiln_stream_destroy(ctx[1], s1));
  for (int d = 0; d < 2; d++) kiln_tensor_free(a[d]), kiln_tensor_free(b[d]), kiln_tensor_free(c[d]);
  kiln_context_destroy(ctx[1]);
  kiln_context_destroy(ctx[0]);
}

static void launchfail(void) {
  kiln_context *ctx = create_device_0();
  CUstream s = NULL;
  assert_kiln_ok(kiln_stream_create(ctx, &s));
  DLManagedTensorVersioned *a = empty(ctx, TEST_F16, 64, 64), *b = empty(ctx, TEST_F16, 64, 64);
  DLManagedTensorVersioned *c = empty(ctx, TEST_F32, 64, 64);
  assert_kiln_fails(kiln_cast(ctx, &a->dl_tensor, &c->dl_tensor, s), KILN_ERROR_CUDA, "kiln_cast", "cuLaunchKernel",
                    "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle", "is the stream valid", FAKE_NAME,
                    "ordinal 0");
  assert_kiln_fails(kiln_matmul(ctx, &a->dl_tensor, &b->dl_tensor, &c->dl_tensor, NULL, NULL), KILN_ERROR_CUDA,
                    "kiln_matmul", "cuLaunchKernel", "CUDA_ERROR_INVALID_HANDLE");
  kiln_matmul_opts opts = kiln_matmul_opts_default();
  opts.algo = KILN_MATMUL_MMA_SYNC;
  assert_kiln_fails(kiln_matmul(ctx, &a->dl_tensor, &b->dl_tensor, &c->dl_tensor, &opts, s), KILN_ERROR_CUDA,
                    "kiln_matmul", "cuLaunchKernel", "CUDA_ERROR_INVALID_HANDLE");
  assert_int_equal(fake("context_depth"), 0);
  /* The context stays usable for everything but launches: allocate, copy, free. */
  DLManagedTensorVersioned *d = empty(ctx, TEST_F16, 64, 64);
  assert_kiln_ok(kiln_tensor_copy(ctx, &a->dl_tensor, &d->dl_tensor, s));
  assert_kiln_ok(kiln_stream_synchronize(ctx, s));
  kiln_tensor_free(a);
  kiln_tensor_free(b);
  kiln_tensor_free(c);
  kiln_tensor_free(d);
  assert_kiln_ok(kiln_stream_destroy(ctx, s));
  kiln_context_destroy(ctx);
}

static void fake_device(void **state) {
  (void)state;
  int n = -1;
  const int devices = strcmp(fault, "twodev") ? 1 : 2;
  assert_kiln_ok(kiln_device_count(&n));
  assert_int_equal(n, devices);
  /* kiln loaded the fake (dlopen of the same path finds that copy) */
  fake_lib = dlopen(getenv("KILN_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
  assert_non_null(fake_lib);
  assert_fake_clean();

  /* Any build: an ordinal beyond the one device, or negative, names itself and the count, and
   * retains nothing. */
  kiln_context *ctx = (kiln_context *)0x1;
  assert_kiln_fails(kiln_context_create(kDLCUDA, 3, &ctx), KILN_ERROR_NO_DEVICE, "kiln_context_create",
                    "ordinal is 3", devices == 1 ? "1 CUDA device;" : "2 CUDA devices;",
                    devices == 1 ? "expected 0..0" : "expected 0..1");
  assert_null(ctx);
  assert_kiln_fails(kiln_context_create(kDLCUDA, -1, &ctx), KILN_ERROR_NO_DEVICE, "kiln_context_create",
                    "ordinal is -1", devices == 1 ? "1 CUDA device;" : "2 CUDA devices;");
  assert_fake_clean();

  /* Any build: a GPU older than sm_80 (a Turing T4) is refused at creation, before any image
   * is loaded, naming the device, its architecture and what kiln needs. */
  if (!strcmp(fault, "oldgpu")) {
    setenv("FAKE_CUDA_CC", "75", 1);
    assert_kiln_fails(kiln_context_create(kDLCUDA, 0, &ctx), KILN_ERROR_NO_KERNEL_IMAGE,
                      "kiln_context_create: " FAKE_NAME,
                      "is sm_75; kiln's GPU kernels need sm_80 (Ampere) or newer; use a CPU context (kDLCPU) on "
                      "this machine");
    assert_null(ctx);
    assert_int_equal(fake("library_loads"), 0);
    assert_fake_clean();
    unsetenv("FAKE_CUDA_CC");
  }

  if (!kiln_build_has_kernels()) {
    /* The whole device is queried, then creation stops at the missing images, releasing the
     * primary context it retained. */
    assert_kiln_fails(kiln_context_create(kDLCUDA, 0, &ctx), KILN_ERROR_NO_KERNEL_IMAGE, "kiln_context_create",
                      "built without nvcc");
    assert_null(ctx);
    assert_int_equal(fake("library_loads"), 0);
    assert_fake_clean();
    dlclose(fake_lib);
    printf("SKIP: this build has no GPU kernels (built without nvcc): checked only bad ordinals and context "
           "creation on the fake device; the %s checks past context creation need a build with kernels\n",
           fault);
    exit(KILN_TEST_SKIP);
  }

  if (!strcmp(fault, "healthy")) healthy();
  else if (!strcmp(fault, "oom")) oom();
  else if (!strcmp(fault, "noimage")) noimage();
  else if (!strcmp(fault, "badordinal")) badordinal();
  else if (!strcmp(fault, "launchfail")) launchfail();
  else if (!strcmp(fault, "twodev")) twodev();
  else if (!strcmp(fault, "sm89")) sm89();
  else if (!strcmp(fault, "loadfail"))
    load_fault(KILN_ERROR_OUT_OF_MEMORY, "cuLibraryLoadData failed with CUDA_ERROR_OUT_OF_MEMORY (2)", "out of memory");
  else if (!strcmp(fault, "nokernel"))
    load_fault(KILN_ERROR_NO_KERNEL_IMAGE, "kernel \"kiln_attn_fwd_wgmma_f16_d64\" is missing from the embedded images "
               "(error 500)", "rebuild kiln");
  else if (!strcmp(fault, "nofunction"))
    load_fault(KILN_ERROR_NO_KERNEL_IMAGE, "has no code for " FAKE_NAME, "(sm_90); kiln needs sm_80 or newer");
  else if (!strcmp(fault, "oldgpu")) {
    /* checked above; with the device back at sm_90 a context works */
    kiln_context *ok = create_device_0();
    kiln_context_destroy(ok);
  }
  else fail_msg("unknown fault \"%s\"", fault);
  assert_fake_clean();

  /* The CPU is unaffected. */
  assert_kiln_ok(kiln_context_create(kDLCPU, 0, &ctx));
  kiln_context_destroy(ctx);
  dlclose(fake_lib);
}

int main(int argc, char **argv) {
  fault = argc > 1 ? argv[1] : "old";
  const char *env = getenv("FAKE_CUDA_MODE");
  if (!env || strcmp(env, fault)) {
    fprintf(stderr, "test_driver_faults %s: FAKE_CUDA_MODE must be \"%s\" too (it is \"%s\")\n", fault, fault,
            env ? env : "");
    return 1;
  }
  const int unusable_driver = !strcmp(fault, "old") || !strcmp(fault, "missing") || !strcmp(fault, "nodevice");
  const struct CMUnitTest driver[] = {cmocka_unit_test(driver_fault)};
  const struct CMUnitTest device[] = {cmocka_unit_test(fake_device)};
  return unusable_driver ? cmocka_run_group_tests_name(fault, driver, NULL, NULL)
                         : cmocka_run_group_tests_name(fault, device, NULL, NULL);
}
