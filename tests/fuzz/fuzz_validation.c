/*
 * fuzz_validation.c — libFuzzer target for the validation of every public entry point that takes
 * DLTensors. The input bytes become up to nine arbitrary tensor descriptors (rank, shape, strides
 * or NULL, byte_offset, dtype, device, data pointer or NULL) and op options; each entry point must
 * return a status, never crash, and never touch memory outside what the descriptors describe.
 * The first five descriptors and the matmul options come first in the input, so older corpus
 * entries keep their meaning; a later selector byte switches to the attention entry points,
 * which take all nine (q, k, v, o, lse, dout, dq, dk, dv), to the int8 ones, to the INT4
 * weight importers, quantizer and dequantizer (whose native buffers live in a second arena), or
 * to kiln_matmul_int4 and the fused QKV projections (their weights in a third arena).
 *
 * Descriptors point into one arena. The size query (validation only) runs on anything; the ops
 * run only when every accepted tensor's extent, computed here independently of kiln, lies inside
 * the arena (a caller that lies about its memory is outside kiln's contract) and the product is
 * small enough to keep the fuzzer fast. AddressSanitizer checks the rest.
 *
 * Each input runs five times: on a CPU context, then on the fake driver's device
 * (tests/fake/fake_libcuda.c, loaded through KILN_LIBCUDA) as an H200, a 16-SM MIG slice of one,
 * an A100 (sm_80) and an L40S (sm_89, 99 KB of shared memory), where the same descriptors reach
 * the GPU dispatch: validation, kernel choice, TMA descriptors and launch shapes. There the
 * arenas are device allocations, CPU tensors become tensors on device 0 (and those on device 0
 * CPU tensors), and the fake refuses what a driver would: a TMA descriptor breaking the driver's
 * rules or reaching past its allocation, a launch beyond the grid limits or the shared memory its
 * device grants. kiln must have refused such input itself, so KILN_ERROR_CUDA there is a
 * finding, as is KILN_ERROR_INTERNAL anywhere: the harness aborts with kiln's message. Nothing
 * runs on the fake, so no kernel's reads or writes are checked.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"

#define ARENA_BYTES (1 << 20)
/* On the fake GPU the arena is 64 GiB of address space (the fake reserves allocations this large
 * without memory): descriptors still start in its first ARENA_BYTES, but a tensor may reach GPU
 * sizes, so that launch shapes and index arithmetic meet sizes no CPU run could (nothing runs). */
#define GPU_ARENA_BYTES ((size_t)1 << 36)
#define QARENA_BYTES (1 << 18)
#define WORKSPACE_BYTES (1 << 20)
#define SCRATCH_BYTES (1 << 16)

/* One run of an input: its context and where its memory lives. `here` is the device type of the
 * context's own tensors, `away` the other one (a weight's fuzzed "wrong device"). */
typedef struct pass {
  const char *name;
  kiln_context *ctx;
  DLDeviceType here, away;
  unsigned char *arena, *qarena, *warena, *workspace, *scratch;
  size_t arena_bytes;
} pass;
static const pass *P;

/* The CPU run computes, so an op runs there only when its work is below `limit`; on the fake GPU
 * nothing runs and validation costs the same at any size, so the size of the arenas is the only
 * bound (which lets the fuzzer reach what kiln decides by counting tiles against SMs). */
static int cheap(int64_t work, int64_t limit) { return P->here != kDLCPU || work <= limit; }

/* On the fake GPU each buffer an op may touch is declared to the fake (its fake_cuda_declare),
 * which then holds every kernel operand and TMA descriptor to the declared buffers: an operand a
 * stride too long is caught wherever it lies, not only past the end of the arena. */
static int (*fake_declare)(const void *p, size_t bytes);
static void declare(const void *p, size_t bytes) {
  if (P->here == kDLCUDA && bytes && !fake_declare(p, bytes)) {
    fprintf(stderr, "fuzz_validation: the fake's table of declared buffers is full\n");
    abort();
  }
}

