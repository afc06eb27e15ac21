#!/usr/bin/env python3
"""The report of `make bench`: reads the rows that scripts/bench_all.sh left in OUT_DIR (one
<name>.json per kiln-bench subcommand, as written by write_json in tools/bench/bench.c), prints
one summary table, writes OUT_DIR/bench.json (all rows merged, with date, GPU and commit), draws
the chart of kiln / peer ratios and regenerates the section of docs/performance.md between
<!-- bench:begin --> and <!-- bench:end -->. Only the standard library; matplotlib for the chart
when it is installed.
    python3 scripts/bench_report.py OUT_DIR [--docs docs/performance.md] [--chart docs/perf.png]
                                    [--commit C] [--gpu NAME] [--no-docs]
"% of roofline" is kiln's rate over min(peak, bytes moved x bandwidth) of the row: the peak from
the GPU's datasheet (dense, no sparsity), the bandwidth the device copy measured in the same run
(kiln-bench copy, the repo's reference for GB/s). Rows whose bytes are not known compare with
the peak alone; copy itself compares with the datasheet bandwidth."""
import argparse
import glob
import json
import math
import os
import re
import sys
import textwrap

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
ORDER = ["copy", "matmul", "int8", "int4", "qkv", "attention"]  # bench_all.sh's order
BYTES = {"f32": 4, "f16": 2, "bf16": 2, "i8": 1}

# Datasheet figures, dense: f16/bf16 tensor TFLOP/s, int8 TOPS, DRAM GB/s. Matched by substring of
# the device name, first hit wins (so "H100 PCIe" before "H100").
PEAKS = [
    ("H200", 989.4, 1978.9, 4800.0),
    ("H100 PCIe", 756.0, 1513.0, 2000.0),
    ("H100", 989.4, 1978.9, 3350.0),
    ("A100-SXM4-80GB", 312.0, 624.0, 2039.0),
    ("A100", 312.0, 624.0, 1555.0),
]


def num(v):
    """A JSON number, or None for null and anything that is not a finite number."""
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def fmt_rate(v):
    # as kiln-bench prints: small rates (GEMV-like shapes in TFLOP/s) keep two decimals
    return "-" if v is None else f"{v:.2f}" if v < 10 else f"{v:.1f}"


def fmt(v, spec, none="-"):
    return none if v is None else format(v, spec)


# ------------------------------------------------------------------------------------------------
# Reading
# ------------------------------------------------------------------------------------------------
def read_status(out_dir):
    """bench_all.sh's status.txt: ({name: (rc, seconds)}, quick or None)."""
    status, quick = {}, None
    try:
        with open(os.path.join(out_dir, "status.txt")) as f:
            for line in f:
                m = re.match(r"#\s*quick\s+(\d)", line)
                if m:
                    quick = m.group(1) == "1"
                    continue
                parts = line.split()
                if len(parts) == 3 and not line.startswith("#"):
                    status[parts[0]] = (int(parts[1]), int(parts[2]))
    except (OSError, ValueError):
        pass
    return status, quick


def read_rows(out_dir):
    """Every row of OUT_DIR/*.json but bench.json, tagged with its file's name, in bench_all.sh's
    order. Returns (rows, names of files that could not be read)."""
    paths = [p for p in glob.glob(os.path.join(out_dir, "*.json")) if os.path.basename(p) != "bench.json"]
    names = sorted((os.path.basename(p)[:-5] for p in paths),
                   key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))
    rows, bad = [], []
    for name in names:
        try:
            with open(os.path.join(out_dir, name + ".json"), encoding="utf-8") as f:
                data = json.load(f)
            if not isinstance(data, list):
                raise ValueError("not a JSON array")
        except (OSError, ValueError) as e:
            print(f"bench_report: {name}.json unreadable ({e}); its rows are missing", file=sys.stderr)
            bad.append(name)
            continue
        for r in data:
            if isinstance(r, dict) and "op" in r:
                rows.append(dict(r, source=name))
    return rows, bad


def sdpa_version(out_dir):
    """The '# torch X, GPU, ...' line bench_sdpa.py writes first, or None."""
    try:
        with open(os.path.join(out_dir, "sdpa.txt")) as f:
            first = f.readline().strip()
    except OSError:
        return None
    m = re.match(r"#\s*torch\s+(\S+?),", first)
    return m.group(1) if m else None


