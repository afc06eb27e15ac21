#!/bin/bash
# One device session, reproducible: run on the GPU machine from the repository root with the
# build directory carried along. The test programs find libkiln.so and libcmocka.so.0 in BUILD
# (their RUNPATH is $ORIGIN/..); the GPU machine has no cmocka, so first, here:
#   cp -L /usr/lib/x86_64-linux-gnu/libcmocka.so.0 build/ Runs the GPU tests, the
# same tests under compute-sanitizer, the demo, the benchmarks and the resource/SASS reports,
# writing every log into $OUT/logs.tgz (the device tool returns at most 8 files) plus summary.txt
# and the benchmark JSON beside it. Usage:
#   scripts/gpu-session.sh [BUILD_DIR] [stages...]   stages: info tests sanitize demo bench sass (default all)
# and, not in the default, two longer ones:
#   sanitize-all  every test_gpu_* program under compute-sanitizer racecheck, initcheck and synccheck
#                 (SANITIZE_TOOLS="racecheck ..." picks tools, SANITIZE_TESTS="test_gpu_soak ..." programs,
#                 to fit a run into the device's per-command limit; KILN_SANITIZER_ARGS adds options)
#   soak          test_gpu_soak for KILN_SOAK_SECONDS (default 120) seconds per concurrency test
set -u
BUILD=${1:-build}
shift || true
STAGES=${*:-info tests sanitize demo bench sass}
FINAL=${OUT:-gpu-out}
OUT=$(mktemp -d)/logs
mkdir -p "$OUT" "$FINAL"
T=$BUILD/tests
summary=$OUT/summary.txt
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

run_test() { # name, log, command...
  local name=$1 log=$2
  shift 2
  local t0=$(date +%s.%N)
  "$@" >"$log" 2>&1
  local rc=$?
  note "$(printf '%-40s rc=%-3d %6.1fs  %s' "$name" $rc "$(awk "BEGIN{print $(date +%s.%N) - $t0}")" "$(grep -E 'PASSED|FAILED|ERROR SUMMARY|RACECHECK SUMMARY|SKIP' "$log" | tr '\n' ' ' | cut -c1-160)")"
}

# Pack after every stage, so a run cut short by the time limit still returns what it did.
pack() {
  tar czf "$FINAL/logs.tgz" -C "$(dirname "$OUT")" logs
  cp "$summary" "$FINAL/"
  cp "$OUT"/*.json "$FINAL/" 2>/dev/null
  return 0
}

for stage in $STAGES; do
  case $stage in
  info)
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv >"$OUT/info.txt" 2>&1
    note "$(tail -1 "$OUT/info.txt")"
    ;;
  tests)
    for t in "$T"/test_*; do
      [ -x "$t" ] || continue
      case $t in *test_driver_faults) continue ;; esac # needs the fake driver: a host test under CTest
      run_test "$(basename "$t")" "$OUT/test-$(basename "$t").log" "$t"
    done
    ;;
  sanitize)
    for t in "$T"/test_gpu_*; do
      [ -x "$t" ] || continue
      KILN_TEST_SANITIZER=1 run_test "memcheck $(basename "$t")" "$OUT/memcheck-$(basename "$t").log" \
        compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 "$t"
    done
    ;;
  sanitize-all)
    # The other three tools, at the tests' sanitizer sizes (KILN_TEST_SANITIZER): racecheck
    # (shared-memory hazards), initcheck (reads of uninitialized global memory), synccheck
    # (barrier misuse). Packed after every program: a run cut short still returns its logs.
    for tool in ${SANITIZE_TOOLS:-racecheck initcheck synccheck}; do
      for t in "$T"/test_gpu_*; do
        [ -x "$t" ] || continue
        if [ -n "${SANITIZE_TESTS:-}" ]; then
          case " $SANITIZE_TESTS " in *" $(basename "$t") "*) ;; *) continue ;; esac
        fi
        # shellcheck disable=SC2086 # KILN_SANITIZER_ARGS is a list of options
        KILN_TEST_SANITIZER=1 run_test "$tool $(basename "$t")" "$OUT/$tool-$(basename "$t").log" \
          compute-sanitizer --tool "$tool" --error-exitcode 9 ${KILN_SANITIZER_ARGS:-} "$t"
        pack
      done
    done
    ;;
  soak)
    secs=${KILN_SOAK_SECONDS:-120}
    KILN_SOAK_SECONDS=$secs run_test "soak ${secs}s test_gpu_soak" "$OUT/soak-test_gpu_soak.log" "$T/test_gpu_soak"
    grep -E '^\s+[0-9]+ threads|device free memory|after cycle' "$OUT/soak-test_gpu_soak.log" >>"$summary"
    ;;
  demo)
    run_test kiln-demo "$OUT/demo.log" "$BUILD/tools/kiln-demo"
    cat "$OUT/demo.log" >>"$summary"
    ;;
  bench)
    "$BUILD/tools/kiln-bench" copy --json "$OUT/bench-copy.json" >"$OUT/bench-copy.log" 2>&1
    tail -3 "$OUT/bench-copy.log" >>"$summary"
    "$BUILD/tools/kiln-bench" matmul ${KILN_BENCH_ARGS:---quick} --json "$OUT/bench-matmul.json" >"$OUT/bench-matmul.log" 2>&1
    cat "$OUT/bench-matmul.log" >>"$summary"
    ;;
  sass)
    for f in "$BUILD"/kernels/*.fatbin; do
      cuobjdump --dump-resource-usage "$f" >"$OUT/resources-$(basename "$f").txt" 2>&1
      cuobjdump --dump-sass "$f" >"$OUT/sass-$(basename "$f" .fatbin).txt" 2>&1
    done
    for f in "$OUT"/sass-*.txt; do
      note "$(basename "$f"): HMMA $(grep -c HMMA "$f"), HGMMA $(grep -c HGMMA "$f"), IMMA $(grep -c IMMA "$f"), LDSM $(grep -c LDSM "$f"), LDGSTS $(grep -c LDGSTS "$f"), local LDL/STL $(grep -cE 'LDL|STL' "$f")"
    done
    # The SASS dumps are large; keep them compressed so they come back under the size limit.
    gzip -f "$OUT"/sass-*.txt 2>/dev/null
    ;;
  esac
  pack
done
echo "=== summary ==="
cat "$summary"
