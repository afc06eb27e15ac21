#!/bin/bash
# The W·A16 decode ladder, on the GPU machine: the same benchmarks for each build given (slim
# builds of successive commits, scripts/slim-build.sh), side by side in one run, then Nsight
# Compute on the last build's int4 kernel at one decode shape and the SASS of the int4 kernels
# (sm_80 register ring and sm_90a TMA ring, where the build has them). Logs go to $OUT.
#   scripts/wa16-ladder.sh build-ladder/slim/v4 build-ladder/slim/v5
# docs/performance.md records each rung's prediction and measurement.
#
# Rung builds (here, before the GPU call; slim kiln-bench builds under build-ladder/slim/wa16-*):
#   scripts/wa16-ladder.sh build [NAME...]
# v12 tma-ring: the weight streamed through shared memory by TMA (sm_90a), measured slower than
#   v9 on every decode shape; tma-probe: the same with consumers that only wait and release, i.e.
#   what TMA alone delivers; slab-probe and slab: the stage's codes fetched as one contiguous 4 KB
#   bulk copy (the bytes a [N/32][K/8][32]-word layout would hold there; results wrong, timing
#   what such a layout would give), without and with the compute; box-codes-probe and
#   slab-codes-probe: the probes with the codes' copy alone, one TMA operation a stage instead of
#   four (docs/performance.md, "v12"). v13 tma-v13 (and its probe): stages of 1024 k, four TMA
#   operations per ~19 KB instead of per ~5 KB; tma-v13-s512 / -s2048: stages of 512 / 2048 k;
#   measured 2026-12-04 (performance.md, "v13"); main's kernel since. v14 split-k (split-K over
#   a cluster of blocks, chosen per shape) and split1 / split2 / split4 (forced): measured slower.
#   one-per-sm: main's kernel in one 17-warp block per SM whatever the grid (measured at 6091f47,
#   before v15's persistent blocks: slower; again on v15's: see performance.md, "v15").
#   w8-*: the int8 (W8A16) TMA path's switches, and w8-before its sm_80 kernel (performance.md,
#   "W8A16 on sm_90a"); probe: main's TMA kernels with consumers that only wait and release.
#   l2-ahead1 / l2-ahead2 (scripts/rungs/wa16-l2-ahead.patch): with the dependent launch, the
#   producer first prefetches its first one or two rings of weight stages into L2 (coherent, so
#   safe before griddepcontrol.wait); measured slower (performance.md, "Rung l2-ahead").
#   w8-bf16-magic (scripts/rungs/wa16-w8-bf16-magic.patch): bf16 int8 weight pairs in 4
#   instructions instead of 5; measured 3-8 % slower (performance.md, "Rung w8-bf16-magic").
set -u
if [ "${1:-}" = build ]; then
  shift
  WANT="$*"
  cd "$(dirname "$0")/.."
  . scripts/ladder-lib.sh
  ring=scripts/rungs/wa16-tma-ring.patch
  v13="$ring scripts/rungs/wa16-tma-v13.patch"
  ladder_step wa16 tma-ring "" b74e48a "$ring"
  ladder_step wa16 tma-probe "KILN_WA16_TMA_PROBE=1" b74e48a "$ring"
  ladder_step wa16 slab-probe "KILN_WA16_TMA_PROBE=1;KILN_WA16_TMA_SLAB_PROBE=1" b74e48a "$ring"
  ladder_step wa16 slab "KILN_WA16_TMA_SLAB_PROBE=1" b74e48a "$ring"
  ladder_step wa16 box-codes-probe "KILN_WA16_TMA_PROBE=1;KILN_WA16_TMA_CODES_ONLY=1" b74e48a "$ring"
  ladder_step wa16 slab-codes-probe "KILN_WA16_TMA_PROBE=1;KILN_WA16_TMA_SLAB_PROBE=1;KILN_WA16_TMA_CODES_ONLY=1" \
    b74e48a "$ring"
  ladder_step wa16 tma-v13 "" b74e48a "$v13"
  ladder_step wa16 tma-v13-probe "KILN_WA16_TMA_PROBE=1" b74e48a "$v13"
  ladder_step wa16 tma-v13-s512 "KILN_WA16_TMA_STAGE_K=512" b74e48a "$v13"
  ladder_step wa16 tma-v13-s2048 "KILN_WA16_TMA_STAGE_K=2048" b74e48a "$v13"
  # v14 on 9c0b809 (v13 as first landed): split-K over a cluster, chosen per shape or forced
  ladder_step wa16 split-k "" 9c0b809 scripts/rungs/wa16-split-k.patch
  for n in 1 2 4; do ladder_step wa16 split$n "KILN_WA16_TMA_SPLIT=$n" 9c0b809 scripts/rungs/wa16-split-k.patch; done
  # main's kernel with one block of 16 consumers per SM on every grid
  ladder_step wa16 one-per-sm "KILN_WA16_TMA_TWO_PER_SM=0" .
  # W8A16 on sm_90a (performance.md, "W8A16 on sm_90a"): the sm_80 int8 kernel before it, int8's
  # 32-column tiles only, 16-column tiles in two blocks per SM, int8 M 9..16 on the sm_80 kernel,
  # and the copies alone
  ladder_step wa16 w8-before "" 6aaf2d0
  ladder_step wa16 w8-n32 "KILN_WA8_TMA_N16=0" .
  ladder_step wa16 w8-n16-two "KILN_WA8_TMA_N16=2" .
  ladder_step wa16 w8-m8only "KILN_WA16_TMA_M16=0" .
  ladder_step wa16 probe "KILN_WA16_TMA_PROBE=1" .
  # l2-ahead: the block's first 1 or 2 rings of weight stages prefetched into L2 before
  # griddepcontrol.wait, while the previous kernel ends (measured slower; not taken)
  for n in 1 2; do ladder_step wa16 l2-ahead$n "KILN_WA16_TMA_L2_AHEAD=$n" 5ce1882 scripts/rungs/wa16-l2-ahead.patch; done
  # w8-bf16-magic: bf16 int8 pairs as (128 + low 7 bits) + (-256 or -128) in one bf16 add,
  # 4 instructions a pair instead of 5 (both W8A16 kernels, W8C; measured slower; not taken)
  ladder_step wa16 w8-bf16-magic "" 14990eb scripts/rungs/wa16-w8-bf16-magic.patch
  exit 0
