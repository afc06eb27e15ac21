#!/usr/bin/env python3
"""A CPU model of the sm_90a forward's online softmax (attention_sm90.cu), for rungs that change
its arithmetic before a GPU is at hand (issue 8). Per query row it walks key blocks of BN keys
as the kernel does: a running maximum kept until a block's exceeds it by more than LAZY (log2
units), P = 2^(s*sl2 - m*sl2) rounded to the 16-bit type for P.V, the row sum l in f32 either of
the unrounded P (FADDs, main) or of the rounded P (rung rowsum-mma: P times a column of ones on
the tensor cores), and for rung fast-keep (below) its own walk, and reports:
  - O's relative error (test_rel_error of tests/test_util.h) and the worst LSE error over the
    test's bound 1e-3 (1 + |lse|), against float64, for both sums and fast-keep's walk (rounded-P
    sum), on test_gpu_attention's cases
    (inputs uniform in [-1, 1) rounded to the dtype, scale as the case gives);
  - for rung fast-keep (P computed with the kept maximum before the block's own is known, the
    block's maximum taken only where some P >= 2): the share of key blocks after each row's
    first where a row, a warp (16 rows), a warpgroup (64 rows) needs that slower path, and
    where some P exceeds 2^64 (the scores are recomputed: 1 / P must stay a normal float, and
    from 2^128 on P overflowed f32).
The rung lives in scripts/rungs/attn-rowsum-fast-keep.patch (measured on an H100 2026-12-07, not
taken; docs/performance.md). The model walks whole blocks: the kernel recomputes per warpgroup
of 64 rows, and its first GPU run found what the model's exact 1 / pm hid (__fdividef gives 0
past 2^126), hence the 2^64 limit.
Run: /usr/bin/python3 scripts/attn-softmax-model.py  (numpy; ~1 minute)"""

import numpy as np

LOG2E = 1.4426950408889634


def to_dtype(x, dt):
    """Rounds f32 values to f16 or bf16 (round to nearest even), returned as float32."""
    x = np.asarray(x, np.float32)
    if dt == "f16":
        return x.astype(np.float16).astype(np.float32)
    b = x.view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16 << 16
    return b.astype(np.uint32).view(np.float32)


