"""Cold search time and warm (cache-hit) compile time per workload, with explain() output.

    python -m benchmarks.search_report --target cpu            # small sizes
    python -m benchmarks.search_report --target cuda           # large sizes

Each workload is compiled cold with empty caches (the full search, every candidate compiled
from scratch: the winner cache and the backends' object caches point at a new directory), then warm
twice: in the same process, and in a fresh Python process (what a user's second run sees;
its compile() call is timed inside that process, interpreter start-up and imports reported
apart). Prints each workload's explain() and a summary table.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

_WARM_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from compiler.api import compile
from compiler.explain_cli import workload
t1 = time.perf_counter()
fn, specs = workload(sys.argv[1], sys.argv[2], sys.argv[3])
f = compile(fn, *specs, target=sys.argv[4], quiet=True)
t2 = time.perf_counter()
print(json.dumps({"imports": t1 - t0, "compile": t2 - t1, "cache": f.cache}))
"""


def _versions(target: str) -> str:
    from importlib.metadata import version

    import compiler
    from compiler.cache import device_name
    parts = [f"saturn {compiler.__version__}", f"python {platform.python_version()}", f"numpy {np.__version__}"]
    for package in ("llvmlite", "egglog", "pycuda"):
        try:
            parts.append(f"{package} {version(package)}")
        except Exception:
            pass
    try:
        from backends import get_backend
        parts.insert(0, f"device: {device_name(get_backend(target), target)}")
    except Exception as e:
        parts.insert(0, f"device: unavailable ({e})")
    return ", ".join(parts)


def run_workload(name: str, target: str, size: str, dtype: str, budget: float | None, cache_dir: str) -> dict:
    from compiler.api import compile
    from compiler.explain_cli import workload
    fn, specs = workload(name, size, dtype)
    t0 = time.perf_counter()
    cold = compile(fn, *specs, target=target, budget=budget, cache=cache_dir, quiet=True)
    t1 = time.perf_counter()
    warm = compile(fn, *specs, target=target, cache=cache_dir, quiet=True)
    t2 = time.perf_counter()
    env = dict(os.environ, SATURN_CACHE_DIR=cache_dir)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    t3 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _WARM_CHILD, name, size, dtype, target], env=env,
                         capture_output=True, text=True, check=True)
    t4 = time.perf_counter()
    child = json.loads(out.stdout.strip().splitlines()[-1])
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(s.shape).astype(s.dtype.np) for s in specs]
    same = cold(*xs).tobytes() == warm(*xs).tobytes()
    w = cold.result.winner
    base = cold.result.baseline()  # None when the original program under the default schedule was not timed
    return {"workload": name, "inputs": ", ".join(map(str, specs)), "cold_s": t1 - t0, "warm_s": t2 - t1,
            "warm_fresh_process_compile_s": child["compile"], "warm_fresh_process_imports_s": child["imports"],
            "warm_fresh_process_total_s": t4 - t3, "warm_cache": warm.cache, "fresh_cache": child["cache"],
            "chosen": w.description, "schedule": w.schedule_text, "median_s": w.median,
            "baseline_median_s": base.median if base is not None else None, "warm_equals_cold": same,
            "explain": cold.explain(), "warm_explain_head": "\n".join(warm.explain().splitlines()[:4])}


def _trim_source(text: str, n: int) -> str:
    if n <= 0 or "\ngenerated code:\n" not in text:
        return text
    head, code = text.split("\ngenerated code:\n", 1)
    lines = code.splitlines()
    more = f"\n... ({len(lines) - n} more lines)" if len(lines) > n else ""
    return head + "\ngenerated code:\n" + "\n".join(lines[:n]) + more


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="cpu")
    p.add_argument("--size", default=None, choices=["small", "large", "long"])
    p.add_argument("--dtype", default="f32")
    p.add_argument("--budget", type=float, default=None)
    p.add_argument("--workloads", default="softmax,layernorm,attention")
    p.add_argument("--json", default=None, help="also write the results here")
    p.add_argument("--source-lines", type=int, default=0, help="print at most this many lines of generated code (0: all)")
    args = p.parse_args(argv)
    size = args.size or ("large" if args.target == "cuda" else "small")
    print(f"# search report: target {args.target}, size {size}, {args.dtype}; {time.strftime('%Y-%m-%d %H:%M')}; "
          f"{_versions(args.target)}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="saturn-cache-") as cache_dir:
        # a cold compile starts from empty caches: the winner cache and the backends' object
        # caches (LLVM objects, CUDA cubins) all live under this directory for the run
        os.environ["SATURN_CACHE_DIR"] = cache_dir
        for name in args.workloads.split(","):
            try:
                r = run_workload(name, args.target, size, args.dtype, args.budget, cache_dir)
            except Exception as e:  # report it and go on with the other workloads
                print(f"\n## {name}\n\nfailed: {type(e).__name__}: {e}")
                continue
            rows.append(r)
            print(f"\n## {name} ({r['inputs']})\n")
            print(_trim_source(r["explain"], args.source_lines))
            print("\nwarm compile:\n" + r["warm_explain_head"])
    print("\n## summary\n")
    print("| workload | chosen | schedule | median | original (default schedule) | cold search | warm (same process) "
          "| warm (fresh process: compile / imports) | warm == cold output |")
    print("|---|---|---|---|---|---|---|---|---|")
    from compiler.timing import format_seconds as fs
    for r in rows:
        print(f"| {r['workload']} | {r['chosen']} | {r['schedule']} | {fs(r['median_s'])} | {fs(r['baseline_median_s']) if r['baseline_median_s'] is not None else '-'} "
              f"| {r['cold_s']:.2f} s | {r['warm_s']:.3f} s | {r['warm_fresh_process_compile_s']:.3f} s / "
              f"{r['warm_fresh_process_imports_s']:.2f} s | {r['warm_equals_cold']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{k: v for k, v in r.items() if k != "explain"} for r in rows], f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
