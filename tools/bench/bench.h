/*
 * bench.h — the harness shared by kiln-bench's subcommands: device setup, CUDA-event timing,
 * random inputs, the cuBLAS peer (loaded at run time, like the driver) and result reporting.
 *
 * A subcommand is `int bench_<name>_main(int argc, char **argv)` plus a usage string; it parses
 * its options, opens a bench_env (which prints the device line), times kiln and the peer, adds
 * one bench_row per measurement and closes the env (which writes the JSON).
 */
#ifndef KILN_BENCH_H
#define KILN_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cuda_driver.h"
#include "kiln.h"

/* ------------------------------------------------------------------------------------------ */
/* Subcommands (kiln-bench.c dispatches on these; quant, qkv, attention will follow suit)     */
/* ------------------------------------------------------------------------------------------ */
int bench_matmul_main(int argc, char **argv);
extern const char bench_matmul_usage[];
int bench_attention_main(int argc, char **argv);
extern const char bench_attention_usage[];
int bench_int4_main(int argc, char **argv);
extern const char bench_int4_usage[];
int bench_int8_main(int argc, char **argv);
extern const char bench_int8_usage[];
int bench_qkv_main(int argc, char **argv);
extern const char bench_qkv_usage[];
int bench_overhead_main(int argc, char **argv);
extern const char bench_overhead_usage[];
int bench_qweight_main(int argc, char **argv);
extern const char bench_qweight_usage[];

/* ------------------------------------------------------------------------------------------ */
/* Options every subcommand accepts                                                            */
/* ------------------------------------------------------------------------------------------ */
typedef struct bench_common {
  const char *json_path; /* --json FILE, NULL for none */
  int quick;             /* --quick: fewer shapes and repetitions */
  int reps;              /* --reps N: timed repetitions (0 = default) */
  int device;            /* --device N: CUDA ordinal */
  int paired;            /* --paired: kiln and its peer timed in alternating batches */
  int batch_us;          /* --batch-us US: a sample spans at least US µs of calls (0 = BENCH_BATCH_US) */
} bench_common;

#define BENCH_COMMON_USAGE                                                  \
  "  --json FILE      also write the results as a JSON array to FILE\n"    \
  "  --quick          fewer shapes and repetitions\n"                       \
  "  --reps N         timed repetitions per measurement (default 30, quick 10)\n" \
  "  --batch-us US    calls per sample: at least US µs of them back to back between two events\n" \
  "                   (default 20; longer: fewer events between short calls)\n" \
  "  --device N       CUDA ordinal (default 0)\n"                           \
  "  --help           this text\n"

/* --paired, in the usage of the subcommands that time kiln against a peer they run themselves
 * (bench_parse_common accepts it where the usage lists it) */
#define BENCH_PAIRED_USAGE                                                                        \
  "  --paired         time kiln and its peer in alternating batches, --reps rounds; the ratio\n" \
  "                   is the median of the rounds' ratios (bench_time_paired)\n"

void bench_common_init(bench_common *c);
/* If argv[*i] is a common option, consumes it (and its value) and returns 1; returns 0 if it is
 * not one, -1 (after printing why) if its value is missing or bad, BENCH_HELP after printing
 * `usage` for --help or -h. */
#define BENCH_HELP 2
int bench_parse_common(int argc, char **argv, int *i, bench_common *c, const char *usage);

/* ------------------------------------------------------------------------------------------ */
/* Element types                                                                               */
/* ------------------------------------------------------------------------------------------ */
typedef enum bench_dtype { BENCH_F32, BENCH_F16, BENCH_BF16, BENCH_I8 } bench_dtype;

size_t bench_dtype_size(bench_dtype dt);
const char *bench_dtype_name(bench_dtype dt);
DLDataType bench_dtype_dl(bench_dtype dt);
/* Parses "f32", "f16", "bf16", "i8"; returns -1 for anything else. */
int bench_dtype_parse(const char *s, bench_dtype *dt);
/* Element i of a host array of dtype dt, as a float. */
float bench_load_f32(bench_dtype dt, const void *base, size_t i);