# ------------------------------------------------------------------------------------------------
# Roofline
# ------------------------------------------------------------------------------------------------
def row_bytes(r):
    """DRAM bytes one call must move at least (operands read once, output written once), from the
    shape strings the subcommands print; None when the shape is not one of theirs."""
    op, shape, dtype, algo = r.get("op", ""), r.get("shape", ""), r.get("dtype", ""), r.get("algo", "")
    ins, _, outs = dtype.partition("->")
    es, os_ = BYTES.get(ins), BYTES.get(outs or ins)
    m = re.fullmatch(r"(\d+)x(\d+)x(\d+)", shape)
    if op == "matmul" and m and es and os_:  # C[M,N] = A[M,K]·B[K,N]
        M, N, K = map(int, m.groups())
        return (M * K + K * N) * es + M * N * os_
    if op == "int8" and m and os_:  # C[M,N] = A[M,K]·W[N,K]ᵀ, int8 operands
        M, N, K = map(int, m.groups())
        return M * K + N * K + M * N * os_
    m = re.fullmatch(r"M(\d+)K(\d+)N(\d+)", shape)
    g = re.search(r"g(\d+)", algo)
    if op == "matmul_int4" and m and g and es:  # 4-bit codes + f16 scale and u8 zero per group
        M, K, N = map(int, m.groups())
        G = int(g.group(1))
        return K * N // 2 + -(-K // G) * N * 3 + (M * K + M * N) * es
    m = re.fullmatch(r"B(\d+)H(\d+)S(\d+)D(\d+)", shape)
    if op.startswith("attention") and m and es:  # fwd: Q K V in, O out; + bwd: Q K V O dO in, dQ dK dV out
        B, H, S, D = map(int, m.groups())
        return B * H * S * D * es * (12 if "bwd" in op else 4)
    return None


def roofline(r, peaks, copy_gbps):
    """The row's roof in its own unit (TFLOP/s or GB/s), or None when unknown."""
    f16_peak, int8_peak, dram = peaks
    unit, op, rate = r.get("unit"), r.get("op", ""), num(r.get("kiln_rate"))
    if rate is None:
        return None
    if op == "copy":
        return dram  # the practical bandwidth against the datasheet's
    if unit == "GB/s":
        return copy_gbps or dram  # rows reporting bytes moved (int4 decode)
    if unit != "TFLOP/s":
        return None
    peak = int8_peak if r.get("dtype", "").startswith("i8") else f16_peak
    if peak is None:
        return None  # the bytes bound alone would overstate the roof of compute-bound rows
    work, nbytes, bw = num(r.get("work")), row_bytes(r), copy_gbps or dram
    if work and nbytes and bw:
        return min(peak, work / nbytes * bw * 1e-3)  # FLOP/byte x GB/s = GFLOP/s
    return peak


def device_peaks(gpu, args):
    f16 = int8 = dram = None
    for key, a, b, c in PEAKS:
        if key.lower() in (gpu or "").lower():
            f16, int8, dram = a, b, c
            break
    return (args.peak_tflops or f16, args.peak_tops or int8, args.bandwidth or dram)


# ------------------------------------------------------------------------------------------------
# Output
# ------------------------------------------------------------------------------------------------
def summarize(rows, status, bad, quick, meta):
    """The merged document: the run's facts, how each command ended, every row."""
    failed = sorted({n for n, (rc, _) in status.items() if rc != 0} | set(bad),
                    key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))
    return {
        **meta,
        "quick": quick,
        "subcommands": [{"name": n, "exit_status": rc, "seconds": s} for n, (rc, s) in status.items()],
        "failed": failed,
        "rows": rows,
    }


def group(rows):
    """Rows by op, ops in first-seen order."""
    out = {}
    for r in rows:
        out.setdefault(r.get("op", "?"), []).append(r)
    return out


def note_of(r):
    note = " ".join(str(r.get("note") or "").split())
    return ("CHECK FAILED " if r.get("check_failed") else "") + note


def print_table(doc):
    cols = [("op", 17, "<"), ("shape", 20, "<"), ("dtype", 9, "<"), ("algo", 12, "<"), ("unit", 7, "<"),
            ("kiln", 9, ">"), ("peer", 9, ">"), ("ratio", 6, ">"), ("% roof", 6, ">"), ("note", 0, "<")]
    line = lambda vals: " ".join(f"{v:{a}{w}}" if w else v for v, (_, w, a) in zip(vals, cols)).rstrip()
    print(line([c[0] for c in cols]))
    for r in doc["rows"]:
        note = note_of(r)
        print(line([r.get("op", ""), r.get("shape", ""), r.get("dtype", ""), r.get("algo", ""),
                    r.get("unit", ""), fmt_rate(num(r.get("kiln_rate"))), fmt_rate(num(r.get("peer_rate"))),
                    fmt(num(r.get("ratio")), ".2f"), fmt(r.get("roofline_pct"), ".0f"),
                    note if len(note) <= 60 else note[:57] + "..."]))
    ratios = [num(r.get("ratio")) for r in doc["rows"] if num(r.get("ratio")) is not None]
    print(f"{len(doc['rows'])} rows on {doc['gpu']}, {doc['date']}, commit {doc['commit']}; "
          + (f"kiln / peer ratio {min(ratios):.2f}-{max(ratios):.2f} (geometric mean "
             f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}) over {len(ratios)} rows with a peer"
             if ratios and min(ratios) > 0 else "no row with a peer"))
    if doc["failed"]:
        runs = {s["name"]: s["exit_status"] for s in doc["subcommands"]}
        def why(n):
            if n not in runs:
                return "unreadable JSON"
            return "timed out" if runs[n] in (124, 137) else f"exit {runs[n]}"
        print("failed: " + ", ".join(f"{n} ({why(n)})" for n in doc["failed"]))


