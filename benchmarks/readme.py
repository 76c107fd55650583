"""Rewrite the README's Benchmarks section from the newest results files.

    python3 -m benchmarks.readme            # updates README.md in place
    python3 -m benchmarks.readme --check    # exit 1 if README.md is out of date

Among the `saturn bench` results in `benchmarks/results/*.json` (schema "saturn-bench/1"; other
tools' files there are ignored), the newest run per target (cuda first, then cpu) gives a
table; its .png (if present) is shown under it, and both link to the file they came from.
Only the text between the two markers below is replaced.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks import report

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
START, END = "<!-- bench:start -->", "<!-- bench:end -->"
TARGETS = [("cuda", "GPU"), ("cpu", "CPU")]
SCHEMA = "saturn-bench/1"


def bench_runs() -> list[tuple[Path, dict]]:
    """Every saturn bench results file, with its data."""
    out = []
    for path in sorted(RESULTS.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("schema") == SCHEMA:
            out.append((path, data))
    return out


def newest(target: str) -> tuple[Path, dict] | None:
    """The newest run of the workload suite on `target` (a `--module` run times one user file:
    not the table a reader expects)."""
    runs = [(p, d) for p, d in bench_runs() if d.get("target") == target and d.get("suite", "full") != "module"]
    return max(runs, key=lambda pd: (pd[1].get("date", ""), pd[0].name)) if runs else None


def section() -> str:
    parts = [START, "",
             "`saturn bench` times Saturn against PyTorch eager and torch.compile with every output checked "
             "first (method and options: `docs/benchmarks.md`). Latest committed runs:", ""]
    found = False
    for target, title in TARGETS:
        run = newest(target)
        if run is None:
            continue
        found = True
        path, data = run
        rel = path.relative_to(ROOT).as_posix()
        parts += [f"### {title}: {data.get('device', {}).get('name', '?')}, {data.get('date', '?')}", "",
                  f"From [`{rel}`]({rel}) (`{data.get('command', '?')}`, Saturn commit "
                  f"{data.get('versions', {}).get('commit') or '?'}); notes and versions in "
                  f"[`{rel[:-5]}.md`]({rel[:-5]}.md).", "",
                  report.table(data["results"]), ""]
        if data.get("other_processes_cores") is not None:
            parts += [f"Other processes used {data['other_processes_cores']:.2f} of the machine's cores on "
                      "average during this run; times are medians (± half the interquartile range).", ""]
        png = path.with_suffix(".png")
        if png.exists():
            prel = png.relative_to(ROOT).as_posix()
            parts += [f"![speedup over PyTorch eager, {title}]({prel})", "", f"Plot: [`{prel}`]({prel}).", ""]
    if not found:
        parts += ["No results committed yet: run `saturn bench --json FILE` (see `docs/benchmarks.md`).", ""]
    parts.append(END)
    return "\n".join(parts)


def updated(readme: str) -> str:
    body = section()
    if START in readme and END in readme:
        head, rest = readme.split(START, 1)
        return head + body + rest.split(END, 1)[1]
    return readme.rstrip("\n") + "\n\n## Benchmarks\n\n" + body + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m benchmarks.readme", description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="only report whether README.md is up to date")
    args = p.parse_args(argv)
    path = ROOT / "README.md"
    old = path.read_text()
    new = updated(old)
    if args.check:
        print("README.md is up to date" if new == old else "README.md's Benchmarks section is out of date")
        return 0 if new == old else 1
    path.write_text(new)
    print("README.md: Benchmarks section written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
