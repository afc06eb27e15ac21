/*
 * test_concurrency_host.c — one CPU context shared by 8 threads issuing mixed ops (matmul and
 * its backward, attention, int8 matmul, cast) and failing calls at the same time: every result
 * must be bit-identical to the serial run, and every thread's error message must be its own
 * (thread-local). The GPU version of this soak (streams, two contexts) is the reliability
 * issue's; this one runs in CI, under ASan too.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kiln.h"
#include "test_util.h"

enum { THREADS = 8, ROUNDS = 100, OPS = 4 };
enum { M = 33, K = 40, N = 24, S = 19, D = 16 };

static kiln_context *g_ctx;

/* Inputs, shared read-only by every thread. */
static uint16_t a16[M * K], b16[K * N], dc16[M * N], q16[2 * S * D], k16[S * D], v16[S * D];
static int8_t a8[M * K], b8[K * N];
static float cast_src[M * K];

/* One op's output buffer set: the serial reference and each thread's copy. */
typedef struct outputs {
  float mm[M * N];
  uint16_t att[2 * S * D];
  float lse[2 * S];
  float i8[M * N];
  uint16_t cast[M * K];
  float da[M * K];
} outputs;

static outputs g_ref;

static DLTensor t2(void *data, DLDataType dt, int64_t *shape) {
  return (DLTensor){data, {kDLCPU, 0}, 2, dt, shape, NULL, 0};
}

/* Runs op `which` into out; returns the status of the call. */
static kiln_status run_op(int which, outputs *out) {
  static int64_t sa[2] = {M, K}, sb[2] = {K, N}, sc[2] = {M, N};
  static int64_t sq[3] = {2, S, D}, skv[3] = {1, S, D}, sl[2] = {2, S};
  const DLDataType i8 = {kDLInt, 8, 1};
  switch (which) {
  case 0: { /* matmul f16 -> f32, and the dA of a given f16 dC */
    DLTensor a = t2(a16, TEST_F16, sa), b = t2(b16, TEST_F16, sb), c = t2(out->mm, TEST_F32, sc);
    kiln_status st = kiln_matmul(g_ctx, &a, &b, &c, NULL, NULL);
    if (st) return st;
    DLTensor dc = t2(dc16, TEST_F16, sc), da = t2(out->da, TEST_F32, sa);
    return kiln_matmul_backward(g_ctx, &a, &b, &dc, &da, NULL, NULL, 0, NULL, NULL);
  }
  case 1: { /* causal GQA attention with LSE */
    DLTensor q = {q16, {kDLCPU, 0}, 3, TEST_F16, sq, NULL, 0}, k = {k16, {kDLCPU, 0}, 3, TEST_F16, skv, NULL, 0},
             v = {v16, {kDLCPU, 0}, 3, TEST_F16, skv, NULL, 0}, o = {out->att, {kDLCPU, 0}, 3, TEST_F16, sq, NULL, 0},
             lse = t2(out->lse, TEST_F32, sl);
    kiln_attention_opts opts = kiln_attention_opts_default();
    opts.causal = 1;
    return kiln_attention(g_ctx, &q, &k, &v, &o, &lse, &opts, NULL);
  }
  case 2: { /* int8 x int8 -> f32 */
    DLTensor a = t2(a8, i8, sa), b = t2(b8, i8, sb), c = t2(out->i8, TEST_F32, sc);
    kiln_matmul_int8_opts opts = kiln_matmul_int8_opts_default();
    opts.scale = 0.125f;
    return kiln_matmul_int8(g_ctx, &a, &b, &c, &opts, NULL);
  }
  default: { /* cast f32 -> bf16 */
    DLTensor src = t2(cast_src, TEST_F32, sa), dst = t2(out->cast, TEST_BF16, sa);
    return kiln_cast(g_ctx, &src, &dst, NULL);
  }
  }
}

typedef struct worker {
  int id, mismatches, errors, wrong_messages;
  pthread_barrier_t *start;
} worker;

