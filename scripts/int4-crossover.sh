#!/bin/bash
# Where kiln_matmul_int4 should switch from DECODE to PREFILL (the AUTO rule in
# src/ops/matmul_int4.c): both algorithms at every M of kiln-bench int4, three weight shapes, on
# the GPU machine, beside cuBLAS f16 in the same run. Logs to $OUT.
#   scripts/int4-crossover.sh build-ladder/slim/main
set -u
unset LD_LIBRARY_PATH
b=$1
for s in 4096x4096 4096x12288 8192x28672; do
  for a in decode prefill; do
    timeout 120 "$b/tools/kiln-bench" int4 --shape $s --algo $a >>"$OUT/crossover.txt" 2>&1
    timeout 60 "$b/tools/kiln-bench" int4 --shape $s --algo $a --m 128 >>"$OUT/crossover.txt" 2>&1
  done
done
grep -E "^matmul_int4" "$OUT/crossover.txt" | sort -s -k2,2 | cut -c1-150