def forward(q, k, v, scale, causal, dt, bn=128, lazy=8):
    """One head: q [Sq, D], k, v [Sk, D] (already rounded). Returns O and LSE for the FADD sum
    and the rounded-P sum, and the fast-keep statistics."""
    sq, sk = q.shape[0], k.shape[0]
    shift = sk - sq
    s_all = (q.astype(np.float32) @ k.astype(np.float32).T).astype(np.float32)
    sl2 = np.float32(scale * LOG2E)
    m = np.full(sq, -np.inf, np.float32)
    m_fk = m.copy()  # fast-keep's own walk (O and l of the rounded-P sum)
    l_fk = np.zeros(sq, np.float32)
    o_fk = np.zeros((sq, v.shape[1]), np.float32)
    l_fadd = np.zeros(sq, np.float32)
    l_mma = np.zeros(sq, np.float32)
    o = np.zeros((sq, v.shape[1]), np.float32)
    rows = np.arange(sq)
    stats = {"blocks": 0, "row": 0, "warp": 0, "wg": 0, "inf": 0}
    for k0 in range(0, sk, bn):
        s = s_all[:, k0:k0 + bn].copy()
        keys = np.arange(k0, min(k0 + bn, sk))
        vis = np.ones(s.shape, bool)
        if causal:
            vis = keys[None, :] <= rows[:, None] + shift
        s[~vis] = -np.inf
        live = vis.any(axis=1)
        # fast-keep: P with the kept maximum, before this block's own maximum (rows that have one)
        seen = m > -np.inf
        if seen.any():
            with np.errstate(over="ignore", invalid="ignore"):
                x = s * sl2 - m[:, None] * sl2
            need = (x >= 1).any(axis=1) & seen & live
            over = (x > 64).any(axis=1) & seen & live
            counted = seen & live
            stats["blocks"] += int(counted.sum())
            stats["row"] += int(need.sum())
            for size, key in ((16, "warp"), (64, "wg")):
                for r0 in range(0, sq, size):
                    c = counted[r0:r0 + size]
                    if c.any():
                        stats[key + "_n"] = stats.get(key + "_n", 0) + 1
                        stats[key] += int(need[r0:r0 + size].any())
            stats["inf"] += int(over.sum())
        # fast-keep's arithmetic (softmax_kept): unmasked blocks after the first take P with the
        # kept maximum; a warp (16 rows) with some P >= 2 takes, per row, pm > 2^LAZY as a new
        # maximum (P and O scaled by 1 / pm); a P past 2^64 (or a masked or first block) takes the
        # ordinary step
        unmasked = vis.all() and k0 > 0
        with np.errstate(over="ignore", invalid="ignore"):
            p = np.exp2(s * sl2 - m_fk[:, None] * sl2).astype(np.float32)
        pm = p.max(axis=1)
        if unmasked and (pm <= 2.0 ** 64).all():
            warp_big = np.repeat([(p[r:r + 16] >= 2).any() for r in range(0, sq, 16)], 16)[:sq]
            new = warp_big & (pm > 2.0 ** lazy)
            f = np.where(new, 1 / np.where(new, pm, 1), 1).astype(np.float32)
            m_fk = np.where(new, (m_fk * sl2 + np.log2(np.where(new, pm, 1))) / sl2, m_fk).astype(np.float32)
            p16 = to_dtype(p * f[:, None], dt)
            l_fk = l_fk * f + p16.sum(axis=1, dtype=np.float32)
            o_fk = o_fk * f[:, None] + p16 @ v[k0:k0 + bn].astype(np.float32)
        else:
            mn = np.maximum(m_fk, s.max(axis=1))
            kp = ~((mn - m_fk) * sl2 > lazy)
            mk2 = np.where(kp, m_fk, mn)
            mu2 = np.where(mk2 == -np.inf, np.float32(0), mk2 * sl2).astype(np.float32)
            with np.errstate(invalid="ignore"):
                c2 = np.nan_to_num(np.where(kp, np.float32(1), np.exp2(m_fk * sl2 - mu2)).astype(np.float32))
            p16 = to_dtype(np.exp2(s * sl2 - mu2[:, None]).astype(np.float32), dt)
            l_fk = l_fk * c2 + p16.sum(axis=1, dtype=np.float32)
            o_fk = o_fk * c2[:, None] + p16 @ v[k0:k0 + bn].astype(np.float32)
            m_fk = mk2
        mnew = np.maximum(m, s.max(axis=1))
        keep = ~((mnew - m) * sl2 > lazy)
        mk = np.where(keep, m, mnew)
        mu = np.where(mk == -np.inf, np.float32(0), mk * sl2).astype(np.float32)
        with np.errstate(invalid="ignore"):
            corr = np.where(keep, np.float32(1), np.exp2(m * sl2 - mu)).astype(np.float32)
        corr = np.nan_to_num(corr)
        p = np.exp2(s * sl2 - mu[:, None]).astype(np.float32)
        p16 = to_dtype(p, dt)
        l_fadd = l_fadd * corr + p.sum(axis=1, dtype=np.float32)
        l_mma = l_mma * corr + p16.sum(axis=1, dtype=np.float32)
        o = o * corr[:, None] + p16 @ v[k0:k0 + bn].astype(np.float32)
        m = mk
    res = {}
    for name, l, o, m in (("fadd", l_fadd, o, m), ("mma", l_mma, o, m), ("fk", l_fk, o_fk, m_fk)):
        inv = np.where(l > 0, 1 / np.where(l > 0, l, 1), 0).astype(np.float32)
        with np.errstate(divide="ignore"):
            lse = np.where(l > 0, (m * sl2 + np.log2(np.where(l > 0, l, 1))) * np.float32(0.6931471805599453), -np.inf)
        res[name] = (to_dtype(o * inv[:, None], dt), lse)
    return res, stats