/* Declares on the fake GPU the part of a workspace of `offered` bytes that an op may use: what its
 * size query (status st) asked for, which is all a caller allocates. */
static void declare_workspace(void *buf, size_t offered, kiln_status st, size_t need) {
  if (st == KILN_OK) declare(buf, offered < need ? offered : need);
}

/* A status kiln must never return for this input (see the top of the file). With FUZZ_TRACE set
 * in the environment every call's status and message is printed (to see how far a seed gets). */
static void check(kiln_status st, const char *what) {
  static int trace = -1;
  if (trace < 0) trace = getenv("FUZZ_TRACE") != NULL;
  if (trace)
    fprintf(stderr, "%s: %s: %s %s\n", P->name, what, kiln_status_string(st), st ? kiln_last_error() : "");
  if (st == KILN_ERROR_INTERNAL || (st == KILN_ERROR_CUDA && P->here == kDLCUDA)) {
    fprintf(stderr, "fuzz_validation: %s on the %s context returned %s: %s\n", what, P->name,
            kiln_status_string(st), kiln_last_error());
    abort();
  }
}
#define CHECK(call) check((call), #call)

typedef struct reader {
  const uint8_t *p;
  size_t n;
} reader;

static uint64_t take(reader *r, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++) {
    v = v << 8 | (r->n ? *r->p : 0);
    if (r->n) r->p++, r->n--;
  }
  return v;
}

typedef struct fuzz_tensor {
  DLTensor t;
  int64_t shape[8], strides[8];
  int present;
} fuzz_tensor;

static const DLDataType dtypes[] = {{kDLFloat, 16, 1}, {kDLBfloat, 16, 1}, {kDLFloat, 32, 1}, {kDLInt, 8, 1},
                                    {kDLUInt, 8, 1},   {kDLFloat, 64, 1},  {kDLFloat, 16, 2}, {kDLBool, 8, 1},
                                    {kDLFloat, 4, 1},  {kDLInt, 32, 1}};

/* Small sizes most of the time (so ops run), extreme ones sometimes (so overflow checks run), and
 * large ones (a 16-bit number times 2^0..2^31), which fit the fake GPU's 64 GiB arena: batches
 * past a grid's 65535, rows past 2^31 elements. */
static int64_t pick_extent(reader *r) {
  uint8_t k = (uint8_t)take(r, 1);
  switch (k >> 5) {
  case 0: return -(int64_t)(k & 7);
  case 1: return (int64_t)take(r, 8);
  case 7: return (int64_t)take(r, 2) << (k & 31);
  default: return k & 31;
  }
}

static void read_tensor(reader *r, fuzz_tensor *f) {
  memset(f, 0, sizeof *f);
  uint8_t flags = (uint8_t)take(r, 1);
  f->present = (flags & 7) != 0;
  f->t.ndim = (int32_t)((flags >> 3) & 3) + 1 + ((flags & 0x80) ? 2 : 0); /* 1..6 */
  if ((flags & 0x40) && (flags & 0x20)) f->t.ndim = -1;
  f->t.dtype = dtypes[take(r, 1) % (sizeof dtypes / sizeof dtypes[0])];
  uint8_t dev = (uint8_t)take(r, 1);
  f->t.device = (DLDevice){dev % 7 == 0 ? kDLCUDA : dev % 11 == 0 ? kDLCUDAHost : kDLCPU, (int32_t)(dev >> 6)};
  if (P->here == kDLCUDA) { /* the GPU run: CPU tensors on device 0, device 0's on the CPU */
    if (f->t.device.device_type == kDLCPU) f->t.device = (DLDevice){kDLCUDA, 0};
    else if (f->t.device.device_type == kDLCUDA && f->t.device.device_id == 0) f->t.device.device_type = kDLCPU;
  }
  int nd = f->t.ndim < 0 ? 0 : f->t.ndim;
  for (int d = 0; d < nd; d++) f->shape[d] = pick_extent(r);
  int null_strides = (flags & 0x40) && !(flags & 0x20);
  for (int d = 0; d < nd; d++) f->strides[d] = pick_extent(r);
  f->t.shape = f->shape;
  f->t.strides = null_strides ? NULL : f->strides;
  /* where the data starts: in the CPU's 1 MiB arena, or anywhere in the first 16 MiB of the fake
   * GPU's (room for an output of a few MiB beside its inputs) */
  uint32_t off = (uint32_t)take(r, 3) % (P->here == kDLCPU ? ARENA_BYTES : 1u << 24);
  f->t.data = (flags & 0x10) && off < 64 ? NULL : P->arena + (off & ~(uint32_t)1);
  f->t.byte_offset = take(r, 1) % 5 == 0 ? take(r, 2) : 0;
}

