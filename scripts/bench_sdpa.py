#!/usr/bin/env python3
"""The peer of `kiln-bench attention`: PyTorch SDPA (flash backend, or cuDNN with --backend cudnn)
forward and forward+backward times on the same shapes, written as lines "S D causal dtype fwd_us
fwdbwd_us" (medians of CUDA-event timings after warm-up, random inputs; the backward gets a random
dO) after a "# ... SDPA <backend> backend" header, which names the peer in kiln-bench's table.
Run on the GPU machine before kiln-bench attention --peer FILE:
    python3 scripts/bench_sdpa.py [--quick] [--dtype f16|bf16|all] [--backend flash|cudnn]
        [--head-dims 64,128,256] > sdpa.txt"""
import argparse
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ap = argparse.ArgumentParser()
ap.add_argument("--quick", action="store_true")
ap.add_argument("--dtype", default="f16", choices=["f16", "bf16", "all"])
ap.add_argument("--reps", type=int, default=30)
ap.add_argument("--backend", default="flash", choices=["flash", "cudnn"])
ap.add_argument("--lengths", default=None, help="comma-separated sequence lengths instead of the default list")
ap.add_argument("--head-dims", default="64,128", help="comma-separated head dims (64, 128, 256)")
a = ap.parse_args()
dtypes = {"f16": [torch.float16], "bf16": [torch.bfloat16], "all": [torch.float16, torch.bfloat16]}[a.dtype]
names = {torch.float16: "f16", torch.bfloat16: "bf16"}
lengths = [2048, 8192] if a.quick else [512, 1024, 2048, 4096, 8192, 16384]
if a.lengths:
    lengths = [int(x) for x in a.lengths.split(",")]
backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[a.backend]
print(f"# torch {torch.__version__}, {torch.cuda.get_device_name()}, SDPA {a.backend} backend")
for d in [int(x) for x in a.head_dims.split(",")]:
    for causal in (0, 1):
        for dt in dtypes:
            for s in lengths:
                b, h = max(1, 16384 // s), 2048 // d
                q, k, v = (torch.rand(b, h, s, d, device="cuda", dtype=dt) * 2 - 1 for _ in range(3))
                q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
                dout = torch.rand(b, h, s, d, device="cuda", dtype=dt) * 2 - 1

                def fwd():
                    with torch.no_grad():
                        F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))

                def fwdbwd():
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
                    torch.autograd.grad(o, (q, k, v), dout)

                med = []
                with sdpa_kernel(backend):
                    for fn in (fwd, fwdbwd):
                        for _ in range(10):
                            fn()
                        times = []
                        for _ in range(a.reps):
                            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                            e0.record()
                            fn()
                            e1.record()
                            e1.synchronize()
                            times.append(e0.elapsed_time(e1) * 1000.0)
                        med.append(statistics.median(times))
                print(f"{s} {d} {causal} {names[dt]} {med[0]:.2f} {med[1]:.2f}", flush=True)