def reference(q, k, v, scale, causal):
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    s = q @ k.T * scale
    sq, sk = s.shape
    if causal:
        s[np.arange(sk)[None, :] > np.arange(sq)[:, None] + (sk - sq)] = -np.inf
    m = s.max(axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):
        p = np.exp(s - m)
    p = np.nan_to_num(p)
    l = p.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        o = np.where(l[:, None] > 0, p @ v / np.where(l > 0, l, 1)[:, None], 0)
        lse = np.where(l > 0, m[:, 0] + np.log(np.where(l > 0, l, 1)), -np.inf)
    return o, lse


def case(rng, sq, sk, d, dt, causal, scale=0.0, heads=2):
    scale = scale or 1 / np.sqrt(d)
    out = {"fadd": [0.0, 0.0, 0.0], "mma": [0.0, 0.0, 0.0], "fk": [0.0, 0.0, 0.0]}
    stats_all = {}
    for _ in range(heads):
        q, k, v = (to_dtype(rng.uniform(-1, 1, (n, d)), dt) for n in (sq, sk, sk))
        res, stats = forward(q, k, v, scale, causal, dt)
        ro, rl = reference(q, k, v, scale, causal)
        for name, (o, lse) in res.items():
            acc = out[name]
            acc[0] += float(((o - ro) ** 2).sum())
            acc[1] += float((ro ** 2).sum())
            fin = np.isfinite(rl)
            acc[2] = max(acc[2], float((np.abs(lse[fin] - rl[fin]) / (1e-3 * (1 + np.abs(rl[fin])))).max(initial=0)))
        for key, n in stats.items():
            stats_all[key] = stats_all.get(key, 0) + n
    tol = 1e-2 if dt == "bf16" else 2e-3
    line = f"Sq {sq:5d} Sk {sk:5d} D {d:3d} {dt:4s} {'causal' if causal else 'full  '} scale {scale:.3f}:"
    for name in ("fadd", "mma", "fk"):
        num, den, lse_w = out[name]
        line += f"\n    {name}: O err {np.sqrt(num / den):.2e} ({np.sqrt(num / den) / tol:.2f} of tol), LSE {lse_w:.2f} of tol"
    b = max(stats_all.get("blocks", 0), 1)
    line += (f"\n    fast-keep: slower path in {stats_all.get('row', 0) / b:.2%} of row-blocks, "
             f"{stats_all.get('warp', 0) / max(stats_all.get('warp_n', 0), 1):.2%} of warp-blocks, "
             f"{stats_all.get('wg', 0) / max(stats_all.get('wg_n', 0), 1):.2%} of warpgroup-blocks; "
             f"P > 2^64 (recomputed) in {stats_all.get('inf', 0)} row-blocks")
    print(line, flush=True)


def main():
    rng = np.random.default_rng(5)
    # test_gpu_attention's large_scale cases, then head-dim / length / causal cases like the others,
    # then the benchmark's causal D = 64 S = 2048 rows (one head's worth)
    for sq, sk, d, dt, causal, scale in (
        (700, 1000, 64, "f16", 0, 4.0), (1000, 1000, 64, "bf16", 1, 4.0), (500, 900, 128, "f16", 1, 3.0),
        (300, 700, 128, "bf16", 0, 3.0), (300, 1000, 64, "f16", 0, 50.0), (200, 900, 128, "bf16", 1, 40.0),
        (300, 500, 64, "f16", 0, 0), (300, 600, 64, "bf16", 1, 0),
        (257, 1000, 128, "f16", 1, 0), (2048, 2048, 64, "f16", 1, 0), (2048, 2048, 64, "bf16", 1, 0)):
        case(rng, sq, sk, d, dt, causal, scale, heads=1 if sq >= 2048 else 2)


if __name__ == "__main__":
    main()
