#!/usr/bin/env python3
"""Eager per-call overhead of kiln's PyTorch bridge on a GPU, against an equivalent cheap PyTorch op.

Each op runs on tiny tensors, so the time per call is the host's cost of issuing it (Python,
ctypes, the launch), not the GPU's work: kiln.matmul on 16x16 f16 matrices against torch.matmul
on the same, kiln.attention on a [1, 1, 16, 64] f16 head against F.scaled_dot_product_attention
on the same (plus, for information, kiln.matmul_int4 against torch.matmul, and kiln.matmul
through the torch.ops.kiln dispatcher instead of the eager fast path). For each: warm-up, then
N calls (default 2000) timed with time.perf_counter, torch.cuda.synchronize() at the end; the
median of --repeats such runs, in µs per call. The 'issue' column is the same loop timed before
the final synchronize (what the host spends per call).

    KILN_LIBRARY=build/libkiln.so python3 python/bench_overhead.py [--n 2000] [--repeats 5] [--profile]

--profile then runs each kiln call N times under cProfile and prints where the host time goes
(the functions with the most time of their own), to choose what to trim. --breakdown times the
pieces of one eager kiln.matmul call separately (without a profiler's distortion): the C call
with prepared arguments, the DLTensor of one tensor, the placement lookup, the eager-path checks,
the output allocation.

Target (issue 9): eager overhead < 10 µs per call; the last line says how kiln's per-call time,
and its excess over PyTorch's, compare with it.
"""
import argparse
import importlib
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

try:
    import kiln
except ImportError:  # run from elsewhere than python/: the package is next to this file
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import kiln

TARGET_US = 10.0


def timed(fn, n):
    """(µs per call before the final synchronize, µs per call after it) for n calls of fn."""
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return (t1 - t0) / n * 1e6, (t2 - t0) / n * 1e6


def measure(fn, n, warmup, repeats):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    runs = [timed(fn, n) for _ in range(repeats)]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def main(argv=None):
    parser = argparse.ArgumentParser(description="kiln eager per-call overhead vs PyTorch (GPU)")
    parser.add_argument("--n", type=int, default=2000, help="calls per timed run (default 2000)")
    parser.add_argument("--warmup", type=int, default=200, help="untimed calls first (default 200)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs; the median is reported (default 5)")
    parser.add_argument("--profile", action="store_true", help="then profile each kiln call (cProfile)")
    parser.add_argument("--breakdown", action="store_true", help="then time the pieces of one kiln.matmul call")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available() or kiln.device_count() == 0 or not kiln.build_has_kernels():
        print(f"needs a CUDA GPU visible to PyTorch and a libkiln with kernels ({kiln.library_path})")
        return 2
    importlib.import_module("kiln.torch_ops")  # torch.ops.kiln.*; needs torch >= 2.4 (a local import would shadow kiln)

    dev, h = "cuda", torch.float16
    torch.manual_seed(0)
    a, b = torch.randn(16, 16, device=dev, dtype=h), torch.randn(16, 16, device=dev, dtype=h)
    q, k, v = (torch.randn(1, 1, 16, 64, device=dev, dtype=h) for _ in range(3))
    x = torch.randn(16, 128, device=dev, dtype=h)
    w = torch.randn(128, 128, device=dev, dtype=h)
    w4 = kiln.Int4Weight.from_float(w, group=128)

    pairs = [  # (name, kiln call, equivalent torch call, counted against the target)
        ("matmul 16x16x16 f16", lambda: kiln.matmul(a, b), lambda: torch.matmul(a, b), True),
        ("attention [1,1,16,64] f16", lambda: kiln.attention(q, k, v),
         lambda: F.scaled_dot_product_attention(q, k, v), True),
        ("matmul_int4 16x128x128 (vs f16 matmul)", lambda: kiln.matmul_int4(x, w4), lambda: torch.matmul(x, w), False),
        ("matmul via torch.ops.kiln (dispatcher)", lambda: torch.ops.kiln.matmul(a, b, None, 1.0, 0),
         lambda: torch.matmul(a, b), False),
    ]
    print(f"kiln {kiln.__version__} ({kiln.library_path}); torch {torch.__version__}; "
          f"{torch.cuda.get_device_name()}; Python {sys.version.split()[0]}")
    print(f"N = {args.n} calls per run, {args.warmup} warm-up calls, median of {args.repeats} runs; µs per call "
          "(issue: before the final synchronize)")
    print(f"{'op':42} {'kiln':>8} {'torch':>8} {'kiln-torch':>11}   {'kiln issue':>10} {'torch issue':>11}")
    worst_total = worst_diff = 0.0
    with torch.no_grad():
        for name, kiln_fn, torch_fn, counted in pairs:
            k_issue, k_total = measure(kiln_fn, args.n, args.warmup, args.repeats)
            t_issue, t_total = measure(torch_fn, args.n, args.warmup, args.repeats)
            print(f"{name:42} {k_total:8.2f} {t_total:8.2f} {k_total - t_total:+11.2f}   {k_issue:10.2f} "
                  f"{t_issue:11.2f}")
            if counted:
                worst_total, worst_diff = max(worst_total, k_total), max(worst_diff, k_total - t_total)
    yes = lambda ok: "yes" if ok else "NO"  # noqa: E731
    print(f"matmul and attention: kiln per call at most {worst_total:.2f} µs (< {TARGET_US:.0f} µs: "
          f"{yes(worst_total < TARGET_US)}); kiln - torch at most {worst_diff:+.2f} µs (< {TARGET_US:.0f} µs: "
          f"{yes(worst_diff < TARGET_US)})")
    if args.breakdown:
        breakdown(a, b, args.n, args.warmup, args.repeats)
    if args.profile:
        import cProfile
        import pstats
        with torch.no_grad():
            for name, kiln_fn, _, _ in pairs:
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(args.n):
                    kiln_fn()
                prof.disable()
                torch.cuda.synchronize()
                print(f"\n--- profile: {name}, {args.n} calls (tottime: the function's own time) ---")
                pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(14)
    return 0

