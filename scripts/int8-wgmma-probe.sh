#!/bin/bash
# Where the int8 WGMMA kernel's time goes (run on the H200 with the device tool):
#   scripts/int8-wgmma-probe.sh BUILD [VARIANT_BUILD]
# 1. K sweep at 4096 x 4096: time linear in K is the main loop, the intercept prologue/epilogue.
# 2. Nsight Compute (SpeedOfLight, WarpStateStats, ComputeWorkloadAnalysis) on the 256-wide
#    int8 kernel and on the f16 one at 4096^3: tensor-pipe use and what warps wait on, side by side.
# 3. The SASS of the 256-wide int8 kernel (gzip) for the main loop's instruction mix.
# VARIANT_BUILD (a libkiln.so + tools/kiln-bench built with other KILN_TUNE_DEFS or a changed
# kernel) repeats the sweep in the same call.
# Everything to $OUT.
B=${1:-build}
export PATH=$PATH:/usr/local/cuda/bin
"$B/tools/kiln-bench" int8 --algo wgmma --shape 4096x4096x1024 --shape 4096x4096x4096 --shape 4096x4096x16384 --shape 8192x8192x8192 \
  --reps 20 2>&1 | tee "$OUT/ksweep.txt" | grep -E "^int8" | cut -c1-120
[ -n "${2:-}" ] && "$2/tools/kiln-bench" int8 --algo wgmma --shape 4096x4096x1024 --shape 4096x4096x4096 \
  --shape 4096x4096x16384 --shape 8192x8192x8192 --reps 20 2>&1 | tee "$OUT/ksweep-variant.txt" | grep -E "^int8" | cut -c1-120
"$B/tools/kiln-bench" matmul --algo wgmma --dtype f16 --shape 4096x4096x4096 --reps 20 2>&1 | grep -E "^matmul" | cut -c1-120
for run in "int8 --algo wgmma" "matmul --algo wgmma --dtype f16"; do
  name=${run%% *}
  timeout 120 ncu -k regex:wgmma256 -c 1 --section SpeedOfLight --section WarpStateStats \
    --section ComputeWorkloadAnalysis "$B/tools/kiln-bench" $run --shape 4096x4096x4096 --reps 1 \
    >"$OUT/ncu-$name.txt" 2>&1
  echo "ncu $name: exit $?"
  grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Executed Ipc A|Stall|Warp Cycles Per Issued|Tensor|L2 Cache Throughput|DRAM Throughput" \
    "$OUT/ncu-$name.txt" | cut -c1-110 | head -24
done
cuobjdump -sass -fun kiln_gemm_wgmma256_i8_kk "$B/kernels/gemm_int8_sm90.fatbin" | gzip >"$OUT/sass-i8-256.txt.gz"
