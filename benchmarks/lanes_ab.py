"""Concurrent streams on and off, on CUDA: each workload compiled once, then its executable timed
with independent launches on concurrent streams (backends/cuda/lanes.py) and in order on one
stream, in alternating rounds, on the same inputs.

    python3 -m benchmarks.lanes_ab [--workloads decoder gpt2 block] [--suite full] [--rounds 9]
        [--budget 10] [--json OUT.json]

Prints per workload the lanes used, the median of each way (CUDA events around each run, as
`saturn bench` times Saturn) and in-order / concurrent. The two ways' outputs are compared
first: they must be equal bit for bit (the same kernels on the same inputs).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=["decoder", "gpt2", "block"])
    ap.add_argument("--suite", default="full", help="sizes: full (default), odd, quick or tiny")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--runs", type=int, default=20, help="timed runs per round and way")
    ap.add_argument("--budget", type=float, default=10.0)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)

    import numpy as np
    import compiler
    from benchmarks.suite import make_inputs
    from benchmarks.workloads import select_cases

    rows = []
    for case in select_cases("cuda", args.suite, args.workloads):
        specs = [compiler.spec(i.shape, i.dtype, i.name) for i in case.inputs]
        fn = compiler.compile(case.saturn_fn, *specs, target="cuda", budget=args.budget, quiet=True)
        exe = fn.executable
        arrays = make_inputs(case, 0)
        outs = {}
        for way in (False, True):
            exe.concurrent = way
            outs[way] = np.array(fn(*arrays), copy=True)
        same = bool(np.array_equal(outs[False], outs[True], equal_nan=True))
        times = {False: [], True: []}
        for r in range(args.rounds):
            for way in ((False, True) if r % 2 == 0 else (True, False)):
                exe.concurrent = way
                times[way].append(statistics.median(exe.benchmark(arrays, 3, args.runs)))
        exe.concurrent = False
        row = {"label": case.label, "lanes": exe.lanes.count, "launches": len(exe.launches), "equal": same,
               "in_order_ms": statistics.median(times[False]) * 1e3,
               "concurrent_ms": statistics.median(times[True]) * 1e3}
        row["in_order_over_concurrent"] = row["in_order_ms"] / row["concurrent_ms"]
        rows.append(row)
        print(f"{row['label']}: {row['launches']} launches on {row['lanes']} lanes, outputs equal {same}; "
              f"in order {row['in_order_ms']:.4f} ms, concurrent {row['concurrent_ms']:.4f} ms "
              f"({row['in_order_over_concurrent']:.3f}x)", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "rounds": args.rounds, "budget": args.budget}, f, indent=1)
    return 0 if all(r["equal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
