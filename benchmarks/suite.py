"""Run the suite: per case, compile Saturn, check every output against a reference, then time
Saturn and the PyTorch contenders in alternating rounds. Produces plain dicts (the JSON)."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from benchmarks.ceilings import floor_seconds
from benchmarks.contenders import SaturnContender, SaturnDeviceContender, TorchContender, TorchEnv
from benchmarks.timing import Stats, alternate
from benchmarks.workloads import Case

# Saturn passes if its error (max |out - ref| / max |ref|) is within the dtype's tolerance,
# or within twice PyTorch eager's own error at the same precision.
TOLERANCE = {"f32": 1e-3, "f16": 1e-2, "bf16": 4e-2}
# Without PyTorch the reference interpreter checks Saturn, if no intermediate is larger than this.
INTERPRETER_LIMIT = 1 << 26  # elements of the largest intermediate (~0.5 GB as the f64 it sums in)


@dataclass
class Settings:
    target: str
    family: str                    # "cpu" or "cuda" (which sizes and which torch device)
    suite: str                     # "full", "quick" or "tiny"
    rounds: int
    batch_s: float
    peers: list[str]               # among "eager", "compile", "compile-graphs", "sdpa", "saturn-graphs"
    saturn_options: dict = field(default_factory=dict)
    time_limit_s: float | None = None
    seed: int = 0


def make_inputs(case: Case, seed: int) -> list[np.ndarray]:
    """Random inputs (never zeros): normal * scale + shift, rounded to each input's dtype."""
    from ir.dtypes import as_dtype
    from benchmarks.workloads import structured_values
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(i.shape, dtype=np.float32) * np.float32(i.scale) + np.float32(i.shift)
             if i.fill == "normal" else structured_values(i)).astype(as_dtype(i.dtype).np) for i in case.inputs]


def rel_error(out: np.ndarray, ref: np.ndarray) -> float:
    """max |out - ref| / max |ref| (inf for NaN, inf or a shape mismatch)."""
    if tuple(out.shape) != tuple(ref.shape):
        return math.inf
    ref32 = ref.astype(np.float32, copy=False)
    diff = np.abs(out.astype(np.float32) - ref32)
    worst = float(np.max(diff)) if diff.size else 0.0
    if not math.isfinite(worst):
        return math.inf
    return worst / max(float(np.max(np.abs(ref32))) if ref32.size else 0.0, 1e-30)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def _rates(case: Case, seconds: float, ceilings: dict) -> dict:
    floor = floor_seconds(case.bytes, case.flops, case.dtype, ceilings)
    return {"GBps": case.bytes / seconds / 1e9,
            "GFLOPs": case.flops / seconds / 1e9 if case.flops else None,
            "pct_of_floor": 100.0 * floor / seconds if floor else None}


