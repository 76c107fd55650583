"""The CPU backend alone against PyTorch eager and torch.compile, in one process.

Saturn here is the traced program lowered and compiled by the llvmlite backend with no e-graph
search: once with the default schedule and once with the fastest of `LLVMBackend.schedules`
(what the search would pick among). Every output is checked against PyTorch eager before
anything is timed. Timing: warm-up, then rounds in which every contender runs a batch of calls,
in a rotating order; the reported time is the median per-call time over all rounds.

    python -m benchmarks.cpu_backend [--workloads softmax,matmul_f32] [--odd] [--rounds 9]
                                     [--no-compile] [--out benchmarks/results]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from compiler.cache import cpu_name

DEFAULT = ["elementwise", "softmax", "layernorm", "matmul_f32", "attention", "mlp"]


def _arrays(case, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    from ir.dtypes import as_dtype
    return [(rng.standard_normal(i.shape) * i.scale + i.shift).astype(as_dtype(i.dtype).np) for i in case.inputs]


def _time_rounds(contenders: dict, rounds: int, batch_seconds: float) -> dict[str, list[float]]:
    """Per-call seconds for each contender: `rounds` rounds, each timing one batch per contender."""
    batch = {}
    for name, fn in contenders.items():
        fn()
        t0 = time.perf_counter()
        fn()
        one = max(time.perf_counter() - t0, 1e-6)
        batch[name] = max(1, min(50, int(batch_seconds / one)))
    samples: dict[str, list[float]] = {n: [] for n in contenders}
    names = list(contenders)
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            fn, n = contenders[name], batch[name]
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            samples[name].append((time.perf_counter() - t0) / n)
    return samples


def run(workloads: list[str], odd: bool, rounds: int, use_compile: bool, threads: int) -> dict:
    import torch

    import compiler
    from backends.llvm import LLVMBackend
    from benchmarks.workloads import select_cases

    torch.set_num_threads(threads)
    backend = LLVMBackend()
    results = []
    cases = [c for c in select_cases("cpu", "full", workloads) if odd or c.variant == "full"]
    for case in cases:
        specs = [compiler.spec(i.shape, i.dtype, i.name) for i in case.inputs]
        graph = compiler.trace(case.saturn_fn, *specs)
        arrays = _arrays(case)
        tensors = [torch.from_numpy(a) for a in arrays]
        with torch.no_grad():
            ref = case.torch_fn(*tensors).float().numpy()
        row = {"workload": case.workload, "label": case.label}
        t0 = time.perf_counter()
        default = backend.build(graph)
        row["build_s"] = time.perf_counter() - t0
        row["kernels"] = len(default.launches)
        # pick the fastest schedule by a short timing of each
        best, best_t, tried = default, float("inf"), {}
        for s in backend.schedules(graph):
            exe = default if s.name == "default" else backend.build(graph, s)
            t = statistics.median(exe.benchmark(arrays, 1, 3))
            tried[s.name] = t
            if t < best_t:
                best, best_t = exe, t
        row["schedule_probe_ms"] = {k: v * 1e3 for k, v in tried.items()}
        row["best_schedule"] = best.schedule.name
        errors = {}
        for name, exe in (("saturn", default), ("saturn_best", best)):
            out = exe(*arrays)[0].astype(np.float32)
            errors[name] = float(np.max(np.abs(out - ref)) / max(np.max(np.abs(ref)), 1e-30))
        row["rel_error"] = errors
        contenders = {"saturn": lambda: default(*arrays), "saturn_best": lambda: best(*arrays)}

        def eager():
            with torch.no_grad():
                case.torch_fn(*tensors)
        contenders["eager"] = eager
        if use_compile:
            try:
                torch._dynamo.reset()
                compiled = torch.compile(case.torch_fn, dynamic=False)
                with torch.no_grad():
                    t0 = time.perf_counter()
                    got = compiled(*tensors).float().numpy()
                    row["torch_compile_build_s"] = time.perf_counter() - t0
                errors["torch.compile"] = float(np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-30))

                def tc():
                    with torch.no_grad():
                        compiled(*tensors)
                contenders["torch.compile"] = tc
            except Exception as e:  # noqa: BLE001 - report why, keep benchmarking
                row["torch_compile_error"] = f"{type(e).__name__}: {e}"[:200]
        samples = _time_rounds(contenders, rounds, 0.15)
        row["median_ms"] = {n: statistics.median(s) * 1e3 for n, s in samples.items()}
        row["iqr_ms"] = {n: (np.percentile(s, 75) - np.percentile(s, 25)) * 1e3 for n, s in samples.items()}
        results.append(row)
        m = row["median_ms"]
        print(f"{case.label:38s} saturn {m['saturn']:8.2f}  best {m['saturn_best']:8.2f} ({row['best_schedule']})"
              f"  eager {m['eager']:8.2f}" + (f"  compile {m['torch.compile']:8.2f}" if "torch.compile" in m else "")
              + f"  ms  err {errors['saturn']:.1e}", flush=True)
    import llvmlite
    import llvmlite.binding as llvm
    from backends.llvm import jit
    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "device": cpu_name(), "cores": os.cpu_count(), "threads": threads,
        "host_cpu": jit.host_description(), "load_average": os.getloadavg(),
        "versions": {"python": platform.python_version(), "numpy": np.__version__, "torch": torch.__version__,
                     "llvmlite": llvmlite.__version__, "llvm": ".".join(map(str, llvm.llvm_version_info))},
        "rounds": rounds, "results": results,
    }


def markdown(report: dict) -> str:
    lines = [f"# CPU backend vs PyTorch ({report['date'][:10]})", "",
             f"- device: {report['device']} ({report['host_cpu']}), {report['cores']} cores, "
             f"{report['threads']} threads for everyone",
             "- versions: " + ", ".join(f"{k} {v}" for k, v in report["versions"].items()),
             f"- load average at the end: {', '.join(f'{x:.1f}' for x in report['load_average'])} "
             "(the machine is shared; numbers move between runs, ratios less so)",
             f"- method: `python -m benchmarks.cpu_backend`; Saturn = traced program, llvmlite backend, no "
             f"e-graph search; default schedule and the fastest of `LLVMBackend.schedules()`; "
             f"{report['rounds']} rotating rounds of batched calls, median per call; outputs checked "
             "against eager first (max abs error / max |ref|).", "",
             "| workload | Saturn (default) ms | Saturn (best schedule) ms | eager ms | torch.compile ms "
             "| vs eager | vs compile | rel. error | kernels |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in report["results"]:
        m = r["median_ms"]
        s = min(m["saturn"], m["saturn_best"])
        tc = m.get("torch.compile")
        lines.append(f"| {r['label']} | {m['saturn']:.2f} | {m['saturn_best']:.2f} ({r['best_schedule']}) | "
                     f"{m['eager']:.2f} | {tc:.2f} |" if tc else f"| {r['label']} | {m['saturn']:.2f} | "
                     f"{m['saturn_best']:.2f} ({r['best_schedule']}) | {m['eager']:.2f} | n/a |")
        lines[-1] += (f" {m['eager'] / s:.2f}x | " + (f"{tc / s:.2f}x" if tc else "n/a") +
                      f" | {r['rel_error']['saturn']:.1e} | {r['kernels']} |")
    lines += ["", "Ratios are speedups (> 1: Saturn faster), using the better of Saturn's two schedules."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default=",".join(DEFAULT))
    p.add_argument("--odd", action="store_true", help="also run the odd sizes")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--out", default=None, help="folder for cpu-<date>.md and .json")
    a = p.parse_args(argv)
    report = run(a.workloads.split(","), a.odd, a.rounds, not a.no_compile, a.threads)
    md = markdown(report)
    print(md)
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        day = report["date"][:10]
        (out / f"cpu-{day}.md").write_text(md)
        (out / f"cpu-{day}.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