/* The bytes [lo, hi) a tensor addresses (computed here, not by kiln); 0 if it cannot be sure.
 * On the CPU extents and strides up to 2^20; on the fake GPU up to 2^34 (its arena's size). */
static int extent_fits(const DLTensor *t) {
  if (!t || t->ndim < 0 || t->ndim > 8) return 0;
  const int64_t limit = P->here == kDLCPU ? (int64_t)1 << 20 : (int64_t)1 << 34;
  int64_t bytes = (t->dtype.bits * (int64_t)t->dtype.lanes + 7) / 8, hi = 0, s = 1, term;
  for (int d = t->ndim - 1; d >= 0; d--) {
    int64_t n = t->shape[d], st = t->strides ? t->strides[d] : s;
    if (n < 0 || st < 0 || n > limit || st > limit) return 0;
    if (n == 0) return 1;
    if (__builtin_mul_overflow(n - 1, st, &term) || __builtin_add_overflow(hi, term, &hi) ||
        __builtin_mul_overflow(s, n, &s))
      return 0;
  }
  if (!t->data || __builtin_add_overflow(hi, 1, &hi) || __builtin_mul_overflow(hi, bytes, &hi)) return 0;
  uintptr_t lo = (uintptr_t)t->data + t->byte_offset, end = lo + (uintptr_t)hi;
  if (lo < (uintptr_t)P->arena || end < lo || end > (uintptr_t)P->arena + P->arena_bytes) return 0;
  declare((const void *)lo, end - lo);
  return 1;
}

/* Element count, saturating at 2^40. */
static int64_t numel(const DLTensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++)
    if (__builtin_mul_overflow(n, t->shape[d] > 0 ? t->shape[d] : 0, &n) || n > (1ll << 40)) return 1ll << 40;
  return n;
}
/* ~ the multiply-adds of a product of a and b (tensors already inside an arena) */
static int64_t pair_work(const DLTensor *a, const DLTensor *b) {
  return numel(a) > (1 << 20) ? INT64_MAX : numel(a) * (numel(b) + 1);
}

/* kiln_attention and its backward on t[0..8] = q, k, v, o, lse, dout, dq, dk, dv. */
static void fuzz_attention(kiln_context *ctx, reader *r, const DLTensor *const t[9]) {
  kiln_attention_opts o = kiln_attention_opts_default();
  const uint8_t a = (uint8_t)take(r, 1), sc = (uint8_t)take(r, 1);
  /* mostly AUTO, sometimes SMEM, FLASH_DECODE or bad */
  o.algo = (kiln_attention_algo)(a % 5 == 4 ? ((a & 0x80) ? 5 : 7) : a % 5 == 3 ? 1 : 0);
  o.causal = (a >> 3) % 3;                                                 /* 2 is invalid */
  o.deterministic = (a >> 5) & 1;
  o.scale = sc == 255 ? __builtin_nanf("") : sc == 254 ? -1.0f : (float)sc / 32.0f;

  size_t ws = 0;
  CHECK(kiln_attention_backward_workspace_size(ctx, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], &o, &ws));
  for (int i = 0; i < 9; i++)
    if (t[i] && !extent_fits(t[i])) return;
  /* work ~ numel(q) · Sk · (D + Dv) <= numel(q) · numel(k) · 2: keep it under ~1M */
  if (t[0] && t[1] && !cheap(pair_work(t[0], t[1]), 1 << 20)) return;
  CHECK(kiln_attention(ctx, t[0], t[1], t[2], t[3], t[4], &o, NULL));
  if (ws <= WORKSPACE_BYTES) {
    declare(P->workspace, ws);
    CHECK(kiln_attention_backward(ctx, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], P->workspace, ws, &o,
                                  NULL));
  }
}

