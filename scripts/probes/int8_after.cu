/*
 * int8_after.cu — issue 5's open question: why kiln's int8 WGMMA kernel runs 25-30 % slower
 * right after cuBLAS's int8 GEMM than after itself (docs/performance.md, "int8 paired against
 * unpaired"). kiln-bench can only alternate two ops; this probe runs chosen sequences on one
 * stream, times every launch with events, and reads the SM clock between launches:
 *
 *   probe   one block per SM spins N clock64 cycles and divides them by the globaltimer
 *           nanoseconds they took: the SM clock (MHz) right then, per SM.
 *   gap     one thread sleeps D us (__nanosleep): the GPU idles for D us.
 *   m / r   a 64 MB memset of a scratch buffer (leaves dirty lines in L2), or a read of a
 *           128 MB one (leaves L2 full of clean lines, what was dirty written back).
 *
 * Build (scripts/int8-after-probe.sh does it): nvcc -arch=sm_90a -O2 -Iinclude int8_after.cu
 *   -Lslim -lkiln -lcublas -Xlinker -rpath='$ORIGIN/..'.
 * Run: int8_after [M N K] [rounds] ["seq,seq,..."], a sequence being steps separated by spaces.
 * Inputs are random int8 in 8 rotating copies (no call finds its operands in L2), C one each.
 * The f16 operands: one copy (PROBE_F16_ROT=n: n copies, which steps M, A and n rotate through,
 * one counter per library as kiln-bench does), small random halves (PROBE_F16_UNIFORM=1:
 * kiln-bench's uniform (-1, 1)).
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "probe_check.h"

enum { ROT = 8, PROBE_SLOTS = 4096 };

__global__ void clock_probe(long long cycles, float *mhz) {
  unsigned long long t0, t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  const long long c0 = clock64();
  while (clock64() - c0 < cycles) {
  }
  const long long c1 = clock64();
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  if (threadIdx.x == 0) mhz[blockIdx.x] = (float)(c1 - c0) * 1e3f / (float)(t1 - t0);
}

__global__ void idle_gap(unsigned ns) {
  for (unsigned slept = 0; slept < ns; slept += 1000) __nanosleep(1000);
}

__global__ void read_sweep(const uint4 *p, size_t n, unsigned *sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc; /* keeps the loads */
}

/* About 300 KB of straight-line code, run once by a warp on every SM: what it leaves in the SMs'
 * instruction caches is none of the other kernels' code. */
__global__ void icache_flush(unsigned *sink, unsigned x) {
#pragma unroll
  for (int i = 0; i < 6144; i++) x = (x ^ (x >> 7)) * 0x9E3779B1u + (unsigned)i;
  if (x == 0x12345u) *sink = x;
}

/* kiln-bench's f16 operands: uniform in (-1, 1) with a full mantissa (PROBE_F16_UNIFORM=1). */
__global__ void fill_uniform_half(__half *p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned x = (unsigned)i * 2654435761u ^ seed;
    x ^= x >> 15, x *= 2246822519u, x ^= x >> 13, x *= 3266489917u, x ^= x >> 16;
    p[i] = __float2half((float)(2 * (int)(x >> 8) + 1 - (1 << 24)) * 0x1p-24f);
  }
}

__global__ void fill_random(signed char *p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned x = (unsigned)i * 2654435761u ^ seed;
    x ^= x >> 15, x *= 2246822519u, x ^= x >> 13;
    p[i] = (signed char)((int)(x % 255u) - 127);
  }
}

typedef struct world {
  int64_t m, n, k;
  signed char *a, *w; /* ROT copies each */
  float *c_kiln;
  int *c_cublas;
  __half *h_a, *h_w, *h_c; /* f16 operands for the f16 GEMM steps */
  float *hk_c, *hc_c;       /* f32 C of kiln's and cuBLAS's f16 -> f32 GEMMs (steps H, h) */
  int f16_rot;              /* PROBE_F16_ROT: copies of h_a / h_w that steps M, A, n rotate through */
  int kiln_iter, blas_iter; /* their rotation counters, one per library as in kiln-bench */
  kiln_context *ctx;
  cublasHandle_t blas;
  cudaStream_t s;
  int sms, iter;
  float *mhz; /* PROBE_SLOTS x sms */
  void *scratch; /* 128 MB for steps m and r */
  int probes;
} world;

