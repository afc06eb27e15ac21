/*
 * bench.c — kiln-bench's harness: device setup, event timing, random inputs, the cuBLAS peer and
 * the table / JSON output. See bench.h for the contract of each function.
 */
#define _POSIX_C_SOURCE 200809L

#include "bench.h"

#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------------------------ */
/* Options                                                                                     */
/* ------------------------------------------------------------------------------------------ */
void bench_common_init(bench_common *c) {
  memset(c, 0, sizeof *c);
}

static int parse_int(const char *opt, const char *s, int lo, int hi, int *out) {
  char *end = NULL;
  long v = s ? strtol(s, &end, 10) : 0;
  if (!s || !*s || *end || v < lo || v > hi) {
    fprintf(stderr, "kiln-bench: %s expects an integer in [%d, %d], got \"%s\"\n", opt, lo, hi, s ? s : "");
    return -1;
  }
  *out = (int)v;
  return 0;
}

int bench_parse_common(int argc, char **argv, int *i, bench_common *c, const char *usage) {
  const char *a = argv[*i];
  const char *val = *i + 1 < argc ? argv[*i + 1] : NULL;
  if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
    fputs(usage, stdout);
    return BENCH_HELP;
  }
  if (!strcmp(a, "--quick")) {
    c->quick = 1;
    return 1;
  }
  if (!strcmp(a, "--paired") && strstr(usage, "--paired")) {
    c->paired = 1;
    return 1;
  }
  if (strcmp(a, "--json") && strcmp(a, "--reps") && strcmp(a, "--batch-us") && strcmp(a, "--device")) return 0;
  if (!val) {
    fprintf(stderr, "kiln-bench: %s needs a value\n", a);
    return -1;
  }
  ++*i;
  if (!strcmp(a, "--json")) {
    c->json_path = val;
    return 1;
  }
  if (!strcmp(a, "--reps")) return parse_int(a, val, 1, 100000, &c->reps) ? -1 : 1;
  if (!strcmp(a, "--batch-us")) return parse_int(a, val, 1, 100000, &c->batch_us) ? -1 : 1;
  return parse_int(a, val, 0, 1023, &c->device) ? -1 : 1;
}

/* ------------------------------------------------------------------------------------------ */
/* Element types                                                                               */
/* ------------------------------------------------------------------------------------------ */
size_t bench_dtype_size(bench_dtype dt) {
  switch (dt) {
  case BENCH_F32: return 4;
  case BENCH_F16:
  case BENCH_BF16: return 2;
  case BENCH_I8: return 1;
  }
  return 0;
}

const char *bench_dtype_name(bench_dtype dt) {
  switch (dt) {
  case BENCH_F32: return "f32";
  case BENCH_F16: return "f16";
  case BENCH_BF16: return "bf16";
  case BENCH_I8: return "i8";
  }
  return "?";
}

DLDataType bench_dtype_dl(bench_dtype dt) {
  DLDataType t = {kDLFloat, 32, 1};
  switch (dt) {
  case BENCH_F32: break;
  case BENCH_F16: t.bits = 16; break;
  case BENCH_BF16: t.code = kDLBfloat; t.bits = 16; break;
  case BENCH_I8: t.code = kDLInt; t.bits = 8; break;
  }
  return t;
}

int bench_dtype_parse(const char *s, bench_dtype *dt) {
  static const bench_dtype all[] = {BENCH_F32, BENCH_F16, BENCH_BF16, BENCH_I8};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (s && !strcmp(s, bench_dtype_name(all[i]))) {
      *dt = all[i];
      return 0;
    }
  return -1;
}

float bench_load_f32(bench_dtype dt, const void *base, size_t i) {
  switch (dt) {
  case BENCH_F32: return ((const float *)base)[i];
  case BENCH_F16: return kiln_f16_to_f32(((const uint16_t *)base)[i]);
  case BENCH_BF16: return kiln_bf16_to_f32(((const uint16_t *)base)[i]);
  case BENCH_I8: return (float)((const int8_t *)base)[i];
  }
  return NAN;
}

/* ------------------------------------------------------------------------------------------ */
/* Device environment                                                                          */
/* ------------------------------------------------------------------------------------------ */
int bench_cu_check(bench_env *env, CUresult r, const char *what) {
  if (r == CUDA_SUCCESS) return 0;
  const char *name = NULL, *text = NULL;
  if (env->cu->cuGetErrorName(r, &name) != CUDA_SUCCESS) name = NULL;
  if (env->cu->cuGetErrorString(r, &text) != CUDA_SUCCESS) text = NULL;
  fprintf(stderr, "kiln-bench: %s failed: %s (%s)\n", what, name ? name : "unknown CUDA error",
          text ? text : "no description");
  env->failures++;
  return -1;
}

