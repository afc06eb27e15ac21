#!/bin/sh
# The GEMM development ladder: builds kiln once per tile configuration (sm_90a only, to keep the
# builds short) into build-ladder/NAME, so one GPU call can benchmark every step side by side:
#   scripts/gemm-ladder.sh [RUNG...]  # build here (nvcc; all rungs, or the ones named), then on the GPU:
#   for d in build-ladder/*; do $d/tools/kiln-bench matmul --shape 4096x4096x4096 --algo all; done
# Each line below is one rung: name, then KILN_TUNE_DEFS. docs/performance.md records what each
# rung predicted and measured.
set -e
cd "$(dirname "$0")/.."
WANT="$*"
. scripts/ladder-lib.sh
build() {
  name=$1
  defs=$2
  ladder_wanted "$name" || return 0
  ladder_build "build-ladder/$name" "$defs"
  echo "built build-ladder/$name ($defs)"
}
# v1: BK 32, 4-stage cp.async; register-staged MMA_SYNC at one block per SM
build v1-bk32-s4 "KILN_GEMM_CPA_BK=32;KILN_GEMM_CPA_STAGES=4;KILN_GEMM_MMA_BN=128;KILN_GEMM_MMA_BLOCKS_PER_SM=1"
# v2: BK 64, 3 stages (half the barriers per FLOP); MMA_SYNC capped at 128 registers, 2 blocks/SM
build v2-bk64-s3 "KILN_GEMM_CPA_BK=64;KILN_GEMM_CPA_STAGES=3;KILN_GEMM_MMA_BN=128;KILN_GEMM_MMA_BLOCKS_PER_SM=2"
# v4 (default since): MMA_SYNC on CP_ASYNC's 128x256 tile (warp 64x64), one block per SM, registers uncapped:
#     its 128x128 two-block form is latency-bound (see docs/performance.md)
build v4-mma-128x256 "KILN_GEMM_MMA_BN=256;KILN_GEMM_MMA_BLOCKS_PER_SM=1"
# v5: CP_ASYNC 128x128x32 (warp 64x32), 4 stages, two blocks per SM: 16 warps to hide latency
build v5-cpa-128x128-2blk "KILN_GEMM_CPA_BN=128;KILN_GEMM_CPA_BK=32;KILN_GEMM_CPA_STAGES=4;KILN_GEMM_CPA_BLOCKS_PER_SM=2"
# v6: CP_ASYNC 128x128x64, 3 stages, two blocks per SM
build v6-cpa-128x128x64-2blk "KILN_GEMM_CPA_BN=128;KILN_GEMM_CPA_BK=64;KILN_GEMM_CPA_STAGES=3;KILN_GEMM_CPA_BLOCKS_PER_SM=2"
# WGMMA w2: 128x256 tiles in 2-CTA clusters sharing B by TMA multicast (off by default: it
#     measured 7 % slower at 4096^3), for comparison with the default build in the same GPU call.
#     Since rung pairs2 (2026-12-05) the pairs stage C through shared memory as single CTAs do,
#     and kiln_matmul_int8 has a pair kernel too: measured 0.5 % slower at 4096^3 f16, int8 the
#     same (docs/performance.md, "Rung pairs2"): L2 bandwidth does not bound these kernels
build w2-wgmma-pairs "KILN_WGMMA_PAIRS=1"
# WGMMA w3: the band height of the persistent grid's L2-friendly tile order (kiln_gemm_args.group_m,
#     tile rows per band; 8 on main). At 4096^3 with 128 x 256 tiles a wave of 132 tiles covers
#     ~one band of 8 x 16 tiles (A 8 MB + all of B 32 MB); at 8192^3 it covers 8 x 16.5 of 32
#     tile columns, so B's slabs (69 MB) pass through L2 once per band. Predicted: within +-2 %
#     (the pair rung found L2 bandwidth not limiting); measured 2026-12-04: within the run-to-run
#     spread for 4, 16 and 32, main keeps 8 (docs/performance.md). kiln-bench builds only (ladder_step):
#     build-ladder/slim/gemm-w3-g4 ..., run as kiln-bench matmul --shape 4096x4096x4096
#     --shape 8192x8192x8192 --algo wgmma --dtype all --reps 50 beside main's build.
ladder_step gemm w3-g4 "KILN_GEMM_GROUP_M=4"
ladder_step gemm w3-g16 "KILN_GEMM_GROUP_M=16"
ladder_step gemm w3-g32 "KILN_GEMM_GROUP_M=32"
# store-probe: the WGMMA GEMMs and the int4 PREFILL without their epilogue's stores (results are
# garbage): what an epilogue overlapped with the next tile could gain at most. Measured
# 2026-12-04: 6-15 % of the f16 GEMM with f32 C, 18-24 % of the int8 GEMM, 1-13 % of the int4
# PREFILL (docs/performance.md, "Rung store-probe").
ladder_step gemm store-probe "KILN_GEMM_STORE_PROBE=1;KILN_W4_WG_STORE_PROBE=1"
# e1 (landed as 92fd5b2; its patch, scripts/rungs/gemm-e1-tma-store.patch, is in 1392282): the
# WGMMA GEMMs' C (f16/bf16 with beta = 0, and int8) through shared memory and TMA stores that
# drain under the next tile, where C's rows are whole 16-byte chunks; e1-off: the same code with
# KILN_GEMM_TMA_STORE=0 (direct stores). Predicted: up to the probe's 6-15 % (f32 C) and 18-24 %
# (int8). Measured 2026-12-04 (twelfth session, 4 interleaved runs): 4-12 % with 16-bit C, int8
# 1-12 %, f32 C within the noise (docs/performance.md, "Rung e1").
ladder_step gemm e1-off "KILN_GEMM_TMA_STORE=0"
# e2 (commit 2c7edbc, where KILN_GEMM_C_EVICT_FIRST exists): e1 with C's TMA stores marked
# evict-first in L2, so that C (written once) does not displace the A and B slabs that later
# tiles read again. Predicted: part of what e1 left of the probe's bound with f32 C. Measured
# 2026-12-04, 3 interleaved rounds: 0.93-1.04 of main, noise; not taken (the macro left main).
ladder_step gemm e2 "KILN_GEMM_C_EVICT_FIRST=1" 2c7edbc
# e3 (commit 2f69510, where KILN_GEMM_C_PIECE_ROWS exists): each warp stages and stores its own
# 16-row pieces of C (lane 0 issues the TMA store) in place of the warpgroup's 64-row pieces
# between named barriers. Nsight Compute (4096^3 f16 -> f32, e1) put 41 % of the warps' stall
# cycles at CTA barriers. Predicted: a few % of the epilogue's share. Measured 2026-12-04: tests
# and sanitizers clean; Nsight Compute 192.4-193.0 against main's 192.8-193.1 us, the barrier
# stall 5.4 -> 4.9 cycles (so the epilogue's barriers were not most of it); bench 0.96-1.04.
# Not taken (the macro left main). Its tests: a full build with
# -DKILN_TUNE_DEFS=KILN_GEMM_C_PIECE_ROWS=16 of 2f69510, then test_gpu_matmul and test_gpu_int8.
ladder_step gemm e3 "KILN_GEMM_C_PIECE_ROWS=16" 2f69510
# v9: CP_ASYNC 128x256x64 with 4 stages (216 KB of shared memory: sm_90 only; sm_80 has 164 KB,
# so a default would have to depend on the device) instead of 3 (162 KB): three slices in flight
# during the MMAs instead of two. Nsight Compute (rung v7) found 0.38 eligible warps a scheduler.
# Predicted: +0-10 % at 4096^3 if load latency is what the warps wait on. Measured 2026-12-04: a
# steady 1-3 % (0.46-0.48x cuBLAS), not taken (docs/performance.md, ladder table). kiln-bench only:
# kiln-bench matmul --shape 4096x4096x4096 --shape 8192x8192x8192 --algo cp_async --dtype all.
ladder_step gemm v9-cpa-s4 "KILN_GEMM_CPA_STAGES=4"
# skew (2026-12-05): consumer warpgroup 1 starts KILN_GEMM_WG_SKEW K slices
# after warpgroup 0, so that one warpgroup's epilogue runs under the other's last wgmmas instead
# of both idling the tensor pipe together. Predicted: up to half of the epilogue's share at
# 4096^3 (1-2 %), more for int8; a skew above 1-2 may starve the leader (the ring's lead shrinks
# by the skew). Measured with scripts/device-next.sh skew against skew 0 (H100, 2026-12-05):
# +0-0.3 % at 4096^3 f16, nothing for int8, inside the spread; not taken (docs/performance.md).
ladder_step gemm s1 "KILN_GEMM_WG_SKEW=1"
ladder_step gemm s2 "KILN_GEMM_WG_SKEW=2"
ladder_step gemm s3 "KILN_GEMM_WG_SKEW=3"
# c-pieces (2026-12-05, twentieth session): the epilogue's staging for C, more pieces a consumer
# warpgroup (so a tile's epilogue waits for fewer of its stores) for a stage of the 256-wide
# ring. p4: 3 stages + 4 pieces (cannot launch: the 64-wide ring then exceeds 227 KB); s3: 3
# stages + 2 pieces, 1-3 us slower at 4096^3 int8. Not taken (docs/performance.md, "int8 after
# other kernels").
ladder_step gemm c-p4 "KILN_GEMM_WG_STAGES_256=3;KILN_GEMM_WG_C_PIECES=4"
ladder_step gemm c-s3 "KILN_GEMM_WG_STAGES_256=3"
# e4 / e5 / e8 (2026-12-05): the staged epilogue with less code, so that a cold start after
# another kernel fetches less (scripts/probes/int8_after.cu: 16 us at 4096^3 int8). Built from
# the working tree as they were written; e8 landed as c7effd0 (e4's clamped column factors,
# e5's Int8ScaleValue, st.shared by the compiler), so main is the last rung. Measured with
# scripts/device-next.sh epi (docs/performance.md).
# v10 (2026-12-06, twenty-second session): CP_ASYNC's ring through mbarriers (KILN_GEMM_CPA_MBAR=1):
# each warp waits only for the slice it reads (`full`, completed by every thread's cp.async
# through cp.async.mbarrier.arrive.noinc) and, before refilling a stage, for every thread to
# have read it (`empty`); no __syncthreads per slice. Reading behind it: per 128x256x64 slice a
# scheduler's two warps need ~2048 cycles of HMMA.16816 at mma.sync's rate (8 cycles each,
# ~495 TFLOP/s on 132 SMs), against ~3300 measured (300 TFLOP/s); with a block barrier every
# slice all 8 warps issue their first ldmatrix together (32 KB of shared reads, ~256 cycles of
# bank bandwidth) after waiting for the slowest. Predicted: +5-10 % at 4096^3 if the lock-step
# is the loss. v10-s4: the same with 4 stages (sm_90's 216 KB), two slices in flight during
# the MMAs as on main's 3-stage ring (the mbarrier ring refills after the slice's MMAs).
ladder_step gemm v10-cpa-mbar "KILN_GEMM_CPA_MBAR=1" 54e02a3
ladder_step gemm v10-cpa-mbar-s4 "KILN_GEMM_CPA_MBAR=1;KILN_GEMM_CPA_STAGES=4" 54e02a3
# v10-bk32-s6: the mbarrier ring with BK 32 and 6 stages (157 KB, fits sm_80): finer slices,
# four in flight during a slice's MMAs; per-slice waits are cheap once no block barrier is left.
ladder_step gemm v10-cpa-mbar-bk32-s6 "KILN_GEMM_CPA_MBAR=1;KILN_GEMM_CPA_BK=32;KILN_GEMM_CPA_STAGES=6" 54e02a3
# v11: MMA_SYNC's register-staged feed on the same mbarrier ring (KILN_GEMM_MMA_RING=1) with 4
# stages of BK 32 (106 KB): slice kt+3 loaded into registers before slice kt's MMAs, stored
# after them once every thread has read its stage. Same reading and prediction as v10; measured
# from the tests build of scripts/device-next.sh v10 (HEAD: v10 + v11).
ladder_step gemm v11-mma-ring-s4 "KILN_GEMM_CPA_MBAR=1;KILN_GEMM_MMA_RING=1;KILN_GEMM_MMA_STAGES=4" 54e02a3
# (v10 / v11 build from 54e02a3, where the rings were macros; main has only the rings since.)
# v12 (2026-12-06, twenty-third session): v10 and v11 are main's (measured on an H100: CP_ASYNC
# 0.45-0.49x -> 0.49-0.57x, MMA_SYNC 0.40-0.45x -> 0.47-0.51x cuBLAS at 4096^3), with stages per
# device (KILN_GEMM_STAGES: 4 on sm_90, 3 elsewhere). From here the sm_90 counts are the _SM90
# macros. v12-cpa-s3: CP_ASYNC's 3 stages on sm_90, the baseline of the 4th stage. The rest try
# the ring's depth as drift slack instead of slices in flight (KILN_GEMM_*_AHEAD): a register-
# staged feed holds one slice in registers whatever the depth, so MMA_SYNC's 4 stages bought it
# only drift of one slice; Nsight Compute (v11, H100) put 6 % of its warp samples on ring waits.
# v12-mma-ahead1: MMA_SYNC fetches 1 slice ahead, 3 of slack; v12-cpa-ahead2: CP_ASYNC 2 ahead
# (v10's in flight), 2 of slack. Predicted: a few % for MMA_SYNC if the ring waits are drift.
ladder_step gemm v12-cpa-s3 "KILN_GEMM_CPA_STAGES_SM90=3"
ladder_step gemm v12-mma-ahead1 "KILN_GEMM_MMA_AHEAD=1"
ladder_step gemm v12-cpa-ahead2 "KILN_GEMM_CPA_AHEAD=2"
# v14 (2026-12-06): MMA_SYNC paired with cuBLAS ran 547-556 us at 4096^3 against 418-436 back to
# back (H100; SM clock steady at 1965-1980 MHz in both). Guess: after cuBLAS's ~200 KB blocks the
# SMs keep a split with little L1, through which MMA_SYNC's ld.global pass (CP_ASYNC's
# cp.async.cg bypass L1 and lost 3-10 %). KILN_GEMM_MMA_CARVEOUT=0 asks for the most L1 the
# block allows (CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, src/runtime/context.c).
# Predicted: paired MMA_SYNC back near its back-to-back time if the guess holds; no change
# back to back. Measured (device-next.sh v14): no effect; not taken, kept as a patch.
ladder_step gemm v14-mma-carveout0 "KILN_GEMM_MMA_CARVEOUT=0" 8463581^ scripts/rungs/gemm-v14-mma-carveout.patch
# v15 (2026-12-06): MMA_SYNC loads each slice into registers one slice
# ahead of its MMAs (~1700 cycles of them at 4096^3), and v11's profile put 5.5 % of its warp
# samples on shared stores still waiting for those loads; a DRAM round trip under load can take
# that long. KILN_GEMM_MMA_L2_AHEAD=D prefetches (prefetch.global.L2, interior windows only)
# the slice D after the one being loaded, so the loads find L2. Predicted: a few % back to back;
# more paired with cuBLAS if its slowdown there is load latency.
# Measured (device-next.sh v14, H100): 6-10 % slower; not taken, removed from main after 80da638,
# where these build from.
ladder_step gemm v15-mma-l2ahead2 "KILN_GEMM_MMA_L2_AHEAD=2" 80da638
ladder_step gemm v15-mma-l2ahead4 "KILN_GEMM_MMA_L2_AHEAD=4" 80da638
# v16 (2026-12-06): v15 measured 6-10 % slower (H100). The probe (device-next.sh sm80long) showed
# MMA_SYNC's paired slowdown is the SM clock shared with cuBLAS (1770 MHz alternating, 1920
# alone, 1590 under cuBLAS alone), so MMA_SYNC must get faster per cycle. Its profile: per 128x256x32
# slice a warp issues 64 HMMA + 16 LDSM and ~97 instructions of fetch (address arithmetic, 6
# LDG.128), all before the ring wait, a basic block of its own: no HMMA issues from that warp
# meanwhile, and a scheduler has two warps. KILN_GEMM_MMA_LATE_FETCH=1 fetches interior slices
# after the wait under a predicate, in the MMAs' block, for ptxas to interleave. Predicted: +5-15 %
# MMA_SYNC at 4096^3, 0 spills. Measured (device-next.sh v14, H100): no effect (SASS: the loads
# moved after the wait, their arithmetic stayed ahead of the MMAs); not taken, kept as a patch.
ladder_step gemm v16-mma-late "KILN_GEMM_MMA_LATE_FETCH=1" b3b72cb scripts/rungs/gemm-v16-mma-late.patch
# v17 (2026-12-06): v16's SASS shows each slice starting with the ring wait, then ~50
# instructions and the first ldmatrix, whose latency (~30 cycles) the first HMMA waits out; the
# profile (v11, f16 4096^3) puts 43 % of warp samples on fixed-latency waits, 22 % on HMMAs
# spaced by one warp's issue limit, while the tensor pipe is busy only 6 % (math throttle): a
# scheduler's two warps rarely issue HMMAs together. KILN_GEMM_HANDOFF=1 (WarpTile::slice) waits
# for slice kt+1 and loads its first fragments before slice kt's last MMAs, so a warp goes from
# one slice's MMAs to the next's without a gap. Costs 32 registers live across the fetch and
# put: ptxas spills 8 bytes (kn), 28-40 (mk, mn) in MMA_SYNC, 8 in CP_ASYNC mk; kk none.
# Predicted: +5-10 % at 4096^3 if the gap is what keeps the pipe idle. Measured (device-next.sh
# handoff, H100): MMA_SYNC 6 % slower (_kn), unchanged (_kk, no spills); CP_ASYNC 30 % slower
# (its next slice is often still in flight). Not taken, kept as a patch.
ladder_step gemm v17-handoff "KILN_GEMM_HANDOFF=1" b3b72cb scripts/rungs/gemm-v17-handoff.patch
# v18 (2026-12-06): MMA_SYNC warp-specialized on sm_90a (KILN_GEMM_MMA_WS=1): a fourth
# warpgroup does every load (synchronous ld.global, st.shared into the ring), the 8 MMA warps only
# wait, ldmatrix and mma (setmaxnreg 120 / 192). Predicted: the MMA warps' issue freed of ~100
# instructions a slice, +20-40 % if the loaders keep up. Measured (device-next.sh v12q, H100):
# correct and sanitizer-clean, 13 % slower: one slice in flight per loader thread (48 registers)
# is latency-bound, and two do not fit the register file beside the MMA warps. Not taken.
ladder_step gemm v18-mma-ws "KILN_GEMM_MMA_WS=1" b3b72cb scripts/rungs/gemm-v18-mma-ws.patch
# v19 (2026-12-06): the profile's samples per slice and warp (~1577 cycles, f16 4096^3): ~520 in
# its 64 HMMAs (one warp issues one every ~8 cycles), ~300 on the fetch's 64-bit address chains
# (fixed-latency waits on IMAD / LEA / IADD3: the window origin A + m0·lda + k0 and the thread's
# offset rebuilt every slice, registers being too few to keep them), ~250 on ring waits and
# stores waiting for loads. KILN_GEMM_MMA_PTRS=1 computes each thread's first-chunk pointers once
# per tile and adds kt slices' advance (one 64-bit multiply-add); edge windows as before.
# ptxas: 238-248 registers (from 240-250), 0 spills. Predicted: +3-10 % at 4096^3. Measured
# (device-next.sh handoff, H100): 4 % slower; ptxas rebuilds the ldmatrix addresses from %tid
# every slice instead. Not taken, kept as a patch.
ladder_step gemm v19-mma-ptrs "KILN_GEMM_MMA_PTRS=1" b3b72cb scripts/rungs/gemm-v19-mma-ptrs.patch
# v20 (2026-12-06): if the register file bounds MMA_SYNC (v15-v19), give it registers: the warp
# fragments single-buffered (KILN_GEMM_FRAG_BUFFERS=1, 32 registers fewer; each k step's ldmatrix
# right before its MMAs, their latency left to the scheduler's other warp; rung v1 found the
# double buffer worth 0-1.5 % before the ring); -ptrs adds v19's per-thread pointers, which then
# need not be paid for with rebuilt ldmatrix addresses. ptxas: 246-252 / 244-249 registers, 0
# spills. Predicted: v20 -2 to +3 %, v20-ptrs +3-8 % if the freed registers stop the rebuilding.
# Measured (device-next.sh handoff, H100): v20 0-1 % (CP_ASYNC 3-5 % slower), v20-ptrs MMA_SYNC
# 3-5 % faster. Main since 2026-12-06 for MMA_SYNC's vector kernels only (no macros: gemm_block's
# PTRS and FRAG_BUFFERS); these rungs build from the tree before it with the patches' macros.
ladder_step gemm v20-frag1 "KILN_GEMM_FRAG_BUFFERS=1" 95d345a scripts/rungs/gemm-v20-frag.patch
ladder_step gemm v20-frag1-ptrs "KILN_GEMM_FRAG_BUFFERS=1;KILN_GEMM_MMA_PTRS=1" 95d345a "scripts/rungs/gemm-v19-mma-ptrs.patch scripts/rungs/gemm-v20-frag.patch"
# v21 (2026-12-06): v20's per-thread pointers for CP_ASYNC's interior cp.async too
# (KILN_GEMM_CPA_PTRS=1): its put rebuilds the window origin and interior_src every slice as
# MMA_SYNC's fetch did. ptxas: 244-254 registers (from 234-244), 0 spills. Predicted: 0-4 %.
# Measured (device-next.sh handoff, H100): _kn 2-3 % faster, _kk 5 % slower. Not taken.
ladder_step gemm v21-cpa-ptrs "KILN_GEMM_CPA_PTRS=1" 4eb7dc0 scripts/rungs/gemm-v21-cpa-ptrs.patch
# v22 (2026-12-06): v18's loader warpgroup with two slices in flight per loader thread (slice kt+1
# loaded before slice kt is stored), the loader lean enough to hold them (96 registers): per-thread
# pointers for interior windows, edge loads along the thread's column of chunks, stores at one
# address plus offsets. setmaxnreg FILL / MMA: ws2 152 / 176, r184 136 / 184 (main's since),
# r192 120 / 192; ws1: one slice in flight at 152 / 176. Predicted +10-20 % at 4096^3 (v18 was
# loader-bound: 512 slices x ~1800 cycles); measured (device-next.sh v22 and mmarungs, H100):
# 3-5 % (ws2, r184, r192 alike), ws1 4-7 % slower. Main since 2026-12-06 as r184.
W22="KILN_GEMM_MMA_WS=1;KILN_GEMM_MMA_WS_NB=1"
ladder_step gemm v22-ws1 "$W22;KILN_GEMM_MMA_WS_DEPTH=1;KILN_GEMM_MMA_WS_FILL_REGS=152;KILN_GEMM_MMA_WS_MMA_REGS=176" 6cdb5cf scripts/rungs/gemm-v22-ws.patch
ladder_step gemm v22-ws2 "$W22;KILN_GEMM_MMA_WS_DEPTH=2;KILN_GEMM_MMA_WS_FILL_REGS=152;KILN_GEMM_MMA_WS_MMA_REGS=176" 6cdb5cf scripts/rungs/gemm-v22-ws.patch
ladder_step gemm v22-r184 "$W22;KILN_GEMM_MMA_WS_DEPTH=2;KILN_GEMM_MMA_WS_FILL_REGS=136;KILN_GEMM_MMA_WS_MMA_REGS=184" 6cdb5cf scripts/rungs/gemm-v22-ws.patch
ladder_step gemm v22-r192 "$W22;KILN_GEMM_MMA_WS_DEPTH=2;KILN_GEMM_MMA_WS_FILL_REGS=120;KILN_GEMM_MMA_WS_MMA_REGS=192" 6cdb5cf scripts/rungs/gemm-v22-ws.patch
# v23 (2026-12-06): r184's loader loads with a cache qualifier, .cg (cg) or .L1::no_allocate (na):
# Nsight Compute put L1 at 76 % with the loads' fills through it. Measured: within the spread.
ladder_step gemm v23-cg "$W22;KILN_GEMM_MMA_WS_DEPTH=2;KILN_GEMM_MMA_WS_FILL_REGS=136;KILN_GEMM_MMA_WS_MMA_REGS=184;KILN_GEMM_LDG_HINT=1" 6cdb5cf scripts/rungs/gemm-v22-ws.patch
ladder_step gemm v23-na "$W22;KILN_GEMM_MMA_WS_DEPTH=2;KILN_GEMM_MMA_WS_FILL_REGS=136;KILN_GEMM_MMA_WS_MMA_REGS=184;KILN_GEMM_LDG_HINT=2" 6cdb5cf scripts/rungs/gemm-v22-ws.patch
# v24 (2026-12-06): the loaders' lanes walk down the rows of a tile with 4 chunks a row, so that a
# store phase of 8 lanes writes 8 rows (v22's profile: 2 wavefronts per such store). Measured
# (device-next.sh mmarungs, H100): 15-20 % slower. Not taken.
ladder_step gemm v24-lanerows "KILN_GEMM_MMA_WS_LANE_ROWS=1" 93b8429 scripts/rungs/gemm-v24-lane-rows.patch
# v25 (2026-12-06): v22's MMA warps with double-buffered fragments at 192 registers, loaders at
# 120 (v22's profile: 18 % of the MMA warps' stalls wait for ldmatrix). Measured (mmarungs,
# H100): within the spread. Not taken.
ladder_step gemm v25-nb2 "KILN_GEMM_MMA_WS=1;KILN_GEMM_MMA_WS_DEPTH=2;KILN_GEMM_MMA_WS_FILL_REGS=120;KILN_GEMM_MMA_WS_MMA_REGS=192;KILN_GEMM_MMA_WS_NB=2" 6cdb5cf scripts/rungs/gemm-v22-ws.patch
# v26 (2026-12-06): a k step's MMAs with the B fragment outer, A inner. Measured (mmarungs, H100,
# two calls): within the spread. Not taken.
ladder_step gemm v26-ni "KILN_GEMM_MMA_ORDER_NI=1" 01d195b scripts/rungs/gemm-v26-order-ni.patch
