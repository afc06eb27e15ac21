#!/bin/bash
# The closing device calls of a stop, each sized for the device tool's 10-minute limit:
#   scripts/device-release.sh bench BUILD COMMIT   make bench-run (quick); copies the regenerated
#                                                  docs/performance.md, docs/perf.png, the logs
#   scripts/device-release.sh check BUILD          every GPU test + memcheck, the GPU soak for a
#                                                  while, racecheck / initcheck / synccheck
#   scripts/device-release.sh verify BUILD         every GPU test + memcheck, the demo in f16 and
#                                                  bf16, the Python GPU tests, and racecheck /
#                                                  initcheck / synccheck of $SANITIZE_TESTS (the
#                                                  programs a kernel change touches)
#   scripts/device-release.sh attn BUILD           scripts/attn-wgmma-probe.sh (attention tests, memcheck,
#                                                  racecheck, SASS, benchmark against SDPA), then
#                                                  every GPU test, the demo, the Python GPU tests,
#                                                  initcheck / synccheck of test_gpu_attention
#   scripts/device-release.sh spot BUILD           the GEMM benchmarks a kernel change moves, in
#                                                  about 3 minutes: int8 (both algos), matmul at
#                                                  4096^3 (every algo and dtype), the
#                                                  int8 QKV DECODE / PREFILL crossover, and the
#                                                  Python bridge's per-call overhead
# Everything goes to $OUT (few files: the device tool returns a handful).
mode=$1 B=$2 C=${3:-unknown}

# The demo in f16 and bf16, then the Python GPU tests; logs into directory $1.
demo_and_python() {
  for d in f16 bf16; do
    timeout 60 "$B/tools/kiln-demo" --dtype $d >"$1/demo-$d.txt" 2>&1
    echo "kiln-demo --dtype $d: exit $?: $(tail -1 "$1/demo-$d.txt" | cut -c1-150)"
  done
  timeout 150 bash tests/run_python_tests.sh gpu "$PWD/$B/libkiln.so" >"$1/python-gpu.txt" 2>&1
  echo "python gpu tests: exit $?: $(tail -1 "$1/python-gpu.txt" | cut -c1-150)"
}
# gpu-session.sh sanitize-all (SANITIZE_TOOLS / SANITIZE_TESTS as the caller set them) for at
# most $2 seconds; logs into directory $1, one summary line per program and tool.
sanitize_more() {
  timeout "$2" bash scripts/gpu-session.sh "$B" sanitize-all >/dev/null 2>&1
  rm -rf /tmp/logs && tar xzf "$OUT/logs.tgz" -C /tmp && cp /tmp/logs/*check-*.log "$1/" 2>/dev/null
  grep -hE "^(racecheck|initcheck|synccheck)" /tmp/logs/summary.txt | cut -c1-200
  rm -f "$OUT/logs.tgz" "$OUT/summary.txt"
}

case $mode in
bench)
  export KILN_BENCH_QUICK=1 KILN_BENCH_TIMEOUT=${KILN_BENCH_TIMEOUT:-150}
  timeout 540 make --no-print-directory bench-run BUILD="$B" BENCH_COMMIT="$C" >"$OUT/bench.txt" 2>&1
  echo "make bench-run: exit $?"
  grep -vE "^ *$" "$OUT/bench.txt" | tail -70 | cut -c1-180
  cp docs/performance.md docs/perf.png "$OUT/" 2>/dev/null
  tar czf "$OUT/bench.tgz" -C "$B" bench 2>/dev/null
  ;;
check)
  mkdir -p /tmp/san
  timeout 200 bash scripts/gpu-session.sh "$B" info tests sanitize >/dev/null 2>&1
  rm -rf /tmp/logs && tar xzf "$OUT/logs.tgz" -C /tmp && cp -r /tmp/logs /tmp/san/tests
  grep -vE "^ *[0-9a-z_]+ *\| " /tmp/logs/summary.txt | cut -c1-200 | head -40
  KILN_SOAK_SECONDS=${SOAK:-30} timeout 120 bash scripts/gpu-session.sh "$B" soak >/dev/null 2>&1
  rm -rf /tmp/logs && tar xzf "$OUT/logs.tgz" -C /tmp && cp /tmp/logs/summary.txt /tmp/san/soak-summary.txt &&
    cp /tmp/logs/soak-*.log /tmp/san/
  cut -c1-200 /tmp/san/soak-summary.txt
  for tool in racecheck initcheck synccheck; do
    SANITIZE_TOOLS=$tool timeout "${SAN_SECONDS:-70}" bash scripts/gpu-session.sh "$B" sanitize-all >/dev/null 2>&1
    rm -rf /tmp/logs && tar xzf "$OUT/logs.tgz" -C /tmp && cp /tmp/logs/$tool-*.log /tmp/san/ 2>/dev/null
  done
  rm -f "$OUT/logs.tgz" "$OUT/summary.txt"
  for f in /tmp/san/*check-*.log; do
    [ -f "$f" ] && echo "$(basename "$f"): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' "$f" | tr '\n' ' ' | cut -c1-160)"
  done
  tar czf "$OUT/check.tgz" -C /tmp san
  ;;
verify)
  mkdir -p /tmp/v
  timeout 260 bash scripts/gpu-session.sh "$B" info tests sanitize >/dev/null 2>&1
  tar xzf "$OUT/logs.tgz" -C /tmp && mv /tmp/logs /tmp/v/tests
  grep -vE "^ *[0-9a-z_]+ *\| " /tmp/v/tests/summary.txt | cut -c1-200 | head -40
  demo_and_python /tmp/v
  SANITIZE_TESTS=${SANITIZE_TESTS:-test_gpu_int4} sanitize_more /tmp/v "${SAN_SECONDS:-100}"
  tar czf "$OUT/verify.tgz" -C /tmp v
  ;;
spot)
  k="$B/tools/kiln-bench"
  { timeout 80 "$k" int8 --quick --reps 20
    timeout 30 "$k" int8 --shape 4096x4096x4096 --out all --algo wgmma --reps 20
    timeout 60 "$k" matmul --shape 4096x4096x4096 --algo all --dtype all --reps 20
    for m in 128 256; do for a in decode prefill; do
      timeout 25 "$k" qkv --quick --only int8 --algo $a --m $m; done; done
  } >"$OUT/spot.txt" 2>&1
  grep -E "^(int8|matmul|qkv_int8) " "$OUT/spot.txt" | cut -c1-150
  KILN_LIBRARY="$PWD/$B/libkiln.so" timeout 60 python3 python/bench_overhead.py --repeats 3 --n 1000 >"$OUT/overhead.txt" 2>&1
  tail -8 "$OUT/overhead.txt"
  ;;
attn)
  bash scripts/attn-wgmma-probe.sh "$B" quick >"$OUT/probe-summary.txt" 2>&1
  grep -v mma_sync "$OUT/probe-summary.txt" | cut -c1-150 | tail -44
  mkdir -p /tmp/a
  timeout 200 bash scripts/gpu-session.sh "$B" info tests >/dev/null 2>&1
  tar xzf "$OUT/logs.tgz" -C /tmp && mv /tmp/logs /tmp/a/tests
  grep -E "rc=" /tmp/a/tests/summary.txt | cut -c1-140
  demo_and_python /tmp/a
  SANITIZE_TOOLS="initcheck synccheck" SANITIZE_TESTS=test_gpu_attention sanitize_more /tmp/a 120
  tar czf "$OUT/attn.tgz" -C /tmp a
  ;;
*) echo "usage: scripts/device-release.sh bench|check|verify|spot|attn BUILD [COMMIT]" >&2; exit 2 ;;
esac