fi
unset LD_LIBRARY_PATH # each build's tools must load their own libkiln.so (RUNPATH $ORIGIN/..)
last=
for b in "$@"; do
  n=$(basename "$b")
  echo "== $n"
  timeout 100 "$b/tools/kiln-bench" int4 --quick >"$OUT/int4-$n.txt" 2>&1
  grep -E "^matmul_int4|copy bandwidth" "$OUT/int4-$n.txt"
  for s in 8192x28672 28672x8192; do
    for m in 1 16; do timeout 60 "$b/tools/kiln-bench" int4 --shape $s --m $m >>"$OUT/int4-$n.txt" 2>&1; done
  done
  grep -E "^matmul_int4 M(1|16)K(8192|28672)" "$OUT/int4-$n.txt"
  timeout 100 "$b/tools/kiln-bench" qkv --quick >"$OUT/qkv-$n.txt" 2>&1
  grep -E "^qkv" "$OUT/qkv-$n.txt" | grep -v M512
  for m in 1 16; do timeout 60 "$b/tools/kiln-bench" qkv --only int8 --m $m >>"$OUT/qkv8-$n.txt" 2>&1; done
  timeout 60 "$b/tools/kiln-bench" qkv --only int8 --m 1 --dtype bf16 >>"$OUT/qkv8-$n.txt" 2>&1
  grep -E "^qkv" "$OUT/qkv8-$n.txt"
  last=$b
done
if [ -n "$last" ] && command -v ncu >/dev/null; then
  timeout 120 ncu -k regex:w4a16 -s 3 -c 1 --section SpeedOfLight --section WarpStateStats --section Occupancy \
    --section LaunchStats --section MemoryWorkloadAnalysis --section InstructionStats \
    "$last/tools/kiln-bench" int4 --shape 4096x12288 --m 1 --reps 1 >"$OUT/ncu.txt" 2>&1
  grep -E "Duration|Throughput|Achieved Occupancy|Block Size|Registers|Issued Ipc|Executed Ipc|Warp Cycles|Theoretical Occ|Executed Instructions  " "$OUT/ncu.txt" | head -40
  # (the TMA kernel was kiln_w4a16_tma_f16_m8 / _m16 in the v12-v14 rungs)
  for k in sm80:kiln_w4a16_decode_f16_m8 sm80:kiln_w4a16_decode_f16_m16 sm90:kiln_w4a16_tma_f16 \
    sm90:kiln_w4a16_tma_f16_m8 sm90:kiln_w4a16_tma_f16_m16; do
    f=$last/kernels/wa16_decode_${k%%:*}.fatbin
    k=${k#*:}
    [ -f "$f" ] || continue
    cuobjdump -sass -fun $k "$f" >/tmp/$k.sass 2>&1
    echo "$k SASS (sm_90a and the others): $(grep -c HMMA /tmp/$k.sass) HMMA, $(grep -c LDGSTS /tmp/$k.sass) LDGSTS," \
      "$(grep -c 'LDS' /tmp/$k.sass) LDS, $(grep -c UTMALDG /tmp/$k.sass) UTMALDG, $(grep -cE 'LDL|STL' /tmp/$k.sass) LDL/STL"
    gzip -c /tmp/$k.sass >"$OUT/sass-$k.txt.gz"
  done
fi
