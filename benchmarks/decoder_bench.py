"""On-device run for the decoders (one process, everything under --out, a short table last):

    source .gpu/on-device.sh && python3 benchmarks/decoder_bench.py --out $OUT [--tests] [--tiles] [--profile-all]

1. wgmma probes (as benchmarks/gpu_suite.py) and, with --tests, pytest -m gpu on
   tests/test_decoder_gpu.py (log in $OUT/decoder_tests.log);
2. with --tiles, every mma.sync / wgmma tile on each decoder product shape alone (m x k @ k x n,
   B stored (in, out) as the weights are), next to the tile prior's ranking (tiles.json);
3. the decoder workloads of benchmarks/workloads.py (main and odd sizes): Saturn under the
   default, the prior's first and second tiles, and fixed tiles, checked against PyTorch in
   float64, timed next to eager and torch.compile, the best schedule profiled per kernel (with
   --profile-all every schedule, and a table of their launches side by side printed last).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import gpu_suite  # noqa: E402

FIXED_SCHEDULES = 2        # --fixed: how many of the backend's fixed-tile / attention schedules to time too
PROFILE_ALL = False        # --profile-all: per-kernel times of every schedule, not only the best
PRODUCT_SHAPES = [(1024, 2048, 2048), (1024, 512, 2048), (1024, 5632, 2048), (1024, 2048, 5632),
                  (1024, 3072, 1024), (1024, 1024, 1024), (1024, 4096, 1024), (1024, 1024, 4096)]


def log(*a):
    print(*a, flush=True)


def tile_schedules():
    from backends.cuda.render import Schedule
    from backends.cuda import tiles
    out = []
    for cfg, _, _ in tiles.MMA:
        out.append(Schedule(tc=cfg, gemm="mma", name=tiles.TileChoice("mma", cfg, 0).name))
    for cfg, _, _ in tiles.WGMMA + tiles.WGMMA_MN:
        out.append(Schedule(wg=cfg, gemm="wgmma", name=tiles.TileChoice("wgmma", cfg, 0).name))
    return out


def time_tiles(be, out_dir):
    import compiler
    from compiler.trace import spec
    from backends.cuda import render, tiles
    rng = np.random.default_rng(0)
    rows = []
    mn = render.wgmma_mn_allowed()
    for m, n, k in PRODUCT_SHAPES:
        g = compiler.trace(lambda a, b: a @ b, spec((m, k), "f16"), spec((k, n), "f16"))
        a = rng.standard_normal((m, k)).astype(np.float16)
        b = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float16)
        want = a.astype(np.float64) @ b.astype(np.float64)
        scheds = tile_schedules()
        be.precompile([(g, s) for s in scheds])
        ranked = [c.name for c in tiles.rank_tiles(m, n, k, 1, True, True, mn)]
        row = {"shape": [m, n, k], "prior": ranked, "ms": {}}
        for s in scheds:
            if s.wg is not None and s.wg.b_mn and not mn:
                continue
            exe, why = be.try_build(g, s)
            if exe is None:
                row["ms"][s.name] = why[:120]
                continue
            got = exe(a, b)[0].astype(np.float64)
            err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
            t = gpu_suite.median_ms(exe.benchmark([a, b], warmup=10, repeat=40))
            row["ms"][s.name] = t if err < 1e-2 else f"wrong ({err:.1e})"
            exe.close()
        best = min((v, k_) for k_, v in row["ms"].items() if isinstance(v, float))
        log(f"tiles {m}x{n}x{k}: best {best[1]} {best[0]:.4f} ms ({2 * m * n * k / best[0] / 1e9:.0f} TFLOP/s); "
            f"prior {ranked[:3]} -> " + ", ".join(f"{x} {row['ms'].get(x, '-')}" for x in ranked[:3]))
        rows.append(row)
        with open(os.path.join(out_dir, "tiles.json"), "w") as f:
            json.dump(rows, f, indent=1)
    return rows


def decoder_schedules(be, graph):
    from backends.cuda.render import Schedule
    from backends.cuda.templates.attention import ATTN_CONFIGS
    out = [Schedule(), Schedule(gemm="prior", name="prior"), Schedule(gemm="prior", tile_rank=1, name="prior#2")]
    out += [Schedule(gemm="prior", attn=c, name=f"prior+{c.name}") for c in ATTN_CONFIGS[1:4]]
    out += [Schedule(gemm="cublas", cublas_fallback="prior", attn=c, name=f"cublas+{c.name}") for c in ATTN_CONFIGS[1:3]]
    fixed = [s for s in be.schedules(graph)[1:] if s.lowering != "kernel_ir" and (s.tc is not None or s.attn is not None)]
    return out + fixed[:FIXED_SCHEDULES]


def run_decoder(torch, be, case, results, out_dir):
    import compiler
    from compiler.trace import spec
    row = {"label": case.label, "workload": case.workload, "variant": case.variant, "flops": case.flops,
           "bytes": case.bytes, "saturn": []}
    specs = [spec(i.shape, i.dtype, i.name) for i in case.inputs]
    graph = compiler.trace(case.saturn_fn, *specs)
    t_in = gpu_suite.make_inputs(torch, case, 0)
    np_in = [gpu_suite.to_numpy(t) for t in t_in]
    with torch.no_grad():
        ref = case.torch_fn(*[t.double() for t in t_in])
    scheds = decoder_schedules(be, graph)
    t0 = time.perf_counter()
    be.precompile([(graph, s) for s in scheds])
    row["compile_s"] = time.perf_counter() - t0
    best = None
    for s in scheds:
        rec = {"schedule": s.name}
        exe, why = be.try_build(graph, s)
        if exe is None:
            rec["rejected"] = why[:300]
        else:
            out = exe(*np_in)[0]
            rec["rel_err"] = gpu_suite.rel_err(out, ref)
            rec["ok"] = bool(rec["rel_err"] <= 1e-2)
            rec["ms"] = gpu_suite.median_ms(exe.benchmark(np_in, warmup=10, repeat=30))
            rec["kernels"] = exe.explain()
            rec["launches"] = len(exe.launches)
            if PROFILE_ALL:
                rec["profile"] = [(n, t * 1e3) for n, t in exe.profile(np_in, repeat=20)]
            if rec["ok"] and (best is None or rec["ms"] < best[0]):
                if best is not None:
                    best[1].close()
                best = (rec["ms"], exe, s.name)
            else:
                exe.close()
        row["saturn"].append(rec)
        log(f"  {case.label:55s} {s.name:24s} " + (f"{rec['ms']:.4f} ms err={rec['rel_err']:.2e} "
                                                  f"launches={rec['launches']}" if "ms" in rec else rec["rejected"][:100]))
    if best is not None:
        row["best_ms"], row["best_schedule"] = best[0], best[2]
        row["profile"] = [(n, t * 1e3) for n, t in best[1].profile(np_in, repeat=20)]
        row["best_kernels"] = best[1].explain()
        best[1].close()
    with torch.no_grad():
        row["eager_ms"] = gpu_suite.median_ms(gpu_suite.time_torch(torch, case.torch_fn, t_in, 5, 30))
        if case.variant == "full":
            try:
                cf = torch.compile(case.torch_fn)
                row["compile_ms"] = gpu_suite.median_ms(gpu_suite.time_torch(torch, cf, t_in, 5, 30))
            except Exception as e:
                row["compile_error"] = str(e)[:300]
    results.append(row)
    with open(os.path.join(out_dir, "decoder_bench.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)
    return row


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--tests", action="store_true")
    ap.add_argument("--tiles", action="store_true")
    ap.add_argument("--only", nargs="*", default=["decoder", "gpt2"])
    ap.add_argument("--variants", nargs="*", default=["full", "odd"])
    ap.add_argument("--fixed", type=int, default=2)
    ap.add_argument("--profile-all", action="store_true", help="profile every schedule per kernel")
    args = ap.parse_args(argv)
    global FIXED_SCHEDULES, PROFILE_ALL
    FIXED_SCHEDULES = args.fixed
    PROFILE_ALL = args.profile_all
    os.makedirs(args.out, exist_ok=True)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    checks = {}
    for kind in ("k", "mn1"):
        p = subprocess.run([sys.executable, os.path.join(here, "benchmarks", "gpu_suite.py"), "--probe-wgmma", kind],
                           capture_output=True, text=True, cwd=here, timeout=300)
        checks[f"wgmma_probe_{kind}"] = "passed" if p.returncode == 0 else f"failed ({p.returncode})"
        with open(os.path.join(args.out, f"wgmma_probe_{kind}.log"), "w") as f:
            f.write(p.stdout + p.stderr)
    if checks["wgmma_probe_k"] != "passed":
        os.environ["SATURN_CUDA_NO_WGMMA"] = "1"
    if checks["wgmma_probe_mn1"] != "passed":
        os.environ["SATURN_CUDA_NO_WGMMA_MN"] = "1"
    log("probes:", checks)
    if args.tests:
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "--tb=short",
                            "-rf", "tests/test_decoder_gpu.py"], capture_output=True, text=True, cwd=here, timeout=1500)
        with open(os.path.join(args.out, "decoder_tests.log"), "w") as f:
            f.write(p.stdout + p.stderr)
        summary = [l for l in p.stdout.splitlines() if " passed" in l or " failed" in l]
        checks["decoder_tests"] = (summary[-1].strip("= ") if summary else f"exit {p.returncode}") + \
            f" ({time.perf_counter() - t0:.0f} s)"
        log("decoder tests:", checks["decoder_tests"])
        for l in p.stdout.splitlines():
            if l.startswith("FAILED"):
                log("  ", l[:300])
    import torch
    torch.cuda.init()
    from backends.cuda import CUDABackend
    from benchmarks.workloads import select_cases
    be = CUDABackend()
    meta = gpu_suite.versions(torch)
    log(json.dumps(meta))
    tiles_rows = time_tiles(be, args.out) if args.tiles else []
    cases = [c for c in select_cases("cuda", "full", args.only) if c.variant in args.variants]
    rows = []
    for case in cases:
        run_decoder(torch, be, case, rows, args.out)
        torch.cuda.empty_cache()
    with open(os.path.join(args.out, "decoder_bench.json"), "w") as f:
        json.dump({"meta": meta, "checks": checks, "tiles": tiles_rows, "rows": rows}, f, indent=1, default=str)
    log("\n| workload | Saturn best ms (schedule) | default ms | launches | eager ms | torch.compile ms | x eager |")
    log("|---|---|---|---|---|---|---|")
    for r in rows:
        d = r["saturn"][0]
        best = r.get("best_ms")
        log(f"| {r['label']} | {best and round(best, 4)} ({r.get('best_schedule')}) | {round(d.get('ms', 0), 4)} | "
            f"{d.get('launches')} | {r['eager_ms']:.4f} | {r.get('compile_ms', float('nan')):.4f} | "
            f"{(r['eager_ms'] / best if best else 0):.2f} |")
    for r in rows:
        table = profile_table(r)
        if table:
            log(f"\n{r['label']}: microseconds per launch (--profile-all)\n{table}")
    return 0


def profile_table(row: dict) -> str:
    """A Markdown table of the per-launch times (us; recorded in ms) of a decoder row's profiled
    schedules, one line per launch in program order (a schedule's extra launches, as cuBLAS's
    epilogue kernels, on lines of their own); '' where no schedule was profiled."""
    profiled = [s for s in row["saturn"] if s.get("profile")]
    if not profiled:
        return ""
    names: list[str] = []
    per = []
    for s in profiled:
        seen: dict[str, int] = {}
        times = {}
        for n, t in s["profile"]:
            seen[n] = seen.get(n, 0) + 1
            key = f"{n}#{seen[n]}" if seen[n] > 1 else n
            times[key] = t * 1e3
            if key not in names:
                names.append(key)
        per.append(times)
    lines = ["| launch | " + " | ".join(s["schedule"] for s in profiled) + " |",
             "|---|" + "---|" * len(profiled)]
    for n in names:
        lines.append(f"| {n} | " + " | ".join(f"{p[n]:.1f}" if n in p else "" for p in per) + " |")
    lines.append("| sum | " + " | ".join(f"{sum(p.values()):.1f}" for p in per) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