def md_cell(s):
    return str(s).replace("|", "\\|")


def markdown(doc, chart_rel):
    """The generated section: one sentence on where it comes from, then a table per op."""
    peers = sorted({r["peer"] for r in doc["rows"] if r.get("peer")})
    if doc.get("torch") and "torch sdpa flash" in peers:
        peers[peers.index("torch sdpa flash")] = f"torch {doc['torch']} sdpa flash"
    # prose wrapped at 100 columns like the hand-written text around it (a code span may wrap)
    wrap = lambda s: textwrap.fill(s, 100, break_on_hyphens=False, break_long_words=False)
    lines = [
        wrap(f"Generated by `make bench` on {doc['date']}, {doc['gpu']}, commit {doc['commit']}; "
             "do not edit by hand."),
        "",
        wrap(f"Every `kiln-bench` subcommand{' with --quick' if doc['quick'] else ''} (scripts/bench_all.sh), "
             f"driver {doc['driver']}, kiln {doc['kiln_version']}; peers: " + (", ".join(peers) or "none")
             + ". Ratio = kiln throughput / peer throughput (above 1: kiln is faster); % of roofline = kiln's "
             "rate / min(datasheet peak, bytes moved x the copy bandwidth of the same run). All rows: "
             f"`{doc['rows_at']}`."),
    ]
    if doc["failed"]:
        lines += ["", wrap("Failed in this run (rows missing or incomplete): " + ", ".join(doc["failed"]) + ".")]
    if chart_rel:
        lines += ["", f"![kiln / peer throughput per row]({chart_rel})"]
    for op, rows in group(doc["rows"]).items():
        ps = sorted({r["peer"] for r in rows if r.get("peer")})
        lines += ["", f"### {op}" + (f" (peer: {', '.join(ps)})" if ps else ""), "",
                  "| shape | dtype | algo | unit | kiln | peer | ratio | % of roofline | note |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append("| " + " | ".join(md_cell(v) for v in [
                r.get("shape", ""), r.get("dtype", ""), r.get("algo", ""), r.get("unit", ""),
                fmt_rate(num(r.get("kiln_rate"))), fmt_rate(num(r.get("peer_rate"))),
                fmt(num(r.get("ratio")), ".2f"), fmt(r.get("roofline_pct"), ".0f", "-") + (
                    " %" if r.get("roofline_pct") is not None else ""), note_of(r)]) + " |")
    return "\n".join(lines)


