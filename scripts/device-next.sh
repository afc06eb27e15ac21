#!/bin/bash
# What waits for the next device call (written 2026-12-05, after three sessions without one):
# the GPU checks of main's changes since the last GPU run, then rung p17 of the int4 PREFILL.
# Each mode fits the device tool's 10-minute limit; run them in order, one call each.
#
# Here, before the call (one carry, ~17 MB):
#   scripts/slim-build.sh build90 build-ladder/slim/head     (build90: sm_90a, tests, up to date)
#   cd build-ladder && tar czf carry.tgz slim/head slim/w4p-p17full slim/main
# On the device (carry ["build-ladder/carry.tgz"]):
#   tar xzf build-ladder/carry.tgz -C /tmp && bash scripts/device-next.sh verify /tmp/slim/head
#   tar xzf build-ladder/carry.tgz -C /tmp && bash scripts/device-next.sh p17 /tmp/slim/w4p-p17full /tmp/slim/main
#
#   verify HEAD      every GPU test program of HEAD's build (the soak excepted), then memcheck of
#                    test_gpu_matmul's backward tests: the reduce_batch views (commit 0f63a36) are
#                    the one GPU-visible change not yet run on a GPU (their TMA maps now say
#                    batch 1), and of test_gpu_int4's fused PREFILL tests (~180 s measured).
#   p17 RUNG MAIN    RUNG (p17 with tests) runs test_gpu_int4's PREFILL tests and memcheck of
#                    *prefill_fused*; cuobjdump counts the HGMMA and where they sit in the PREFILL
#                    kernels of both builds; then the PREFILL benchmarks, builds interleaved
#                    after one untimed warm-up (docs/performance.md, "Rung p17").
# Logs: $OUT/next-MODE.tgz (one file), and a summary on stdout.
set -u
unset LD_LIBRARY_PATH # each build's programs load their own libkiln.so (RUNPATH $ORIGIN/..)
mode=${1:?usage: device-next.sh verify HEAD | p17 RUNG MAIN | qweight HEAD}
L=/tmp/next-$mode
rm -rf "$L" && mkdir -p "$L"
memcheck() { # memcheck PROGRAM FILTER LOG
  KILN_TEST_SANITIZER=1 timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$1" --filter "$2" >"$3" 2>&1
  rc=$?
  echo "memcheck $(basename "$1") --filter '$2': exit $rc ($(grep -m1 -E 'ERROR SUMMARY' "$3"))"
}
case $mode in
verify)
  H=$2
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  for t in "$H"/tests/test_gpu_*; do
    [ "$(basename "$t")" = test_gpu_soak ] && continue
    s=$(date +%s)
    timeout 200 "$t" >"$L/$(basename "$t").log" 2>&1
    rc=$?
    echo "$(basename "$t"): exit $rc in $(($(date +%s) - s)) s: $(grep -E 'PASSED|FAILED|SKIP' "$L/$(basename "$t").log" | tr '\n' ' ')"
  done
  memcheck "$H/tests/test_gpu_matmul" "backward_*" "$L/memcheck-matmul-backward.log"
  memcheck "$H/tests/test_gpu_int4" "*prefill_fused*" "$L/memcheck-int4-prefill-fused.log"
  ;;