/* ------------------------------------------------------------------------------------------ */
/* Device environment                                                                          */
/* ------------------------------------------------------------------------------------------ */
typedef struct bench_row bench_row;

typedef struct bench_env {
  const kiln_cuda_api *cu;
  kiln_context *ctx; /* NULL when opened without kernels and the context could not be created */
  kiln_device_info info;
  CUdevice device;
  CUcontext primary; /* pushed current for the env's lifetime: our driver calls need it */
  CUstream stream;   /* non-blocking stream every measurement runs on */
  size_t mem_budget; /* device bytes a subcommand may spend on rotation copies */
  char date[32];     /* ISO 8601 UTC, when the env was opened */
  bench_common opts;
  bench_row *rows;
  size_t n_rows, cap_rows;
  int failures; /* errors and failed checks; nonzero makes the exit status 1 */
  int opened;   /* bench_env_open succeeded: only then is there a JSON to write */
} bench_env;

/* Loads the driver, creates the kiln context of opts->device, makes the device's primary context
 * current and prints the device line. need_kernels = 0 lets a subcommand that only uses the
 * driver (copy) run on a build without kernels. Returns 0, or nonzero after printing why. */
int bench_env_open(bench_env *env, const bench_common *opts, int need_kernels);
/* Writes the JSON (if --json), frees everything. Returns the exit status: 0, or 1 if any row
 * failed or the JSON could not be written. */
int bench_env_close(bench_env *env);

/* Reports a failed driver call on stderr ("kiln-bench: what: cuX failed: NAME (text)") and counts
 * it as a failure. Returns -1 for r != CUDA_SUCCESS, else 0. */
int bench_cu_check(bench_env *env, CUresult r, const char *what);

/* Device memory; returns 0, or -1 after printing why. */
int bench_alloc(bench_env *env, size_t bytes, CUdeviceptr *out);
void bench_free(bench_env *env, CUdeviceptr p);

/* Fills count elements at dst with uniform random values from a fixed-seed xorshift: floats in
 * [-1,1], int8 in [-127,127], never zero (all-zero inputs draw less power and clock higher, which
 * flatters every kernel). Synchronizes env->stream. */
int bench_fill_random(bench_env *env, CUdeviceptr dst, size_t count, bench_dtype dt, uint64_t seed);

/* Relative Frobenius error ||x - ref|| / ||ref|| of two device arrays of dtype dt, copied back in
 * chunks. NaN in either array gives NaN. */
int bench_rel_error(bench_env *env, CUdeviceptr x, CUdeviceptr ref, size_t count, bench_dtype dt, double *err);

/* How many copies of the inputs a memory-bound op should rotate through so that one pass over
 * them exceeds twice the L2 and the timing measures DRAM, not L2: the smallest n with
 * n * bytes_per_call > 2 * L2, capped by budget_bytes / bytes_per_call, at least 1. */
int bench_rotation_count(const bench_env *env, size_t bytes_per_call, size_t budget_bytes);

/* ------------------------------------------------------------------------------------------ */
/* Timing                                                                                      */
/* ------------------------------------------------------------------------------------------ */
/* Enqueues one call of the measured op on the stream the caller chose; iter counts every call
 * (warm-up included) so the callee can rotate through input copies. Returns 0, nonzero to stop. */
typedef int (*bench_fn)(void *user, int iter);

typedef struct bench_timing {
  double median_us, min_us, p90_us; /* per call */
  int reps;                         /* timed samples */
  int batch;                        /* calls per sample (>1 for calls shorter than BENCH_BATCH_US) */
} bench_timing;

