"""A/B of two checkouts on the CPU target, fair on a shared machine: each checkout compiles the
same workloads in its own process, then the two processes take turns timing them (round by
round, alternating which goes first), so load that comes and goes falls on both.

    python3 benchmarks/ab_cpu.py OLD_TREE NEW_TREE [--workloads mlp block ...] [--rounds 7]
        [--budget 10] [--json OUT.json]

Prints, per workload, the median over rounds of each round's median time, old and new, and
their ratio. Compiles use each tree's own cache directory (cold). Outputs are checked against
each other before timing (they must agree to the dtype's tolerance).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

WORKER = r"""
import json, statistics, sys, time, numpy as np
sys.path.insert(0, sys.argv[1])
import compiler as saturn
from benchmarks.workloads import WORKLOADS, structured_values
from ir.dtypes import as_dtype
cases, fns, args = {}, {}, {}
def inputs(case, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in case.inputs:
        if i.fill != "normal":
            v = structured_values(i)
        else:
            v = rng.standard_normal(i.shape) * i.scale + i.shift
        out.append(np.asarray(v).astype(as_dtype(i.dtype).np))
    return out
for line in sys.stdin:
    cmd = json.loads(line)
    if cmd["op"] == "compile":
        w = next(w for w in WORKLOADS if w.name == cmd["workload"])
        case = w.case("cpu", cmd["suite"])
        f = saturn.compile(case.saturn_fn, *[saturn.spec(i.shape, i.dtype) for i in case.inputs],
                           target="cpu", budget=cmd["budget"], quiet=True)
        key = cmd["workload"] + "/" + cmd["suite"]
        cases[key], fns[key], args[key] = case, f, inputs(case)
        out = np.asarray(f(*args[key]), dtype=np.float64)
        print(json.dumps({"label": case.label, "chosen": f"{f.result.winner.description} [{f.result.winner.schedule_text}]" if f.result else "",
                          "out": out.ravel()[:4096].tolist()}), flush=True)
    elif cmd["op"] == "time":
        f, a = fns[cmd["key"]], args[cmd["key"]]
        f(*a)
        t0 = time.perf_counter(); n = 0
        times = []
        while time.perf_counter() - t0 < cmd["seconds"] or n < 3:
            s = time.perf_counter(); f(*a); times.append(time.perf_counter() - s); n += 1
        print(json.dumps({"median": statistics.median(times), "runs": n}), flush=True)
"""


def start(tree: str, cache: str) -> subprocess.Popen:
    env = dict(os.environ, SATURN_CACHE_DIR=cache, PYTHONPATH=tree)
    return subprocess.Popen([sys.executable, "-c", WORKER, tree], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env, cwd=tree)


def ask(p: subprocess.Popen, cmd: dict) -> dict:
    p.stdin.write(json.dumps(cmd) + "\n")
    p.stdin.flush()
    line = p.stdout.readline()
    if not line:
        raise RuntimeError("worker died")
    return json.loads(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--workloads", nargs="*", default=["matmul_f32", "mlp", "block", "decoder", "attention"])
    ap.add_argument("--suite", default="full")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=0.5, help="timing per turn")
    ap.add_argument("--budget", type=float, default=10.0)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="saturn-ab-")
    procs = {"old": start(a.old, os.path.join(tmp, "old")), "new": start(a.new, os.path.join(tmp, "new"))}
    rows = []
    for w in a.workloads:
        key = f"{w}/{a.suite}"
        got = {k: ask(p, {"op": "compile", "workload": w, "suite": a.suite, "budget": a.budget})
               for k, p in procs.items()}
        import numpy as np
        o, n = np.array(got["old"]["out"]), np.array(got["new"]["out"])
        agree = bool(np.allclose(o, n, rtol=2e-2, atol=2e-2 * max(1.0, float(np.abs(o).max(initial=0)))))
        times = {"old": [], "new": []}
        for r in range(a.rounds):
            order = ("old", "new") if r % 2 == 0 else ("new", "old")
            for k in order:
                times[k].append(ask(procs[k], {"op": "time", "key": key, "seconds": a.seconds})["median"])
        med = {k: statistics.median(v) for k, v in times.items()}
        row = {"workload": got["old"]["label"], "old_ms": med["old"] * 1e3, "new_ms": med["new"] * 1e3,
               "new_over_old": med["new"] / med["old"], "outputs_agree": agree,
               "old_chosen": got["old"]["chosen"], "new_chosen": got["new"]["chosen"],
               "rounds_ms": {k: [t * 1e3 for t in v] for k, v in times.items()}}
        rows.append(row)
        print(f"{row['workload']:<50} old {row['old_ms']:8.3f} ms  new {row['new_ms']:8.3f} ms  "
              f"new/old {row['new_over_old']:.2f}  agree {agree}", flush=True)
    for p in procs.values():
        p.stdin.close()
        p.wait(timeout=30)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"old": a.old, "new": a.new, "suite": a.suite, "budget": a.budget, "rows": rows,
                       "load_average": os.getloadavg()}, fh, indent=1)


if __name__ == "__main__":
    main()
