#!/bin/bash
# The one-kernel int4 PREFILL ladder (kernels/w4_prefill_sm90.cu; docs/performance.md, "PREFILL in
# one kernel"), on the GPU machine: the same benchmarks for each build given, side by side:
#   scripts/w4-prefill-ladder.sh build-ladder/slim/main build-ladder/slim/w4p-p1 ...
# Rung builds (here, before the GPU call; slim kiln-bench builds under build-ladder/slim/w4p-*):
#   scripts/w4-prefill-ladder.sh build [NAME...]
# p1: fragments dequantized in registers for wgmma's register A operand (wait_group 0, as ptxas
#   serializes otherwise); p2: consumers dequantize into shared memory, one stage in flight; p3:
#   the producer warpgroup dequantizes; p5: p3 with non-blocking copies and 136 / 184 registers;
#   main (p4): p2 with two stages in flight. copy: main with the one-kernel path off (the
#   dequantized copy + kiln_matmul everywhere).
# p6, a probe without the per-stage proxy fence (results not guaranteed: it times the fence,
# MEMBAR.ALL.CTA in SASS): no faster; p8, the weight written through the async proxy
# (st.async, completing on a per-warpgroup mbarrier): CUDA_ERROR_ILLEGAL_INSTRUCTION on the H200.
# Later rungs (p9 ..) below; docs/performance.md has every rung's figures.
set -u
if [ "${1:-}" = build ]; then
  shift
  WANT="$*"
  cd "$(dirname "$0")/.."
  . scripts/ladder-lib.sh
  for r in p1-register-a p2-one-in-flight p3-producer p5-producer-nonblocking p6-nofence-probe p8-st-async; do
    ladder_step w4p "${r%%-*}" "" acc56dc "scripts/rungs/w4-prefill-$r.patch"
  done
  ladder_step w4p copy "KILN_W4_WGMMA=0" .
  # prefetch depth: 128-row tiles with main's 4 stages and with 6 (a stage's TMA copies leave
  # one stage ahead of its use with 4, three with 6)
  ladder_step w4p bx128 "KILN_W4_WG_BX=128" 674c930
  ladder_step w4p bx128-s6 "KILN_W4_WG_BX=128;KILN_W4_WG_STAGES=6" 674c930
  # p9: a stage's code words loaded before any weight is stored; p10 (a762835): p9 and y's tile
  # through shared memory (stmatrix.trans), M <= 1024 still; main (70d1f2d): p10 at any M
  ladder_step w4p p9 "" 674c930 scripts/rungs/w4-prefill-p9-hoist.patch
  ladder_step w4p p10 "" a762835
  # p11: the dequantized weight in its own 2 slots, so the TMA ring holds 5 stages (three ahead
  # of their use) with one stage of wgmmas in flight; p11-f2: the same code with 4 stages and 2
  # in flight (main's depths)
  ladder_step w4p p11 "" 70d1f2d scripts/rungs/w4-prefill-p11-w-ring.patch
  ladder_step w4p p11-f2 "KILN_W4_WG_IN_FLIGHT=2;KILN_W4_WG_STAGES=4" 70d1f2d scripts/rungs/w4-prefill-p11-w-ring.patch
  # p12 (fe8c36c): one LOP3 per nibble pair's and-or; p13 (3e026b2): a pair from one PRMT and
  # one LOP3, no shifts
  ladder_step w4p p12 "" fe8c36c
  # p13 (70e462d): the last kernel with the weight dequantized into shared memory; main (p14):
  # into wgmma's register A operand, two fragment buffers; p14-s5: main with 5 stages
  ladder_step w4p p13 "" 70e462d
  ladder_step w4p p14-s5 "KILN_W4_WG_STAGES=5" .
  # p15: a stage's shared-memory reads issued one stage ahead, under the wgmmas of the stage
  # before (Nsight Compute of p14, 2026-12-04: 20 % of consumer samples short-scoreboard waits,
  # PRMT the instruction most often waiting: the first use of each LDS). Measured the same day:
  # even at M >= 2048, 3-13 % slower below; not taken.
  ladder_step w4p p15 "" 23fa65b scripts/rungs/w4-prefill-p15-prefetch.patch
  # f128 / f256: the rows of x per tile forced (main: 256 where those tiles reach 70 % of the
  # SMs, else 128), to check the rule against a wave count. Measured 2026-12-04: 128-row tiles
  # cost 1.25-1.4x per FLOP at M >= 1024; the rule picks the faster size; kept.
  ladder_step w4p f128 "KILN_W4_WG_BX=128" c1a47e5
  ladder_step w4p f256 "KILN_W4_WG_BX=256" c1a47e5
  # p16: y's pieces leave by TMA stores (32-byte swizzled boxes of 32 rows x 16 columns, two
  # 1 KB halves a warp) that drain while the warp goes on, in place of rung p10's LDS + STG
  # (rung store-probe bounded the epilogue at 1-13 % of the kernel). Measured 2026-12-04 in three
  # interleaved rounds on top of e1 (92fd5b2, where its gemm_sm90.cuh hunk is already in): 0.90-1.03
  # of main, within the noise; tests and sanitizers clean; not taken (docs/performance.md).
  ladder_step w4p p16 "" e4a6247 scripts/rungs/w4-prefill-p16-tma-store.patch
  # p17: each k16 chunk's wgmma issued right after its fragments are dequantized (a wgmma fence
  # each), instead of all four after the whole stage. Nsight Compute's stall samples (2026-12-04,
  # docs/performance.md) showed the tensor pipe running dry while the consumers dequantize.
  # Predicted: 0-10 % at M >= 1024. Built (ptxas: 168 registers, 0 spills, no C75xx notes; the
  # default build's PTX byte-identical), not yet run on a GPU. Its tests: a full build of
  # /tmp/kiln-w4p-p17 with -DKILN_TUNE_DEFS=KILN_W4_WG_CHUNKED=1, then test_gpu_int4.
  ladder_step w4p p17 "KILN_W4_WG_CHUNKED=1" 5ccc903 scripts/rungs/w4-prefill-p17-chunked.patch
  # p18: a tile's scales and zeros kept in registers from the stage where their group begins
  # (KILN_W4_WG_SCALE_CACHE), so that a stage at G = 128 without a new group, and every stage
  # after the first at G = K, loads and converts none: ~20 of a stage's ~130 consumer
  # instructions, in a kernel paced by those instructions (27 % issue slots, tensor pipe 81 %).
  # Predicted: +3-8 % at M >= 1024, G = 128. Built 2026-12-05 (ptxas: 168 registers, 0 spills,
  # no C75xx notes; the default build's fatbin byte-identical); not yet run on a GPU. Its tests:
  # scripts/device-next.sh p18 (a full build with the macro: build-ladder/p18full).
  ladder_step w4p p18 "KILN_W4_WG_SCALE_CACHE=1" .
  exit 0
