"""Render bench results (the JSON dict) as a readable table, a Markdown report and a bar chart.

`python3 -m benchmarks.report RESULTS.json [--md FILE] [--plot FILE]` re-renders a saved run;
several files (parts of one suite run in several commands) merge with `--out MERGED.json`.
"""
from __future__ import annotations

import argparse
import json
import math
import sys

PEER_TITLES = {"saturn": "Saturn", "eager": "eager", "compile": "torch.compile",
               "compile-graphs": "torch.compile CUDA graphs", "sdpa": "SDPA",
               "saturn-graphs": "Saturn CUDA graphs (device tensors)"}
PEER_ORDER = ["eager", "compile", "compile-graphs", "sdpa", "saturn-graphs"]


def _ms(d: dict) -> str:
    if d.get("status") == "n/a":
        return "n/a"
    if "error" in d:
        return "error"
    if not d.get("median_s"):
        return "—"
    med = d["median_s"] * 1e3
    spread = 50.0 * (d["p75_s"] - d["p25_s"]) / d["median_s"]
    return f"{med:.3g} ±{spread:.0f}%" if med < 1000 else f"{med:.0f} ±{spread:.0f}%"


def _num(x, fmt="{:.3g}") -> str:
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else fmt.format(x)


def _pct(x) -> str:
    if x is None:
        return "—"
    return f"{x:.0f}%" if x >= 10 else f"{x:.2g}%"


def _compile(s: dict) -> str:
    text = _num(s.get("compile_s"), "{:.2g}")
    return text + " (cached)" if s.get("cache") == "hit" else text


def _check(rec: dict) -> str:
    c = rec["check"]
    if c["status"] == "ok":
        return "ok"
    if c["status"] == "FAIL":
        return f"FAIL ({_num(c['max_err'], '{:.1e}')})"
    if c["status"] == "error":
        return "ERROR"
    return "unchecked"


def peers_in(results: list[dict]) -> list[str]:
    present = {p for r in results for p in r["peers"]}
    return [p for p in PEER_ORDER if p in present]


def table(results: list[dict]) -> str:
    """A Markdown table (aligned, so it reads in a terminal too)."""
    peers = peers_in(results)
    head = (["workload", "check", "Saturn ms"] + [f"{PEER_TITLES[p]} ms" for p in peers]
            + (["Saturn × eager"] if "eager" in peers else [])
            + [f"{PEER_TITLES[p]} × eager" for p in peers if p != "eager"]
            + ["Saturn GB/s", "Saturn GFLOP/s", "Saturn % of floor", "Saturn compile s"])
    rows = []
    for r in results:
        s = r["saturn"]
        sp = r.get("speedup_vs_eager", {})
        row = [r["label"], _check(r), _ms(s) if r["check"]["status"] != "FAIL" else "not timed"]
        row += [_ms(r["peers"].get(p, {})) for p in peers]
        if "eager" in peers:
            row.append(_num(sp.get("saturn"), "{:.2f}×"))
        row += [_num(sp.get(p), "{:.2f}×") for p in peers if p != "eager"]
        row += [_num(s.get("GBps"), "{:.3g}"), _num(s.get("GFLOPs"), "{:.3g}"),
                _pct(s.get("pct_of_floor")), _compile(s)]
        rows.append(row)
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]

    def line(cells):
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(head), sep] + [line(r) for r in rows])


def notes(data: dict) -> list[str]:
    """The lines under the table: device, ceilings, threads, what was missing and why."""
    out = []
    dev, ver = data.get("device", {}), data.get("versions", {})
    out.append(f"Device: {dev.get('name', '?')}; target '{data['target']}', suite '{data['suite']}', "
               f"date {data.get('date', '?')}.")
    out.append("Versions: " + ", ".join(f"{k} {v}" for k, v in ver.items() if v))
    c = data.get("ceilings", {})
    mm = ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in c.get("matmul_GFLOPs", {}).items())
    if c.get("copy_GBps"):
        out.append(f"Ceilings measured in this run: copy {c['copy_GBps']:.1f} GB/s ({c.get('copy_how', '')}); "
                   f"matmul {mm or 'n/a'} ({c.get('matmul_how', '')}).")
    else:
        out.append(f"Ceilings: {c.get('copy_how') or 'not measured'}.")
    out.append("Times are medians over alternating rounds (± is half the interquartile range); "
               "'× eager' is eager time / contender time; '% of floor' is the floor time (bytes at the copy "
               "ceiling or FLOPs at the matmul ceiling, whichever is larger) over Saturn's time. "
               "Compile time is Saturn's compile() call, not part of the per-run time.")
    if any((r["saturn"].get("pct_of_floor") or 0) > 100 for r in data["results"]):
        out.append("Above 100% of floor means the data stayed in the CPU/GPU caches, which are faster than "
                   "the memory the large copy measures.")
    out += data.get("notes", [])
    rho = cost_model_note(data["results"])
    if rho:
        out.append(rho)
    reasons = {}
    for r in data["results"]:
        for p, d in r["peers"].items():
            if d.get("status") == "n/a":
                reasons.setdefault(f"{PEER_TITLES.get(p, p)} n/a: {d['reason']}", []).append(r["label"])
        if "error" in r["saturn"]:
            reasons.setdefault(f"Saturn error: {r['saturn']['error']}", []).append(r["label"])
    out += [f"{msg} ({', '.join(labels)})" for msg, labels in reasons.items()]
    if data.get("skipped"):
        out.append(f"Not run (time limit): {', '.join(data['skipped'])}.")
    return out