/* x @ W.T operands for kiln: A [M,K], W [N,K] seen as B [K,N], C [M,N] row-major. */
typedef struct linear {
  int64_t as[2], ast[2], bs[2], bst[2], cs[2], cst[2];
  DLTensor a, b, c;
} linear;
static void linear_init(linear *l, const world *g, void *a, void *w, DLDataType in, void *c, int c_bits) {
  const int64_t m = g->m, n = g->n, k = g->k;
  *l = (linear){{m, k}, {k, 1}, {k, n}, {1, k}, {m, n}, {n, 1}, {}, {}, {}};
  l->a = (DLTensor){a, {kDLCUDA, 0}, 2, in, l->as, l->ast, 0};
  l->b = (DLTensor){w, {kDLCUDA, 0}, 2, in, l->bs, l->bst, 0};
  l->c = (DLTensor){c, {kDLCUDA, 0}, 2, {kDLFloat, (uint8_t)c_bits, 1}, l->cs, l->cst, 0};
}

static void kiln_int8_to(world *g, void *cp, int c_bits) {
  const int r = g->iter++ % ROT;
  linear l;
  linear_init(&l, g, g->a + r * g->m * g->k, g->w + r * g->n * g->k, {kDLInt, 8, 1}, cp, c_bits);
  kiln_matmul_int8_opts o = kiln_matmul_int8_opts_default();
  o.algo = KILN_INT8_WGMMA;
  if (kiln_matmul_int8(g->ctx, &l.a, &l.b, &l.c, &o, (CUstream)g->s) != KILN_OK) {
    fprintf(stderr, "kiln_matmul_int8: %s\n", kiln_last_error());
    exit(1);
  }
}

static void kiln_int8_f16(world *g, const char *) { kiln_int8_to(g, g->h_c, 16); }
static void kiln_int8(world *g, const char *) { kiln_int8_to(g, g->c_kiln, 32); }

/* cuBLAS's x @ W.T as the benchmarks call it: C [m, n] row-major is column-major Cᵀ = W·xᵀ.
 * alpha and beta are 1 and 0 in the compute type's scalar (int for 32I, float for 32F). */
static void cublas_linear(world *g, const void *w, const void *a, cudaDataType_t in, void *c, cudaDataType_t ct,
                          cublasComputeType_t compute, const void *alpha, const void *beta) {
  cublasStatus_t st = cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)g->n, (int)g->m, (int)g->k, alpha, w, in,
                                   (int)g->k, a, in, (int)g->k, beta, c, ct, (int)g->n, compute, CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS) fprintf(stderr, "cublasGemmEx: %d\n", (int)st), exit(1);
}

static void cublas_int8(world *g, const char *) {
  const int r = g->iter++ % ROT, alpha = 1, beta = 0;
  cublas_linear(g, g->w + r * g->n * g->k, g->a + r * g->m * g->k, CUDA_R_8I, g->c_cublas, CUDA_R_32I,
                CUBLAS_COMPUTE_32I, &alpha, &beta);
}

static void cublas_f16_to(world *g, void *c, cudaDataType_t ct) {
  const float alpha = 1, beta = 0;
  cublas_linear(g, g->h_w, g->h_a, CUDA_R_16F, c, ct, CUBLAS_COMPUTE_32F, &alpha, &beta);
}
static void cublas_f16(world *g, const char *) { cublas_f16_to(g, g->h_c, CUDA_R_16F); }
static void cublas_f16_f32(world *g, const char *) { cublas_f16_to(g, g->hc_c, CUDA_R_32F); }

/* kiln's f16 GEMM into c: x @ W.T (B k-major, the kernels' _kk variants), or with kn kiln-bench
 * matmul's A [M,K] · B [K,N] row-major (h_w read as [K,N], square shapes only; the _kn kernels),
 * rotating through PROBE_F16_ROT operand copies as kiln-bench does. */
