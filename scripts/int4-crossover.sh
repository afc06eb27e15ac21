#!/bin/bash
# Where kiln_matmul_int4 and kiln_qkv_project_int4 should switch from DECODE to PREFILL (the AUTO
# rule in src/ops/matmul_int4.c): both algorithms at every M of kiln-bench int4 (three weight
# shapes) and at M 64..2048 of the fused QKV call, on the GPU machine, beside cuBLAS f16 in the
# same run. Logs to $OUT.
#   scripts/int4-crossover.sh build-ladder/slim/main     (CROSSOVER=qkv: the QKV part only)
set -u
unset LD_LIBRARY_PATH
b=$1
[ "${CROSSOVER:-all}" = qkv ] ||
for s in 4096x4096 4096x12288 8192x28672; do
  for a in decode prefill; do
    timeout 120 "$b/tools/kiln-bench" int4 --shape $s --algo $a >>"$OUT/crossover.txt" 2>&1
    timeout 60 "$b/tools/kiln-bench" int4 --shape $s --algo $a --m 128 >>"$OUT/crossover.txt" 2>&1
  done
done
for a in decode prefill; do # the fused QKV calls, int4 and int8 (K 4096, Nq 4096, Nk = Nv 1024)
  for m in 64 128 256 512 2048; do
    timeout 60 "$b/tools/kiln-bench" qkv --quick --algo $a --m $m >>"$OUT/crossover.txt" 2>&1
  done
done
grep -E "^(matmul_int4|qkv_int4|qkv_int8)" "$OUT/crossover.txt" | sort -s -k1,2 | cut -c1-150