/* kiln_matmul_int8 on t[0..4] = a, b, c, row_scale, col_scale; kiln_quantize_int8 on w, q, scales. */
static void fuzz_int8(kiln_context *ctx, reader *r, const DLTensor *const t[9]) {
  kiln_matmul_int8_opts o = kiln_matmul_int8_opts_default();
  const uint8_t a = (uint8_t)take(r, 1), sc = (uint8_t)take(r, 1);
  /* mostly AUTO; MMA_SYNC / WGMMA by name (refused on a CPU context); 3 is out of range */
  o.algo = (kiln_int8_algo)(a % 7 == 6 ? 3 : a % 7 == 5 ? 1 + (a >> 7) : 0);
  o.scale = sc == 255 ? __builtin_inff() : (float)(int8_t)sc / 8.0f;
  o.row_scale = t[3];
  o.col_scale = t[4];
  for (int i = 0; i < 5; i++)
    if (t[i] && !extent_fits(t[i])) return;
  if (t[0] && t[1] && !cheap(pair_work(t[0], t[1]), 1 << 20)) return;
  CHECK(kiln_matmul_int8(ctx, t[0], t[1], t[2], &o, NULL));
  CHECK(kiln_quantize_int8(ctx, t[0], t[1], t[2], (a >> 3) % 3, NULL)); /* per_column 2 is invalid */
}

/* kiln_qweight_*: qweight, qzeros, scales, g_idx = t[0..3], a float weight or output t[4]; the
 * native buffers of the fuzzed [k, n] / group are carved from their own arena when they fit. */
static void fuzz_qweight(kiln_context *ctx, reader *r, const DLTensor *const t[9]) {
  const uint8_t fmt = (uint8_t)take(r, 1), flags = (uint8_t)take(r, 1);
  kiln_qweight qw;
  memset(&qw, 0, sizeof qw);
  qw.device = (DLDevice){P->here, 0};
  qw.k = (int64_t)(take(r, 2) % 1100) - 2;
  qw.n = (int64_t)(take(r, 1)) - 2;
  static const int64_t groups[] = {32, 64, 128, 0, 48, -1};
  qw.group = groups[flags % 6] == 0 ? qw.k : groups[flags % 6];
  size_t cb = 0, sb = 0, zb = 0, pb = 0;
  if (kiln_qweight_bytes(qw.k, qw.n, qw.group, &cb, &sb, &zb, &pb) != KILN_OK) {
    qw.codes = (uint32_t *)P->qarena, qw.scales = (uint16_t *)P->qarena, qw.zeros = P->qarena; /* validation only */
  } else {
    if (cb + sb + zb + pb + 4 * 256 > QARENA_BYTES) return;
    size_t off = 0;
    qw.codes = (uint32_t *)(P->qarena + off), off += (cb + 255) & ~(size_t)255;
    qw.scales = (uint16_t *)(P->qarena + off), off += (sb + 255) & ~(size_t)255;
    qw.zeros = P->qarena + off, off += (zb + 255) & ~(size_t)255;
    qw.perm = (flags >> 3) & 1 ? (int32_t *)(P->qarena + off) : NULL;
    declare(qw.codes, cb), declare(qw.scales, sb), declare(qw.zeros, zb);
    if (qw.perm) declare(qw.perm, pb);
    if (fmt % 11 == 10) qw.scales = (uint16_t *)((unsigned char *)qw.scales + 1); /* misaligned: refused */
  }
  for (int i = 0; i < 5; i++)
    if (t[i] && !extent_fits(t[i])) return;
  if (t[0] && !cheap(numel(t[0]), 1 << 16)) return;
  CHECK(kiln_qweight_import(ctx, (kiln_qformat)(fmt % 6), t[0], t[1], t[2], t[3], &qw, NULL));
  CHECK(kiln_qweight_dequantize(ctx, &qw, t[4], NULL));
  CHECK(kiln_qweight_quantize(ctx, t[4], (flags >> 4) & 1, &qw, NULL));
}