static void kiln_f16_call(world *g, void *c, int c_bits, kiln_matmul_algo algo, bool kn) {
  const int r = kn ? g->kiln_iter++ % g->f16_rot : 0;
  linear l;
  linear_init(&l, g, g->h_a + (size_t)r * g->m * g->k, g->h_w + (size_t)r * g->n * g->k, {kDLFloat, 16, 1}, c, c_bits);
  if (kn) l.bst[0] = g->n, l.bst[1] = 1;
  kiln_matmul_opts o = kiln_matmul_opts_default();
  o.algo = algo;
  if (kiln_matmul(g->ctx, &l.a, &l.b, &l.c, &o, (CUstream)g->s) != KILN_OK) {
    fprintf(stderr, "kiln_matmul: %s\n", kiln_last_error());
    exit(1);
  }
}
static void kiln_mma_sync(world *g, const char *) { kiln_f16_call(g, g->hk_c, 32, KILN_MATMUL_MMA_SYNC, true); }
static void kiln_cp_async(world *g, const char *) { kiln_f16_call(g, g->hk_c, 32, KILN_MATMUL_CP_ASYNC, true); }
static void kiln_mma_sync_kk(world *g, const char *) { kiln_f16_call(g, g->hk_c, 32, KILN_MATMUL_MMA_SYNC, false); }
static void kiln_cp_async_kk(world *g, const char *) { kiln_f16_call(g, g->hk_c, 32, KILN_MATMUL_CP_ASYNC, false); }
/* cuBLAS in kiln-bench's call: column-major C^T = B^T A^T with both operands not transposed. */
static void cublas_bench(world *g, const char *) {
  const float alpha = 1, beta = 0;
  const int r = g->blas_iter++ % g->f16_rot;
  cublasStatus_t st = cublasGemmEx(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)g->n, (int)g->m, (int)g->k, &alpha,
                                   g->h_w + (size_t)r * g->n * g->k, CUDA_R_16F, (int)g->n,
                                   g->h_a + (size_t)r * g->m * g->k, CUDA_R_16F, (int)g->k, &beta, g->hc_c, CUDA_R_32F,
                                   (int)g->n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS) fprintf(stderr, "cublasGemmEx: %d\n", (int)st), exit(1);
}

static void kiln_f16(world *g, const char *) { kiln_f16_call(g, g->h_c, 16, KILN_MATMUL_AUTO, false); }
static void kiln_f16_f32(world *g, const char *) { kiln_f16_call(g, g->hk_c, 32, KILN_MATMUL_AUTO, false); }

static void probe(world *g, const char *) {
  if (g->probes >= PROBE_SLOTS) fprintf(stderr, "out of probe slots\n"), exit(1);
  clock_probe<<<g->sms, 32, 0, g->s>>>(20000, g->mhz + (size_t)g->probes++ * g->sms);
}

static void memset_scratch(world *g, const char *) { CK(cudaMemsetAsync(g->scratch, g->iter++ & 0xff, 64 << 20, g->s)); }
static void read_scratch(world *g, const char *) {
  read_sweep<<<4 * g->sms, 512, 0, g->s>>>((const uint4 *)g->scratch, (128u << 20) / 16, (unsigned *)g->mhz);
}

static void flush_icache(world *g, const char *) { icache_flush<<<g->sms, 32, 0, g->s>>>((unsigned *)g->mhz, 1); }

static void gap(world *g, const char *arg) { idle_gap<<<1, 1, 0, g->s>>>((unsigned)(atof(arg) * 1e3)); }

/* A sequence is a string of steps, e.g. "c g50 k": c cuBLAS int8, k kiln int8, f cuBLAS f16,
 * F kiln f16 (f16 C), h / H the same into f32 C, p clock probe, gD idle D us, m / r a memset /
 * read of scratch, I a kernel of ~300 KB of code on every SM, K kiln int8 into f16 C, M / A kiln
 * MMA_SYNC / CP_ASYNC f16 -> f32 and n cuBLAS f16 -> f32 in kiln-bench matmul's layout (square
 * shapes), U / V MMA_SYNC / CP_ASYNC f16 -> f32 as x @ W.T (B k-major). Each round runs the sequence once; every step is timed. */
typedef void (*step_fn)(world *, const char *);
static step_fn step_of(const char *tok, const char **arg) {
  *arg = tok + 1;
  switch (tok[0]) {
  case 'c': return cublas_int8;
  case 'k': return kiln_int8;
  case 'f': return cublas_f16;
  case 'F': return kiln_f16;
  case 'h': return cublas_f16_f32;
  case 'H': return kiln_f16_f32;
  case 'p': return probe;
  case 'g': return gap;
  case 'm': return memset_scratch;
  case 'r': return read_scratch;
  case 'I': return flush_icache;
  case 'K': return kiln_int8_f16;
  case 'M': return kiln_mma_sync;
  case 'A': return kiln_cp_async;
  case 'n': return cublas_bench;
  case 'U': return kiln_mma_sync_kk;
  case 'V': return kiln_cp_async_kk;
  }
  fprintf(stderr, "unknown step %s\n", tok);
  exit(1);
}

static int cmp_float(const void *x, const void *y) {
  const float a = *(const float *)x, b = *(const float *)y;
  return (a > b) - (a < b);
}

static float median(float *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_float);
  return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