/* Device facts straight from the driver, for a driver-only env whose kiln context failed. */
static int info_from_driver(bench_env *env, int ordinal) {
  const kiln_cuda_api *cu = env->cu;
  kiln_device_info *in = &env->info;
  CUdevice dev;
  int l2 = 0;
  memset(in, 0, sizeof *in);
  in->ordinal = ordinal;
  in->driver_version = cu->driver_version;
  if (bench_cu_check(env, cu->cuDeviceGet(&dev, ordinal), "cuDeviceGet") ||
      bench_cu_check(env, cu->cuDeviceGetName(in->name, (int)sizeof in->name, dev), "cuDeviceGetName") ||
      bench_cu_check(env, cu->cuDeviceGetAttribute(&in->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
                     "cuDeviceGetAttribute") ||
      bench_cu_check(env, cu->cuDeviceGetAttribute(&in->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
                     "cuDeviceGetAttribute") ||
      bench_cu_check(env, cu->cuDeviceGetAttribute(&in->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
                     "cuDeviceGetAttribute") ||
      bench_cu_check(env, cu->cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev),
                     "cuDeviceGetAttribute") ||
      bench_cu_check(env, cu->cuDeviceTotalMem(&in->total_memory, dev), "cuDeviceTotalMem"))
    return -1;
  in->l2_bytes = (size_t)l2;
  return 0;
}

int bench_env_open(bench_env *env, const bench_common *opts, int need_kernels) {
  memset(env, 0, sizeof *env);
  env->opts = *opts;
  time_t t = time(NULL);
  struct tm tm;
  if (gmtime_r(&t, &tm)) strftime(env->date, sizeof env->date, "%Y-%m-%dT%H:%M:%SZ", &tm);

  kiln_status st;
  env->cu = kiln_cuda("kiln-bench", &st);
  if (!env->cu) {
    fprintf(stderr, "kiln-bench: cannot use the CUDA driver: %s: %s\n", kiln_status_string(st), kiln_last_error());
    return -1;
  }
  const kiln_cuda_api *cu = env->cu;
  st = kiln_context_create(kDLCUDA, opts->device, &env->ctx);
  if (st != KILN_OK) {
    fprintf(stderr, "kiln-bench: kiln_context_create: %s: %s\n", kiln_status_string(st), kiln_last_error());
    if (need_kernels || st != KILN_ERROR_NO_KERNEL_IMAGE) return -1;
    fprintf(stderr, "kiln-bench: continuing with driver-only measurements\n");
    if (info_from_driver(env, opts->device)) return -1;
  } else if ((st = kiln_context_info(env->ctx, &env->info)) != KILN_OK) {
    fprintf(stderr, "kiln-bench: kiln_context_info: %s\n", kiln_last_error());
    return -1;
  }

  /* kiln pushes its context only inside its own calls; ours (alloc, events, cuBLAS through the
   * runtime) need the same primary context current on this thread. */
  if (bench_cu_check(env, cu->cuDeviceGet(&env->device, opts->device), "cuDeviceGet")) return -1;
  if (bench_cu_check(env, cu->cuDevicePrimaryCtxRetain(&env->primary, env->device), "cuDevicePrimaryCtxRetain"))
    return -1;
  if (bench_cu_check(env, cu->cuCtxPushCurrent(env->primary), "cuCtxPushCurrent")) {
    cu->cuDevicePrimaryCtxRelease(env->device);
    env->primary = NULL;
    return -1;
  }
  if (bench_cu_check(env, cu->cuStreamCreate(&env->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate")) return -1;
  size_t free_b = 0, total_b = 0;
  if (bench_cu_check(env, cu->cuMemGetInfo(&free_b, &total_b), "cuMemGetInfo")) return -1;
  env->mem_budget = free_b / 4; /* leaves room for the op's other buffers and cuBLAS's workspace */

  int kmaj = 0, kmin = 0, kpat = 0;
  kiln_version(&kmaj, &kmin, &kpat);
  const kiln_device_info *in = &env->info;
  printf("device %d: %s | sm_%d%d | %d SMs | L2 %.1f MiB | %.1f GiB | driver %d.%d | kiln %d.%d.%d | %s\n",
         in->ordinal, in->name, in->cc_major, in->cc_minor, in->sm_count, (double)in->l2_bytes / (1 << 20),
         (double)in->total_memory / (1u << 30), in->driver_version / 1000, in->driver_version % 1000 / 10, kmaj,
         kmin, kpat, env->date);
  fflush(stdout);
  env->opened = 1;
  return 0;
}

static int write_json(const bench_env *env, const char *path);

int bench_env_close(bench_env *env) {
  int status = env->failures ? 1 : 0;
  if (env->opened && env->opts.json_path) {
    if (write_json(env, env->opts.json_path)) status = 1;
    else printf("wrote %zu result%s to %s\n", env->n_rows, env->n_rows == 1 ? "" : "s", env->opts.json_path);
  }
  if (env->cu) {
    const kiln_cuda_api *cu = env->cu;
    if (env->stream) {
      cu->cuStreamSynchronize(env->stream);
      cu->cuStreamDestroy(env->stream);
    }
    if (env->primary) {
      CUcontext popped;
      cu->cuCtxPopCurrent(&popped);
      cu->cuDevicePrimaryCtxRelease(env->device);
    }
  }
  kiln_context_destroy(env->ctx);
  free(env->rows);
  memset(env, 0, sizeof *env);
  return status;
}

int bench_alloc(bench_env *env, size_t bytes, CUdeviceptr *out) {
  *out = 0;
  CUresult r = env->cu->cuMemAlloc(out, bytes ? bytes : 1);
  if (r == CUDA_SUCCESS) return 0;
  char what[64];
  snprintf(what, sizeof what, "cuMemAlloc(%.1f MiB)", (double)bytes / (1 << 20));
  bench_cu_check(env, r, what);
  *out = 0;
  return -1;
}

void bench_free(bench_env *env, CUdeviceptr p) {
  if (p) env->cu->cuMemFree(p);
}

/* ------------------------------------------------------------------------------------------ */
/* Random data and checking                                                                    */
/* ------------------------------------------------------------------------------------------ */
#define BENCH_HOST_CHUNK ((size_t)1 << 22) /* elements staged on the host at a time */

static uint64_t xorshift64(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

int bench_fill_random(bench_env *env, CUdeviceptr dst, size_t count, bench_dtype dt, uint64_t seed) {
  const kiln_cuda_api *cu = env->cu;
  size_t es = bench_dtype_size(dt);
  size_t chunk = count < BENCH_HOST_CHUNK ? count : BENCH_HOST_CHUNK;
  unsigned char *host = malloc((chunk ? chunk : 1) * es);
  if (!host) {
    fprintf(stderr, "kiln-bench: out of host memory filling random data\n");
    env->failures++;
    return -1;
  }
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull; /* any seed, never a zero state */
  if (!s) s = 1;
  for (size_t done = 0; done < count; done += chunk) {
    size_t n = count - done < chunk ? count - done : chunk;
    for (size_t i = 0; i < n; i++) {
      uint64_t x = xorshift64(&s);
      if (dt == BENCH_I8) {
        int v = (int)(x % 254); /* 0..253 -> -127..-1, 1..127 */
        ((int8_t *)host)[i] = (int8_t)(v < 127 ? v - 127 : v - 126);
        continue;
      }
      /* (2k+1)/2^24 - 1 for a 24-bit k: uniform in (-1,1), exact in f32, odd numerator so never 0,
       * and at least 2^-24 in magnitude so f16 and bf16 keep it nonzero too. */
      int32_t k = (int32_t)(x >> 40);
      float f = (float)(2 * k + 1 - (1 << 24)) * 0x1p-24f;
      if (dt == BENCH_F32) ((float *)host)[i] = f;
      else ((uint16_t *)host)[i] = dt == BENCH_F16 ? kiln_f32_to_f16(f) : kiln_f32_to_bf16(f);
    }
    /* Unified addressing lets the copy take a host pointer; the sync makes the buffer reusable. */
    if (bench_cu_check(env, cu->cuMemcpyAsync(dst + done * es, (CUdeviceptr)(uintptr_t)host, n * es, env->stream),
                       "cuMemcpyAsync (host to device)") ||
        bench_cu_check(env, cu->cuStreamSynchronize(env->stream), "cuStreamSynchronize")) {
      free(host);
      return -1;
    }
  }
  free(host);
  return 0;
}

int bench_rel_error(bench_env *env, CUdeviceptr x, CUdeviceptr ref, size_t count, bench_dtype dt, double *err) {
  const kiln_cuda_api *cu = env->cu;
  size_t es = bench_dtype_size(dt);
  size_t chunk = count < BENCH_HOST_CHUNK ? count : BENCH_HOST_CHUNK;
  unsigned char *hx = malloc((chunk ? chunk : 1) * es), *hr = malloc((chunk ? chunk : 1) * es);
  *err = NAN;
  if (!hx || !hr) {
    free(hx);
    free(hr);
    fprintf(stderr, "kiln-bench: out of host memory checking results\n");
    env->failures++;
    return -1;
  }
  double num = 0, den = 0;
  int nan_seen = 0;
  for (size_t done = 0; done < count; done += chunk) {
    size_t n = count - done < chunk ? count - done : chunk;
    if (bench_cu_check(env, cu->cuMemcpyAsync((CUdeviceptr)(uintptr_t)hx, x + done * es, n * es, env->stream),
                       "cuMemcpyAsync (device to host)") ||
        bench_cu_check(env, cu->cuMemcpyAsync((CUdeviceptr)(uintptr_t)hr, ref + done * es, n * es, env->stream),
                       "cuMemcpyAsync (device to host)") ||
        bench_cu_check(env, cu->cuStreamSynchronize(env->stream), "cuStreamSynchronize")) {
      free(hx);
      free(hr);
      return -1;
    }
    for (size_t i = 0; i < n; i++) {
      double a = bench_load_f32(dt, hx, i), b = bench_load_f32(dt, hr, i);
      if (isnan(a) || isnan(b)) nan_seen = 1;
      num += (a - b) * (a - b);
      den += b * b;
    }
  }
  free(hx);
  free(hr);
  *err = nan_seen ? NAN : den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
  return 0;
}

int bench_rotation_count(const bench_env *env, size_t bytes_per_call, size_t budget_bytes) {
  if (!bytes_per_call) return 1;
  size_t n = 2 * env->info.l2_bytes / bytes_per_call + 1;
  size_t cap = budget_bytes / bytes_per_call;
  if (n > cap) n = cap;
  if (n < 1) n = 1;
  return n > 1024 ? 1024 : (int)n;
}

/* ------------------------------------------------------------------------------------------ */
/* Timing                                                                                      */
/* ------------------------------------------------------------------------------------------ */
static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef struct copy_call {
  bench_env *env;
  CUdeviceptr src, dst;
  size_t bytes;
} copy_call;

static int copy_call_fn(void *user, int iter) {
  (void)iter; /* the buffer is far larger than L2: no rotation needed */
  copy_call *cc = user;
  return bench_cu_check(cc->env, cc->env->cu->cuMemcpyAsync(cc->dst, cc->src, cc->bytes, cc->env->stream),
                        "cuMemcpyAsync (device to device)");
}

int bench_copy_time(bench_env *env, size_t bytes, bench_timing *out) {
  copy_call cc = {env, 0, 0, bytes};
  int rc = -1;
  if (!bench_alloc(env, 2 * bytes, &cc.src) && !bench_fill_random(env, cc.src, bytes / 4, BENCH_F32, 7)) {
    cc.dst = cc.src + bytes;
    rc = bench_time(env, env->stream, copy_call_fn, &cc, bench_default_reps(env), out) ? -1 : 0;
  }
  bench_free(env, cc.src);
  return rc;
}

double bench_copy_gbps(bench_env *env) {
  const size_t bytes = (size_t)512 << 20;
  bench_timing copy;
  const double gbps = bench_copy_time(env, bytes, &copy) ? NAN : 2.0 * (double)bytes / copy.median_us / 1e3;
  printf("device copy bandwidth (read + write): %.0f GB/s\n", gbps);
  return gbps;
}

int bench_w16_algo_parse(const char *s) {
  static const char *const names[3] = {"auto", "decode", "prefill"};
  for (int i = 0; s && i < 3; i++)
    if (!strcmp(s, names[i])) return i;
  return -1;
}
const char *bench_w16_algo_suffix(int algo) { return algo == 1 ? " decode" : algo == 2 ? " prefill" : ""; }
int bench_w16_gets_workspace(int algo, int64_t m) { return algo == 2 || (algo == 0 && m >= 128); }

int bench_default_reps(const bench_env *env) {
  return env->opts.reps > 0 ? env->opts.reps : env->opts.quick ? 10 : 30;
}

/* Enqueues calls [*iter, *iter + n) between events start and end. */
static int run_batch(bench_env *env, CUstream stream, bench_fn fn, void *user, int *iter, long n, CUevent start,
                     CUevent end) {
  if (start && bench_cu_check(env, env->cu->cuEventRecord(start, stream), "cuEventRecord")) return -1;
  for (long j = 0; j < n; j++) {
    int rc = fn(user, (*iter)++);
    if (rc) return rc;
  }
  return bench_cu_check(env, env->cu->cuEventRecord(end, stream), "cuEventRecord");
}

/* Warm-up in doubling groups, each timed between events a and b: brings clocks up, lets libraries
 * pick and load their kernels, and the last group gives the per-call estimate (µs) that sizes the
 * batches. */
static int warm_up(bench_env *env, CUstream stream, bench_fn fn, void *user, int *iter, CUevent a, CUevent b,
                   double *per_call_us) {
  const kiln_cuda_api *cu = env->cu;
  double t0 = now_ms();
  long group = 1, calls = 0;
  for (;;) {
    float ms = 0;
    int rc = run_batch(env, stream, fn, user, iter, group, a, b);
    if (rc || (rc = bench_cu_check(env, cu->cuEventSynchronize(b), "cuEventSynchronize (warm-up)")) ||
        (rc = bench_cu_check(env, cu->cuEventElapsedTime(&ms, a, b), "cuEventElapsedTime")))
      return rc;
    calls += group;
    *per_call_us = (double)ms * 1e3 / (double)group;
    if (*per_call_us < 0.01) *per_call_us = 0.01; /* below the events' resolution */
    if (now_ms() - t0 >= BENCH_WARMUP_MS && calls >= BENCH_WARMUP_CALLS) return 0;
    long cap = (long)(BENCH_WARMUP_MS * 1e3 / 2 / *per_call_us); /* one group <= half the warm-up */
    group = group * 2 < cap ? group * 2 : (cap > 1 ? cap : 1);
  }
}

/* Calls per sample: one sample spans at least BENCH_BATCH_US (--batch-us), so event resolution
 * and launch jitter stay small. An event between two calls also ends a programmatic dependent
 * launch's overlap with the call before it, so short calls measure closer to a model's stream of
 * kernels with longer batches (scripts/probes/read_floor.cu: reads of 8.8-123 MB 5-14 % faster). */
static long batch_for(const bench_env *env, double per_call_us) {
  const double span = env->opts.batch_us > 0 ? env->opts.batch_us : BENCH_BATCH_US;
  return per_call_us < span ? (long)(span / per_call_us) + 1 : 1;
}

/* Median, min and p90 of n per-call samples (sorted in place). */
static void summarize(double *samples, int n, long batch, bench_timing *out) {
  qsort(samples, (size_t)n, sizeof *samples, cmp_double);
  out->min_us = samples[0];
  out->median_us = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  out->p90_us = samples[(9 * n + 9) / 10 - 1]; /* ceil(0.9 n) - 1 */
  out->reps = n;
  out->batch = (int)batch;
}

/* Element q (0..1) of n sorted values, interpolated. */
static double quantile(const double *v, int n, double q) {
  const double x = q * (double)(n - 1);
  const int i = (int)x;
  return i + 1 < n ? v[i] + (x - (double)i) * (v[i + 1] - v[i]) : v[n - 1];
}

/* A measurement's n_ev events and n_samples samples; nonzero (after printing why) when they could
 * not all be had. Whatever was had is released by timing_end. */
static int timing_begin(bench_env *env, int n_ev, int n_samples, CUevent **ev, double **samples) {
  *ev = calloc((size_t)n_ev, sizeof **ev);
  *samples = calloc((size_t)n_samples, sizeof **samples);
  if (!*ev || !*samples) {
    fprintf(stderr, "kiln-bench: out of host memory for timing\n");
    return -1;
  }
  int rc = 0;
  for (int i = 0; i < n_ev && !rc; i++)
    rc = bench_cu_check(env, env->cu->cuEventCreate(&(*ev)[i], CU_EVENT_DEFAULT), "cuEventCreate");
  return rc;
}

/* Releases timing_begin's events and samples; returns rc. */
static int timing_end(bench_env *env, CUstream stream, CUevent *ev, int n_ev, double *samples, int rc) {
  if (rc) env->cu->cuStreamSynchronize(stream); /* no event in use when destroyed; error already reported */
  if (ev)
    for (int i = 0; i < n_ev; i++)
      if (ev[i]) env->cu->cuEventDestroy(ev[i]);
  free(ev);
  free(samples);
  return rc;
}

int bench_time(bench_env *env, CUstream stream, bench_fn fn, void *user, int reps, bench_timing *out) {
  const kiln_cuda_api *cu = env->cu;
  out->median_us = out->min_us = out->p90_us = NAN;
  out->reps = out->batch = 0;
  if (reps < 1) reps = 1;
  const int n_ev = reps + 1; /* reps may shrink below; every created event is destroyed */
  CUevent *ev;
  double *samples;
  int rc = timing_begin(env, n_ev, reps, &ev, &samples), iter = 0;
  double per_call_us = 0;
  if (rc || (rc = warm_up(env, stream, fn, user, &iter, ev[0], ev[1], &per_call_us))) goto done;

  const long batch = batch_for(env, per_call_us);
  long max_reps = (long)(BENCH_MAX_TIMED_MS * 1e3 / (per_call_us * (double)batch));
  if (reps > max_reps) reps = max_reps > 5 ? (int)max_reps : 5;

  /* Samples share boundary events (end of sample r = start of r + 1) and are enqueued back to back
   * with one sync at the end, so the GPU never idles waiting for the host between samples. */
  if ((rc = bench_cu_check(env, cu->cuEventRecord(ev[0], stream), "cuEventRecord"))) goto done;
  for (int r = 0; r < reps && !rc; r++) rc = run_batch(env, stream, fn, user, &iter, batch, NULL, ev[r + 1]);
  if (rc || (rc = bench_cu_check(env, cu->cuEventSynchronize(ev[reps]), "cuEventSynchronize (timed)"))) goto done;
  for (int r = 0; r < reps && !rc; r++) {
    float ms = 0;
    rc = bench_cu_check(env, cu->cuEventElapsedTime(&ms, ev[r], ev[r + 1]), "cuEventElapsedTime");
    samples[r] = (double)ms * 1e3 / (double)batch;
  }
  if (!rc) summarize(samples, reps, batch, out);
done:
  return timing_end(env, stream, ev, n_ev, samples, rc);
}

int bench_time_paired(bench_env *env, CUstream stream, bench_fn kiln_fn, void *kiln_user, bench_fn peer_fn,
                      void *peer_user, int rounds, bench_timing *kiln_out, bench_timing *peer_out,
                      bench_pairing *pair) {
  const kiln_cuda_api *cu = env->cu;
  bench_timing *outs[2] = {kiln_out, peer_out};
  for (int j = 0; j < 2; j++) {
    outs[j]->median_us = outs[j]->min_us = outs[j]->p90_us = NAN;
    outs[j]->reps = outs[j]->batch = 0;
  }
  pair->ratio = pair->ratio_p25 = pair->ratio_p75 = NAN;
  pair->rounds = 0;
  if (rounds < 1) rounds = 1;
  const int n_ev = 2 * rounds + 1; /* rounds may shrink below; every created event is destroyed */
  CUevent *ev;
  double *samples; /* kiln, peer, ratio */
  int rc = timing_begin(env, n_ev, 3 * rounds, &ev, &samples), iter[2] = {0, 0};
  bench_fn fn[2] = {kiln_fn, peer_fn};
  void *user[2] = {kiln_user, peer_user};
  double per_call[2] = {0, 0};
  for (int j = 0; j < 2 && !rc; j++) rc = warm_up(env, stream, fn[j], user[j], &iter[j], ev[0], ev[1], &per_call[j]);
  if (rc) goto done;

  const long batch[2] = {batch_for(env, per_call[0]), batch_for(env, per_call[1])};
  const double round_us = per_call[0] * (double)batch[0] + per_call[1] * (double)batch[1];
  const long max_rounds = (long)(2 * BENCH_MAX_TIMED_MS * 1e3 / round_us); /* two measurements' time */
  if (rounds > max_rounds) rounds = max_rounds > 5 ? (int)max_rounds : 5;

  /* Round r times one batch of each, back to back on the stream, kiln first in even rounds and
   * the peer first in odd ones, so that a clock or temperature drift, or one op warming the L2
   * for the other, falls on both alike; all enqueued with one sync at the end. */
  if ((rc = bench_cu_check(env, cu->cuEventRecord(ev[0], stream), "cuEventRecord"))) goto done;
  for (int r = 0; r < rounds && !rc; r++)
    for (int h = 0; h < 2 && !rc; h++) {
      const int j = (r + h) % 2;
      rc = run_batch(env, stream, fn[j], user[j], &iter[j], batch[j], NULL, ev[2 * r + h + 1]);
    }
  if (rc || (rc = bench_cu_check(env, cu->cuEventSynchronize(ev[2 * rounds]), "cuEventSynchronize (timed)")))
    goto done;
  for (int r = 0; r < rounds && !rc; r++)
    for (int h = 0; h < 2 && !rc; h++) {
      const int j = (r + h) % 2;
      float ms = 0;
      rc = bench_cu_check(env, cu->cuEventElapsedTime(&ms, ev[2 * r + h], ev[2 * r + h + 1]), "cuEventElapsedTime");
      samples[j * rounds + r] = (double)ms * 1e3 / (double)batch[j];
    }
  if (rc) goto done;
  double *ratio = samples + 2 * rounds;
  for (int r = 0; r < rounds; r++) ratio[r] = samples[rounds + r] / samples[r]; /* peer time / kiln time */
  qsort(ratio, (size_t)rounds, sizeof *ratio, cmp_double);
  pair->ratio = quantile(ratio, rounds, 0.5);
  pair->ratio_p25 = quantile(ratio, rounds, 0.25);
  pair->ratio_p75 = quantile(ratio, rounds, 0.75);
  pair->rounds = rounds;
  for (int j = 0; j < 2; j++) summarize(samples + j * rounds, rounds, batch[j], outs[j]);
done:
  return timing_end(env, stream, ev, n_ev, samples, rc);
}

/* ------------------------------------------------------------------------------------------ */
/* cuBLAS                                                                                      */
/* ------------------------------------------------------------------------------------------ */
static int resolve(void *lib, const char *name, void *fn_ptr) {
  void *sym = dlsym(lib, name);
  if (!sym) return -1;
  memcpy(fn_ptr, &sym, sizeof sym); /* ISO C has no void* -> function pointer conversion */
  return 0;
}

int bench_cublas_open(bench_cublas *p, CUstream stream) {
  static const char *const names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
  const char *first = getenv("KILN_BENCH_CUBLAS");
  char why[512] = "";
  memset(p, 0, sizeof *p);
  for (int i = -1; i < 3 && !p->lib; i++) {
    const char *name = i < 0 ? first : names[i];
    if (!name || !*name) continue;
    p->lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (p->lib) p->lib_name = name;
    else if (!why[0]) snprintf(why, sizeof why, "%s", dlerror());
  }
  if (!p->lib) {
    printf("peer: cuBLAS not loaded (dlopen of libcublas.so.13, .so.12, .so failed: %s); kiln-only numbers, "
           "ratio n/a\n",
           why);
    return -1;
  }
  if (resolve(p->lib, "cublasCreate_v2", &p->create) || resolve(p->lib, "cublasDestroy_v2", &p->destroy) ||
      resolve(p->lib, "cublasSetStream_v2", &p->set_stream) ||
      resolve(p->lib, "cublasSetMathMode", &p->set_math_mode) || resolve(p->lib, "cublasGemmEx", &p->gemm_ex) ||
      resolve(p->lib, "cublasGemmStridedBatchedEx", &p->gemm_strided_batched_ex)) {
    printf("peer: %s lacks a needed entry point (%s); kiln-only numbers, ratio n/a\n", p->lib_name, dlerror());
    bench_cublas_close(p);
    return -1;
  }
  cublasStatus_t (*get_property)(int type, int *value) = NULL;
  int v[3] = {0, 0, 0};
  if (!resolve(p->lib, "cublasGetProperty", &get_property) && !get_property(0, &v[0]) && !get_property(1, &v[1]) &&
      !get_property(2, &v[2]))
    snprintf(p->version, sizeof p->version, "%d.%d.%d", v[0], v[1], v[2]);
  cublasStatus_t s = p->create(&p->handle);
  if (s == BENCH_CUBLAS_STATUS_SUCCESS) s = p->set_math_mode(p->handle, BENCH_CUBLAS_DEFAULT_MATH);
  if (s == BENCH_CUBLAS_STATUS_SUCCESS) s = p->set_stream(p->handle, stream);
  if (s != BENCH_CUBLAS_STATUS_SUCCESS) {
    printf("peer: %s: handle setup failed with %s; kiln-only numbers, ratio n/a\n", p->lib_name,
           bench_cublas_status_name(s));
    bench_cublas_close(p);
    return -1;
  }
  printf("peer: cuBLAS %s (%s)\n", p->version[0] ? p->version : "?", p->lib_name);
  return 0;
}

void bench_cublas_close(bench_cublas *p) {
  if (p->handle && p->destroy) p->destroy(p->handle);
  if (p->lib) dlclose(p->lib);
  memset(p, 0, sizeof *p);
}

int bench_cuda_data_type(bench_dtype dt) {
  switch (dt) {
  case BENCH_F32: return BENCH_CUDA_R_32F;
  case BENCH_F16: return BENCH_CUDA_R_16F;
  case BENCH_BF16: return BENCH_CUDA_R_16BF;
  case BENCH_I8: return BENCH_CUDA_R_8I;
  }
  return -1;
}

const char *bench_cublas_status_name(cublasStatus_t s) {
  switch (s) {
  case 0: return "CUBLAS_STATUS_SUCCESS";
  case 1: return "CUBLAS_STATUS_NOT_INITIALIZED";
  case 3: return "CUBLAS_STATUS_ALLOC_FAILED";
  case 7: return "CUBLAS_STATUS_INVALID_VALUE";
  case 8: return "CUBLAS_STATUS_ARCH_MISMATCH";
  case 11: return "CUBLAS_STATUS_MAPPING_ERROR";
  case 13: return "CUBLAS_STATUS_EXECUTION_FAILED";
  case 14: return "CUBLAS_STATUS_INTERNAL_ERROR";
  case 15: return "CUBLAS_STATUS_NOT_SUPPORTED";
  case 16: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

/* ------------------------------------------------------------------------------------------ */
/* Results                                                                                     */
/* ------------------------------------------------------------------------------------------ */
static void copy_str(char *dst, size_t cap, const char *src) {
  snprintf(dst, cap, "%s", src ? src : "");
}

void bench_row_init(bench_row *r, const char *op, const char *shape, const char *dtype, const char *algo,
                    bench_unit unit, double work) {
  memset(r, 0, sizeof *r);
  copy_str(r->op, sizeof r->op, op);
  copy_str(r->shape, sizeof r->shape, shape);
  copy_str(r->dtype, sizeof r->dtype, dtype);
  copy_str(r->algo, sizeof r->algo, algo);
  r->unit = unit;
  r->work = work;
  r->kiln.median_us = r->kiln.min_us = r->kiln.p90_us = NAN;
  r->peer_t.median_us = r->peer_t.min_us = r->peer_t.p90_us = NAN;
  r->pair.ratio = r->pair.ratio_p25 = r->pair.ratio_p75 = NAN;
  r->rel_err = NAN;
}

double bench_rate(const bench_row *r, double us) {
  if (!isfinite(us) || us <= 0) return NAN;
  return r->unit == BENCH_TFLOPS ? r->work / us * 1e-6 : r->work / us * 1e-3;
}

static const char *unit_name(bench_unit u) { return u == BENCH_TFLOPS ? "TFLOP/s" : "GB/s"; }

/* Ratio of throughputs, kiln over peer: > 1 means kiln is faster. Paired: the median of the
 * rounds' ratios. */
static double row_ratio(const bench_row *r) {
  if (r->pair.rounds > 0) return r->pair.ratio;
  double k = r->kiln.median_us, p = r->peer_t.median_us;
  return isfinite(k) && isfinite(p) && k > 0 ? p / k : NAN;
}

static const char *fmt_num(char *buf, size_t cap, double v, int prec) {
  if (!isfinite(v)) snprintf(buf, cap, "-");
  else snprintf(buf, cap, "%.*f", prec, v);
  return buf;
}

/* Small rates (GEMV-like shapes in TFLOP/s) keep two significant digits. */
static const char *fmt_rate(char *buf, size_t cap, double v) {
  return fmt_num(buf, cap, v, isfinite(v) && v < 10 ? 2 : 1);
}

void bench_table_header(bench_unit unit) {
  char kr[24], pr[24];
  snprintf(kr, sizeof kr, "kiln %s", unit_name(unit));
  snprintf(pr, sizeof pr, "peer %s", unit_name(unit));
  printf("%-7s %-20s %-9s %-8s %10s %12s %10s %12s %6s %8s  %s\n", "op", "shape", "dtype", "algo", "kiln us", kr,
         "peer us", pr, "ratio", "rel err", "note");
  fflush(stdout);
}

int bench_row_paired(bench_env *env, bench_row *row, bench_fn kiln_fn, bench_fn peer_fn, void *user,
                     const kiln_status *st, const cublasStatus_t *cst) {
  if (!bench_time_paired(env, env->stream, kiln_fn, user, peer_fn, user, bench_default_reps(env), &row->kiln,
                         &row->peer_t, &row->pair))
    return 0;
  if (*st == KILN_OK && *cst == BENCH_CUBLAS_STATUS_SUCCESS) return -1; /* a driver error */
  snprintf(row->note, sizeof row->note, "error: %s",
           *st != KILN_OK ? kiln_last_error() : bench_cublas_status_name(*cst));
  env->failures++;
  return 0;
}

void bench_report(bench_env *env, const bench_row *r) {
  char b[6][32];
  char err[32];
  if (isfinite(r->rel_err)) snprintf(err, sizeof err, "%.1e", r->rel_err);
  else snprintf(err, sizeof err, "%s", !isnan(r->rel_err) ? "inf" : r->check_failed ? "nan" : "-");
  double ratio = row_ratio(r);
  char paired[96] = "";
  if (r->pair.rounds > 0)
    snprintf(paired, sizeof paired, "%spaired: %d rounds, ratio quartiles %.3f-%.3f", r->note[0] ? "; " : "",
             r->pair.rounds, r->pair.ratio_p25, r->pair.ratio_p75);
  printf("%-7s %-20s %-9s %-8s %10s %12s %10s %12s %6s %8s  %s%s%s\n", r->op, r->shape, r->dtype, r->algo,
         fmt_num(b[0], 32, r->kiln.median_us, 2), fmt_rate(b[1], 32, bench_rate(r, r->kiln.median_us)),
         fmt_num(b[2], 32, r->peer_t.median_us, 2), fmt_rate(b[3], 32, bench_rate(r, r->peer_t.median_us)),
         r->peer[0] && isfinite(ratio) ? fmt_num(b[4], 32, ratio, r->pair.rounds > 0 ? 3 : 2) : "n/a", err,
         r->check_failed ? "CHECK FAILED " : "", r->note, paired);
  fflush(stdout);
  if (r->check_failed) env->failures++;
  if (env->n_rows == env->cap_rows) {
    size_t cap = env->cap_rows ? 2 * env->cap_rows : 64;
    bench_row *rows = realloc(env->rows, cap * sizeof *rows);
    if (!rows) {
      fprintf(stderr, "kiln-bench: out of host memory keeping results; this row is missing from the JSON\n");
      env->failures++;
      return;
    }
    env->rows = rows;
    env->cap_rows = cap;
  }
  env->rows[env->n_rows++] = *r;
}

/* ------------------------------------------------------------------------------------------ */
/* JSON                                                                                        */
/* ------------------------------------------------------------------------------------------ */
static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
    case '"': fputs("\\\"", f); break;
    case '\\': fputs("\\\\", f); break;
    case '\n': fputs("\\n", f); break;
    case '\r': fputs("\\r", f); break;
    case '\t': fputs("\\t", f); break;
    default:
      if (*p < 0x20 || *p == 0x7f) fprintf(f, "\\u%04x", *p);
      else fputc(*p, f); /* UTF-8 bytes pass through: JSON text is UTF-8 */
    }
  }
  fputc('"', f);
}

/* NaN and infinities are not JSON numbers: they become null. */
static void json_num(FILE *f, double v) {
  if (isfinite(v)) fprintf(f, "%.10g", v);
  else fputs("null", f);
}

/* One "key": value member; the first of an object has no leading comma. */
static void json_key(FILE *f, const char *key, int first) {
  fputs(first ? "\n    " : ",\n    ", f);
  json_str(f, key);
  fputs(": ", f);
}

static void field_str(FILE *f, const char *key, const char *v) {
  json_key(f, key, 0);
  if (v) json_str(f, v);
  else fputs("null", f);
}

static void field_num(FILE *f, const char *key, double v) {
  json_key(f, key, 0);
  json_num(f, v);
}

static void field_int(FILE *f, const char *key, long long v) {
  json_key(f, key, 0);
  fprintf(f, "%lld", v);
}

static void field_timing(FILE *f, const char *prefix, const bench_row *r, const bench_timing *t) {
  char key[32];
  snprintf(key, sizeof key, "%s_us", prefix);
  field_num(f, key, t->median_us);
  snprintf(key, sizeof key, "%s_min_us", prefix);
  field_num(f, key, t->min_us);
  snprintf(key, sizeof key, "%s_p90_us", prefix);
  field_num(f, key, t->p90_us);
  snprintf(key, sizeof key, "%s_rate", prefix);
  field_num(f, key, bench_rate(r, t->median_us));
  snprintf(key, sizeof key, "%s_reps", prefix);
  field_int(f, key, t->reps);
  snprintf(key, sizeof key, "%s_batch", prefix);
  field_int(f, key, t->batch);
}

static int write_json(const bench_env *env, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) {
    perror(path);
    return -1;
  }
  int kmaj = 0, kmin = 0, kpat = 0;
  char kver[32], cc[16];
  kiln_version(&kmaj, &kmin, &kpat);
  snprintf(kver, sizeof kver, "%d.%d.%d", kmaj, kmin, kpat);
  snprintf(cc, sizeof cc, "%d.%d", env->info.cc_major, env->info.cc_minor);
  fputc('[', f);
  for (size_t i = 0; i < env->n_rows; i++) {
    const bench_row *r = &env->rows[i];
    fputs(i ? ",\n  {" : "\n  {", f);
    json_key(f, "op", 1);
    json_str(f, r->op);
    field_str(f, "shape", r->shape);
    field_str(f, "dtype", r->dtype);
    field_str(f, "algo", r->algo);
    field_str(f, "unit", unit_name(r->unit));
    field_num(f, "work", r->work);
    field_timing(f, "kiln", r, &r->kiln);
    field_str(f, "peer", r->peer[0] ? r->peer : NULL);
    field_timing(f, "peer", r, &r->peer_t);
    field_num(f, "ratio", row_ratio(r));
    field_int(f, "paired_rounds", r->pair.rounds);
    field_num(f, "ratio_p25", r->pair.ratio_p25);
    field_num(f, "ratio_p75", r->pair.ratio_p75);
    field_num(f, "rel_err", r->rel_err);
    json_key(f, "check_failed", 0);
    fputs(r->check_failed ? "true" : "false", f);
    field_str(f, "note", r->note);
    field_str(f, "device", env->info.name);
    field_str(f, "compute_capability", cc);
    field_int(f, "sm_count", env->info.sm_count);
    field_int(f, "driver_version", env->info.driver_version);
    field_str(f, "kiln_version", kver);
    field_str(f, "date", env->date);
    fputs("\n  }", f);
  }
  fputs(env->n_rows ? "\n]\n" : "]\n", f);
  int bad = ferror(f);
  if (fclose(f) || bad) {
    fprintf(stderr, "kiln-bench: writing %s failed\n", path);
    return -1;
  }
  return 0;
}
