#!/bin/bash
# One device call for the W·A16 decode kernels (kernels/wa16_decode_sm80.cu): every GPU test,
# memcheck and the SASS report of NEW, then the int4 ladder (the same benchmark with an older
# build, e.g. v3 at 898bacf, in the same run), kiln-bench qkv, and the Python GPU tests.
# Usage on the GPU machine: scripts/device-wa16.sh NEW_BUILD [OLD_BUILD]
NEW=$1 OLD=${2:-}
bash scripts/gpu-session.sh "$NEW" info tests sanitize sass >/dev/null 2>&1
tar xzf "$OUT/logs.tgz" -C /tmp
grep -vE "^ *[0-9a-z_]+ *\| " /tmp/logs/summary.txt | cut -c1-220 | head -60
grep -hE "FAILED|rror" /tmp/logs/test-*.log | head -30
if [ -n "$OLD" ]; then
  timeout 100 "$OLD/tools/kiln-bench" int4 --quick >"$OUT/int4-old.txt" 2>&1; grep -E "matmul_int4|copy" "$OUT/int4-old.txt"
fi
timeout 100 "$NEW/tools/kiln-bench" int4 --quick --json "$OUT/int4.json" >"$OUT/int4.txt" 2>&1; grep -E "matmul_int4|copy|error" "$OUT/int4.txt"
timeout 150 "$NEW/tools/kiln-bench" qkv --quick --json "$OUT/qkv.json" >"$OUT/qkv.txt" 2>&1; grep -E "qkv|copy|error" "$OUT/qkv.txt"
KILN_LIBRARY=$PWD/$NEW/libkiln.so timeout 150 python3 -m pytest -q -rs python/tests >"$OUT/pytest.txt" 2>&1; tail -8 "$OUT/pytest.txt"