def run_case(case: Case, index: int, s: Settings, env: TorchEnv | None, ceilings: dict,
             log: Callable[[str], None]) -> dict:
    """Check and time one case; returns its JSON record."""
    arrays = make_inputs(case, s.seed + index)
    rec: dict = {
        "workload": case.workload, "variant": case.variant, "label": case.label, "dtype": case.dtype,
        "inputs": [{"name": i.name, "shape": list(i.shape), "dtype": i.dtype} for i in case.inputs],
        "output": {"shape": list(case.out_shape), "dtype": case.out_dtype},
        "bytes": case.bytes, "flops": case.flops,
        "floor_s": floor_seconds(case.bytes, case.flops, case.dtype, ceilings),
        "check": {"status": "unchecked", "reference": None, "max_err": None, "tol": TOLERANCE[case.out_dtype]},
        "saturn": {}, "peers": {},
    }

    # Saturn: compile (timed separately) and run once
    saturn = SaturnContender(case, s.target, arrays, s.saturn_options)
    out = None
    try:
        rec["saturn"]["compile_s"] = saturn.prepare()
        rec["saturn"]["timing"] = saturn.how
        rec["saturn"].update(saturn.compile_info())
        out = saturn.output()
    except Exception as e:  # noqa: BLE001 - one failing case must not stop the suite
        rec["saturn"]["error"] = _first_line(e)
        rec["check"]["status"] = "error"
        log(f"  saturn failed: {rec['saturn']['error']}")

    # PyTorch contenders and the reference output
    contenders: list = []
    tensors = sets = None
    if env is not None:
        sets = env.input_sets(arrays)
        tensors = sets[0]
        rec["torch_input_copies"] = len(sets)
        fns = {"eager": (case.torch_fn, False), "compile": (case.torch_fn, True)}
        if case.many_kernels and case.variant != "odd" and env.device == "cuda":   # (not the odd sizes too: a compile each)
            fns["compile-graphs"] = (case.torch_fn, "reduce-overhead")
        fns.update({k: (f, False) for k, f in case.extra_peers.items()})
        for name in s.peers:
            if name not in fns:
                continue
            fn, compile_it = fns[name]
            c = TorchContender(name, fn, env, sets, compile_it)
            try:
                secs = c.prepare()
                rec["peers"][name] = {"compile_s": secs} if compile_it else {}
                contenders.append(c)
            except Exception as e:  # noqa: BLE001 - e.g. torch.compile without a working toolchain
                rec["peers"][name] = {"status": "n/a", "reason": _first_line(e)}
                log(f"  {name}: n/a ({rec['peers'][name]['reason']})")
        if "saturn-graphs" in s.peers and "compile-graphs" in fns and out is not None:
            # Saturn as a model calls it on device tensors, beside torch.compile's CUDA graphs
            c = SaturnDeviceContender(saturn, env, sets)
            try:
                c.prepare()
                rec["peers"][c.name] = {}
                contenders.append(c)
            except Exception as e:  # noqa: BLE001 - a device-tensor call that fails is a result too
                rec["peers"][c.name] = {"status": "n/a", "reason": _first_line(e)}
                log(f"  {c.name}: n/a ({rec['peers'][c.name]['reason']})")
        try:
            ref, how = _reference(case, env, tensors, contenders)
        except Exception as e:  # noqa: BLE001 - e.g. out of memory for the f32 reference
            ref, how = None, f"failed: {_first_line(e)}"
            log(f"  reference failed: {how}")
    else:
        ref, how = _interpreter_reference(saturn, arrays) if out is not None else (None, None)

    # Check every output against the reference before anything is timed
    if ref is not None:
        rec["check"]["reference"] = how
        for c in list(contenders):
            try:
                rec["peers"][c.name]["max_err"] = rel_error(c.output(), ref)
            except Exception as e:  # noqa: BLE001
                rec["peers"][c.name] = {"status": "n/a", "reason": _first_line(e)}
                contenders.remove(c)
        if out is not None:
            err = rel_error(out, ref)
            eager_err = rec["peers"].get("eager", {}).get("max_err")
            ok = err <= TOLERANCE[case.out_dtype] or (eager_err is not None and err <= 2 * eager_err)
            rec["check"].update(status="ok" if ok else "FAIL", max_err=err, eager_err=eager_err)
    elif out is not None:
        rec["check"]["reference"] = how or "none: no PyTorch, and the program is too large for the interpreter"

    timed = list(contenders)
    if rec["check"]["status"] in ("ok", "unchecked"):
        timed.insert(0, saturn)
    else:   # Saturn's result on device tensors is timed only where its result checks
        timed = [c for c in timed if not isinstance(c, SaturnDeviceContender)]
    samples, errors = alternate(timed, rounds=s.rounds, batch_s=s.batch_s)
    for name, msg in errors.items():
        target = rec["saturn"] if name == "saturn" else rec["peers"][name]
        target["error"] = msg
    for name, xs in samples.items():
        stats = Stats.of(xs)
        target = rec["saturn"] if name == "saturn" else rec["peers"][name]
        target.update(stats.to_json())
        target.update(_rates(case, stats.median, ceilings))
    eager = rec["peers"].get("eager", {}).get("median_s")
    rec["speedup_vs_eager"] = {}
    if eager:
        for name, d in [("saturn", rec["saturn"])] + list(rec["peers"].items()):
            if d.get("median_s"):
                rec["speedup_vs_eager"][name] = eager / d["median_s"]
    del tensors, contenders, sets
    if env is not None:
        env.free()
    return rec


def _reference(case: Case, env: TorchEnv, tensors, contenders) -> tuple[np.ndarray | None, str | None]:
    """PyTorch's result in f32 (inputs upcast), the truth every contender is compared with."""
    torch = env.torch
    eager = next((c for c in contenders if c.name == "eager"), None)
    if case.dtype == "f32" and eager is not None:
        return eager.output(), f"PyTorch eager f32 on {env.device}"
    with torch.no_grad():
        out = case.torch_fn(*[t.float() for t in tensors])
    return env.numpy(out), f"PyTorch f32 on {env.device} (inputs upcast from {case.dtype})"


def _interpreter_reference(saturn: SaturnContender, arrays) -> tuple[np.ndarray | None, str | None]:
    from ir.interpreter import evaluate
    graph = saturn.fn.graph
    if max((n.numel for n in graph.nodes), default=0) > INTERPRETER_LIMIT:
        return None, None
    return np.asarray(evaluate(graph, arrays)[0]), "Saturn's reference interpreter (PyTorch not installed)"


def run_suite(cases: list[Case], s: Settings, env: TorchEnv | None, ceilings: dict,
              on_result: Callable[[dict], None], log: Callable[[str], None]) -> list[str]:
    """Run every case, calling `on_result` after each. Returns the labels skipped by the time limit."""
    start = time.perf_counter()
    skipped = []
    for i, case in enumerate(cases):
        if s.time_limit_s is not None and time.perf_counter() - start > s.time_limit_s:
            skipped.append(case.label)
            continue
        log(f"[{i + 1}/{len(cases)}] {case.label}")
        on_result(run_case(case, i, s, env, ceilings, log))
    return skipped
