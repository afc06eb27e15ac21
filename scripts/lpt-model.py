#!/usr/bin/env python3
"""The causal attention grid's tail, modelled (docs/performance.md, "Rung lpt"): blocks of a
tiles x heads x batch grid start in linear blockIdx order on 132 SMs, each the moment an SM is
free (greedy list scheduling), and last their warpgroup-blocks (the key blocks each of a 192-row
tile's three 64-row warpgroups sees, causal) plus a fixed cost C0. Compares the per-head order
(each head's tiles longest first, head after head: the forward's query_tile) with longest first
across sections of G heads (the dQ kernel's block_tile_lpt) and the balanced time (total / SMs).

  scripts/lpt-model.py            # the shapes of kiln-bench attention --quick, D = 64
"""
import heapq
import math

SMS, BM, BN, C0 = 132, 192, 128, 2.0


def tile_work(s):
    """Warpgroup-blocks of each 192-row causal tile of a square S x S head."""
    work = []
    for i in range(math.ceil(s / BM)):
        rows = [BM * i + 64 * c for c in range(3) if BM * i + 64 * c < s]
        work.append(sum(math.ceil(min(s, r + 64) / BN) for r in rows))
    return work


def makespan(order):
    free = [0.0] * SMS
    end = 0.0
    for w in order:
        t = heapq.heappop(free) + C0 + w
        end = max(end, t)
        heapq.heappush(free, t)
    return end


def main():
    for s, heads in [(1024, 512), (2048, 256), (4096, 128), (8192, 64)]:
        work = tile_work(s)
        longest_first = list(reversed(work))
        per_head = [w for _ in range(heads) for w in longest_first]
        balanced = sum(C0 + w for w in per_head) / SMS
        base = makespan(per_head)
        row = [f"S {s:5d} x {heads:3d} heads: per-head {base:6.0f} ({100 * (base / balanced - 1):.1f} % over balanced)"]
        for g in (8, 16, 32, heads):
            order = []
            for first in range(0, heads, g):
                n = min(g, heads - first)
                order += [w for w in longest_first for _ in range(n)]
            t = makespan(order)
            row.append(f"G{g} {100 * (1 - t / base):.1f} %")
        print(", ".join(row))


if __name__ == "__main__":
    main()