static void run_sequence(world *g, const char *seq, int rounds) {
  char toks[32][16];
  int n = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", seq);
  for (char *t = strtok(buf, " "); t && n < 32; t = strtok(NULL, " ")) snprintf(toks[n++], 16, "%s", t);
  cudaEvent_t *ev = (cudaEvent_t *)calloc((size_t)(rounds * n + 1), sizeof *ev);
  for (int i = 0; i <= rounds * n; i++) CK(cudaEventCreate(&ev[i]));
  g->probes = 0;
  idle_gap<<<1, 1, 0, g->s>>>(20000000); /* 20 ms: the host enqueues everything while it runs */
  CK(cudaEventRecord(ev[0], g->s));
  for (int r = 0; r < rounds; r++)
    for (int i = 0; i < n; i++) {
      const char *arg;
      step_of(toks[i], &arg)(g, arg);
      CK(cudaEventRecord(ev[r * n + i + 1], g->s));
    }
  CK(cudaStreamSynchronize(g->s));
  CK(cudaGetLastError());
  float *t = (float *)malloc(sizeof(float) * (size_t)rounds);
  float *mhz = (float *)malloc(sizeof(float) * (size_t)g->probes * (size_t)g->sms);
  CK(cudaMemcpy(mhz, g->mhz, sizeof(float) * (size_t)g->probes * (size_t)g->sms, cudaMemcpyDeviceToHost));
  printf("%-28s", seq);
  int probe_i = 0;
  for (int i = 0; i < n; i++) {
    for (int r = 0; r < rounds; r++) CK(cudaEventElapsedTime(&t[r], ev[r * n + i], ev[r * n + i + 1]));
    const float us = median(t + rounds / 4, rounds - rounds / 4) * 1e3f; /* the first quarter warms up */
    if (toks[i][0] == 'p') {
      /* MHz: median over SMs and the last 3/4 of the rounds; min over SMs' medians */
      const int per_round = g->probes / rounds;
      float *v = (float *)malloc(sizeof(float) * (size_t)rounds * (size_t)g->sms);
      int nv = 0;
      for (int r = rounds / 4; r < rounds; r++)
        for (int s = 0; s < g->sms; s++) v[nv++] = mhz[((size_t)r * per_round + probe_i) * g->sms + s];
      const float lo = v[0] < v[nv - 1] ? v[0] : v[nv - 1];
      printf(" | p %.0f MHz (%.1f us)", median(v, nv), us);
      (void)lo;
      free(v);
      probe_i++;
    } else {
      printf(" | %s %.1f us", toks[i], us);
    }
  }
  printf("\n");
  fflush(stdout);
  free(t);
  free(mhz);
  for (int i = 0; i <= rounds * n; i++) cudaEventDestroy(ev[i]);
  free(ev);
}

