#!/bin/bash
# The device run of 2026-12-02 evening (one call): every GPU test and memcheck, SASS counts, then
# the int4, int8 and attention benchmarks with their peers, then the Python GPU tests and the
# eager-overhead measurement. Usage on the GPU machine: scripts/device-evening.sh BUILD_DIR
B=${1:-build}
bash scripts/gpu-session.sh "$B" info tests sanitize sass demo >/dev/null 2>&1
tar xzf "$OUT/logs.tgz" -C /tmp
grep -vE "^ *[0-9a-z_]+ *\| " /tmp/logs/summary.txt | cut -c1-200 | head -80
grep -hE "FAILED|rror" /tmp/logs/test-*.log | head -30
timeout 120 "$B/tools/kiln-bench" int4 >"$OUT/int4.txt" 2>&1; cat "$OUT/int4.txt"
timeout 60 "$B/tools/kiln-bench" int8 --quick >"$OUT/int8.txt" 2>&1; cat "$OUT/int8.txt"
timeout 150 python3 scripts/bench_sdpa.py --quick --dtype all >"$OUT/sdpa.txt" 2>&1
timeout 90 "$B/tools/kiln-bench" attention --quick --dtype all --peer "$OUT/sdpa.txt" >"$OUT/attn.txt" 2>&1; cat "$OUT/attn.txt"
KILN_LIBRARY=$PWD/$B/libkiln.so timeout 120 python3 -m pytest -q -rs python/tests >"$OUT/pytest.txt" 2>&1; tail -15 "$OUT/pytest.txt"
KILN_LIBRARY=$PWD/$B/libkiln.so timeout 60 python3 python/bench_overhead.py >"$OUT/overhead.txt" 2>&1; cat "$OUT/overhead.txt"
timeout 60 "$B/tools/kiln-demo" --dtype bf16 >"$OUT/demo-bf16.txt" 2>&1; tail -5 "$OUT/demo-bf16.txt"