/* A kiln_qweight of fuzzed k (x's K when flags say so), n and group, carved from warena at
 * *used when its buffers fit (else pointers for validation only); perm, when present, a valid
 * rotation or garbage, zeros sanitized to 0..16 or left as they are. Returns 0 when the buffers
 * of a valid layout did not fit: then only the size queries may see the weight (an op would
 * read what its sizes promise, outside the contract as any buffer smaller than declared). */
static int make_w16_weight(reader *r, int64_t k_hint, size_t *used, kiln_qweight *qw) {
  const uint8_t flags = (uint8_t)take(r, 1);
  memset(qw, 0, sizeof *qw);
  qw->device = (DLDevice){flags % 13 == 12 ? P->away : P->here, 0};
  qw->k = (flags & 1) ? k_hint : (int64_t)(take(r, 2) % 600) - 2;
  qw->n = (int64_t)take(r, 1) - 2;
  static const int64_t groups[] = {32, 64, 128, 0, 48, -1};
  qw->group = groups[(flags >> 1) % 6] == 0 ? qw->k : groups[(flags >> 1) % 6];
  size_t cb = 0, sb = 0, zb = 0, pb = 0;
  const size_t need = kiln_qweight_bytes(qw->k, qw->n, qw->group, &cb, &sb, &zb, &pb) == KILN_OK
                          ? ((cb + 255) & ~(size_t)255) + ((sb + 255) & ~(size_t)255) + ((zb + 255) & ~(size_t)255) + pb
                          : 0;
  if (!need || *used + need > QARENA_BYTES) {
    qw->codes = (uint32_t *)P->warena, qw->scales = (uint16_t *)P->warena, qw->zeros = P->warena; /* validation only */
    return !need;
  }
  unsigned char *p = P->warena + *used;
  qw->codes = (uint32_t *)p, p += (cb + 255) & ~(size_t)255;
  qw->scales = (uint16_t *)p, p += (sb + 255) & ~(size_t)255;
  qw->zeros = p, p += (zb + 255) & ~(size_t)255;
  qw->perm = (flags >> 4) & 1 ? (int32_t *)p : NULL;
  *used += need;
  declare(qw->codes, cb), declare(qw->scales, sb), declare(qw->zeros, zb);
  if (qw->perm) declare(qw->perm, pb);
  if (flags % 11 == 10) qw->codes = (uint32_t *)((unsigned char *)qw->codes + 2); /* misaligned: refused */
  if ((flags >> 5) & 1)
    for (size_t i = 0; i < zb; i++) qw->zeros[i] %= 17;
  if (qw->perm && ((flags >> 6) & 1))
    for (int64_t i = 0; i < qw->k; i++) qw->perm[i] = (int32_t)((i + flags) % qw->k);
  return 1;
}

/* kiln_matmul_int4 (x = t[0], y = t[2]) and kiln_qkv_project_int4 (x = t[0], q, k, v = t[1..3])
 * with fuzzed weights; kiln_qkv_project_int8 on x = t[0], weights t[1..3], scales t[4..6],
 * outputs t[7], t[8] and one more descriptor read here. */
