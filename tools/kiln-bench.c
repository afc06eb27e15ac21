/*
 * kiln-bench.c — the benchmark program: dispatches to one subcommand per op family.
 * To add one: write tools/bench/bench_<name>.c with
 * bench_<name>_main and bench_<name>_usage, declare them in bench.h, add a line to `commands`.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <string.h>

#include "bench/bench.h"

/* ------------------------------------------------------------------------------------------ */
/* copy: the device's practical memory bandwidth, which other subcommands' GB/s are read against */
/* ------------------------------------------------------------------------------------------ */
static const char copy_usage[] =
    "usage: kiln-bench copy [options]\n"
    "  Device-to-device cuMemcpyAsync from one half of a buffer to the other; reports\n"
    "  (bytes read + bytes written) / time.\n"
    "  --size MIB       the whole buffer in MiB (default 2048: 1 GiB copied per call)\n" BENCH_COMMON_USAGE;

static int copy_main(int argc, char **argv) {
  bench_common common;
  bench_common_init(&common);
  long long size_mib = 2048;
  for (int i = 1; i < argc; i++) {
    int c = bench_parse_common(argc, argv, &i, &common, copy_usage);
    if (c == BENCH_HELP) return 0;
    if (c < 0) return 2;
    if (c > 0) continue;
    char tail = 0;
    if (!strcmp(argv[i], "--size") && i + 1 < argc && sscanf(argv[i + 1], "%lld%c", &size_mib, &tail) == 1 &&
        size_mib >= 2 && size_mib <= (1ll << 20)) {
      i++;
      continue;
    }
    fprintf(stderr, "kiln-bench copy: bad option or value \"%s%s%s\" (see kiln-bench copy --help)\n", argv[i],
            i + 1 < argc ? " " : "", i + 1 < argc ? argv[i + 1] : "");
    return 2;
  }

  bench_env env;
  if (bench_env_open(&env, &common, 0)) {
    bench_env_close(&env);
    return 1;
  }
  const size_t bytes = ((size_t)size_mib << 20) / 2;
  char shape[48];
  snprintf(shape, sizeof shape, "%lld MiB", (long long)(bytes >> 20));
  bench_row row;
  bench_row_init(&row, "copy", shape, "bytes", "memcpy", BENCH_GBPS, 2.0 * (double)bytes);
  snprintf(row.note, sizeof row.note, "D2D cuMemcpyAsync, read + write");
  bench_table_header(BENCH_GBPS);
  if (!bench_copy_time(&env, bytes, &row.kiln)) bench_report(&env, &row);
  return bench_env_close(&env);
}

/* ------------------------------------------------------------------------------------------ */
/* Dispatch                                                                                    */
/* ------------------------------------------------------------------------------------------ */
typedef struct command {
  const char *name;
  const char *summary;
  int (*main)(int argc, char **argv); /* argv[0] is the subcommand's name */
  const char *usage;
} command;

static const command commands[] = {
    {"copy", "device-to-device copy bandwidth (the reference for GB/s figures)", copy_main, copy_usage},
    {"matmul", "kiln_matmul against cublasGemmEx, square and LLM shapes", bench_matmul_main, bench_matmul_usage},
    {"attention", "kiln_attention forward (peer: PyTorch SDPA times from scripts/bench_sdpa.py)", bench_attention_main,
     bench_attention_usage},
    {"int4", "kiln_matmul_int4 decode and prefill shapes against cuBLAS f16 on the same logical shape",
     bench_int4_main, bench_int4_usage},
    {"int8", "kiln_matmul_int8 (W8A8) against cuBLAS's int8 GEMM (int32 sums), x @ W.T", bench_int8_main,
     bench_int8_usage},
    {"qkv", "fused QKV projections (int4, int8) against cuBLAS f16 on the merged weight and 3 kiln calls",
     bench_qkv_main, bench_qkv_usage},
    {"overhead", "host time per C call on tiny problems (validation + launch), against cublasGemmEx",
     bench_overhead_main, bench_overhead_usage},
    {"qweight", "weight conversion (GPTQ import, INT4 / INT8 quantization) on the GPU against kiln's CPU context",
     bench_qweight_main, bench_qweight_usage},
};
#define N_COMMANDS (int)(sizeof commands / sizeof commands[0])

static void usage(FILE *f) {
  fprintf(f,
          "usage: kiln-bench <command> [options]   (kiln-bench <command> --help for its options)\n"
          "Times kiln's ops with CUDA events against a peer library (cuBLAS, loaded at run time).\n"
          "The first output line names the device; --json FILE writes machine-readable results.\n"
          "commands:\n");
  for (int i = 0; i < N_COMMANDS; i++) fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    if (argc > 2)
      for (int i = 0; i < N_COMMANDS; i++)
        if (!strcmp(argv[2], commands[i].name)) {
          fputs(commands[i].usage, stdout);
          return 0;
        }
    usage(stdout);
    return 0;
  }
  for (int i = 0; i < N_COMMANDS; i++)
    if (!strcmp(argv[1], commands[i].name)) return commands[i].main(argc - 1, argv + 1);
  fprintf(stderr, "kiln-bench: unknown command \"%s\"\n", argv[1]);
  usage(stderr);
  return 2;
}
