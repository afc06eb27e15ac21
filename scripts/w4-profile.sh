#!/bin/bash
# Nsight Compute readings of the one-kernel W·A16 PREFILL (kernels/w4_prefill_sm90.cu) where it
# trails cuBLAS f16 most: the fused QKV call at K 4096, 4096 + 1024 + 1024, M 2048 (int4 and int8:
# 0.85x in the calls of 2026-12-04 against ~0.99x on the other QKV shapes), next to cuBLAS's
# kernel on the merged weight of the same benchmark, and kiln_matmul_int4 at M 1024 x 4096 x
# 12288. Stall sampling per SASS line as in docs/performance.md ("What set the pace"). Run on the
# GPU from the repository root:
#   scripts/w4-profile.sh BUILD [NAME...]   (BUILD holds libkiln.so and tools/kiln-bench; NAMEs
#                                           pick profiles, none: all)
# Logs go to $OUT: ncu-NAME.txt (sections) and ncu-NAME-sass.csv (samples per SASS line; sum the
# stall_* columns per instruction class to see what holds the warps). Clocks are left alone.
set -u
B=${1:-build}
shift $(($# > 0 ? 1 : 0))
WANT="$*"
OUT=${OUT:-w4-profile}
mkdir -p "$OUT"
S="--section SpeedOfLight --section WarpStateStats --section SourceCounters --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section SchedulerStats"
prof() { # name, kernel regex, skip, command...
  local name=$1 k=$2 s=$3
  shift 3
  case " ${WANT:-$name} " in *" $name "*) ;; *) return 0 ;; esac
  timeout 240 ncu --clock-control none -k "regex:$k" -s "$s" -c 1 $S -o "$OUT/ncu-$name" -f "$@" >"$OUT/ncu-$name.log" 2>&1
  echo "ncu $name: exit $?"
  ncu -i "$OUT/ncu-$name.ncu-rep" >"$OUT/ncu-$name.txt" 2>&1
  ncu -i "$OUT/ncu-$name.ncu-rep" --page source --csv --print-source sass >"$OUT/ncu-$name-sass.csv" 2>/dev/null
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Issued Ipc|No Eligible|Warp Cycles Per Issued" \
    "$OUT/ncu-$name.txt" | head -12
}
unset LD_LIBRARY_PATH # the build's tools load their own libkiln.so
prof qkv4 w4a16_wgmma 2 "$B/tools/kiln-bench" qkv --only int4 --m 2048 --reps 3
prof qkv8 w8a16_wgmma 2 "$B/tools/kiln-bench" qkv --only int8 --m 2048 --reps 3
prof cublas "nvjet|gemm|xmma" 2 "$B/tools/kiln-bench" qkv --only int8 --m 2048 --reps 3
prof mm4 w4a16_wgmma 2 "$B/tools/kiln-bench" int4 --shape 4096x12288 --m 1024 --reps 3