int main(int argc, char **argv) {
  world g;
  memset(&g, 0, sizeof g);
  g.m = argc > 3 ? atoll(argv[1]) : 4096;
  g.n = argc > 3 ? atoll(argv[2]) : 4096;
  g.k = argc > 3 ? atoll(argv[3]) : 4096;
  const int rounds = argc > 4 ? atoi(argv[4]) : 40;
  CK(cudaSetDevice(0));
  CK(cudaFree(0));
  CK(cudaDeviceGetAttribute(&g.sms, cudaDevAttrMultiProcessorCount, 0));
  if (kiln_context_create(kDLCUDA, 0, &g.ctx) != KILN_OK) fprintf(stderr, "%s\n", kiln_last_error()), exit(1);
  CK(cudaStreamCreateWithFlags(&g.s, cudaStreamNonBlocking));
  if (cublasCreate(&g.blas) != CUBLAS_STATUS_SUCCESS) fprintf(stderr, "cublasCreate failed\n"), exit(1);
  cublasSetStream(g.blas, g.s);
  const size_t na = (size_t)(g.m * g.k), nw = (size_t)(g.n * g.k), nc = (size_t)(g.m * g.n);
  CK(cudaMalloc(&g.a, na * ROT));
  CK(cudaMalloc(&g.w, nw * ROT));
  CK(cudaMalloc(&g.c_kiln, nc * 4));
  CK(cudaMalloc(&g.c_cublas, nc * 4));
  g.f16_rot = getenv("PROBE_F16_ROT") ? atoi(getenv("PROBE_F16_ROT")) : 1;
  if (g.f16_rot < 1) g.f16_rot = 1;
  CK(cudaMalloc(&g.h_a, na * 2 * g.f16_rot));
  CK(cudaMalloc(&g.h_w, nw * 2 * g.f16_rot));
  CK(cudaMalloc(&g.h_c, nc * 2));
  CK(cudaMalloc(&g.hk_c, nc * 4));
  CK(cudaMalloc(&g.hc_c, nc * 4));
  CK(cudaMalloc(&g.mhz, sizeof(float) * PROBE_SLOTS * (size_t)g.sms));
  CK(cudaMalloc(&g.scratch, 128 << 20));
  CK(cudaMemset(g.scratch, 1, 128 << 20));
  fill_random<<<1024, 256>>>(g.a, na * ROT, 1);
  fill_random<<<1024, 256>>>(g.w, nw * ROT, 2);
  const char *uniform = getenv("PROBE_F16_UNIFORM");
  if (uniform && *uniform == '1') {
    for (int r = 0; r < g.f16_rot; r++) {
      fill_uniform_half<<<1024, 256>>>(g.h_a + (size_t)r * na, na, 3);
      fill_uniform_half<<<1024, 256>>>(g.h_w + (size_t)r * nw, nw, 4);
    }
    CK(cudaDeviceSynchronize());
  } else {
    /* f16 operands: the int8 bytes' bit patterns would give NaNs; small random halves instead */
    fill_random<<<1024, 256>>>((signed char *)g.h_a, na * 2, 3);
    fill_random<<<1024, 256>>>((signed char *)g.h_w, nw * 2, 4);
    CK(cudaDeviceSynchronize());
    {
      /* clear each half's exponent's top bits so every value is finite and small */
      unsigned short *h = (unsigned short *)malloc(na * 2 > nw * 2 ? na * 2 : nw * 2);
      for (int which = 0; which < 2; which++) {
        const size_t n = which ? nw : na;
        __half *p = which ? g.h_w : g.h_a;
        CK(cudaMemcpy(h, p, n * 2, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) h[i] &= 0xBFFF; /* exponent < 16: |x| < 2 */
        CK(cudaMemcpy(p, h, n * 2, cudaMemcpyHostToDevice));
      }
      free(h);
    }
    for (int r = 1; r < g.f16_rot; r++) {
      CK(cudaMemcpy(g.h_a + (size_t)r * na, g.h_a, na * 2, cudaMemcpyDeviceToDevice));
      CK(cudaMemcpy(g.h_w + (size_t)r * nw, g.h_w, nw * 2, cudaMemcpyDeviceToDevice));
    }
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("%s, %d SMs; %lld x %lld x %lld int8 -> kiln f32 / cuBLAS int32, %d rounds (medians of the last 3/4)\n",
         prop.name, g.sms, (long long)g.m, (long long)g.n, (long long)g.k, rounds);
  printf("steps: c cuBLAS int8, k kiln int8 (WGMMA), f / F cuBLAS / kiln f16 -> f16, h / H f16 -> f32, gD idle D "
         "us, p clock probe, m / r memset 64 MB / read 128 MB of scratch, I big-code kernel, K kiln int8 -> f16, "
         "M / A kiln MMA_SYNC / CP_ASYNC and n cuBLAS f16 -> f32 (kiln-bench's layout), U / V MMA_SYNC / CP_ASYNC "
         "as x @ W.T\n");
  /* warm every kernel once (module loading is never timed) */
  run_sequence(&g, g.m == g.n && g.n == g.k ? "c k f F h H m r p g5 I K M A n U V" : "c k f F h H m r p g5 I K", 2);
  /* argv[5], if given: the sequences, separated by commas, instead of these */
  const char *seqs[64] = {
      "k",     "c",     "c k",   "k c",   "c g1000 k", "f k", "F k", "c F", "F", "f", "m k", "r k",
      "c r k", "c m k", "k m k", "k r k", "c c k",     "c p p p p", "k p p p p", "g1000 p p",
      "H",     "h",     "h H",   "H h",   "m H",       "r H",       "k I k", "K k", "k K", "K",
  };
  int n_seqs = 30;
  char custom[1024];
  if (argc > 5) {
    snprintf(custom, sizeof custom, "%s", argv[5]);
    n_seqs = 0;
    for (char *sq = strtok(custom, ","); sq && n_seqs < 64; sq = strtok(NULL, ",")) seqs[n_seqs++] = sq;
  }
  for (int i = 0; i < n_seqs; i++) run_sequence(&g, seqs[i], rounds);
  /* the first four again, to see the spread */
  for (int i = 0; i < 4 && i < n_seqs; i++) run_sequence(&g, seqs[i], rounds);
  kiln_context_destroy(g.ctx);
  return 0;
}