def cost_model_note(results: list[dict]) -> str:
    """The searches' rank correlations of predicted and measured time (Saturn's cost model)."""
    rows = [(r["label"], r["saturn"].get("cost_model") or {}) for r in results]
    trials = [(label, cm["rho_trials"]) for label, cm in rows if cm.get("rho_trials") is not None]
    if not trials:
        return ""
    programs = [cm["rho_programs"] for _, cm in rows if cm.get("rho_programs") is not None]
    sources = sorted({cm.get("source", "?") for _, cm in rows if cm})
    med = sorted(v for _, v in trials)[len(trials) // 2]
    text = (f"Cost model (Spearman rho of predicted vs measured time over each search's timed trials): median "
            f"{med:.2f} over {len(trials)} searches, lowest {min(v for _, v in trials):.2f}")
    if programs:
        text += f"; per program at its best schedule: median {sorted(programs)[len(programs) // 2]:.2f}"
    return text + f". Model: {'; '.join(sources)}."


def markdown(data: dict, source: str | None = None) -> str:
    title = f"# saturn bench: {data.get('device', {}).get('name', '?')}, {data.get('date', '?')}"
    parts = [title, ""]
    if source:
        parts += [f"Results file: `{source}`. Command: `{data.get('command', '?')}`", ""]
    parts += [table(data["results"]), ""] + [f"- {n}" for n in notes(data)]
    return "\n".join(parts) + "\n"


def plot(data: dict, path: str) -> str | None:
    """Write a bar chart of speedup over PyTorch eager per case; returns a reason if it cannot."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed, so no plot was written (pip install matplotlib)"
    results = data["results"]
    series = ["saturn"] + [p for p in peers_in(results) if p != "eager"]
    labels = [r["label"] for r in results]
    fig, ax = plt.subplots(figsize=(10, 0.17 * len(labels) * len(series) + 1.6))
    h = 0.8 / len(series)
    colors = {"saturn": "#d62728", "compile": "#1f77b4", "sdpa": "#2ca02c"}
    for j, name in enumerate(series):
        ys = [i + (j - (len(series) - 1) / 2) * h for i in range(len(results))]
        xs = [r.get("speedup_vs_eager", {}).get(name, 0.0) for r in results]
        drawn = [(y, x) for y, x in zip(ys, xs) if x > 0]
        # bars grow from 1× (eager) to the speedup: right is faster than eager, left slower
        ax.barh([y for y, _ in drawn], [x - 1.0 for _, x in drawn], left=1.0, height=h,
                label=PEER_TITLES.get(name, name), color=colors.get(name))
        for y, x, r in zip(ys, xs, results):
            if name == "saturn" and r["check"]["status"] in ("FAIL", "error"):
                ax.text(0.01, y, r["check"]["status"], va="center", fontsize=7, transform=ax.get_yaxis_transform())
            elif x:  # label at the bar's far end
                ax.text(x, y, f" {x:.2f}× " if x >= 1 else f"{x:.2g}× ", va="center", fontsize=7,
                        ha="left" if x >= 1 else "right")
    ax.axvline(1.0, color="k", lw=0.8)
    speedups = [x for r in results for x in r.get("speedup_vs_eager", {}).values() if x > 0] or [1.0]
    ax.set_xlim(min(min(speedups), 1.0) / 1.8, max(max(speedups), 1.0) * 1.8)  # room for the labels
    ax.set_yticks(range(len(results)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("speedup over PyTorch eager (higher is better; 1× = eager)")
    ax.set_title(f"saturn bench — {data.get('device', {}).get('name', '?')} — {data.get('date', '?')}", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def merge(runs: list[dict]) -> dict:
    """One result set from several runs of the same target (e.g. a suite split over several
    commands): the first run's metadata, every run's results in order, all notes kept."""
    out = dict(runs[0])
    out["results"] = [r for d in runs for r in d["results"]]
    out["skipped"] = [s for d in runs for s in d.get("skipped", [])]
    out["notes"] = list(dict.fromkeys(n for d in runs for n in d.get("notes", [])))
    out["command"] = " ; ".join(d.get("command", "?") for d in runs)
    out["merged_from"] = [{"date": d.get("date"), "command": d.get("command"), "ceilings": d.get("ceilings")}
                          for d in runs]
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m benchmarks.report", description=__doc__.splitlines()[0])
    p.add_argument("json_files", nargs="+", help="one results file, or several runs to merge (same target)")
    p.add_argument("--out", help="with several inputs: write the merged JSON here")
    p.add_argument("--md", help="write the Markdown report here")
    p.add_argument("--plot", help="write the bar chart (PNG) here")
    args = p.parse_args(argv)
    runs = []
    for name in args.json_files:
        with open(name) as f:
            runs.append(json.load(f))
    targets = {d["target"] for d in runs}
    if len(targets) > 1:
        print(f"cannot merge runs of different targets: {sorted(targets)}", file=sys.stderr)
        return 2
    data = merge(runs) if len(runs) > 1 else runs[0]
    source = args.json_files[0] if len(runs) == 1 else args.out
    if args.out:
        with open(args.out, "w") as f:
            json.dump(data, f, indent=1)
    text = markdown(data, source)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)
    elif not args.out:
        print(text)
    if args.plot:
        reason = plot(data, args.plot)
        if reason:
            print(reason, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
