"""On-device suite for the CUDA target: ceilings, then every anchor workload built by Saturn's
CUDA backend (default schedule and its variants), checked against PyTorch in float64 and timed
next to PyTorch eager and torch.compile in the same process.

    source .gpu/on-device.sh && python3 benchmarks/gpu_suite.py --out $OUT

Writes $OUT/gpu_suite.json and $OUT/gpu_suite.md and prints the table last. Times are medians
of CUDA-event-timed runs on device-resident inputs (Saturn rotates input copies when they fit
in L2 twice over); inputs are random normals, never zeros.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TOL = {"f32": 1e-4, "f16": 1e-2, "bf16": 2e-2}
TORCH_COMPILE_VARIANTS = {"full"}     # --torch-compile: which size variants also time torch.compile
KERNEL_IR_TIMING = False              # --kernel-ir: also time the kernel-IR schedule


def log(*a):
    print(*a, flush=True)


def median_ms(times_s):
    return statistics.median(times_s) * 1e3


def time_torch(torch, fn, args, warmup=10, repeat=50):
    for _ in range(warmup):
        fn(*args)
    torch.cuda.synchronize()
    out = []
    for _ in range(repeat):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn(*args)
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e) / 1e3)
    return out


def ceilings(torch):
    res = {}
    n = 1 << 29                                   # 2 GiB of f32
    a = torch.randn(n, device="cuda")
    b = torch.empty_like(a)
    t = median_ms(time_torch(torch, lambda: b.copy_(a), (), 5, 20))
    res["copy_TBps"] = 2 * a.numel() * 4 / (t / 1e3) / 1e12
    del a, b
    for dt, name in ((torch.float16, "f16"), (torch.float32, "f32")):
        x = torch.randn(4096, 4096, device="cuda", dtype=dt)
        y = torch.randn(4096, 4096, device="cuda", dtype=dt)
        torch.backends.cuda.matmul.allow_tf32 = False
        t = median_ms(time_torch(torch, torch.matmul, (x, y), 10, 50))
        res[f"cublas_{name}_4096_ms"] = t
        res[f"cublas_{name}_4096_TFLOPs"] = 2 * 4096 ** 3 / (t / 1e3) / 1e12
    return res


def versions(torch):
    import pycuda.driver as drv
    import pycuda
    from backends.cuda import toolchain
    nvcc = toolchain.find_nvcc()
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": torch.cuda.get_device_name(0),
            "compute_capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
            "driver": subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                     capture_output=True, text=True).stdout.strip(),
            "cuda_driver_api": drv.get_driver_version(), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "nvcc": toolchain.nvcc_version(nvcc) if nvcc else None, "pycuda": pycuda.VERSION_TEXT,
            "python": platform.python_version()}


def make_inputs(torch, case, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    tdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
    ts = []
    from benchmarks.workloads import structured_values
    for inp in case.inputs:
        if inp.fill != "normal":       # a causal mask, RoPE tables
            t = torch.from_numpy(structured_values(inp)).cuda()
        else:
            t = torch.randn(inp.shape, device="cuda", generator=g, dtype=torch.float32) * inp.scale + inp.shift
        ts.append(t.to(tdt[inp.dtype]))
    return ts


def to_numpy(t):
    import ml_dtypes
    import torch
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).cpu().numpy().view(ml_dtypes.bfloat16)
    return t.cpu().numpy()


def rel_err(out_np, ref):
    import torch
    o = torch.from_numpy(np.asarray(out_np, dtype=np.float64)).cuda()
    r = ref.double()
    if torch.isnan(o).any():
        return float("nan")
    return float(torch.linalg.vector_norm(o - r) / torch.linalg.vector_norm(r).clamp_min(1e-30))


def run_case(torch, be, case, args, results, variants=True):
    import compiler
    from compiler.trace import spec
    row = {"label": case.label, "workload": case.workload, "variant": case.variant, "bytes": case.bytes,
           "flops": case.flops}
    specs = [spec(i.shape, i.dtype, i.name) for i in case.inputs]
    graph = compiler.trace(case.saturn_fn, *specs)
    t_in = make_inputs(torch, case, 0)
    np_in = [to_numpy(t) for t in t_in]
    with torch.no_grad():
        ref = case.torch_fn(*[t.double() for t in t_in])
    scheds = be.schedules(graph) if variants else be.schedules(graph)[:1]
    # the generic kernel-IR rendering is checked by the GPU tests; timing it at these sizes takes
    # minutes (one thread per output row or element), so it is timed only when asked for
    if not KERNEL_IR_TIMING:
        scheds = [s for s in scheds if s.lowering != "kernel_ir"]
    # compile all variants in parallel (nvcc dominates build time): the builds then hit the cache
    t0 = time.perf_counter()
    be.precompile([(graph, s) for s in scheds])
    row["compile_s"] = time.perf_counter() - t0
    row["saturn"] = []
    for s in scheds:
        rec = {"schedule": s.name}
        try:
            exe, why = be.try_build(graph, s)
            if exe is None:
                rec["rejected"] = why
            else:
                out = exe(*np_in)[0]
                rec["rel_err"] = rel_err(out, ref)
                rec["ok"] = bool(rec["rel_err"] <= TOL[case.dtype])
                rec["kernels"] = exe.explain()
                rec["ms"] = median_ms(exe.benchmark(np_in, warmup=10, repeat=50))
                exe.close()
        except Exception as e:
            rec["error"] = f"{type(e).__name__}: {e}"
        row["saturn"].append(rec)
        log(f"  {case.label:45s} {s.name:28s} " + (f"{rec['ms']:.4f} ms err={rec['rel_err']:.2e}" if "ms" in rec
                                                   else rec.get("rejected", rec.get("error", ""))[:100]))
    good = [r for r in row["saturn"] if r.get("ok")]
    row["saturn_default_ms"] = row["saturn"][0].get("ms") if row["saturn"][0].get("ok") else None
    row["saturn_best_ms"] = min((r["ms"] for r in good), default=None)
    row["saturn_best_schedule"] = min(good, key=lambda r: r["ms"])["schedule"] if good else None
    with torch.no_grad():
        try:
            row["eager_ms"] = median_ms(time_torch(torch, case.torch_fn, t_in))
        except Exception as e:
            row["eager_error"] = str(e)[:200]
        if not os.environ.get("SATURN_NO_TORCH_COMPILE") and case.variant in TORCH_COMPILE_VARIANTS:
            try:
                cf = torch.compile(case.torch_fn)
                row["compile_ms"] = median_ms(time_torch(torch, cf, t_in))
            except Exception as e:
                row["compile_error"] = str(e)[:200]
        for peer, fn in case.extra_peers.items():
            try:
                row[f"{peer}_ms"] = median_ms(time_torch(torch, fn, t_in))
            except Exception as e:
                row[f"{peer}_error"] = str(e)[:200]
    results.append(row)
    return row


def floor_ms(row, ceil):
    t_bytes = row["bytes"] / (ceil["copy_TBps"] * 1e12) * 1e3
    t_flops = 0.0
    if row.get("flops"):
        rate = ceil["cublas_f16_4096_TFLOPs"] if "f16" in row["label"] or "bf16" in row["label"] \
            else ceil["cublas_f32_4096_TFLOPs"]
        t_flops = row["flops"] / (rate * 1e12) * 1e3
    return max(t_bytes, t_flops)


def markdown(meta, ceil, rows, checks=None) -> str:
    lines = [f"# Saturn CUDA backend on {meta['device']} ({meta['date']})", "",
             "Versions: " + ", ".join(f"{k} {v}" for k, v in meta.items() if k not in ("date", "device")), "",
             f"Ceilings measured in this run: copy {ceil['copy_TBps']:.2f} TB/s (read+write); cuBLAS 4096^3 "
             f"f16 {ceil['cublas_f16_4096_TFLOPs']:.0f} TFLOP/s ({ceil['cublas_f16_4096_ms']:.3f} ms), "
             f"f32 {ceil['cublas_f32_4096_TFLOPs']:.1f} TFLOP/s ({ceil['cublas_f32_4096_ms']:.3f} ms).", "",
             *(f"- {k}: {v}" for k, v in (checks or {}).items() if v), "",
             "Medians in ms. 'floor' = fewest bytes at the copy rate or FLOPs at the cuBLAS rate, whichever is larger.",
             "", "| workload | Saturn default | Saturn best (schedule) | eager | torch.compile | other | floor | "
                 "Saturn best vs floor | max rel err |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        fl = floor_ms(r, ceil)
        best = r.get("saturn_best_ms")
        other = "; ".join(f"{k[:-3]} {v:.3f}" for k, v in r.items() if k.endswith("_ms") and k not in
                          ("eager_ms", "compile_ms", "saturn_default_ms", "saturn_best_ms"))
        errs = [x.get("rel_err") for x in r["saturn"] if x.get("rel_err") is not None]
        fmt = lambda v: f"{v:.3f}" if isinstance(v, (int, float)) and v is not None else "-"
        lines.append(f"| {r['label']} | {fmt(r.get('saturn_default_ms'))} | {fmt(best)} ({r.get('saturn_best_schedule')}) "
                     f"| {fmt(r.get('eager_ms'))} | {fmt(r.get('compile_ms'))} | {other or '-'} | {fl:.3f} | "
                     f"{(fl / best * 100 if best else 0):.0f}% | {max(errs) if errs else float('nan'):.1e} |")
    return "\n".join(lines) + "\n"


def probe_wgmma(kind: str) -> int:
    """Check the wgmma schedules of one kind ("k": k-contiguous B, transposing an n-contiguous
    one; "mn1": n-contiguous B read as is) on a few shapes. Run in
    a child process: a kernel fault poisons the CUDA context, so the parent decides from the
    exit code whether to keep them."""
    import compiler
    from compiler.trace import spec
    from backends.cuda import CUDABackend
    from backends.cuda.render import Schedule
    from backends.cuda.templates.gemm_wgmma import WG_CONFIGS, WG_MN_CONFIGS
    configs = WG_CONFIGS if kind == "k" else [c for c in WG_MN_CONFIGS if f"mn{c.b_mn}" == kind]
    from ir.interpreter import evaluate
    be = CUDABackend()
    rng = np.random.default_rng(0)
    bad = 0
    for fn, shapes in [(lambda a, b: a @ b, ((256, 128), (128, 512))), (lambda a, b: a @ b.T, ((200, 64), (136, 64))),
                       (lambda a, b: a @ b, ((130, 72), (72, 264)))]:
        g = compiler.trace(fn, *[spec(s, "f16") for s in shapes])
        args = [rng.standard_normal(s).astype(np.float16) for s in shapes]
        want = evaluate(g, args)[0].astype(np.float64)
        for c in configs:
            exe, why = be.try_build(g, Schedule(wg=c, gemm="wgmma"))
            if exe is None:
                log("wgmma probe: rejected", c, why)
                continue
            got = exe(*args)[0].astype(np.float64)
            err = np.linalg.norm(got - want) / np.linalg.norm(want)
            kinds = [l.kind for l in exe.launches]
            log(f"wgmma probe {c} {shapes} kernels={kinds} rel_err={err:.2e}")
            bad += not err < 1e-2
    return 1 if bad else 0


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--suite", default="full", help="full (main sizes), odd, or both")
    ap.add_argument("--only", nargs="*", help="workload names")
    ap.add_argument("--no-variants", action="store_true", help="time the default schedule only")
    ap.add_argument("--probe-wgmma", default=None, help="only check wgmma schedules of a kind: k, mn1 (exit code)")
    ap.add_argument("--tests", action="store_true", help="run the GPU test suite (pytest -m gpu) first")
    ap.add_argument("--torch-compile", default="full", choices=["full", "all", "none"],
                    help="time torch.compile for the main sizes (default), all sizes, or none")
    ap.add_argument("--kernel-ir", action="store_true", help="also time the generic kernel-IR schedule (slow)")
    args = ap.parse_args(argv)
    global KERNEL_IR_TIMING
    KERNEL_IR_TIMING = args.kernel_ir
    TORCH_COMPILE_VARIANTS.clear()
    TORCH_COMPILE_VARIANTS.update({"full": {"full"}, "all": {"full", "odd"}, "none": set()}[args.torch_compile])
    if args.probe_wgmma:
        return probe_wgmma(args.probe_wgmma)
    os.makedirs(args.out, exist_ok=True)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    checks = {}
    # 1. wgmma schedules are kept only if a child process runs them correctly
    probe_log = []
    for kind in ("k", "mn1"):
        try:
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--probe-wgmma", kind], capture_output=True,
                               text=True, cwd=here, timeout=300)
            rc, text = p.returncode, p.stdout + p.stderr
        except subprocess.TimeoutExpired:
            rc, text = -1, "timed out"
        probe_log.append(f"== {kind}: exit {rc}\n{text}")
        checks[f"wgmma_probe_{kind}"] = "passed" if rc == 0 else f"failed (exit {rc})"
        log(f"wgmma probe {kind}:", checks[f"wgmma_probe_{kind}"])
    with open(os.path.join(args.out, "wgmma_probe.log"), "w") as f:
        f.write("\n".join(probe_log))
    if checks["wgmma_probe_k"] != "passed":
        os.environ["SATURN_CUDA_NO_WGMMA"] = "1"
    if checks["wgmma_probe_mn1"] != "passed":
        os.environ["SATURN_CUDA_NO_WGMMA_MN"] = "1"
    # 2. the GPU test suite, in its own process
    if args.tests:
        p = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "--tb=short",
                            "-rf", "tests/test_cuda_gpu.py"], capture_output=True, text=True, cwd=here, timeout=900)
        with open(os.path.join(args.out, "gpu_tests.log"), "w") as f:
            f.write(p.stdout + p.stderr)
        summary = [l for l in p.stdout.splitlines() if " passed" in l or " failed" in l]
        checks["gpu_tests"] = summary[-1].strip("= ") if summary else f"no summary (exit {p.returncode})"
        checks["gpu_tests_failed"] = [l for l in p.stdout.splitlines() if l.startswith("FAILED")]
        log("GPU tests:", checks["gpu_tests"])
        for l in checks["gpu_tests_failed"]:
            log("  ", l)
    import torch
    torch.cuda.init()
    from backends.cuda import CUDABackend
    from benchmarks.workloads import select_cases
    be = CUDABackend()
    reason = be.unavailable_reason()
    if reason:
        log("CUDA target unavailable:", reason)
        return 1
    meta = versions(torch)
    log(json.dumps(meta))
    ceil = ceilings(torch)
    log(json.dumps(ceil))
    # benchmarks.workloads' "full" suite holds the main sizes and the odd ones (variant "odd")
    cases = select_cases("cuda", "full", args.only or None)
    if args.suite != "both":
        cases = [c for c in cases if c.variant == args.suite]
    rows = []
    for case in cases:
        try:
            run_case(torch, be, case, None, rows, variants=not args.no_variants)
        except Exception:
            log(f"FAILED {case.label}\n{traceback.format_exc()}")
            rows.append({"label": case.label, "workload": case.workload, "variant": case.variant,
                         "bytes": case.bytes, "flops": case.flops, "saturn": [], "error": traceback.format_exc()[-2000:]})
        torch.cuda.empty_cache()
        with open(os.path.join(args.out, "gpu_suite.json"), "w") as f:
            json.dump({"meta": meta, "ceilings": ceil, "checks": checks, "rows": rows}, f, indent=1, default=str)
    md = markdown(meta, ceil, rows, checks)
    with open(os.path.join(args.out, "gpu_suite.md"), "w") as f:
        f.write(md)
    log(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