def read_docs(path):
    """The docs' text and the markers' offsets; exits when they are missing, before anything is
    written."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        sys.exit(f"bench_report: {e}")
    b, e = text.find(BEGIN), text.find(END)
    if b < 0 or e < b:
        sys.exit(f"bench_report: {path} lacks the markers {BEGIN} ... {END}; add them where the section goes")
    return text, b, e


def update_docs(path, section):
    """Replaces what lies between the markers; everything else stays byte for byte."""
    text, b, e = read_docs(path)
    new = text[:b + len(BEGIN)] + "\n" + section + "\n" + text[e:]
    if new == text:
        print(f"bench_report: {path}: section unchanged")
        return
    with open(path, "w", encoding="utf-8") as f:
        f.write(new)
    print(f"bench_report: {path}: section regenerated")


def draw(doc, path):
    """Horizontal bars of kiln / peer per row with a peer, grouped and colored by op; False when
    matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")  # no display on the GPU machine
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"bench_report: matplotlib not installed: {path} not drawn "
              "(pip install matplotlib, or apt-get install python3-matplotlib)", file=sys.stderr)
        return False
    bars = [(op, r) for op, rows in group(doc["rows"]).items() for r in rows if num(r.get("ratio")) is not None]
    if not bars:
        print(f"bench_report: no row has a peer: {path} not drawn", file=sys.stderr)
        return False
    ops = list(dict.fromkeys(op for op, _ in bars))
    colors = {op: plt.cm.tab10(i % 10) for i, op in enumerate(ops)}
    # one slot per bar, a blank slot between ops; the first row at the top
    ys, y, prev = [], 0, None
    for op, _ in bars:
        if prev is not None and op != prev:
            y += 1
        ys.append(y)
        y, prev = y + 1, op
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.24 * y))
    vals = [num(r["ratio"]) for _, r in bars]
    ax.barh(ys, vals, color=[colors[op] for op, _ in bars], height=0.8)
    ax.set_yticks(ys)
    ax.set_yticklabels([f"{r.get('shape', '')} {r.get('dtype', '')} {r.get('algo', '')}"
                        + (" CHECK FAILED" if r.get("check_failed") else "") for _, r in bars], fontsize=7)
    ax.set_ylim(ys[-1] + 0.7, -0.7)  # first row at the top, no empty slots at the ends
    for yy, v in zip(ys, vals):
        ax.text(v, yy, f" {v:.2f}", va="center", fontsize=6)
    ax.axvline(1.0, color="black", linewidth=1, linestyle="--")
    ax.set_xlim(0, max(1.1, max(vals) * 1.12))
    ax.set_xlabel("kiln throughput / peer throughput (above 1: kiln is faster)")
    ax.set_title(f"kiln vs peers: {doc['gpu']}, {doc['date']}, commit {doc['commit']}", fontsize=9)
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=colors[op]) for op in ops], labels=ops,
              loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=7)  # outside: never over a bar
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})  # no version stamp: reruns compare equal
    plt.close(fig)
    print(f"bench_report: drew {path}")
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir", help="the folder scripts/bench_all.sh wrote")
    ap.add_argument("--docs", help="markdown file whose bench:begin/end section is regenerated")
    ap.add_argument("--chart", help="PNG chart to draw (needs matplotlib)")
    ap.add_argument("--commit", help="commit the build was made from (default: from the JSON, else unknown)")
    ap.add_argument("--gpu", help="GPU name (default: the device the rows name)")
    ap.add_argument("--no-docs", action="store_true", help="only print the table: write no file")
    ap.add_argument("--json-copy", help="also write the merged JSON here (e.g. docs/bench.json, kept in the "
                    "repository beside the docs it generates); the docs then point to it")
    ap.add_argument("--peak-tflops", type=float, help="dense f16 peak for %% of roofline (default: datasheet)")
    ap.add_argument("--peak-tops", type=float, help="dense int8 peak (default: datasheet)")
    ap.add_argument("--bandwidth", type=float, help="DRAM GB/s when the run has no copy row (default: datasheet)")
    args = ap.parse_args()

    if args.docs and not args.no_docs:
        read_docs(args.docs)
    rows, bad = read_rows(args.out_dir)
    status, quick = read_status(args.out_dir)
    if not rows:
        sys.exit(f"bench_report: no benchmark rows in {args.out_dir} "
                 "(scripts/bench_all.sh writes them; it needs a GPU)")
    first = rows[0]
    dates = sorted(r["date"] for r in rows if r.get("date"))
    gpu = args.gpu or next((r["device"] for r in rows if r.get("device")), "unknown GPU")
    driver = num(first.get("driver_version"))
    meta = {
        "date": dates[0].replace("T", " ").replace("Z", " UTC") if dates else "unknown date",
        "gpu": gpu,
        "commit": args.commit or next((r["commit"] for r in rows if r.get("commit")), "unknown"),
        "compute_capability": first.get("compute_capability"),
        "sm_count": first.get("sm_count"),
        "driver": f"{int(driver) // 1000}.{int(driver) % 1000 // 10}" if driver else "unknown",
        "driver_version": driver,
        "kiln_version": first.get("kiln_version", "unknown"),
        "torch": sdpa_version(args.out_dir),
        "merged": os.path.join(args.out_dir, "bench.json"),
        "rows_at": args.json_copy or os.path.join(args.out_dir, "bench.json"),
    }
    copy = [num(r.get("kiln_rate")) for r in rows if r.get("op") == "copy" and num(r.get("kiln_rate"))]
    peaks = device_peaks(gpu, args)
    meta["copy_gbps"] = copy[0] if copy else None
    meta["peaks"] = {"f16_tflops": peaks[0], "int8_tops": peaks[1], "dram_gbps": peaks[2]}
    for r in rows:
        roof = roofline(r, peaks, meta["copy_gbps"])
        r["roofline_rate"] = roof
        r["roofline_pct"] = 100.0 * r["kiln_rate"] / roof if roof else None
    doc = summarize(rows, status, bad, quick, meta)

    print_table(doc)
    if args.no_docs:
        return
    merged = doc["merged"]
    for path in [merged] + ([args.json_copy] if args.json_copy else []):
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        print(f"bench_report: wrote {path}")
    chart_rel = None
    if args.chart and draw(doc, args.chart) and args.docs:
        chart_rel = os.path.relpath(args.chart, os.path.dirname(os.path.abspath(args.docs)))
    if args.docs:
        update_docs(args.docs, markdown(doc, chart_rel))


if __name__ == "__main__":
    main()
