#!/usr/bin/env python3
"""A tiny transformer attention block, with kiln swapped in for its QKV projection and attention.

The PyTorch original (`Attention`) has one nn.Linear QKV projection, grouped-query attention
through F.scaled_dot_product_attention (causal) and an nn.Linear output projection. `KilnAttention`
is the same block with
  - the QKV projection replaced by kiln's fused INT4 one (kiln.qkv_project_int4: x is read once,
    Q, K and V come out of one call), its three weights quantized with
    kiln.Int4Weight.from_float(group=64);
  - the attention replaced by kiln.attention(causal=True, algo="flash"; "auto", i.e. kiln's CPU
    path, on the CPU), which takes GQA (8 query heads, 2 KV heads) and the [B, S, H, D] ->
    [B, H, S, D] views as they are: no copies.

The check: the original block run on the *dequantized* INT4 weights (what the quantized block
computes exactly, up to rounding) against the kiln block; the max error and a pass/fail line are
printed, and the exit status is non-zero on a mismatch. The error against the original,
unquantized weights is printed too, for information (that is INT4 quantization error, not a bug).

Runs on CUDA when PyTorch sees a GPU, else on the CPU (kiln's CPU path):
    PYTHONPATH=python python3 examples/int4_attention_block.py [--device cpu|cuda]
"""
import argparse
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    import kiln
except ImportError:  # run from the repository without installing: python/ holds the package
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import kiln

HIDDEN, N_HEADS, N_KV_HEADS, HEAD_DIM = 512, 8, 2, 64
BATCH, SEQ = 2, 256
GROUP = 64
TOLERANCE = 5e-3  # relative Frobenius error of the block's output (f16 activations, f16/f32 kernels)


class Attention(nn.Module):
    """The PyTorch original: fused QKV nn.Linear, causal GQA attention (SDPA), output nn.Linear."""

    def __init__(self, hidden=HIDDEN, n_heads=N_HEADS, n_kv_heads=N_KV_HEADS, head_dim=HEAD_DIM):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, head_dim
        self.qkv_proj = nn.Linear(hidden, (n_heads + 2 * n_kv_heads) * head_dim, bias=False)
        self.o_proj = nn.Linear(n_heads * head_dim, hidden, bias=False)

    def forward(self, x):  # x [B, S, hidden]
        b, s, _ = x.shape
        h, hkv, d = self.n_heads, self.n_kv_heads, self.head_dim
        q, k, v = self.qkv_proj(x).split([h * d, hkv * d, hkv * d], dim=-1)
        q = q.view(b, s, h, d).transpose(1, 2)                                        # [B, H, S, D]
        k = k.view(b, s, hkv, d).transpose(1, 2).repeat_interleave(h // hkv, dim=1)   # GQA: repeat KV heads
        v = v.view(b, s, hkv, d).transpose(1, 2).repeat_interleave(h // hkv, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(b, s, h * d))


class KilnAttention(nn.Module):
    """The same block on kiln: INT4 fused QKV projection and FLASH attention; o_proj is kept."""

    def __init__(self, ref: Attention, device, group=GROUP):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = ref.n_heads, ref.n_kv_heads, ref.head_dim
        h, hkv, d = self.n_heads, self.n_kv_heads, self.head_dim
        w = ref.qkv_proj.weight.detach()                                  # [(H + 2·Hkv)·D, hidden]
        # a Linear weight [N, K] is passed as its transposed view [K, N]; quantized on the CPU,
        # then the buffers are copied to the device
        self.wq, self.wk, self.wv = (kiln.Int4Weight.from_float(part.T, group=group).to(device)
                                     for part in w.split([h * d, hkv * d, hkv * d], dim=0))
        self.o_proj = ref.o_proj

    def forward(self, x):  # x [B, S, hidden], float16
        b, s, _ = x.shape
        h, hkv, d = self.n_heads, self.n_kv_heads, self.head_dim
        q, k, v = kiln.qkv_project_int4(x, self.wq, self.wk, self.wv)   # [B, S, H·D], [B, S, Hkv·D] x 2
        q = q.view(b, s, h, d).transpose(1, 2)                            # [B, H, S, D] views, no copy
        k = k.view(b, s, hkv, d).transpose(1, 2)                          # GQA: kiln reads the 2 KV heads
        v = v.view(b, s, hkv, d).transpose(1, 2)
        algo = "flash" if x.is_cuda else "auto"  # FLASH is a GPU algorithm; on the CPU, kiln's CPU path
        o = kiln.attention(q, k, v, causal=True, algo=algo, out_dtype=torch.float32)
        return self.o_proj(o.transpose(1, 2).reshape(b, s, h * d))


def dequantized_reference(ref: Attention, block: KilnAttention):
    """The original block with its QKV weight replaced by the INT4 weights, dequantized."""
    deq = Attention(HIDDEN, ref.n_heads, ref.n_kv_heads, ref.head_dim)
    w = torch.cat([wi.dequantize().T for wi in (block.wq, block.wk, block.wv)], dim=0)  # back to [N, K]
    with torch.no_grad():
        deq.qkv_proj.weight.copy_(w)
        deq.o_proj.weight.copy_(ref.o_proj.weight)
    return deq.to(w.device)


def rel_err(out, ref):
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm()).item()


def gpu_available():
    """Whether PyTorch sees a GPU and this libkiln can run kernels on it."""
    return torch.cuda.is_available() and kiln.device_count() > 0 and kiln.build_has_kernels()


def run(device=None, seed=0, verbose=True):
    """Builds both blocks, runs them; returns a dict of the errors and whether they pass."""
    if device is None:
        device = "cuda" if gpu_available() else "cpu"
    device = torch.device(device)
    torch.manual_seed(seed)
    ref = Attention().to(device)                 # float32 weights
    block = KilnAttention(ref, device)
    x = torch.randn(BATCH, SEQ, HIDDEN, device=device).half()  # kiln's W4A16 takes f16/bf16 activations

    with torch.no_grad():
        out = block(x)                                              # kiln: INT4 QKV + FLASH attention
        want = dequantized_reference(ref, block)(x.float())         # PyTorch: same weights, dequantized
        original = ref(x.float())                                   # PyTorch: the unquantized weights
    if device.type == "cuda":
        torch.cuda.synchronize()

    result = {
        "device": str(device),
        "max_abs_error": (out.double() - want.double()).abs().max().item(),
        "max_abs_ref": want.abs().max().item(),
        "rel_error": rel_err(out, want),
        "quantization_rel_error": rel_err(out, original),
    }
    result["passed"] = bool(result["rel_error"] <= TOLERANCE and torch.isfinite(out).all().item())
    if verbose:
        print(f"kiln {kiln.__version__} ({kiln.library_path}), device {result['device']}")
        print(f"block: hidden {HIDDEN}, {N_HEADS} query heads, {N_KV_HEADS} KV heads, head dim {HEAD_DIM}, "
              f"batch {BATCH}, seq {SEQ}; INT4 QKV weights, group {GROUP}")
        print(f"kiln vs PyTorch (dequantized weights, SDPA): max abs error {result['max_abs_error']:.3e} "
              f"(max |ref| {result['max_abs_ref']:.3e}), relative error {result['rel_error']:.3e} "
              f"(tolerance {TOLERANCE:.0e})")
        print(f"kiln vs the unquantized original (INT4 quantization error, for information): "
              f"relative error {result['quantization_rel_error']:.3e}")
        print("PASS" if result["passed"] else "FAIL: kiln's block does not match PyTorch's")
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    args = parser.parse_args(argv)
    return 0 if run(args.device)["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
