#!/bin/sh
# The sm_90a short-sequence attention forward (algo SMEM, kernels/attention_sm90.cu with the
# kiln_abi.h KILN_ATTN_SH_* sizes) and its rungs: builds kiln once per rung (sm_90a only, no
# tests) into build-ladder/short-NAME, copies the library and kiln-bench into
# build-ladder/slim/short-NAME (~13 MB each: the rungs fit one carry), then one GPU call
# benchmarks them side by side against SDPA:
#   scripts/attn-short-ladder.sh [RUNG...]   # here; then on the GPU:
#   python3 scripts/bench_sdpa.py --lengths 128,256,384,512,1024 --dtype all > sdpa.txt
#   for d in build-ladder/slim/short-*; do LD_LIBRARY_PATH=$d $d/tools/kiln-bench attention \
#     --seq 128 --seq 256 --seq 384 --seq 512 --seq 1024 --dtype all --algo smem --peer sdpa.txt; done
# (and --algo wgmma in one of them for FLASH). docs/performance.md ("kiln_attention SMEM")
# records what each rung predicted and measured. A rung's tests (the patches add many_tiles: more
# query tiles than blocks, fully masked ones among them) need a full build of its worktree:
#   cmake -S /tmp/kiln-short-NAME -B build-ladder/full-NAME && cmake --build build-ladder/full-NAME -j2
# then test_gpu_attention from it on the GPU.
set -e
cd "$(dirname "$0")/.."
WANT="$*"
. scripts/ladder-lib.sh
# s1 (main): one query tile of 64 rows per block, two blocks per SM
ladder_step short s1 ""
# persist: at most two blocks per SM walk the query tiles (scripts/rungs/attn-short-persist.patch
# on the SMEM kernel's first commit); its first form hung on fully masked tiles
# (docs/performance.md), the patch frees Q per warp
ladder_step short persist "" 5f5a057 scripts/rungs/attn-short-persist.patch
# persist-q2: persist with two Q slots, the next tile's Q loading while this one runs (D = 64: ring
# of 2 x 128 keys); predicted to approach the DRAM floor at S = 128 (56 µs against 155-162),
# measured 4-6 % faster there and 5-20 % slower from S = 512 (the stores, not the loads, were the
# critical path: docs/performance.md)
ladder_step short persist-q2 "" 5f5a057 "scripts/rungs/attn-short-persist.patch scripts/rungs/attn-short-persist-q2.patch"
