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
. "$(dirname "$0")/ncu-lib.sh"
ncu_args w4-profile "$@"
NCU_SECTIONS="--section SpeedOfLight --section WarpStateStats --section SourceCounters --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section SchedulerStats"
NCU_GREP="Duration|Compute \(SM\) Throughput|Memory Throughput|Issued Ipc|No Eligible|Warp Cycles Per Issued"
NCU_SASS=1
unset LD_LIBRARY_PATH # the build's tools load their own libkiln.so
ncu_prof qkv4 w4a16_wgmma 2 1 "$B/tools/kiln-bench" qkv --only int4 --m 2048 --reps 3
ncu_prof qkv8 w8a16_wgmma 2 1 "$B/tools/kiln-bench" qkv --only int8 --m 2048 --reps 3
ncu_prof cublas "nvjet|gemm|xmma" 2 1 "$B/tools/kiln-bench" qkv --only int8 --m 2048 --reps 3
ncu_prof mm4 w4a16_wgmma 2 1 "$B/tools/kiln-bench" int4 --shape 4096x12288 --m 1024 --reps 3
