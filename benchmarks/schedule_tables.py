"""What the per-schedule kernel tables (benchmarks/attention_kernels.py, product_kernels.py)
share: nvcc on every (case, schedule) at once before anything is timed, and the command line
that runs each case and keeps its rows."""
from __future__ import annotations

import argparse
import json


def precompile(programs, schedules_of) -> None:
    """nvcc on every (program, schedule) at once, on all cores (the builds then hit its cache)."""
    from backends.cuda import CUDABackend
    CUDABackend().precompile([(g, x) for g in programs for x in schedules_of(g)])


def report(rows, label: str, flops: float, base_ms: float, versus: str, out=print, width: int = 30,
           extra=lambda r: "") -> None:
    """Each row's TFLOP/s and speed over the baseline's (key x_<versus>, lower-cased), printed
    one line a row (a failed build prints its reason)."""
    key = "x_" + versus.lower()
    for r in rows:
        if "ms" in r:
            r["tflops"] = flops / (r["ms"] * 1e-3) / 1e12
            r[key] = base_ms / r["ms"]
            out(f"{label:<28} {r['kernel']:<{width}} {r['ms']:8.4f} ms {r['tflops']:7.1f} TFLOP/s {r[key]:5.2f}x {versus}"
                + extra(r))
        else:
            out(f"{label:<28} {r['kernel']:<{width}} failed: {r['error']}")


def main(doc: str, cases, run_case, precompile_cases, argv=None, repeat: int = 20, label=str,
         summary=None, options=None) -> int:
    """Parse --quick / --repeat / --json (and what `options(parser)` adds, read back by it from
    the parsed arguments it returns; it may return cases to run instead of `cases`), then
    run_case(backend, case, repeat) -> rows for each case (one that fails is reported and the
    others still run), the rows written to --json after each case (a time limit keeps what
    ran), and `summary(rows)` lines printed last."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="only the first case")
    ap.add_argument("--repeat", type=int, default=repeat, help="timed runs per kernel (median reported)")
    ap.add_argument("--json", help="write every row here")
    ap.add_argument("--cases", help="comma-separated parts of case names: the cases whose name contains "
                                    "one of them (e.g. '2048x5632 nt f16,64 x')")
    apply = options(ap) if options is not None else None
    a = ap.parse_args(argv)
    if apply is not None:
        cases = apply(a) or cases
    if a.cases:
        parts = a.cases.split(",")
        cases = [c for c in cases if any(p in label(c) for p in parts)]
        if not cases:
            print(f"no case name contains any of {parts}")
            return 1
    from backends.cuda import CUDABackend
    be = CUDABackend()
    reason = be.unavailable_reason()
    if reason:
        print(f"no CUDA device: {reason}")
        return 1
    cases = cases[:1] if a.quick else cases
    precompile_cases(be, cases)
    rows = []
    for case in cases:
        try:
            rows += run_case(be, case, a.repeat)
        except Exception as e:      # (one case out of memory or failing must not lose the others)
            print(f"{label(case)}: {type(e).__name__}: {e}")
        if a.json:
            with open(a.json, "w") as f:
                json.dump(rows, f, indent=1)
    if summary is not None:
        print("\n".join(summary(rows)))
    return 0