#define BENCH_WARMUP_MS 50.0
#define BENCH_WARMUP_CALLS 10
#define BENCH_BATCH_US 20.0    /* below this per call, one sample times a batch of calls */
#define BENCH_MAX_TIMED_MS 2000.0 /* the timed phase of one measurement stays under this */

/* Warms up (at least BENCH_WARMUP_MS and BENCH_WARMUP_CALLS), then takes reps samples, each
 * between two events recorded on stream, and reports per-call median, min and p90. Returns 0,
 * the callback's nonzero value, or -1 after a driver error (printed). */
int bench_time(bench_env *env, CUstream stream, bench_fn fn, void *user, int reps, bench_timing *out);

/* The ratio of one paired measurement: peer time / kiln time per round (above 1: kiln is
 * faster), its median and quartiles over the rounds. */
typedef struct bench_pairing {
  double ratio, ratio_p25, ratio_p75;
  int rounds; /* 0: not paired */
} bench_pairing;

/* As bench_time for kiln and its peer together (--paired): each warms up alone, then `rounds`
 * rounds each time one batch of kiln and one of the peer back to back, in alternating order.
 * The two ops then see the same clocks and temperature, which drift during a call (cuBLAS moved
 * 620-751 TFLOP/s at 4096^3 within one call: docs/performance.md), so their ratio is steadier
 * than that of two separate bench_time measurements. */
int bench_time_paired(bench_env *env, CUstream stream, bench_fn kiln_fn, void *kiln_user, bench_fn peer_fn,
                      void *peer_user, int rounds, bench_timing *kiln_out, bench_timing *peer_out,
                      bench_pairing *pair);

/* Times a device-to-device cuMemcpyAsync of `bytes` (from one half of a fresh 2·bytes buffer to
 * the other): the practical memory bandwidth that GB/s figures are read against is
 * 2·bytes / time (read + write). Returns 0, or -1 after printing why. */
int bench_copy_time(bench_env *env, size_t bytes, bench_timing *out);

/* bench_copy_time over 512 MiB as GB/s (read + write), printed as "device copy bandwidth ...":
 * what GB/s rows state their share of. NaN (after printing why) if it could not be measured. */
double bench_copy_gbps(bench_env *env);

/* --algo of the W·A16 commands (int4, qkv): "auto", "decode", "prefill" -> 0, 1, 2 (the values of
 * both kiln_int4_algo and kiln_qkv_algo), else -1; the algo column's suffix ("", " decode",
 * " prefill"); whether a call gets PREFILL's workspace (PREFILL always, AUTO from M = 128, so
 * AUTO may choose). */
int bench_w16_algo_parse(const char *s);
const char *bench_w16_algo_suffix(int algo);
int bench_w16_gets_workspace(int algo, int64_t m);

/* The repetitions a subcommand should use: --reps, else 30 (10 with --quick). */
int bench_default_reps(const bench_env *env);

/* ------------------------------------------------------------------------------------------ */
/* Peer library: cuBLAS, dlopen'ed (no CUDA header or link dependency)                         */
/* ------------------------------------------------------------------------------------------ */
typedef struct bench_cublas_ctx *cublasHandle_t;
typedef int cublasStatus_t;

/* Values from library_types.h / cublas_api.h (CUDA 12 and 13 agree). */
enum {
  BENCH_CUDA_R_32F = 0,
  BENCH_CUDA_R_16F = 2,
  BENCH_CUDA_R_8I = 3,
  BENCH_CUDA_R_32I = 10,
  BENCH_CUDA_R_16BF = 14,
};
enum { BENCH_CUBLAS_COMPUTE_32F = 68, BENCH_CUBLAS_COMPUTE_32I = 72 };
enum { BENCH_CUBLAS_OP_N = 0, BENCH_CUBLAS_OP_T = 1 };
enum { BENCH_CUBLAS_GEMM_DEFAULT = -1 };
enum { BENCH_CUBLAS_DEFAULT_MATH = 0 };
enum { BENCH_CUBLAS_STATUS_SUCCESS = 0 };

