"""`saturn bench --module FILE.py`: one PyTorch module file, Saturn against eager and torch.compile.

The file defines `Model(nn.Module)`, `get_inputs()` and `get_init_inputs()` (the convention of
public kernel-benchmark suites): the model is built as `Model(*get_init_inputs())` in eval mode
and called on `get_inputs()` under `torch.no_grad()`. Saturn runs it through
`torch.compile(model, backend="saturn")`; every contender's output is checked against eager's
before anything is timed, with the same timing, check and report code as the workload suite.
"""
from __future__ import annotations

import datetime
import importlib.util
import os
import sys
import time
from pathlib import Path

from benchmarks import report
from benchmarks.contenders import TorchContender, TorchEnv, import_torch
from benchmarks.suite import TOLERANCE, rel_error
from benchmarks.timing import Stats, alternate

PEERS = ["eager", "compile"]   # SDPA is a formulation of one workload, not of an arbitrary module
DTYPE_NAMES = {"torch.float32": "f32", "torch.float16": "f16", "torch.bfloat16": "bf16"}


class ModuleFileError(Exception):
    pass


def load(path: str):
    """The module file as a Python module, checked for the three names it must define."""
    p = Path(path)
    if not p.is_file():
        raise ModuleFileError(f"{path}: no such file")
    spec = importlib.util.spec_from_file_location(f"saturn_bench_module_{p.stem}", p)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except Exception as e:  # noqa: BLE001 - the user's file: report what went wrong in it
        raise ModuleFileError(f"{path} failed to import: {type(e).__name__}: {e}") from None
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(mod, n)]
    if missing:
        raise ModuleFileError(f"{path} does not define {', '.join(missing)} "
                              "(it needs Model(nn.Module), get_inputs() and get_init_inputs())")
    return mod


def _outputs(torch, fn, inputs) -> list:
    """The tensors of one call's result (a tensor, or any nesting of tuples, lists and dicts)."""
    with torch.no_grad():
        out = fn(*inputs)
    leaves = torch.utils._pytree.tree_leaves(out)
    return [t.detach().float().cpu().numpy() for t in leaves if isinstance(t, torch.Tensor)]


def _max_error(got: list, want: list) -> float:
    if len(got) != len(want):
        return float("inf")
    return max((rel_error(g, w) for g, w in zip(got, want)), default=0.0)


def run(args, options: dict, notes: list[str]) -> int:
    """Check and time the module file `args.module`; print the table (and write --json/--md)."""
    import json
    torch, why = import_torch()
    if torch is None:
        print(f"saturn bench --module: {why}", file=sys.stderr)
        return 2
    if args.target != "cpu":
        print("saturn bench --module: only --target cpu so far (the backend takes CPU tensors)", file=sys.stderr)
        return 2
    peers = PEERS if args.peers is None else [p for p in args.peers.split(",") if p]
    bad = sorted(set(peers) - set(PEERS))
    if bad:
        print(f"saturn bench --module: unknown peer(s) {', '.join(bad)}; choose from {', '.join(PEERS)}", file=sys.stderr)
        return 2
    try:
        mod = load(args.module)
        torch.manual_seed(0)
        model = mod.Model(*mod.get_init_inputs()).eval()
        inputs = list(mod.get_inputs())
    except ModuleFileError as e:
        print(f"saturn bench --module: {e}", file=sys.stderr)
        return 2
    env = TorchEnv(torch, "cpu", args.threads)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731 - progress goes to stderr
    label = f"{Path(args.module).name}: {type(model).__name__}"
    want = _outputs(torch, model, inputs)
    dtype = DTYPE_NAMES.get(str(next((t.dtype for t in torch.utils._pytree.tree_leaves(inputs)
                                      if isinstance(t, torch.Tensor) and t.is_floating_point()), torch.float32)), "f32")
    rec = {"workload": "module", "variant": "module", "label": label, "dtype": dtype, "module": args.module,
           "inputs": [{"shape": list(t.shape), "dtype": str(t.dtype)} for t in inputs if isinstance(t, torch.Tensor)],
           "check": {"status": "unchecked", "reference": "PyTorch eager", "max_err": None, "tol": TOLERANCE[dtype]},
           "saturn": {}, "peers": {}}

    # torch.compile first: its preparation resets Dynamo, which would drop Saturn's compiled graphs
    contenders = []
    for name in peers:
        c = TorchContender(name, model, env, [inputs], compile_it=(name == "compile"))
        log(f"preparing {name}...")
        try:
            rec["peers"][name] = {"compile_s": c.prepare()} if name == "compile" else {}
            rec["peers"][name]["max_err"] = _max_error(_outputs(torch, c.fn, inputs), want)
            contenders.append(c)
        except Exception as e:  # noqa: BLE001 - e.g. Inductor without a working C++ toolchain
            rec["peers"][name] = {"status": "n/a", "reason": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
            log(f"  {name}: n/a ({rec['peers'][name]['reason']})")

    log("compiling with Saturn (torch.compile backend='saturn')...")
    from compiler.torch_backend import explain
    saturn = TorchContender("saturn", torch.compile(model, backend="saturn", options=options), env, [inputs])
    t0 = time.perf_counter()
    try:
        saturn.prepare()
        rec["saturn"]["compile_s"] = time.perf_counter() - t0
        err = _max_error(_outputs(torch, saturn.fn, inputs), want)
        ok = err <= TOLERANCE[dtype]
        rec["check"].update(status="ok" if ok else "FAIL", max_err=err)
    except Exception as e:  # noqa: BLE001
        rec["saturn"]["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        rec["check"]["status"] = "error"
    timed = ([saturn] if rec["check"]["status"] == "ok" else []) + contenders
    samples, errors = alternate(timed, rounds=args.rounds or 7, batch_s=(args.batch_ms or 200) / 1e3)
    for name, msg in errors.items():
        (rec["saturn"] if name == "saturn" else rec["peers"][name])["error"] = msg
    for name, xs in samples.items():
        (rec["saturn"] if name == "saturn" else rec["peers"][name]).update(Stats.of(xs).to_json())
    explained = str(explain(saturn.fn))   # after timing: its per-call times include the timed runs
    eager = rec["peers"].get("eager", {}).get("median_s")
    rec["speedup_vs_eager"] = {n: eager / d["median_s"] for n, d in [("saturn", rec["saturn"])] + list(rec["peers"].items())
                               if eager and d.get("median_s")}

    from benchmarks.cli import _command_line, device_info, versions
    notes.append(f"PyTorch runs with torch.set_num_threads({args.threads}) on {os.cpu_count()} cores.")
    data = {"schema": "saturn-bench/1", "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": _command_line(), "target": args.target, "suite": "module",
            "device": device_info("cpu", env, args.threads), "versions": versions(),
            "settings": {"rounds": args.rounds or 7, "batch_s": (args.batch_ms or 200) / 1e3, "peers": peers,
                         "saturn_options": options},
            "ceilings": {}, "notes": notes, "results": [rec], "skipped": [], "saturn_explain": explained}
    print(report.table(data["results"]))
    print()
    for line in report.notes(data):
        print(f"- {line}")
    print()
    print(explained)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1, default=float)
    if args.md:
        with open(args.md, "w") as f:
            f.write(report.markdown(data, args.json) + "\n```\n" + explained + "\n```\n")
    return 0 if rec["check"]["status"] == "ok" else 1
