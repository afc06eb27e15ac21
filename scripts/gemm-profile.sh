#!/bin/bash
# Nsight Compute: where kiln's sm_90a tensor-core mainloops stand against cuBLAS's in the same
# benchmark: the WGMMA GEMM (kernels/gemm_sm90.cuh) at 4096³ f16 -> f32 and the one-kernel int4
# PREFILL (kernels/w4_prefill_sm90.cu) on the fused QKV at K 4096, 4096 + 1024 + 1024, M 2048,
# each beside the cuBLAS kernel of its benchmark. Besides the usual sections it reads shared
# memory's bank utilisation (reads, and writes: TMA's fills) and L2's, to test whether the
# shared-memory bandwidth bounds the 128 x 256 tile (wgmma's smem operands plus TMA's writes).
# Run on the GPU from the repository root:
#   scripts/gemm-profile.sh BUILD [NAME...]   (NAMEs: gemm cublas qkv4 cublas-qkv; none: all)
# Logs go to $OUT (default gemm-profile): ncu-NAME.txt (every section's details). Clocks are left
# alone (--clock-control none), so figures compare within one run, not across calls.
set -u
. "$(dirname "$0")/ncu-lib.sh"
ncu_args gemm-profile "$@"
NCU_SECTIONS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section WarpStateStats"
NCU_METRICS="l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed,l1tex__data_bank_writes.avg.pct_of_peak_sustained_elapsed,lts__t_sectors.avg.pct_of_peak_sustained_elapsed,sm__cycles_elapsed.avg.per_second"
NCU_GREP="^  [a-zA-Z]|Duration|Throughput|Busy|Issued Ipc|bank_|lts__t_sectors|per_second"
NCU_TIMEOUT=150
unset LD_LIBRARY_PATH # the build's tools load their own libkiln.so
ncu_prof gemm kiln_gemm_wgmma256 2 1 "$B/tools/kiln-bench" matmul --shape 4096x4096x4096 --algo wgmma --reps 3
ncu_prof cublas "nvjet|xmma|cutlass" 2 1 "$B/tools/kiln-bench" matmul --shape 4096x4096x4096 --algo wgmma --reps 3
ncu_prof qkv4 w4a16_wgmma 2 1 "$B/tools/kiln-bench" qkv --only int4 --m 2048 --reps 3
ncu_prof cublas-qkv "nvjet|xmma|cutlass" 2 1 "$B/tools/kiln-bench" qkv --only int4 --m 2048 --reps 3