fi
unset LD_LIBRARY_PATH # each build's tools must load their own libkiln.so (RUNPATH $ORIGIN/..)
# Each benchmark runs for every build back to back (builds interleaved, not one after another),
# after one untimed warm-up run: in the 2026-12-04 calls the first build timed ran slower than
# the same kernel later in the call, and one build's row moved 156-176 µs within a call.
timeout 40 "$1/tools/kiln-bench" int4 --shape 4096x12288 --m 1024 >/dev/null 2>&1
bench() { for b in "$@"; do timeout 60 "$b/tools/kiln-bench" $ARGS >>"$OUT/w4p-$(basename "$b").txt" 2>&1; done; }
for m in 128 256 512 1024 4096; do ARGS="int4 --shape 4096x12288 --m $m" bench "$@"; done
for m in 256 1024; do ARGS="int4 --shape 4096x4096 --m $m" bench "$@"; done
for m in 512 2048; do
  ARGS="qkv --only int4 --m $m" bench "$@"
  ARGS="qkv --only int8 --m $m" bench "$@" # the same kernel with int8 weights since e080ee1
done
for b in "$@"; do
  echo "== $(basename "$b")"
  grep -hE "^(qkv_int[48]|matmul_int4)" "$OUT/w4p-$(basename "$b").txt" | grep -v "vs 3"
done