static void fuzz_w16(kiln_context *ctx, reader *r, const DLTensor *const t[9], int qkv) {
  const uint8_t a = (uint8_t)take(r, 1);
  /* mostly AUTO; DECODE and PREFILL (GPU algorithms: UNSUPPORTED on the CPU); 3 is out of range */
  const int algo = a % 7 == 6 ? 3 : a % 7 == 5 ? 1 : a % 7 == 4 ? 2 : 0;
  const int64_t k_hint = t[0] && t[0]->ndim == 2 && t[0]->shape ? t[0]->shape[1] : 0;
  size_t used = 0;
  kiln_qweight w[3];
  int real = 1; /* every weight's buffers hold what its sizes say */
  for (int i = 0; i < (qkv ? 3 : 1); i++) real &= make_w16_weight(r, k_hint, &used, &w[i]);
  fuzz_tensor extra;
  read_tensor(r, &extra);
  for (int i = 0; i < 9; i++)
    if (t[i] && !extent_fits(t[i])) return;
  if (extra.present && !extent_fits(&extra.t)) return;
  if (t[0] && !cheap(numel(t[0]), 1 << 12)) return; /* int4 work <= numel(x) · n · 3, n < 254 */
  /* PREFILL's workspace: the size query (the op's own checks; with bytes NULL, its refusal), and
   * a workspace in opts, which the CPU path must ignore whatever it says (a scratch buffer, a size
   * from the input). On the fake GPU only the bytes the size query asked for are declared, however
   * many the op is offered, so an input whose query had nowhere to answer offers none. */
  size_t need = 0;
  size_t ws_bytes = (size_t)take(r, 2) << ((a >> 4) & 7);
  const int null_query = (a >> 7) & 1, with_ws = ((a >> 6) & 1) && !null_query;
  /* on the GPU a workspace is used: say no more than there is (a lie is outside the contract) */
  if (P->here == kDLCUDA && ws_bytes > SCRATCH_BYTES) ws_bytes = SCRATCH_BYTES;
  kiln_status st;
  if (!qkv) {
    CHECK(st = kiln_matmul_int4_workspace_size(ctx, t[0], &w[0], t[2], null_query ? NULL : &need));
    if (with_ws) declare_workspace(P->scratch, ws_bytes, st, need);
    kiln_matmul_int4_opts o = kiln_matmul_int4_opts_default();
    o.algo = (kiln_int4_algo)algo;
    if (with_ws) o.workspace = P->scratch, o.workspace_bytes = ws_bytes;
    if (real) CHECK(kiln_matmul_int4(ctx, t[0], &w[0], t[2], (a >> 3) & 1 ? &o : NULL, NULL));
    return;
  }
  CHECK(st = kiln_qkv_project_int4_workspace_size(ctx, t[0], &w[0], &w[1], &w[2], t[1], t[2], t[3],
                                                  null_query ? NULL : &need));
  if (with_ws) declare_workspace(P->scratch, ws_bytes, st, need);
  kiln_qkv_opts o = kiln_qkv_opts_default();
  o.algo = (kiln_qkv_algo)algo;
  if (with_ws) o.workspace = P->scratch, o.workspace_bytes = ws_bytes;
  if (real) CHECK(kiln_qkv_project_int4(ctx, t[0], &w[0], &w[1], &w[2], t[1], t[2], t[3], &o, NULL));
  /* the int8 call's workspace is another buffer, declared as its own query asks */
  const DLTensor *v = extra.present ? &extra.t : NULL;
  need = 0;
  CHECK(st = kiln_qkv_project_int8_workspace_size(ctx, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], v,
                                                  null_query ? NULL : &need));
  if (with_ws) {
    declare_workspace(P->workspace, ws_bytes, st, need);
    o.workspace = P->workspace;
  }
  for (int i = 1; i <= 3; i++) /* int8 work <= numel(x) · numel(w) */
    if (t[0] && t[i] && !cheap(pair_work(t[0], t[i]), 1 << 20)) return;
  CHECK(kiln_qkv_project_int8(ctx, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], v, &o, NULL));
}

