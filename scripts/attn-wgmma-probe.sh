#!/bin/bash
# The sm_90a FLASH forward (kernels/attention_sm90.cu) on the H200 in one device call:
#   scripts/attn-wgmma-probe.sh BUILD [quick|full]
# 1. test_gpu_attention (every case through FLASH_MMA_SYNC and FLASH_WGMMA) and the same under
#    compute-sanitizer memcheck, then racecheck of a forward and a backward test.
# 2. The SASS of the WGMMA kernels (forward, backward): HGMMA count, local memory (spills).
# 3. PyTorch SDPA (flash backend) and kiln-bench attention --algo all: both kiln kernels against
#    the peer in the same call (quick: S 2048 and 8192; full: 512..16384).
# Everything to $OUT.
B=${1:-build}
MODE=${2:-quick}
export PATH=$PATH:/usr/local/cuda/bin
timeout 120 "$B/tests/test_gpu_attention" >"$OUT/test.txt" 2>&1
rc=$?
echo "test_gpu_attention: exit $rc ($(grep -cE 'FAILED ' "$OUT/test.txt") FAILED lines)"
grep -E "FAILED|PASSED|gpu_attention:" "$OUT/test.txt" | head -30 | cut -c1-200
[ $rc = 124 ] && { echo "test_gpu_attention hung: stopping"; tail -5 "$OUT/test.txt"; exit 1; }
timeout 240 compute-sanitizer --tool memcheck "$B/tests/test_gpu_attention" >"$OUT/memcheck.txt" 2>&1
echo "memcheck: exit $?: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.txt" | tail -1)"
timeout 120 compute-sanitizer --tool racecheck "$B/tests/test_gpu_attention" --filter strided_views_scale_long \
  >"$OUT/racecheck.txt" 2>&1
echo "racecheck: exit $?: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/racecheck.txt" | tail -1)"
timeout 150 compute-sanitizer --tool racecheck "$B/tests/test_gpu_attention" --filter backward_deterministic \
  >"$OUT/racecheck-bwd.txt" 2>&1
echo "racecheck (backward): exit $?: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/racecheck-bwd.txt" | tail -1)"
for f in attention_sm90 attention_bwd_sm90; do
  cuobjdump -sass "$B/kernels/$f.fatbin" >"$OUT/sass-$f.txt" 2>&1
  echo "SASS $f: $(grep -c HGMMA "$OUT/sass-$f.txt") HGMMA, $(grep -cE 'STL|LDL' "$OUT/sass-$f.txt") local-memory ops"
done
Q=$([ "$MODE" = quick ] && echo --quick)
timeout 200 python3 scripts/bench_sdpa.py $Q --dtype all >"$OUT/sdpa.txt" 2>"$OUT/sdpa.err"
echo "bench_sdpa: exit $?"
timeout 240 "$B/tools/kiln-bench" attention $Q --dtype all --algo all --peer "$OUT/sdpa.txt" >"$OUT/bench.txt" 2>&1
echo "kiln-bench attention: exit $?"
grep -E "^attention" "$OUT/bench.txt" | cut -c1-150
# 4. The second peer (issue 8 asks for its ratio): SDPA's cuDNN backend, same shapes; its times
#    land in sdpa-cudnn.txt, to divide by kiln's rows in bench.txt.
timeout 200 python3 scripts/bench_sdpa.py $Q --dtype all --backend cudnn >"$OUT/sdpa-cudnn.txt" 2>"$OUT/sdpa-cudnn.err"
echo "bench_sdpa cudnn: exit $?"
