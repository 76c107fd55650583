"""Per-kernel times of every program the e-graph offers for a built-in workload.

    python -m benchmarks.profile_candidates softmax --target cuda --size long
    python -m benchmarks.profile_candidates layernorm,attention --target cpu

Each candidate is built under the backend's default schedule, compared with the original
program's output, timed as a whole (the backend's benchmark: warm-up, median) and per kernel
(the executable's profile()). The search does the same timing; this shows where a candidate's
time goes (which step of a split reduction, which launch) when deciding what to improve.
"""
from __future__ import annotations

import argparse

import numpy as np


def profile_workload(name: str, target: str, size: str, dtype: str, out=print) -> None:
    from backends import get_backend
    from compiler.explain_cli import workload
    from compiler.explore import explore
    from compiler.trace import trace
    be = get_backend(target)
    fn, specs = workload(name, size, dtype)
    g = trace(fn, *specs)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s.shape).astype(np.dtype(s.dtype.np)) for s in specs]
    want = np.asarray(be.build(g)(*args)[0], np.float64)      # the original program
    for c in explore(g).candidates:
        try:
            exe = be.build(c.graph)
            got = np.asarray(exe(*args)[0], np.float64)
        except Exception as e:       # a candidate this backend cannot build: say why, go on
            out(f"{name} {c.description[:60]:60s} failed: {type(e).__name__}: {e}")
            continue
        err = float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))
        total = float(np.median(exe.benchmark(args)))
        out(f"{name} {c.description[:60]:60s} {total * 1e6:9.1f} us  (max rel. diff to the original {err:.1e})")
        details = {getattr(l, "name", ""): l for l in getattr(exe, "launches", [])}
        for kernel, seconds in exe.profile(args):
            l = details.get(kernel)
            where = f"{l.kind} grid={l.grid} block={l.block} {l.detail}".rstrip() if hasattr(l, "grid") else ""
            out(f"    {kernel:16s} {seconds * 1e6:9.1f} us  {where}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.profile_candidates", description=__doc__.split("\n\n")[0])
    p.add_argument("workloads", help="comma-separated: softmax, layernorm, attention")
    p.add_argument("--target", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--size", default=None, choices=["small", "large", "long"],
                   help="input sizes (default: small on cpu, large on cuda)")
    p.add_argument("--dtype", default="f32", help="f32 (default), f16 or bf16")
    args = p.parse_args(argv)
    size = args.size or ("large" if args.target == "cuda" else "small")
    for name in args.workloads.split(","):
        profile_workload(name, args.target, size, args.dtype)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
