#!/bin/bash
# Every kiln-bench subcommand against its peer, one after the other (what `make bench` runs):
#   scripts/bench_all.sh [--quick] BUILD_DIR OUT_DIR        (KILN_BENCH_QUICK=1 = --quick)
# copy, matmul, int8, int4, qkv, then PyTorch SDPA (scripts/bench_sdpa.py, when python3 has torch with
# CUDA) and attention against it. Each writes OUT_DIR/<name>.json (its rows) and OUT_DIR/<name>.txt
# (its output; for sdpa the peer file itself, its stderr in sdpa.err). One that fails or times
# out does not stop the others; OUT_DIR/status.txt keeps "name exit_status seconds" per run for
# scripts/bench_report.py. --quick: fewer shapes (61 s of benchmarks on an H200, 2026-12-03).
#   KILN_BENCH_<NAME>_ARGS      more options for one subcommand, e.g.
#                               KILN_BENCH_MATMUL_ARGS="--algo all --dtype all"
#   KILN_BENCH_ATTENTION_DTYPE  f16 (default), bf16 or all: SDPA and kiln must time the same cases
#   KILN_BENCH_TIMEOUT          seconds per subcommand (default 240 with --quick, 900 without)
# Exit status: 0; 1 if any subcommand failed; 2 on bad usage; 3 if no GPU could be opened (then
# nothing else runs: every subcommand would fail the same way).
# $QUICK and the KILN_BENCH_*_ARGS are split into words on purpose: they hold options or nothing.
# shellcheck disable=SC2086
set -u
QUICK=
[ "${KILN_BENCH_QUICK:-0}" = 1 ] && QUICK=--quick
if [ "${1:-}" = --quick ]; then
  QUICK=--quick
  shift
fi
if [ $# -ne 2 ]; then
  echo "usage: scripts/bench_all.sh [--quick] BUILD_DIR OUT_DIR" >&2
  exit 2
fi
BUILD=$1
OUT=$2
BENCH=$BUILD/tools/kiln-bench
if [ ! -x "$BENCH" ]; then
  echo "kiln: bench: $BENCH not found; build first (make build)" >&2
  exit 2
fi
LIMIT=${KILN_BENCH_TIMEOUT:-$([ -n "$QUICK" ] && echo 240 || echo 900)}
DTYPE=${KILN_BENCH_ATTENTION_DTYPE:-f16}
mkdir -p "$OUT" || exit 2
# Only this script's own outputs go: a stale JSON from an earlier run would pass for a result.
for n in copy matmul int8 int4 qkv attention; do rm -f "$OUT/$n.json" "$OUT/$n.txt"; done
rm -f "$OUT/sdpa.txt" "$OUT/sdpa.err" "$OUT/bench.json" "$OUT/status.txt"
echo "# quick $([ -n "$QUICK" ] && echo 1 || echo 0), started $(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$OUT/status.txt"

failed=""
# step NAME STDERR_FILE COMMAND...: runs COMMAND under the time limit with stdout to
# OUT/NAME.txt and stderr to STDERR_FILE (or with stdout when "-"), records and prints how it went.
step() {
  local name=$1 err=$2
  shift 2
  local t0=$SECONDS rc
  echo "kiln: bench $name ..."
  if [ "$err" = - ]; then
    timeout -k 10 "$LIMIT" "$@" >"$OUT/$name.txt" 2>&1
  else
    timeout -k 10 "$LIMIT" "$@" >"$OUT/$name.txt" 2>"$err"
  fi
  rc=$?
  local dt=$((SECONDS - t0)) log=$OUT/$name.txt
  [ "$err" = - ] || log=$err
  echo "$name $rc $dt" >>"$OUT/status.txt"
  if [ $rc -eq 0 ]; then
    local n rows=
    if [ -f "$OUT/$name.json" ]; then
      n=$(grep -c '"op":' "$OUT/$name.json")
      rows=", $n row$([ "$n" = 1 ] || echo s)"
    fi
    echo "kiln: bench $name: ok ($dt s$rows)"
    return 0
  fi
  failed="$failed $name"
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "kiln: bench $name: TIMED OUT after $dt s (limit $LIMIT s, KILN_BENCH_TIMEOUT); last lines of $log:"
  else
    echo "kiln: bench $name: FAILED (exit $rc, $dt s); last lines of $log:"
  fi
  tail -n 5 "$log" | sed 's/^/    /'
  return $rc
}

# copy first: it needs only the driver, so when it cannot open a device there is no GPU to use.
step copy - "$BENCH" copy $QUICK --json "$OUT/copy.json" ${KILN_BENCH_COPY_ARGS:-}
if ! grep -q '^device [0-9]*:' "$OUT/copy.txt"; then
  echo "kiln: bench: no usable CUDA GPU (see kiln-bench's message above): nothing was measured;"
  echo "kiln: bench: make bench needs an NVIDIA GPU (sm_80 or newer) and its driver"
  exit 3
fi
step matmul - "$BENCH" matmul $QUICK --json "$OUT/matmul.json" ${KILN_BENCH_MATMUL_ARGS:-}
step int8 - "$BENCH" int8 $QUICK --json "$OUT/int8.json" ${KILN_BENCH_INT8_ARGS:-}
step int4 - "$BENCH" int4 $QUICK --json "$OUT/int4.json" ${KILN_BENCH_INT4_ARGS:-}
step qkv - "$BENCH" qkv $QUICK --json "$OUT/qkv.json" ${KILN_BENCH_QKV_ARGS:-}

# The attention peer runs in Python before kiln, on the same GPU; without torch kiln runs alone.
peer=()
if python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  if step sdpa "$OUT/sdpa.err" python3 "$(dirname "$0")/bench_sdpa.py" $QUICK --dtype "$DTYPE"; then
    peer=(--peer "$OUT/sdpa.txt")
  elif grep -q '^[0-9]' "$OUT/sdpa.txt"; then
    peer=(--peer "$OUT/sdpa.txt") # what it timed before it stopped still counts
    echo "kiln: bench attention: against the $(grep -c '^[0-9]' "$OUT/sdpa.txt") SDPA cases timed before it stopped"
  else
    echo "kiln: bench attention: runs without its peer (bench_sdpa.py failed)"
  fi
else
  echo "kiln: bench sdpa: skipped: python3 has no PyTorch with CUDA; attention runs without its peer"
fi
step attention - "$BENCH" attention $QUICK --dtype "$DTYPE" ${peer[@]+"${peer[@]}"} --json "$OUT/attention.json" \
  ${KILN_BENCH_ATTENTION_ARGS:-}

if [ -n "$failed" ]; then
  echo "kiln: bench: failed:$failed (logs in $OUT)"
  exit 1
fi
echo "kiln: bench: every subcommand ran (logs in $OUT)"