static void run(const uint8_t *data, size_t size) {
  kiln_context *ctx = P->ctx;
  if (P->here == kDLCUDA) fake_declare(NULL, 0); /* this input's buffers only */
  reader r = {data, size};
  fuzz_tensor f[9];
  for (int i = 0; i < 5; i++) read_tensor(&r, &f[i]);
  kiln_matmul_opts o = kiln_matmul_opts_default();
  /* AUTO, MMA_SYNC, CP_ASYNC, WGMMA (GPU algorithms, UNSUPPORTED on the CPU) or 42 (out of
   * range); tile_n 0, 64, 128 or 256 (WGMMA's only) */
  const uint8_t ab = (uint8_t)take(&r, 1);
  static const int algos[6] = {0, 0, 1, 2, 3, 42}, tiles[4] = {0, 64, 128, 256};
  o.algo = (kiln_matmul_algo)algos[ab % 6];
  o.tile_n = tiles[(ab >> 6) & 3];
  const uint8_t al = (uint8_t)take(&r, 1);
  o.alpha = (float)(int8_t)al / 16.0f;
  /* stream-K: mostly per shape, sometimes forced, off, or out of range (alpha 127/16) */
  o.stream_k = al == 127 ? 7 : (ab >> 3) % 4 == 3 ? 1 : (ab >> 3) % 4 == 2 ? -1 : 0;
  /* 0 matmul, 1 attention, 2 int8, 3 int4 weights, 4 int4 matmul, 5 QKV projections (the seeds
   * use 0..3, which % 6 keeps) */
  const int family = take(&r, 1) % 6;
  for (int i = 5; i < 9; i++) read_tensor(&r, &f[i]);
  const DLTensor *t[9];
  for (int i = 0; i < 9; i++) t[i] = f[i].present ? &f[i].t : NULL;
  if (family == 1) {
    fuzz_attention(ctx, &r, t);
    return;
  }
  if (family == 2) {
    fuzz_int8(ctx, &r, t);
    return;
  }
  if (family == 3) {
    fuzz_qweight(ctx, &r, t);
    return;
  }
  if (family >= 4) {
    fuzz_w16(ctx, &r, t, family == 5);
    return;
  }

  /* Validation only: no memory is touched, whatever the descriptors say. */
  size_t ws = 0;
  CHECK(kiln_matmul_backward_workspace_size(ctx, t[0], t[1], t[2], t[3], t[4], &ws));

  int fits = 1;
  for (int i = 0; i < 5; i++) fits &= !t[i] || extent_fits(t[i]);
  if (!fits) return;
  /* Keep each call cheap: at most ~1M multiply-adds. */
  if (t[0] && t[1] && !cheap(pair_work(t[0], t[1]), 1 << 20)) return;
  size_t mws = 0; /* kiln_matmul's workspace where it fits ours (stream-K) */
  CHECK(kiln_matmul_workspace_size(ctx, t[0], t[1], t[2], &o, &mws));
  if (mws <= WORKSPACE_BYTES) {
    declare(P->workspace, mws);
    o.workspace = P->workspace, o.workspace_bytes = mws;
  }
  CHECK(kiln_matmul(ctx, t[0], t[1], t[2], &o, NULL));
  o.workspace = NULL, o.workspace_bytes = 0; /* the backward has its own */
  CHECK(kiln_cast(ctx, t[0], t[2], NULL));
  CHECK(kiln_tensor_copy(ctx, t[0], t[2], NULL));
  if (ws <= WORKSPACE_BYTES) {
    declare(P->workspace, ws);
    CHECK(kiln_matmul_backward(ctx, t[0], t[1], t[2], t[3], t[4], P->workspace, ws, &o, NULL));
  }
}

