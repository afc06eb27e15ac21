#!/bin/sh
# The sm_90a attention backward's tile choices (kernels/attention_bwd_sm90.cu): builds kiln once per
# configuration (sm_90a only, no tests) into build-ladder/attn-NAME and copies the library and
# kiln-bench into build-ladder/slim/attn-NAME, small enough to carry together; then one GPU call
# benchmarks them side by side:
#   scripts/attn-bwd-ladder.sh [RUNG...]   # here; then on the GPU:
#   for d in build-ladder/slim/attn-*; do $d/tools/kiln-bench attention --quick --algo wgmma; done
# Each ladder_step below is one rung: name, then KILN_TUNE_DEFS (kiln_abi.h's overridable backward
# macros). docs/performance.md records what each predicted and measured.
set -e
cd "$(dirname "$0")/.."
WANT="$*"
. scripts/ladder-lib.sh
# b3: dK/dV 128 query rows a step at D = 64, 64 at 128; dQ 128 keys a step at D = 64, 64 at
#     128; 2 ring stages (measured 0-2 % ahead of 4). Main's, beside the wide D = 64 dQ kernel.
ladder_step attn b3 ""
# dK/dV at D = 64 on 64 query rows a step: f32 P for dS (room for it), twice the steps
ladder_step attn kvbm64 "KILN_ATTN_WG_KV_BM_D64=64"
# dQ at D = 128 on 128 keys a step (half the steps); 2 ring stages to fit shared memory
ladder_step attn dqbn128 "KILN_ATTN_WG_DQ_BN_D128=128"
# 4 ring stages (b3's first form)
ladder_step attn s4 "KILN_ATTN_WG_BWD_STAGES=4"
# Two rungs were code, not tile sizes, and were reverted after measuring slower; build them from
# their commits (git worktree add DIR COMMIT, then this script's cmake lines in DIR):
#   e87a5ca  each dK/dV consumer warpgroup stages its own LSE and delta (no shared barrier)
#   d8d411e  the dQ kernel software-pipelined over two register sets (KILN_ATTN_WG_DQ_PIPE)
# Code rungs: a commit plus a patch (scripts/rungs/), built the same way:
# stats-late: the dK/dV kernel issues S and dP before loading the step's LSE and delta, so those
# global loads run under the products; predicted +3-8 % on the D = 64 backward, measured 0.3-5 %
# faster forward + backward in all 16 rows (H200, 2026-12-03) and taken: on main since the
# commit after 729e886, so this entry rebuilds it from the commit the patch was written for.
ladder_step attn stats-late "" 9f98196 scripts/rungs/attn-bwd-stats-late.patch
# A third consumer warpgroup at D = 64 (2026-12-06; docs/performance.md "The D = 64 dQ kernel
# with three consumer warpgroups"), from a5aa098, where each was a macro:
#   dq3b64: the dQ kernel with three warpgroups and 64 keys a step: 1-6 % off forward + backward
#           without a mask, -2 to +3 % causal (H100); taken as the wide D = 64 dQ kernel (from
#           Sq = 2048) in the commit after a5aa098
#   dq3:    three warpgroups, 128 keys a step with S and dP serialized: -3 to +3 %
#   dq3o:   dq3b64 with dQ left in flight under the next step's S and dP: -4 to +0.3 %
#   dq2b64, dq2o: two warpgroups with 64 keys a step, or with the overlap: -1 to +2 %
#   kv3:    the dK/dV kernel with three warpgroups, 64 query rows a step: 3-7 % slower
#   dq3s4:  dq3b64 with 4 dQ ring stages (a5aa098 + a stage macro): within the spread of dq3b64
ladder_step attn dq3b64 "KILN_ATTN_WG_DQ_NC_D64=3;KILN_ATTN_WG_DQ_BN_D64=64" a5aa098
ladder_step attn dq3 "KILN_ATTN_WG_DQ_NC_D64=3" a5aa098
ladder_step attn dq3o "KILN_ATTN_WG_DQ_NC_D64=3;KILN_ATTN_WG_DQ_BN_D64=64;KILN_ATTN_WG_DQ_OVERLAP=1" a5aa098
ladder_step attn dq2b64 "KILN_ATTN_WG_DQ_BN_D64=64" a5aa098
ladder_step attn dq2o "KILN_ATTN_WG_DQ_OVERLAP=1" a5aa098
ladder_step attn kv3 "KILN_ATTN_WG_KV_NC_D64=3;KILN_ATTN_WG_KV_BM_D64=64" a5aa098
ladder_step attn dq3s4 "KILN_ATTN_WG_DQ_NC_D64=3;KILN_ATTN_WG_DQ_BN_D64=64;KILN_ATTN_WG_DQ_STAGES=4" a5aa098 \
  scripts/rungs/attn-bwd-dq-stages.patch
# D = 256 (2026-12-06; docs/performance.md "The sm_90a backward at D = 256"): the dQ kernel with
# 3 ring slots of 32 keys (231.5 KB of shared memory) against main's 2: -1.4 to +3.5 %, the
# spread (H100); not taken
ladder_step attn d256dqs3 "KILN_ATTN_WG_DQ_STAGES_D256=3"
# lpt (2026-12-07; docs/performance.md "Rung lpt"): causal query tiles longest first across heads
# (in sections of heads whose K and V fit 16 MB of L2) instead of head after head, for the
# forward and the dQ kernel; a list-scheduling model of 132 SMs predicted -3 to -4 % on both.
# Measured (H100): the dQ kernel's forward + backward 1-4 % faster in all eight causal rows
# (D 64 / 128, S 2048 / 8192), the forward 2.6 % slower at D = 64, S = 2048 and mixed elsewhere.
# Taken for the dQ kernel only (block_tile_lpt); KILN_ATTN_LPT_L2_BYTES=0 is the old order.
ladder_step attn lpt-off "KILN_ATTN_LPT_L2_BYTES=0"