p17)
  R=$2 M=$3
  timeout 250 "$R/tests/test_gpu_int4" --filter "*prefill*" >"$L/p17-int4-prefill.log" 2>&1
  rc=$?
  echo "p17 test_gpu_int4 --filter '*prefill*': exit $rc: $(grep -E 'PASSED|FAILED|SKIP' "$L/p17-int4-prefill.log" | tr '\n' ' ')"
  memcheck "$R/tests/test_gpu_int4" "*prefill_fused*" "$L/memcheck-p17-prefill-fused.log"
  for b in "$M" "$R"; do
    n=$(basename "$b")
    timeout 60 cuobjdump -sass "$b"/kernels/w4_prefill_sm90*.fatbin >"$L/sass-$n.txt" 2>&1
    echo "$n: HGMMA $(grep -c HGMMA "$L/sass-$n.txt"), WARPGROUP.ARRIVE $(grep -c 'WARPGROUP.ARRIVE' "$L/sass-$n.txt"), \
WARPGROUP.DEPBAR $(grep -c 'WARPGROUP.DEPBAR' "$L/sass-$n.txt")"
  done
  timeout 40 "$M/tools/kiln-bench" int4 --shape 4096x12288 --m 1024 --algo prefill >/dev/null 2>&1 # warm-up
  for round in 1 2 3; do
    for b in "$M" "$R"; do
      n=$(basename "$b")
      timeout 60 "$b/tools/kiln-bench" qkv --only int4 --m 2048 --algo prefill --reps 20 >>"$L/bench-$n.txt" 2>&1
      for m in 1024 4096; do
        timeout 60 "$b/tools/kiln-bench" int4 --shape 4096x12288 --m $m --algo prefill >>"$L/bench-$n.txt" 2>&1
      done
    done
  done
  for b in "$M" "$R"; do echo "== $(basename "$b")"; grep -E '^\| ' "$L/bench-$(basename "$b").txt" | grep -v -- '---'; done
  ;;
qweight)
  # (branch wip/gpu-weight-conversion until this has passed once; build that branch for HEAD)
  # the GPU importers, quantizer and dequantizer (kernels/qweight.cu) and the int8 quantizer
  # (kernels/int8_quantize.cu): their tests, memcheck of them, the benchmark against the CPU
  # context, racecheck and synccheck of the act-order sort (shared memory, block barriers), and
  # the Python bridge's GPU tests, which now build weights on the GPU (most important first)
  H=$2
  timeout 150 "$H/tests/test_gpu_qweight" >"$L/test_gpu_qweight.log" 2>&1
  echo "test_gpu_qweight: exit $?: $(grep -E 'PASSED|FAILED|ERROR' "$L/test_gpu_qweight.log" | head -5 | tr '\n' ' ')"
  timeout 100 "$H/tests/test_gpu_int8" --filter quantize_matches_cpu >"$L/int8-quantize.log" 2>&1
  echo "test_gpu_int8 --filter quantize_matches_cpu: exit $?: $(grep -E 'PASSED|FAILED|ERROR' "$L/int8-quantize.log" | head -3 | tr '\n' ' ')"
  memcheck "$H/tests/test_gpu_qweight" "*" "$L/memcheck-qweight.log"
  memcheck "$H/tests/test_gpu_int8" "quantize_matches_cpu" "$L/memcheck-int8-quantize.log"
  tar czf "$OUT/next-$mode.tgz" -C /tmp "next-$mode" # what is done so far comes back even if cut short
  timeout 120 "$H/tools/kiln-bench" qweight --shape 4096x12288 --shape 8192x28672 --reps 10 >"$L/bench-qweight.txt" 2>&1
  echo "kiln-bench qweight: exit $?"; grep -E '^(qweight|op) ' "$L/bench-qweight.txt"
  for tool in racecheck synccheck; do
    timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 "$H/tests/test_gpu_qweight" --filter import_act_order \
      >"$L/$tool-qweight.log" 2>&1
    echo "$tool test_gpu_qweight --filter import_act_order: exit $? ($(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$L/$tool-qweight.log"))"
  done
  tar czf "$OUT/next-$mode.tgz" -C /tmp "next-$mode"
  PYTHONUNBUFFERED=1 KILN_LIBRARY="$H/libkiln.so" timeout 240 python3 -m pytest -q -rs -p no:cacheprovider \
    python/tests/test_gpu.py >"$L/pytest-gpu.log" 2>&1
  echo "python/tests/test_gpu.py: exit $?: $(tail -1 "$L/pytest-gpu.log")"
  ;;
*) echo "device-next.sh: unknown mode $mode" >&2; exit 2 ;;
esac
tar czf "$OUT/next-$mode.tgz" -C /tmp "next-$mode"