static void *work(void *arg) {
  worker *w = arg;
  outputs *out = malloc(sizeof *out);
  if (!out) {
    w->errors++;
    return NULL;
  }
  pthread_barrier_wait(w->start);
  for (int r = 0; r < ROUNDS; r++)
    for (int i = 0; i < OPS; i++) {
      const int which = (w->id + r + i) % OPS;
      memset(out, 0xFF, sizeof *out); /* NaN poison */
      if (run_op(which, out) != KILN_OK) {
        w->errors++;
        continue;
      }
      int same = 1;
      switch (which) {
      case 0: same = !memcmp(out->mm, g_ref.mm, sizeof out->mm) && !memcmp(out->da, g_ref.da, sizeof out->da); break;
      case 1: same = !memcmp(out->att, g_ref.att, sizeof out->att) && !memcmp(out->lse, g_ref.lse, sizeof out->lse); break;
      case 2: same = !memcmp(out->i8, g_ref.i8, sizeof out->i8); break;
      default: same = !memcmp(out->cast, g_ref.cast, sizeof out->cast); break;
      }
      w->mismatches += !same;
      /* A failing call in between: its message must name this thread's bad value. */
      int64_t bad[2] = {M, K + 1 + w->id};
      DLTensor a = t2(a16, TEST_F16, bad), b = t2(b16, TEST_F16, (int64_t[2]){K, N}),
               c = t2(out->mm, TEST_F32, (int64_t[2]){M, N});
      char want[64];
      snprintf(want, sizeof want, "K = %d", K + 1 + w->id);
      if (kiln_matmul(g_ctx, &a, &b, &c, NULL, NULL) == KILN_OK || !strstr(kiln_last_error(), want))
        w->wrong_messages++;
    }
  free(out);
  return NULL;
}

static void eight_threads_share_one_cpu_context(void **state) {
  (void)state;
  test_seed(4242);
  test_fill(a16, TEST_F16, M * K);
  test_fill(b16, TEST_F16, K * N);
  test_fill(dc16, TEST_F16, M * N);
  test_fill(q16, TEST_F16, 2 * S * D);
  test_fill(k16, TEST_F16, S * D);
  test_fill(v16, TEST_F16, S * D);
  test_fill(cast_src, TEST_F32, M * K);
  for (int i = 0; i < M * K; i++) a8[i] = (int8_t)(test_uniform() * 127.0f);
  for (int i = 0; i < K * N; i++) b8[i] = (int8_t)(test_uniform() * 127.0f);
  for (int op = 0; op < OPS; op++) assert_kiln_ok(run_op(op, &g_ref));

  pthread_barrier_t start;
  assert_int_equal(pthread_barrier_init(&start, NULL, THREADS), 0);
  pthread_t tid[THREADS];
  worker w[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i] = (worker){.id = i, .start = &start};
    assert_int_equal(pthread_create(&tid[i], NULL, work, &w[i]), 0);
  }
  int mismatches = 0, errors = 0, wrong = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(tid[i], NULL);
    mismatches += w[i].mismatches, errors += w[i].errors, wrong += w[i].wrong_messages;
  }
  pthread_barrier_destroy(&start);
  print_message("  %d threads x %d rounds x %d ops: %d mismatches, %d errors, %d wrong error messages\n", THREADS,
                ROUNDS, OPS, mismatches, errors, wrong);
  assert_int_equal(errors, 0);
  assert_int_equal(mismatches, 0);
  assert_int_equal(wrong, 0);
}

int main(int argc, char **argv) {
  test_apply_filter(argc, argv);
  if (kiln_context_create(kDLCPU, 0, &g_ctx) != KILN_OK) {
    printf("FAIL: CPU context: %s\n", kiln_last_error());
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(eight_threads_share_one_cpu_context),
  };
  int failed = cmocka_run_group_tests_name("concurrency_host", tests, NULL, NULL);
  kiln_context_destroy(g_ctx);
  return failed;
}