typedef struct bench_cublas {
  void *lib;
  const char *lib_name; /* which name dlopen accepted */
  char version[24];     /* "13.1.0" from cublasGetProperty, "" if unknown */
  cublasHandle_t handle;
  cublasStatus_t (*create)(cublasHandle_t *handle);
  cublasStatus_t (*destroy)(cublasHandle_t handle);
  cublasStatus_t (*set_stream)(cublasHandle_t handle, CUstream stream);
  cublasStatus_t (*set_math_mode)(cublasHandle_t handle, int mode);
  cublasStatus_t (*gemm_ex)(cublasHandle_t handle, int transa, int transb, int m, int n, int k, const void *alpha,
                            const void *a, int a_type, int lda, const void *b, int b_type, int ldb,
                            const void *beta, void *c, int c_type, int ldc, int compute_type, int algo);
  cublasStatus_t (*gemm_strided_batched_ex)(cublasHandle_t handle, int transa, int transb, int m, int n, int k,
                                            const void *alpha, const void *a, int a_type, int lda,
                                            long long stride_a, const void *b, int b_type, int ldb,
                                            long long stride_b, const void *beta, void *c, int c_type, int ldc,
                                            long long stride_c, int batch, int compute_type, int algo);
} bench_cublas;

/* Loads cuBLAS (KILN_BENCH_CUBLAS names a path to try first, then libcublas.so.13, .so.12, .so)
 * and creates a handle bound to stream. Returns 0, or -1 after printing one line saying that
 * results will be kiln-only; *p is then zeroed and bench_cublas_close is still safe. */
int bench_cublas_open(bench_cublas *p, CUstream stream);
void bench_cublas_close(bench_cublas *p);
/* The data type enum cuBLAS uses for dt. */
int bench_cuda_data_type(bench_dtype dt);
const char *bench_cublas_status_name(cublasStatus_t s);

/* ------------------------------------------------------------------------------------------ */
/* Results                                                                                     */
/* ------------------------------------------------------------------------------------------ */
typedef enum bench_unit { BENCH_TFLOPS, BENCH_GBPS } bench_unit;

struct bench_row {
  char op[24];
  char shape[48];
  char dtype[24];
  char algo[32]; /* e.g. "flash mma_sync causal m192 det" */
  bench_unit unit;
  double work;                    /* FLOPs (TFLOPS) or bytes moved (GBPS) per call */
  bench_timing kiln;              /* median_us NaN when kiln did not run */
  char peer[32];                  /* e.g. "cublas 13.1.0", "" for none */
  bench_timing peer_t;            /* median_us NaN when the peer did not run */
  bench_pairing pair;             /* rounds 0 unless timed by bench_time_paired */
  double rel_err;                 /* NaN when not checked */
  int check_failed;
  char note[200];
};

/* A row with every time and the error set to NaN. */
void bench_row_init(bench_row *r, const char *op, const char *shape, const char *dtype, const char *algo,
                    bench_unit unit, double work);
/* Throughput of a time in the row's unit (NaN if the time is NaN). */
double bench_rate(const bench_row *r, double us);
/* Prints the table header for rows of this unit. */
void bench_table_header(bench_unit unit);
/* Prints the row and keeps it for the JSON. Rows with check_failed count as failures. */
void bench_report(bench_env *env, const bench_row *r);
/* --paired into a row: bench_time_paired of kiln_fn and peer_fn (both called with `user`, whose
 * last statuses *st and *cst they leave) over the default reps. A kiln or cuBLAS error is noted
 * in the row and counted; returns -1 only after a driver error (printed), else 0. */
int bench_row_paired(bench_env *env, bench_row *row, bench_fn kiln_fn, bench_fn peer_fn, void *user,
                     const kiln_status *st, const cublasStatus_t *cst);

#endif /* KILN_BENCH_H */