/* The CPU run's memory is static; the fake GPU's is allocated once through kiln. */
static _Alignas(256) unsigned char arena[ARENA_BYTES], qarena[QARENA_BYTES], warena[QARENA_BYTES],
    workspace[WORKSPACE_BYTES], scratch[SCRATCH_BYTES];
/* The runs: the CPU, then the fake's one device as four GPUs (FAKE_CUDA_CC and FAKE_CUDA_SMS at
 * each context's creation), which share its memory. */
static pass passes[] = {
    {"CPU", NULL, kDLCPU, kDLCUDA, arena, qarena, warena, workspace, scratch, ARENA_BYTES},
    {.name = "fake H200", .here = kDLCUDA, .away = kDLCPU},
    {.name = "fake 16-SM sm_90 (a MIG slice)", .here = kDLCUDA, .away = kDLCPU},
    {.name = "fake A100 (sm_80, 108 SMs)", .here = kDLCUDA, .away = kDLCPU},
    {.name = "fake L40S (sm_89, 142 SMs)", .here = kDLCUDA, .away = kDLCPU},
};
static const char *const fake_devices[][2] = {{"90", "132"}, {"90", "16"}, {"80", "108"}, {"89", "142"}};
#define PASSES (int)(sizeof passes / sizeof passes[0])

static DLManagedTensorVersioned *device_buffers[5]; /* kept for the life of the process */
static unsigned char *device_buffer(kiln_context *ctx, int i, size_t bytes) {
  const int64_t n = (int64_t)bytes;
  if (kiln_tensor_empty(ctx, 1, &n, (DLDataType){kDLUInt, 8, 1}, &device_buffers[i]) != KILN_OK) {
    fprintf(stderr, "fuzz_validation: kiln_tensor_empty on the fake GPU: %s\n", kiln_last_error());
    abort();
  }
  return device_buffers[i]->dl_tensor.data;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  if (kiln_context_create(kDLCPU, 0, &passes[0].ctx) != KILN_OK) abort();
  setenv("KILN_LIBCUDA", FUZZ_FAKE_LIBCUDA, 1);
  void *fake = dlopen(FUZZ_FAKE_LIBCUDA, RTLD_NOW); /* kiln's own dlopen then shares it */
  fake_declare = fake ? (int (*)(const void *, size_t))dlsym(fake, "fake_cuda_declare") : NULL;
  if (!fake_declare) {
    fprintf(stderr, "fuzz_validation: no fake_cuda_declare in %s\n", FUZZ_FAKE_LIBCUDA);
    abort();
  }
  for (int i = 1; i < PASSES; i++) {
    setenv("FAKE_CUDA_CC", fake_devices[i - 1][0], 1);
    setenv("FAKE_CUDA_SMS", fake_devices[i - 1][1], 1);
    if (kiln_context_create(kDLCUDA, 0, &passes[i].ctx) != KILN_OK) {
      fprintf(stderr, "fuzz_validation: no context on the fake driver %s: %s\n", FUZZ_FAKE_LIBCUDA,
              kiln_last_error());
      abort();
    }
  }
  pass *g = &passes[1];
  g->arena = device_buffer(g->ctx, 0, GPU_ARENA_BYTES), g->qarena = device_buffer(g->ctx, 1, QARENA_BYTES);
  g->arena_bytes = GPU_ARENA_BYTES;
  g->warena = device_buffer(g->ctx, 2, QARENA_BYTES), g->workspace = device_buffer(g->ctx, 3, WORKSPACE_BYTES);
  g->scratch = device_buffer(g->ctx, 4, SCRATCH_BYTES);
  for (int i = 2; i < PASSES; i++) {
    passes[i].arena = g->arena, passes[i].arena_bytes = g->arena_bytes, passes[i].qarena = g->qarena,
    passes[i].warena = g->warena;
    passes[i].workspace = g->workspace, passes[i].scratch = g->scratch;
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  for (int i = 0; i < PASSES; i++) P = &passes[i], run(data, size);
  return 0;
}
