#!/bin/sh
# kiln-bench on the fake driver and the fake cuBLAS (tests/fake: KILN_LIBCUDA and
# KILN_BENCH_CUBLAS set by CTest), so that the benchmarks' code (matmul and int8 with the paired
# timing, int8 with scale vectors, attention without a peer (both backward modes), int4 and qkv paired at one shape each,
# --batch-us on two of them: ~20 s apiece, as they first time a 512 MiB copy, which the fake makes
# in host memory) runs in CI before it runs on a GPU. Nothing is computed there, so kiln's results
# fail their checks (exit 1) and the times mean nothing; what must hold: every measurement
# reaches its report (no crash, exit 0 or 1), --paired rows say how many rounds they paired, the
# JSON parses with those rounds in it, and a --batch-us out of range is refused.
#   check_bench.sh KILN_BENCH
set -u
bench=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "check_bench: $*"; cat "$tmp"/*.txt 2>/dev/null | tail -30; exit 1; }
run() { # run NAME ARGS...: the tool's exit must be 0 or 1 (failed checks), not a crash
  name=$1
  shift
  "$bench" "$@" --json "$tmp/$name.json" >"$tmp/$name.txt" 2>&1
  rc=$?
  [ "$rc" -le 1 ] || fail "kiln-bench $* exited $rc"
}
run matmul matmul --shape 128x96x64 --dtype all --algo all --paired --reps 4
run int8 int8 --shape 128x96x64 --algo all --paired --reps 4
run int8s int8 --shape 128x96x64 --algo all --scales both --reps 2 --batch-us 200
run int4 int4 --shape 4096x4096 --m 1024 --algo prefill --paired --reps 2
run qkv qkv --m 16 --only int4 --paired --reps 2 --batch-us 200
run attention attention --seq 2048 --head-dim 64 --dtype f16 --causal 1 --algo all --deterministic all --reps 2
run attention256 attention --seq 1024 --head-dim 256 --dtype bf16 --causal 0 --algo all --reps 2
grep -q "^peer: cuBLAS 13.0.0" "$tmp/matmul.txt" || fail "the fake cuBLAS was not loaded"
"$bench" int4 --batch-us 0 >"$tmp/batch0.txt" 2>&1
[ $? -eq 2 ] && grep -q -- "--batch-us expects an integer in \[1, 100000\], got \"0\"" "$tmp/batch0.txt" ||
  fail "kiln-bench int4 --batch-us 0 was not refused with exit 2 and the option's range"
rows=$(grep -c "paired: 4 rounds" "$tmp/matmul.txt")
[ "$rows" -eq 8 ] || fail "matmul: $rows paired rows, expected 8 (2 dtypes x 4 algos)"
rows=$(grep -c "paired: 4 rounds" "$tmp/int8.txt")
[ "$rows" -eq 2 ] || fail "int8: $rows paired rows, expected 2 (MMA_SYNC, WGMMA)"
rows=$(grep -c "i8->f32+rows+cols" "$tmp/int8s.txt")
[ "$rows" -eq 2 ] || fail "int8 --scales both: $rows rows, expected 2 (MMA_SYNC, WGMMA)"
rows=$(grep -c "paired: 2 rounds" "$tmp/int4.txt")
[ "$rows" -eq 1 ] || fail "int4: $rows paired rows, expected 1"
rows=$(grep -c "paired: 2 rounds" "$tmp/qkv.txt")
[ "$rows" -eq 6 ] || fail "qkv: $rows paired rows, expected 6 (3 shapes x against cuBLAS, against 3 calls)"
rows=$(grep -c "^attention" "$tmp/attention.txt")
[ "$rows" -eq 9 ] || fail "attention: $rows rows, expected 9 (forward, forward + backward twice x 3 algos)"
rows=$(grep -c "^attention fwd+bwd.* det " "$tmp/attention.txt")
[ "$rows" -eq 3 ] || fail "attention --deterministic all: $rows deterministic rows, expected 3"
rows=$(grep -c "^attention" "$tmp/attention256.txt")
[ "$rows" -eq 4 ] || fail "attention D = 256: $rows rows, expected 4 (forward, forward + backward x MMA_SYNC, WGMMA)"
"$bench" attention --paired >"$tmp/refused.txt" 2>&1 && fail "attention accepted --paired, which it does not implement"
if command -v python3 >/dev/null; then
  python3 - "$tmp/matmul.json" "$tmp/int8.json" <<'PY' || fail "JSON"
import json, sys
for path in sys.argv[1:]:
    rows = json.load(open(path))
    assert rows and all(r["paired_rounds"] == 4 for r in rows), path
PY
fi
echo "check_bench: kiln-bench matmul, int8, int4 and qkv --paired, int8 --scales both, and attention, ran every measurement to its report; attention refused --paired"
