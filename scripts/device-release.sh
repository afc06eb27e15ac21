#!/bin/bash
# The closing device calls of a stop, each sized for the device tool's 10-minute limit:
#   scripts/device-release.sh bench BUILD COMMIT   make bench-run (quick); copies the regenerated
#                                                  docs/performance.md, docs/perf.png, the logs
#   scripts/device-release.sh check BUILD          every GPU test + memcheck, the GPU soak for a
#                                                  while, racecheck / initcheck / synccheck
# Everything goes to $OUT (few files: the device tool returns a handful).
mode=$1 B=$2 C=${3:-unknown}
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
*) echo "usage: scripts/device-release.sh bench|check BUILD [COMMIT]" >&2; exit 2 ;;
esac