def breakdown(a, b, n, warmup, repeats):
    """µs per call of each piece of an eager kiln.matmul(a, b) (issue time, no synchronize)."""
    from kiln import _dlpack, _lib, ops, torch_ops
    c = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
    ctx, s = _dlpack.placement(a)
    keep = []
    ta, tb = _dlpack.tensor(a, "a", s, keep), _dlpack.tensor(b, "b", s, keep)
    tc = _dlpack.tensor(c, "c", s, keep, out=True)
    opts = _lib.kiln_matmul_opts(0, 1.0, 0)
    f = _lib.fn.matmul
    pieces = [
        ("kiln.matmul(a, b), the whole call", lambda: kiln.matmul(a, b)),
        ("C kiln_matmul, prepared ctypes arguments", lambda: f(ctx, ta, tb, tc, opts, s)),
        ("_dlpack.tensor (one DLTensor)", lambda: _dlpack.tensor(a, "a", s, keep)),
        ("_dlpack.placement (context, stream)", lambda: _dlpack.placement(a)),
        ("torch_ops._eager(a, b)", lambda: torch_ops._eager(a, b)),
        ("kiln_matmul_opts(...) struct", lambda: _lib.kiln_matmul_opts(0, 1.0, 0)),
        ("ops.matmul_shape", lambda: ops.matmul_shape("kiln.matmul", tuple(a.shape), tuple(b.shape))),
        ("torch.empty((16, 16), device=a.device)", lambda: torch.empty((16, 16), dtype=a.dtype, device=a.device)),
        ("a.new_empty((16, 16))", lambda: a.new_empty((16, 16))),
        ("torch.matmul(a, b) (the peer)", lambda: torch.matmul(a, b)),
    ]
    print(f"\n--- breakdown of kiln.matmul on {tuple(a.shape)} x {tuple(b.shape)}: µs per call, issue time ---")
    with torch.no_grad():
        for name, fn in pieces:
            issue, _ = measure(fn, n, warmup, repeats)
            print(f"{name:48} {issue:8.2f}")


if __name__ == "__main__":
    sys.exit(main())
