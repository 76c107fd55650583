"""Hugging Face decoders on the GPU, end to end on device tensors (one process):

    python3 benchmarks/hf_models_gpu.py OUT_DIR [--quick] [--budget S] [--time-limit S]

Models from `transformers` configs with random weights (no download), f16 on CUDA: GPT-2 small
(124M) and a ~1.1B-parameter Llama-style decoder (hidden 2048, 22 layers, 32 query / 4 key-value
heads, MLP 5632). For each (batch, sequence): eager, `torch.compile()` (Inductor) and
`torch.compile(backend="saturn")`, each compiled for that static shape; every result's logits
are checked against eager first (relative L2 error; a result off by more than --tol is not
timed), then each is timed with CUDA events (median of --repeat calls after --warmup). Saturn's
search is bounded by --budget seconds per region (and --max-schedules). Also the per-call
overhead of a one-kernel Saturn function on device tensors, with CUDA graphs on and off.

Writes OUT_DIR/hf_models_gpu.json and OUT_DIR/hf_models_gpu.md (and prints the table). --quick
runs one small shape per model, with --time-limit 420 unless given; --time-limit skips the
shapes not started after that many seconds (their rows say so).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FULL_SHAPES = {"gpt2-124M": [(1, 512), (8, 512), (1, 2048), (8, 2048)],
               "llama-1.1B": [(1, 512), (8, 512), (1, 2048), (4, 2048)]}
QUICK_SHAPES = {"gpt2-124M": [(1, 512)], "llama-1.1B": [(1, 512)]}


def log(*a):
    print(*a, flush=True)


def build_model(name: str, max_seq: int):
    import torch
    import transformers
    torch.manual_seed(0)
    if name == "gpt2-124M":
        cfg = transformers.GPT2Config(n_positions=max(1024, max_seq))   # GPT-2 small otherwise as published
        model = transformers.GPT2LMHeadModel(cfg)
    else:
        cfg = transformers.LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                                       num_attention_heads=32, num_key_value_heads=4, vocab_size=32000,
                                       max_position_embeddings=max(2048, max_seq))
        model = transformers.LlamaForCausalLM(cfg)
    model = model.eval().half().cuda()
    params = sum(p.numel() for p in model.parameters())
    return model, cfg.vocab_size, params


def rel_err(got, want) -> float:
    got, want = got.float(), want.float()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def time_calls(fn, warmup: int, repeat: int) -> list[float]:
    """Seconds per call: CUDA events around each call on torch's current stream."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3)
    return times


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else float("nan")


