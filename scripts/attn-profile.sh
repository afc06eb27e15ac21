#!/bin/bash
# Nsight Compute readings of the attention kernels next to SDPA's, for the shapes where kiln
# trails: the SMEM short forward at S = 128 (B128 H32 D64, f16; issue 7), the FLASH backward at
# S = 2048 causal (B8 H32 D64), the 128-row FLASH forward at S = 2048, D = 64 causal and not
# (issue 8: causal runs at ~80 % of the unmasked rate there), and the D = 256 backward (B8 H8
# S2048). Run on the GPU from the repository root:
#   scripts/attn-profile.sh BUILD [NAME...]   (BUILD holds libkiln.so and tools/kiln-bench; NAMEs
#                                             pick profiles, none: all)
# Logs go to $OUT (ncu-*.txt). Clocks are left alone (--clock-control none).
set -u
. "$(dirname "$0")/ncu-lib.sh"
ncu_args attn-profile "$@"
NCU_SECTIONS="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats --section ComputeWorkloadAnalysis"
NCU_GREP="^  [a-z_]+.*\(|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Registers Per|Achieved Occupancy|Issued Ipc|Warp Cycles Per Issued|No Eligible"
NCU_TIMEOUT=180
export LD_LIBRARY_PATH=$B
ncu_prof short128 attn_fwd_short_f16_d64 3 1 "$B/tools/kiln-bench" attention --seq 128 --dtype f16 --causal 0 --algo smem
for c in 0 1; do
  ncu_prof fwd2048c$c attn_fwd_wgmma_f16_d64 3 1 "$B/tools/kiln-bench" attention --seq 2048 --dtype f16 --causal $c \
    --head-dim 64 --algo wgmma --tile-m 128
done
ncu_prof bwd2048c "attn_bwd_(dkdv_wgmma_f16_d64|dq_wgmma_f16_d64|delta)" 3 3 \
  "$B/tools/kiln-bench" attention --seq 2048 --dtype f16 --causal 1 --algo wgmma
# the D = 256 backward (dK/dV by role, dQ with 32-key steps), S = 2048 without a mask (AUTO:
# kiln-bench before 2026-12-06 ran no backward row for an explicit wgmma at D = 256)
ncu_prof bwd256 "attn_bwd_(dkdv_wgmma_f16_d256|dq_wgmma_f16_d256|delta)" 3 3 \
  "$B/tools/kiln-bench" attention --seq 2048 --dtype f16 --causal 0 --head-dim 256
cat >"$OUT/sdpa.py" <<'PY'
import sys, torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
b, h, s, d, causal = (int(x) for x in sys.argv[1:6])
q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16, requires_grad=True) for _ in range(3))
with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
    for _ in range(3):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
        o.backward(torch.randn_like(o))
torch.cuda.synchronize()
PY
ncu_prof sdpa128 "flash_fwd" 2 1 python3 "$OUT/sdpa.py" 128 32 128 64 0
ncu_prof sdpa2048c "flash_bwd" 3 3 python3 "$OUT/sdpa.py" 8 32 2048 64 1
