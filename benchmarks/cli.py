"""`saturn bench` (also `python3 -m benchmarks.cli`): Saturn against PyTorch eager and torch.compile.

Compiles each workload with Saturn, checks every contender's output against PyTorch's f32
result, times Saturn, eager and torch.compile in alternating rounds, measures the device's
copy and matmul ceilings in the same run, and prints a table; optionally writes JSON, a
Markdown report and a PNG bar chart.
"""
from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import time

from benchmarks import ceilings as ceiling_mod
from benchmarks import report
from benchmarks.contenders import TorchEnv, import_torch
from benchmarks.machine import OtherLoad
from benchmarks.suite import Settings, run_suite
from benchmarks.workloads import WORKLOADS, select_cases, workload_names

DEFAULTS = {  # suite -> (rounds, seconds per batch)
    "full": (7, 0.2), "quick": (3, 0.05), "tiny": (2, 0.005),
}
ALL_PEERS = ["eager", "compile", "compile-graphs", "sdpa", "saturn-graphs"]
QUICK_BUDGET_S = 2.0  # Saturn's search budget per workload under --quick (keeps it under 2 minutes)


def add_arguments(p) -> None:
    p.add_argument("--target", default="cpu", help="cpu (default), cuda or reference")
    p.add_argument("--workloads", nargs="+", metavar="NAME",
                   help=f"which workloads (default all): {', '.join(workload_names())}; commas also work")
    p.add_argument("--exclude", nargs="+", default=[], metavar="NAME", help="leave these workloads out")
    p.add_argument("--quick", action="store_true", help="smaller sizes, fewer rounds (under 2 minutes on 2 CPU cores)")
    p.add_argument("--tiny", action="store_true", help="tiny shapes, for smoke tests")
    p.add_argument("--json", metavar="FILE", help="write all results (and device, date, versions) as JSON")
    p.add_argument("--md", metavar="FILE", help="write the table and notes as Markdown")
    p.add_argument("--plot", metavar="FILE", help="write a PNG bar chart of speedups (needs matplotlib)")
    p.add_argument("--peers", default=None,
                   help="comma-separated contenders among eager,compile,compile-graphs,sdpa,saturn-graphs "
                        "(default: all; --quick on the CPU: eager,sdpa, since torch.compile takes minutes there). "
                        "compile-graphs is torch.compile(mode='reduce-overhead') (CUDA graphs, weights marked "
                        "static), timed on CUDA for the model workloads (block, decoder, gpt2) at their main sizes (not the odd ones); "
                        "saturn-graphs is, for the same workloads, Saturn's function called on PyTorch CUDA tensors (its CUDA "
                        "graphs replayed), timed like the PyTorch peers")
    p.add_argument("--rounds", type=int, help="alternating timing rounds (default 7; --quick 3)")
    p.add_argument("--batch-ms", type=float, help="target milliseconds per timed batch (default 200; --quick 50)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="CPU threads for PyTorch (default: all cores, as Saturn's CPU code uses)")
    p.add_argument("--time-limit", type=float, metavar="SECONDS",
                   help="start no new workload after this many seconds (results so far are kept)")
    p.add_argument("--budget", type=float, metavar="SECONDS", help=f"Saturn's search budget per workload (default: compile's own; {QUICK_BUDGET_S:g} s with --quick)")
    p.add_argument("--cold", action="store_true", help="bypass Saturn's compile cache, so compile time is a full search")
    p.add_argument("--verbose", action="store_true", help="show Saturn's compile progress lines")
    p.add_argument("--saturn-option", action="append", default=[], metavar="KEY=VALUE",
                   help="pass an option to compiler.compile (repeatable; values parsed as JSON where they can be)")
    p.add_argument("--list", action="store_true", help="list the workloads and their sizes, then exit")
    p.add_argument("--module", metavar="FILE.py",
                   help="benchmark the PyTorch module a file defines (Model, get_inputs, get_init_inputs) "
                        "through torch.compile(backend='saturn'), against eager and torch.compile")


def _parse_options(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, _, value = item.partition("=")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def saturn_options(args) -> dict:
    """Keyword options for compiler.compile from the command line (only those compile() names)."""
    import inspect

    import compiler
    named = inspect.signature(compiler.compile).parameters
    opts = {}
    if "quiet" in named and not args.verbose:
        opts["quiet"] = True
    if args.cold:
        opts["cache"] = False
    if args.budget is not None:
        opts["budget"] = args.budget
    elif args.quick and "budget" in named:
        opts["budget"] = QUICK_BUDGET_S
    unsupported = [k for k in ("cache", "budget") if k in opts and k not in named]
    if unsupported:
        raise ValueError(f"this compiler.compile() takes no {', '.join(unsupported)} option")
    opts.update(_parse_options(args.saturn_option))
    return opts


def _command_line() -> str:
    """How this run was started, as the user typed it (best effort)."""
    prog = os.path.basename(sys.argv[0])
    if prog == "saturn":
        return "saturn " + " ".join(sys.argv[1:])
    if prog in ("cli.py", "__main__.py"):
        return "python3 -m benchmarks.cli " + " ".join(sys.argv[1:])
    return f"{prog} {' '.join(sys.argv[1:])} (bench called from Python)"


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git_commit() -> str | None:
    # a copy of the tree whose git metadata is stale (a device machine's) names its commit here
    if os.environ.get("SATURN_TREE"):
        return os.environ["SATURN_TREE"] + " (SATURN_TREE)"
    try:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        out = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5)
        commit = out.stdout.strip()
        if not commit:
            return None
        # source files changed since that commit make the run not reproducible from it: say so
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no", "--", "*.py"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return commit + ("+uncommitted changes" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def versions() -> dict:
    import compiler
    v = {"saturn": compiler.__version__, "commit": _git_commit(), "python": platform.python_version()}
    for name in ["numpy", "torch", "triton", "llvmlite", "egglog", "pycuda", "tinygrad", "matplotlib"]:
        v[name] = _version(name)
    return v


def device_info(family: str, env: TorchEnv | None, threads: int) -> dict:
    if family == "cuda" and env is not None:
        t = env.torch
        return {"name": t.cuda.get_device_name(0), "cuda": t.version.cuda,
                "count": t.cuda.device_count(), "host": platform.node()}
    from compiler.cache import cpu_name
    return {"name": f"{cpu_name()} ({os.cpu_count()} cores)", "cores": os.cpu_count(), "threads": threads,
            "host": platform.node()}


def _list() -> int:
    for w in WORKLOADS:
        print(f"{w.name}: {w.description}")
        for family, suites in w.sizes.items():
            for suite in suites:
                for case in w.cases(family, suite):
                    print(f"    {family:5} {suite:6} {case.label}")
    return 0


def run(args) -> int:
    if args.list:
        return _list()
    if args.module:
        from benchmarks import module_bench
        try:
            options = saturn_options(args)
        except ValueError as e:
            print(f"saturn bench: {e}", file=sys.stderr)
            return 2
        return module_bench.run(args, options, [])
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731 - progress goes to stderr
    notes: list[str] = []

    # Target
    from backends import BackendUnavailable, get_backend
    try:
        get_backend(args.target)
    except BackendUnavailable as e:
        print(f"saturn bench: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - a backend that fails to load is unavailable too
        print(f"saturn bench: target {args.target!r} could not be loaded: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    family = "cuda" if args.target == "cuda" else "cpu"
    suite = "tiny" if args.tiny else ("quick" if args.quick else "full")
    if args.target == "reference" and suite != "tiny":
        notes.append("The reference target is the numpy interpreter: ran the tiny shapes.")
        suite = "tiny"

    # Workloads
    names = [n for item in (args.workloads or []) for n in item.split(",") if n]
    excluded = {n for item in args.exclude for n in item.split(",") if n}
    try:
        unknown = sorted(excluded - set(workload_names()))
        if unknown:
            raise ValueError(f"unknown workload(s) {', '.join(unknown)} in --exclude")
        names = [n for n in (names or workload_names()) if n not in excluded]
        cases = select_cases(family, suite, names)
    except ValueError as e:
        print(f"saturn bench: {e}", file=sys.stderr)
        return 2

    # PyTorch (optional)
    torch, why = import_torch()
    env = None
    if torch is None:
        notes.append(f"{why}. Saturn-only numbers; no speedups.")
    else:
        try:
            env = TorchEnv(torch, "cuda" if family == "cuda" else "cpu", args.threads)
        except RuntimeError as e:
            notes.append(f"PyTorch is installed but unusable here ({e}): Saturn-only numbers.")
    if env is not None and family == "cpu":
        notes.append(f"PyTorch runs with torch.set_num_threads({args.threads}) on {os.cpu_count()} cores.")
    if _version("tinygrad") is None:
        notes.append("tinygrad is not installed: no tinygrad column.")
    else:
        notes.append("tinygrad is installed but has no runner in this suite yet: no tinygrad column.")

    if args.peers is not None:
        peers = [p for p in args.peers.split(",") if p]
        bad = sorted(set(peers) - set(ALL_PEERS))
        if bad:
            print(f"saturn bench: unknown peer(s) {', '.join(bad)}; choose from {', '.join(ALL_PEERS)}", file=sys.stderr)
            return 2
    elif suite == "quick" and family == "cpu":
        peers = ["eager", "sdpa"]
        if env is not None:
            notes.append("--quick on the CPU leaves out torch.compile (minutes of compiling on 2 cores); "
                         "the full run or --peers eager,compile,sdpa includes it.")
    else:
        peers = list(ALL_PEERS)

    try:
        options = saturn_options(args)
    except ValueError as e:
        print(f"saturn bench: {e}", file=sys.stderr)
        return 2
    rounds, batch_s = DEFAULTS[suite]
    settings = Settings(target=args.target, family=family, suite=suite,
                        rounds=args.rounds or rounds, batch_s=(args.batch_ms / 1e3) if args.batch_ms else batch_s,
                        peers=peers if env is not None else [], saturn_options=options,
                        time_limit_s=args.time_limit)

    started, load_start, others = time.time(), _load(), OtherLoad()
    data = {
        "schema": "saturn-bench/1",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": _command_line(),
        "arguments": {k: v for k, v in vars(args).items() if k not in ("run", "command")},
        "target": args.target, "suite": suite,
        "device": device_info(family, env, args.threads), "versions": versions(),
        "settings": {"rounds": settings.rounds, "batch_s": settings.batch_s, "peers": settings.peers,
                     "threads": args.threads, "saturn_options": settings.saturn_options,
                     "time_limit_s": settings.time_limit_s},
        "ceilings": {}, "notes": notes, "results": [], "skipped": [],
    }

    # Ceilings, measured now, on this device
    log("measuring ceilings (large copy, large matmul)...")
    mm_dtypes = {"f32"} | {c.dtype for c in cases if c.flops}
    try:
        data["ceilings"] = ceiling_mod.measure(env, family, suite, mm_dtypes)
    except Exception as e:  # noqa: BLE001 - a failed ceiling must not lose the run
        data["ceilings"] = {"copy_how": f"failed: {type(e).__name__}: {e}", "matmul_GFLOPs": {}}

    def save():
        if args.json:
            with open(args.json, "w") as f:
                json.dump(data, f, indent=1, default=float)
        if args.md:
            with open(args.md, "w") as f:
                f.write(report.markdown(data, args.json))
        if args.plot and data["results"]:
            return report.plot(data, args.plot)
        return None

    def on_result(rec):
        data["results"].append(rec)
        data["elapsed_s"] = time.time() - started
        save()  # after every case, so a run that is cut short (or killed) still leaves its results

    data["skipped"] = run_suite(cases, settings, env, data["ceilings"], on_result, log)
    data["elapsed_s"] = time.time() - started
    data["load_average"] = {"start": load_start, "end": _load()}
    other_cores = others.cores()
    data["other_processes_cores"] = other_cores
    if other_cores is not None:
        busy = other_cores > 0.1 * (os.cpu_count() or 1)
        notes.append(f"Other processes used {other_cores:.2f} of {os.cpu_count()} cores on average during the run"
                     + (" (the CPU numbers are noisier for it)." if busy and family == "cpu" else "."))
    plot_problem = save()

    print(report.table(data["results"]))
    print()
    for line in report.notes(data):
        print(f"- {line}")
    if plot_problem:
        print(f"- {plot_problem}")
    failed = [r["label"] for r in data["results"] if r["check"]["status"] in ("FAIL", "error")]
    if failed:
        print(f"- {len(failed)} case(s) failed the check or errored: {', '.join(failed)}")
    print(f"- Finished in {data['elapsed_s']:.0f} s.")
    return 0


def main(argv=None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python3 -m benchmarks.cli", description=__doc__.splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