def run_shape(model, vocab: int, batch: int, seq: int, args) -> dict:
    import torch
    from compiler.torch_backend import explain, register
    register()   # the H200 runs a checkout that is not pip-installed
    row = {"batch": batch, "seq": seq}
    ids = torch.randint(0, vocab, (batch, seq), device="cuda")
    with torch.no_grad():
        want = model(ids).logits
        row["eager_ms"] = median(time_calls(lambda: model(ids), args.warmup, args.repeat)) * 1e3
        contenders = {
            "inductor": lambda: torch.compile(model, dynamic=False),
            "saturn": lambda: torch.compile(model, backend="saturn", dynamic=False,
                                            options={"budget": args.budget, "max_schedules": args.max_schedules,
                                                     "quiet": True}),
        }
        for name, make in contenders.items():
            torch._dynamo.reset()
            t0 = time.perf_counter()
            try:
                compiled = make()
                got = compiled(ids).logits
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001 - a contender that fails is reported, the run goes on
                row[f"{name}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                log(f"    {name}: failed: {row[f'{name}_error']}")
                continue
            row[f"{name}_compile_s"] = time.perf_counter() - t0
            err = rel_err(got, want)
            row[f"{name}_rel_err"] = err
            row[f"{name}_check"] = "ok" if err <= args.tol else "MISMATCH"
            if name == "saturn":
                report = explain(compiled)
                row["saturn_regions"] = len(report.regions)
                row["saturn_regions_in_pytorch"] = sum(r.status != "saturn" for r in report.regions)
                row["saturn_fallback_ops"] = sorted({op.removeprefix("aten.") for op, _ in report.fallbacks})
                row["saturn_report"] = str(report)
            if err > args.tol:
                log(f"    {name}: relative error {err:.3g} > {args.tol}: not timed")
                continue
            row[f"{name}_ms"] = median(time_calls(lambda: compiled(ids), args.warmup, args.repeat)) * 1e3
            del compiled
        torch._dynamo.reset()
    return row


def per_call_overhead(args) -> dict:
    """A one-kernel Saturn function (x * 2 + 1 over 1024 f32) on a torch CUDA tensor: host time
    per call over many calls (the kernel itself takes a few microseconds)."""
    import torch
    import compiler
    f = compiler.compile(lambda x: x * 2.0 + 1.0, compiler.spec((1024,), "f32"), target="cuda",
                         budget=min(args.budget, 3.0), quiet=True, max_schedules=1)
    x = torch.randn(1024, device="cuda")
    assert torch.equal(f(x), x * 2.0 + 1.0)
    out = {}
    for graphs in (True, False):
        f.cuda_graphs = graphs
        for _ in range(100):
            f(x)
        torch.cuda.synchronize()
        n = 5000
        t0 = time.perf_counter()
        for _ in range(n):
            f(x)
        torch.cuda.synchronize()
        out["graphs_us" if graphs else "plain_us"] = (time.perf_counter() - t0) / n * 1e6
    t0 = time.perf_counter()
    for _ in range(5000):
        x * 2.0 + 1.0
    torch.cuda.synchronize()
    out["eager_us"] = (time.perf_counter() - t0) / 5000 * 1e6
    out["explain"] = f.explain().split("generated code:")[0].strip().splitlines()[-1]
    return out


def _fmt(v, digits=3):
    return "—" if v is None else (f"{v:.{digits}g}" if isinstance(v, float) else str(v))


def markdown(result: dict) -> str:
    lines = [f"# Hugging Face decoders on {result['device']} (f16, device tensors)", "",
             f"Saturn {result['saturn_commit']}, torch {result['torch']}, transformers {result['transformers']}; "
             f"Saturn budget {result['budget']} s per region, max_schedules {result['max_schedules']}; "
             f"median of {result['repeat']} calls after {result['warmup']} (CUDA events).", "",
             "| model | batch | seq | check (Saturn / Inductor) | eager ms | Inductor ms | Saturn ms | "
             "Saturn × eager | Saturn ÷ Inductor time | Saturn compile s | Inductor compile s | regions | in PyTorch |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        if "skipped" in r:
            lines.append(f"| {r['model']} | {r['batch']} | {r['seq']} | skipped: {r['skipped']} |" + " |" * 9)
            continue
        s, e, i = r.get("saturn_ms"), r.get("eager_ms"), r.get("inductor_ms")
        check = f"{r.get('saturn_check', r.get('saturn_error', '?'))} / {r.get('inductor_check', r.get('inductor_error', '?'))}"
        lines.append(f"| {r['model']} | {r['batch']} | {r['seq']} | {check} | {_fmt(e)} | {_fmt(i)} | {_fmt(s)} | "
                     f"{_fmt(e / s if s and e else None)}× | {_fmt(s / i if s and i else None)} | "
                     f"{_fmt(r.get('saturn_compile_s'))} | {_fmt(r.get('inductor_compile_s'))} | "
                     f"{r.get('saturn_regions', '—')} | {', '.join(r.get('saturn_fallback_ops', [])) or '—'} |")
    o = result.get("overhead", {})
    if o:
        lines += ["", f"Per-call overhead, one Saturn kernel on a 1024-element CUDA tensor (host time per call): "
                      f"{_fmt(o.get('graphs_us'))} µs with CUDA graphs, {_fmt(o.get('plain_us'))} µs plain launches "
                      f"(PyTorch eager `x * 2 + 1`: {_fmt(o.get('eager_us'))} µs)."]
    return "\n".join(lines) + "\n"


def _commit() -> str:
    import subprocess
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip() or "?"
    except OSError:
        return "?"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="directory for hf_models_gpu.json and .md")
    p.add_argument("--quick", action="store_true", help="one small shape per model")
    p.add_argument("--models", nargs="+", choices=sorted(FULL_SHAPES), default=sorted(FULL_SHAPES))
    p.add_argument("--budget", type=float, default=2.0, help="Saturn's search seconds per region (default 2)")
    p.add_argument("--max-schedules", type=int, default=2)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--tol", type=float, default=2e-2, help="largest relative L2 error of the logits vs eager")
    p.add_argument("--time-limit", type=float, default=None, help="skip shapes started after this many seconds")
    args = p.parse_args(argv)
    if args.quick and args.time_limit is None:
        args.time_limit = 420.0
    import torch
    import transformers
    if not torch.cuda.is_available():
        log("no CUDA device")
        return 2
    os.makedirs(args.out, exist_ok=True)
    t_start = time.perf_counter()
    shapes = QUICK_SHAPES if args.quick else FULL_SHAPES
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "transformers": transformers.__version__,
              "python": platform.python_version(), "saturn_commit": _commit(), "budget": args.budget,
              "max_schedules": args.max_schedules, "warmup": args.warmup, "repeat": args.repeat, "tol": args.tol,
              "quick": args.quick, "rows": []}
    log("per-call overhead of a one-kernel function ...")
    try:
        result["overhead"] = per_call_overhead(args)
        log(f"  {result['overhead']}")
    except Exception as e:  # noqa: BLE001
        result["overhead"] = {"error": f"{type(e).__name__}: {e}"}
        log(f"  failed: {result['overhead']['error']}")
    for name in args.models:
        model, vocab, params = build_model(name, max(s for _, s in shapes[name]))
        log(f"{name}: {params / 1e6:.0f}M parameters")
        for batch, seq in shapes[name]:
            base = {"model": name, "params": params, "batch": batch, "seq": seq}
            if args.time_limit and time.perf_counter() - t_start > args.time_limit:
                result["rows"].append(dict(base, skipped=f"time limit {args.time_limit:g} s"))
                continue
            log(f"  batch {batch} seq {seq} ...")
            t0 = time.perf_counter()
            try:
                row = dict(base, **run_shape(model, vocab, batch, seq, args))
            except Exception as e:  # noqa: BLE001 - e.g. out of memory at the largest shape
                row = dict(base, error=f"{type(e).__name__}: {e}")
            row["wall_s"] = time.perf_counter() - t0
            result["rows"].append(row)
            log("    " + ", ".join(f"{k}={_fmt(v)}" for k, v in row.items() if k.endswith(("_ms", "_check", "_s"))))
            with open(os.path.join(args.out, "hf_models_gpu.json"), "w") as f:   # partial results survive a crash
                json.dump(result, f, indent=1)
        del model
        torch.cuda.empty_cache()
    result["total_s"] = time.perf_counter() - t_start
    with open(os.path.join(args.out, "hf_models_gpu.json"), "w") as f:
        json.dump(result, f, indent=1)
    md = markdown(result)
    with open(os.path.join(args.out, "hf_models_gpu.md"), "w") as f:
        f.write(md)
    log(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
