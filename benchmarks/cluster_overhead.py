"""What a cluster path adds to the wall time of one small compile, against the default path.

    python -m benchmarks.cluster_overhead [--repeats 3] [--ray-cpus 4]

Compiles softmax f32 256x1024 for the CPU (the original program and the e-graph's next two
programs, two schedules each, cache off, an ample budget so each search ends when its trials
are verified and timed) through cluster=None, "local" and a Ray instance started here, each
first cold (its workers or actors start inside the compile) then warm (reused) `--repeats`
times. Prints one line per compile and a summary of medians; needs the `distributed` extra
for the Ray rows.
"""
from __future__ import annotations

import argparse
import statistics
import time

import compiler as saturn
from compiler.explore import explore

SPEC = saturn.spec((256, 1024))


def softmax(x):
    return x.softmax(-1)


class _Cand:
    def __init__(self, c):
        self.graph, self.cost, self.description = c.graph, c.cost, c.description


def _one(cluster, candidates) -> tuple[float, dict]:
    t0 = time.perf_counter()
    f = saturn.compile(softmax, SPEC, target="cpu", cluster=cluster, candidates=candidates, budget=60.0,
                       max_trials=6, max_schedules=2, cache=False, quiet=True)
    return time.perf_counter() - t0, f.result.seconds


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ray-cpus", type=int, default=4)
    args = ap.parse_args(argv)
    candidates = [_Cand(c) for c in explore(saturn.trace(softmax, SPEC), max_candidates=3).candidates]
    paths = [("default", None), ("local", "local")]
    try:
        import ray
        from compiler.cluster import Ray
        t0 = time.perf_counter()
        ray.init(address="local", num_cpus=args.ray_cpus, include_dashboard=False, log_to_driver=False)
        print(f"ray.init (a local instance of {args.ray_cpus} CPUs): {time.perf_counter() - t0:.2f} s")
        paths.append(("ray", Ray(build_workers=args.ray_cpus)))
    except ImportError:
        print("ray is not installed: no Ray rows")
    summary = {}
    for name, cluster in paths:
        cold, secs = _one(cluster, candidates)
        print(f"{name:<8} cold {cold:6.2f} s  {secs}")
        warm = []
        for _ in range(args.repeats):
            w, secs = _one(cluster, candidates)
            warm.append(w)
            print(f"{name:<8} warm {w:6.2f} s  {secs}")
        summary[name] = (cold, statistics.median(warm))
    base_cold, base_warm = summary["default"]
    print("\npath      cold compile   warm compile (median)   added over default (cold / warm)")
    for name, (cold, warm) in summary.items():
        print(f"{name:<8} {cold:10.2f} s {warm:14.2f} s {cold - base_cold:+17.2f} s / {warm - base_warm:+.2f} s")


if __name__ == "__main__":
    main()
