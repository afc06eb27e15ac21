#!/bin/sh
# The sm_90a FLASH forward's configurations (kernels/attention_sm90.cu): builds kiln once per rung
# (sm_90a only, no tests) into build-ladder/fwd-NAME and copies the library and kiln-bench into
# build-ladder/slim/fwd-NAME (~13 MB each, several fit one carry); then one GPU call benchmarks
# them side by side against SDPA:
#   scripts/attn-fwd-ladder.sh [RUNG...]   # here; then on the GPU:
#   python3 scripts/bench_sdpa.py --quick --dtype all > sdpa.txt
#   for d in build-ladder/slim/fwd-*; do LD_LIBRARY_PATH=$d $d/tools/kiln-bench attention --quick \
#     --dtype all --algo wgmma --peer sdpa.txt; done
# A rung's tests: a build with tests and the same KILN_TUNE_DEFS,
#   cmake -S . -B build-ladder/full-NAME -DKILN_CUDA_ARCHS=90a -DKILN_PTX_ARCH= "-DKILN_TUNE_DEFS=DEFS"
#   cmake --build build-ladder/full-NAME -j2 --target test_gpu_attention kiln-bench
# then test_gpu_attention (and compute-sanitizer racecheck of it) from there on the GPU.
# docs/performance.md records what each rung predicted and measured.
set -e
cd "$(dirname "$0")/.."
WANT="$*"
. scripts/ladder-lib.sh
# f2 (main): two consumer warpgroups of 64 query rows with ping-pong, 128-row tiles
ladder_step fwd f2 ""
# nc3 (three consumer warpgroups at D = 64, 192-row tiles) was a rung here (KILN_ATTN_WG_NC_D64=3),
# measured 2026-12-03 against f2 and taken as the wide configuration: both are now in every build,
# opts.tile_m = 128 | 192 picks one (kiln-bench attention --tile-m 128|192), so they are compared
# in one build (docs/performance.md, "The wide D = 64 forward").
# poly4 / poly8 (scripts/rungs/attn-fwd-exp2-poly.patch on 2b84b67): at D = 64 every 4th / 8th
# score fragment's exponential of an unmasked key block on the FMA pipe (a cubic, the exponent
# added as an integer) instead of the SFU, whose 16 exp2 per clock per SM take as long as a
# block's products at D = 64. Predicted +0-10 %; measured 3-9 % slower (poly4) and -2 to +3 %
# (poly8): the SFU does not bound it; not taken (docs/performance.md, "The wide D = 64 forward").
# Their tests: a full build of /tmp/kiln-fwd-poly4 with KILN_TUNE_DEFS=KILN_ATTN_EXP2_POLY=4.
ladder_step fwd poly4 "KILN_ATTN_EXP2_POLY=4" 2b84b67 scripts/rungs/attn-fwd-exp2-poly.patch
ladder_step fwd poly8 "KILN_ATTN_EXP2_POLY=8" 2b84b67 scripts/rungs/attn-fwd-exp2-poly.patch
# multi-tile and chain (scripts/rungs/attn-fwd-multi-tile.patch on b6fda3c): each forward block
# walks opts.tiles_per_block query tiles with one K/V ring and two Q buffers at D = 64 (causal tiles
# paired longest with shortest), so that a block's next tile loads while it finishes the last;
# chain also runs the next tile's first Q·Kᵀ and softmax under the last tile's final P·V (the two
# ping-pong warpgroups at D = 64). Predicted up to +15 % on causal S = 2048, D = 64 (the
# block-turnover estimate). Tile counts are compared in one build: kiln-bench attention --algo
# wgmma --tiles-per-block 1 --tiles-per-block 2 ... (a row each), beside main (rung f2) in the
# same call. Measured 2026-12-04: multi-tile: 1 tile up to 4 % slower than main, 2 within noise,
# 4 gain 1-4 % only causal D = 64 at S <= 4096 and lose up to 14 % elsewhere; chain: 3-4 % faster
# only causal S = 2048 bf16, slower elsewhere. Not taken (docs/performance.md, "The forward's
# tiles per block"). Their tests: full builds of /tmp/kiln-fwd-multi-tile and /tmp/kiln-fwd-chain.
ladder_step fwd multi-tile "KILN_ATTN_FWD_CHAIN=0" b6fda3c scripts/rungs/attn-fwd-multi-tile.patch
ladder_step fwd chain "" b6fda3c scripts/rungs/attn-fwd-multi-tile.patch
# mask (scripts/rungs/attn-mask-limit.patch on 4256b4f): one compare per masked score (a per-row
# bound, key_limit / query_floor in attention.cuh) in the forwards and backwards, after Nsight
# Compute counted ~11 % more instructions per key block causal than not at S = 2048, D = 64.
# Predicted +2-5 % there; measured about 1 % (0.991 / 0.992 time), the rest within noise: the
# forward is latency-bound there, not issue-bound. Not taken (docs/performance.md).
ladder_step fwd mask "" 4256b4f scripts/rungs/attn-mask-limit.patch
# wd-bn64, wd-bn64s8 (2026-12-06, built, not yet measured): the wide D = 64 forward with 64-key
# ring slots (4, or 8 for the same bytes in flight). A causal 192-row tile's diagonal then spans
# three 64-key blocks instead of two or three of 128 (which is why the wide configuration lost 1-6 %
# to the 128-row one at causal S = 2048 and is AUTO's only from 8192 causal). Predicted: the wide
# forward at causal S = 2048 from 1.01-1.06x the 128-row time to below it, a few %, and the
# non-causal rows a few % slower (twice the steps). Compare in one build: kiln-bench attention
# --head-dim 64 --seq 2048 --seq 8192 --dtype all --algo wgmma --tile-m 128 and --tile-m 192.
ladder_step fwd wd-bn64 "KILN_ATTN_WD_BN=64"
ladder_step fwd wd-bn64s8 "KILN_ATTN_WD_BN=64;KILN_ATTN_WD_STAGES=8"
# wd-turns (2026-12-07): the wide forward's three consumer warpgroups issue their MMAs in turns, a
# ring 0 -> 1 -> 2 -> 0 of named barriers (FlashAttention-3 runs its three-warpgroup D = 64
# forward so), instead of whenever ready: without an order the three drift into the same phase,
# softmax together (the SFU shared) and then MMAs together (the tensor cores idle before). A
# warpgroup whose rows see fewer key blocks passes its remaining turns on, releasing the slots it
# skips. Predicted +0-8 % on the wide forward (S >= 2048, D = 64). Compare with main's build in
# one call: kiln-bench attention --head-dim 64 --seq 2048 --seq 8192 --dtype all. Measured on an
# H100 (five runs each, medians): 1.3-4.8 % faster in all eight rows; taken (KILN_ATTN_WD_TURNS 1,
# docs/performance.md "Rung wd-turns"). KILN_ATTN_WD_TURNS=0 builds main's earlier behaviour.
ladder_step fwd wd-turns "KILN_ATTN_WD_TURNS=1"
# wd-half (2026-12-07, scripts/rungs/attn-wd-half.patch on 3434a58; built, not measured): in the
# wide forward, a warpgroup whose 64 rows see at most the first half of their last 128-key block
# (causal: every other warpgroup of a 192-row tile, 16 of 272 warpgroup-blocks at S = 2048) runs
# that block's Q·Kᵀ at N = 64 and its P·V over 64 keys. Model: -2.9 % of the MMA work causal at
# S = 2048, under 1 % at 8192. ptxas then serializes the wide kernel's wgmma (C7511: insufficient
# register resources for the wgmma pipeline; C7519: warpgroup.arrive injected, 6-12 times),
# with the N = 64 Q·Kᵀ alone and with the short P·V alone, with or without sc's second half
# defined before the fence; +130-850 SASS instructions. Not worth a device call in this form: the
# branch between two accumulator widths is what ptxas cannot pipeline.
ladder_step fwd wd-half "KILN_ATTN_WD_HALF=1" 3434a58 scripts/rungs/attn-wd-half.patch
# wd-half2 and wd-pad (2026-12-07, thirty-fourth session; on main since ad98a28, KILN_ATTN_WD_HALF
# and KILN_ATTN_WD_PAD 1 in kiln_abi.h, 0 builds the earlier code): wd-half with the half-width
# block peeled off the loop (first / last step chosen whole, each width straight from issue to
# wait: ptxas then keeps every wgmma pipelined, 0 spills, wide kernels 3808 -> 4760 SASS
# instructions with both); wd-pad: causal, the wide forward's tiles end at Sq, so a partial tile
# (Sq not a multiple of 192) is the shortest, not the longest (model: up to -5 % at S = 2048 if
# a tile's time were its busiest warpgroup's chain). Predicted -3 % (half) and up to -5 % (pad);
# measured on an H100 (docs/performance.md, "Rungs wd-half2, wd-pad and tree"): together 1.6-2.5 %
# faster causal at S = 2048 over nine runs, each alone within the spread. Compare: builds with
# KILN_TUNE_DEFS "KILN_ATTN_WD_HALF=0;KILN_ATTN_WD_PAD=0" and the default, kiln-bench attention
# --head-dim 64 --seq 2048 --causal 1 --dtype all, interleaved (scripts/device-next.sh halfmore).
ladder_step fwd wd-half2-pad ""
# tree (scripts/rungs/attn-softmax-tree.patch on 8b2ae64): softmax_step's row maximum and row sum
# as trees (depth 6 instead of chains of 63 dependent FMNMX / FADD) after Nsight Compute put 10-14 %
# of the wide forward's stall samples on FMNMX, mostly "wait". Measured (H100, three interleaved
# runs of kiln-bench attention --quick --dtype all): forward 0.92-1.08x main's time, mixed within
# the spread; the forward is not bound by that latency. Not taken.
ladder_step fwd tree "" 8b2ae64 scripts/rungs/attn-softmax-tree.patch
# rowsum-mma and fast-keep (2026-12-07, scripts/rungs/attn-rowsum-fast-keep.patch on 06b7a3e, both
# behind macros there): rowsum-mma sums each row's P on the tensor cores (one wgmma m64n8k16 with
# a tile of ones beside each k16 step of P·V) instead of an FADD per score; fast-keep takes P with
# the kept maximum before the block's own and the block maximum only in warps where some P >= 2,
# recomputing S (a warpgroup vote each block) where a P passes 2^64. Predicted a few % at D = 64
# where issue slots bound the forward. Measured on an H100 (two calls, 5 and 8 passes beside
# main's build): rowsum-mma 366.0 against 366.9 µs at causal D = 64 S = 2048 f16, slower at
# D = 128 causal S = 8192; fast-keep no faster at D = 64, 15-18 % slower at D = 128 causal
# S = 8192, and it failed large_scale at scale 40-50 (fixed in the patch, not rerun). Not taken
# (docs/performance.md, "Rungs rowsum-mma and fast-keep"). Their tests: a full build of
# /tmp/kiln-fwd-rowsum-mma or /tmp/kiln-fwd-fast-keep with the same KILN_TUNE_DEFS.
ladder_step fwd rowsum-mma "KILN_ATTN_MMA_ROWSUM=1" 06b7a3e scripts/rungs/attn-rowsum-fast-keep.patch
ladder_step fwd fast-keep "KILN_ATTN_FAST_KEEP=1" 06b7a3e scripts/rungs/attn-rowsum-fast-keep.patch
