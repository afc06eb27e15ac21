#!/usr/bin/env python3
# decode-model.py — a float64 model of kernels/attention_decode_sm90.cu's tiling, run without a
# GPU: the packing of a K/V head's query heads x Sq into 16-row tiles, each tile's key range
# (causal: its latest query's), the split of its key blocks over the ranks of a cluster, the
# condition under which a block skips the mask (asserted never to hide an invisible key from a
# stored row), the per-warp online-softmax states over 16 keys of each 64-key block and the
# combine (M, weights, L, O, LSE). It checks the index logic against a plain float64 attention on
# fixed and random shapes (GQA, MQA, Sq > Sk, tiles across heads, empty ranks); the MMA fragment
# layouts are the sm_80 forward's, which the GPU tests cover. Keep it in step with the kernel.
#   /usr/bin/python3 scripts/decode-model.py      (numpy; a few minutes)
import itertools
import random

import numpy as np
ROWS, BC, WARPS, WK = 16, 64, 4, 16
def ref(q, k, v, scale, causal):
    B, Hq, Sq, D = q.shape; Hkv, Sk = k.shape[1], k.shape[2]; g = Hq // Hkv
    o = np.zeros((B, Hq, Sq, D)); lse = np.full((B, Hq, Sq), -np.inf)
    for b in range(B):
        for h in range(Hq):
            s = q[b, h] @ k[b, h // g].T * scale
            for i in range(Sq):
                vis = np.arange(Sk) < Sk
                if causal: vis &= np.arange(Sk) <= i + Sk - Sq
                if vis.any():
                    x = np.where(vis, s[i], -np.inf); m = x.max(); p = np.exp(x - m)
                    o[b, h, i] = p @ v[b, h // g] / p.sum(); lse[b, h, i] = m + np.log(p.sum())
    return o, lse
def model(q, k, v, scale, causal, cs):
    B, Hq, Sq, D = q.shape; Hkv, Sk = k.shape[1], k.shape[2]; g = Hq // Hkv
    packed = g * Sq; tiles = (packed + ROWS - 1) // ROWS; shift = Sk - Sq
    o = np.full((B, Hq, Sq, D), np.nan); lse = np.full((B, Hq, Sq), np.nan)
    for b, hk, tile in itertools.product(range(B), range(Hkv), range(tiles)):
        p0 = tile * ROWS; plast = min(p0 + ROWS, packed) - 1
        one = p0 // Sq == plast // Sq
        qmin = p0 % Sq if one else 0; qmax = plast % Sq if one else Sq - 1
        kend = Sk if not causal else min(Sk, max(0, qmax + 1 + shift)); nb = (kend + BC - 1) // BC
        rowsq = []; Q = np.zeros((ROWS, D))
        for r in range(ROWS):
            pr = p0 + r
            if pr < packed: Q[r] = q[b, hk * g + pr // Sq, pr % Sq]
            rowsq.append(pr % Sq if pr < packed else Sq - 1)
        states = []
        for rank in range(cs):
            b0, b1 = nb * rank // cs, nb * (rank + 1) // cs
            st = [[np.full(ROWS, -np.inf), np.zeros(ROWS), np.zeros((ROWS, D))] for _ in range(WARPS)]
            for blk in range(b0, b1):
                k0 = blk * BC
                masked = k0 + BC > Sk or (causal and k0 + BC - 1 > qmin + shift)
                for w in range(WARPS):
                    keys = k0 + w * WK + np.arange(WK)
                    K = np.zeros((WK, D)); V = np.zeros((WK, D)); ok = keys < Sk
                    K[ok] = k[b, hk, keys[ok]]; V[ok] = v[b, hk, keys[ok]]
                    s = Q @ K.T  # raw scores
                    for r in range(ROWS):
                        for j in range(WK):
                            vis = keys[j] < Sk and (not causal or keys[j] <= rowsq[r] + shift)
                            if masked and not vis: s[r, j] = -np.inf
                            if not masked and not vis and p0 + r < packed:
                                raise AssertionError(f"unmasked path sees an invisible key: row {r} key {keys[j]}")
                    m, l, O = st[w]
                    mn = np.maximum(m, s.max(1)); mu = np.where(mn == -np.inf, 0, mn)
                    corr = np.exp((m - mu) * scale); P = np.exp((s - mu[:, None]) * scale)
                    st[w] = [mn, l * corr + P.sum(1), O * corr[:, None] + P @ V]
            states += st
        for r in range(ROWS):
            pr = p0 + r
            if pr >= packed: continue
            ms = np.array([s_[0][r] for s_ in states]); M = ms.max()
            w = np.array([0.0 if mi == -np.inf else np.exp((mi - M) * scale) for mi in ms])
            L = sum(wi * s_[1][r] for wi, s_ in zip(w, states))
            O = sum(wi * s_[2][r] for wi, s_ in zip(w, states)) / L if L > 0 else np.zeros(D)
            h, i = hk * g + pr // Sq, pr % Sq
            assert np.isnan(o[b, h, i, 0]), "row stored twice"
            o[b, h, i] = O; lse[b, h, i] = M * scale + np.log(L) if L > 0 else -np.inf
    return o, lse
random.seed(1); rng = np.random.default_rng(1); n = 0
cases = [(1,8,2,1,700,16,0,8),(2,8,2,5,700,8,1,5),(1,8,2,3,2,8,1,1),(4,4,4,2,1,8,0,1),(1,8,1,2,333,8,1,8),
         (1,4,1,16,300,8,1,3),(1,2,1,90,20,8,1,1),(1,2,1,100,100,8,1,3),(2,4,2,17,255,8,1,4),(1,16,1,1,1541,8,0,8)]
for _ in range(40):
    hkv = random.choice([1,2,3]); g = random.choice([1,2,3,4,8]); sq = random.randint(1,40); sk = random.randint(1,400)
    cases.append((random.randint(1,2), hkv*g, hkv, sq, sk, 8, random.randint(0,1), random.randint(1,8)))
for (B,Hq,Hkv,Sq,Sk,D,causal,cs) in cases:
    q = rng.uniform(-1,1,(B,Hq,Sq,D)); k = rng.uniform(-1,1,(B,Hkv,Sk,D)); v = rng.uniform(-1,1,(B,Hkv,Sk,D))
    sc = 1/np.sqrt(D); ro, rl = ref(q,k,v,sc,causal); mo, ml = model(q,k,v,sc,causal,cs)
    assert not np.isnan(mo).any(), "unstored row"
    assert np.allclose(mo, ro, atol=1e-9), (B,Hq,Hkv,Sq,Sk,causal,cs, np.abs(mo-ro).max())
    fin = np.isfinite(rl); assert (np.isfinite(ml) == fin).all() and np.allclose(ml[fin], rl[fin])
    n += 1
print("model matches the float64 reference on", n, "cases")
