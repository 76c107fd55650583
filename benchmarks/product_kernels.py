"""Every generated matrix-product schedule of the CUDA backend against cuBLAS, at model shapes.

    python -m benchmarks.product_kernels [--quick] [--repeat N] [--json FILE] [--cases PART,...] [--only PREFIX,...]
        [--experimental] [--tiles NAME,...]

For each case (M x N x K, batch, layout, dtype) the traced product is built under every schedule
the backend offers except the library ones (cuBLAS, and the generic kernel-IR rendering, which
is not a product kernel), checked against PyTorch in float32 (max error over the output's
largest magnitude), and timed with CUDA events (median of `--repeat` runs after warm-up,
inputs resident on the device). PyTorch's `torch.matmul` (cuBLAS) is timed the same way, on
the same layout. The table gives each schedule's time over cuBLAS's; the last line per case the
best generated schedule. "nt" cases are linear layers (`x @ w.T`, the weight k-contiguous),
"nn" plain products (`a @ b`). Needs a GPU, pycuda and torch with CUDA.
"""
from __future__ import annotations

import re

import numpy as np

from benchmarks import schedule_tables

# (M, N, K, batch, layout): 4096^3, the products of a 1.1B Llama-style decoder layer at 1024
# tokens (MLP up/gate 2048 -> 5632, down 5632 -> 2048), GPT-style MLP at 8192 / 16384 tokens,
# attention-sized batched products, an odd size, a 7B-style MLP and a GQA layer's k / v projection
SHAPES = [
    (4096, 4096, 4096, 1, "nn"),
    (1024, 5632, 2048, 1, "nt"),
    (1024, 2048, 5632, 1, "nt"),
    (8192, 1024, 4096, 1, "nt"),
    (16384, 4096, 1024, 1, "nt"),
    (4096, 4096, 128, 64, "nn"),
    (4095, 4097, 4099, 1, "nn"),
    (2048, 11008, 4096, 1, "nt"),
    (1024, 512, 2048, 1, "nn"),     # a GQA layer's k / v projection, weights stored (in, out) as the decoder's
]
CASES = [s + (dt,) for s in SHAPES for dt in ("f16", "bf16")] + [(4096, 4096, 4096, 1, "nn", "f32")]


def _program(m, n, k, batch, layout, dtype):
    from compiler.trace import spec, trace
    lead = (batch,) if batch > 1 else ()
    if layout == "nt":
        return trace(lambda x, w: x @ w.transpose(-1, -2), spec(lead + (m, k), dtype), spec(lead + (n, k), dtype))
    return trace(lambda a, b: a @ b, spec(lead + (m, k), dtype), spec(lead + (k, n), dtype))


ONLY: tuple[str, ...] = ()      # --only: schedule name prefixes to time (empty: all)
EXPERIMENTAL = False            # --experimental: also the TMA and SIMT tiles the search does not offer
TILES: tuple = ()               # --tiles: TMA tiles by name, listed or not


def generated_schedules(be, g) -> list:
    """The backend's schedules for `g` whose products are generated kernels (those named by
    --only), with --experimental the TMA and SIMT tiles not yet searched, and the TMA tiles
    --tiles names (where the backend offers TMA tiles for `g`)."""
    from backends.cuda.render import Schedule
    out = [s for s in be.schedules(g) if s.gemm != "cublas" and s.lowering != "kernel_ir"]
    tma = any(s.tma is not None for s in out)
    if EXPERIMENTAL and tma:
        from backends.cuda.templates.gemm_tma import TMA_EXPERIMENTAL_CONFIGS
        out += [Schedule(tma=c, gemm="wgmma", name=c.name) for c in TMA_EXPERIMENTAL_CONFIGS]
    if EXPERIMENTAL and any(s.simt is not None for s in out):
        from backends.cuda.templates.gemm_simt import SIMT_EXPERIMENTAL_CONFIGS
        out += [Schedule(simt=c, name=c.name) for c in SIMT_EXPERIMENTAL_CONFIGS]
    out = [s for s in out if not ONLY or s.name.startswith(ONLY)]
    named = {s.name for s in out}
    return out + [Schedule(tma=c, gemm="wgmma", name=c.name) for c in TILES if tma and c.name not in named]


def label(case) -> str:
    m, n, k, batch, layout, dtype = case
    return f"{m}x{n}x{k}" + (f" b{batch}" if batch > 1 else "") + f" {layout} {dtype}"


def parse_case(text: str) -> tuple:
    """The case a label names: 'MxNxK [bB] nt|nn f16|bf16|f32' ('1024x512x2048 nt f16',
    '4096x4096x128 b64 nn f32') as (m, n, k, batch, layout, dtype)."""
    m = re.fullmatch(r"\s*(\d+)x(\d+)x(\d+)(?:\s+b(\d+))?\s+(nt|nn)\s+(f16|bf16|f32)\s*", text)
    if m is None:
        raise ValueError(f"{text!r} is not a product case (e.g. '1024x5632x2048 nt f16')")
    mm, n, k, b, layout, dtype = m.groups()
    return int(mm), int(n), int(k), int(b or 1), layout, dtype


def _torch_time(fn, repeat: int) -> float:
    """Median seconds per call (CUDA events around each, after 5 untimed calls)."""
    from benchmarks.hf_models_gpu import time_calls
    return float(np.median(time_calls(fn, 5, repeat)))


def operands(case, g):
    """The case's seeded random operands on the device: (cuBLAS's product of them as a
    callable, that product in float32, the operands as host arrays of `g`'s input dtypes)."""
    import torch
    dtype, layout = case[5], case[4]
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[dtype]
    gen = torch.Generator(device="cuda").manual_seed(0)
    a, b = [torch.randn(tuple(x.shape), generator=gen, device="cuda", dtype=tdt) for x in g.inputs]
    torch.backends.cuda.matmul.allow_tf32 = False      # f32 means f32, for cuBLAS as for Saturn
    prod = (lambda: a @ b.transpose(-1, -2)) if layout == "nt" else (lambda: a @ b)
    want = (a.float() @ (b.float().transpose(-1, -2) if layout == "nt" else b.float()))
    args = [x.cpu().float().numpy().astype(gi.dtype.np) for x, gi in zip((a, b), g.inputs)]
    return prod, want, args


def max_error(exe, args, want) -> float:
    """The executable's largest error over the product's largest magnitude."""
    import torch
    got = torch.from_numpy(np.asarray(exe(*args)[0], np.float32)).cuda()
    return float((got - want).abs().max()) / float(want.abs().max())


def run_case(be, case, repeat: int, out=print) -> list[dict]:
    m, n, k, batch, layout, dtype = case
    g = _program(*case)
    prod, want, args = operands(case, g)
    flops = 2 * batch * m * n * k
    name = label(case)
    rows = [{"case": name, "kernel": "torch.matmul (cuBLAS)", "ms": _torch_time(prod, repeat) * 1e3}]
    seen: dict[str, str] = {}
    for sched in generated_schedules(be, g):
        same = _same_kernel(g, sched, seen)
        if same:       # (an f32 product renders one SIMT kernel under every tensor-core schedule)
            out(f"{name:<28} {sched.name:<24} the same kernel as {same}")
            continue
        exe, why = be.try_build(g, sched)
        if exe is None:
            rows.append({"case": name, "kernel": sched.name, "error": why[:200]})
            continue
        err = max_error(exe, args, want)
        t = float(np.median(exe.benchmark(args, warmup=5, repeat=repeat)))
        kinds = [l.kind for l in exe.launches]
        detail = [l.detail for l in exe.launches if l.kind.startswith("gemm")]
        rows.append({"case": name, "kernel": sched.name, "ms": t * 1e3, "max_rel_err": err,
                     "launches": kinds, "detail": detail[0] if detail else ""})
        exe.close()
    lib = rows[0]["ms"]
    timed = [r for r in rows[1:] if "ms" in r]
    schedule_tables.report(rows, name, flops, lib, "cuBLAS", out, 24,
                           lambda r: f"  err {r['max_rel_err']:.1e}  {'+'.join(r['launches'])}" if "max_rel_err" in r else "")
    if timed:
        best = min(timed, key=lambda r: r["ms"])
        out(f"{name:<28} best generated: {best['kernel']} {best['x_cublas']:.2f}x cuBLAS")
    return rows


def _same_kernel(g, sched, seen: dict) -> str | None:
    """The schedule already timed whose rendered source is this one's (None: a new kernel)."""
    import dataclasses
    import hashlib
    from backends.cuda import render
    from backends.cuda.runtime import get_runtime
    try:
        src = render(g, dataclasses.replace(sched, arch=get_runtime().info.arch))[0]
    except Exception:       # the build reports it
        return None
    key = hashlib.sha256(src.encode()).hexdigest()
    if key in seen:
        return seen[key]
    seen[key] = sched.name
    return None


def _precompile(be, cases) -> None:
    schedule_tables.precompile([_program(*c) for c in cases], lambda g: generated_schedules(be, g))


def summary(rows) -> list[str]:
    """One line per case: cuBLAS, the best generated schedule and their ratio."""
    out = []
    for case in dict.fromkeys(r["case"] for r in rows):
        mine = [r for r in rows if r["case"] == case and "ms" in r]
        lib = next((r for r in mine if r["kernel"].startswith("torch")), None)
        gen = [r for r in mine if not r["kernel"].startswith("torch")]
        if lib and gen:
            best = min(gen, key=lambda r: r["ms"])
            out.append(f"| {case} | {lib['ms']:.4f} | {best['ms']:.4f} ({best['kernel']}) | {lib['ms'] / best['ms']:.2f}x |")
    return ["| case | cuBLAS ms | best generated ms | generated x cuBLAS |", "|---|---|---|---|"] + out


def _options(ap):
    ap.add_argument("--only", help="comma-separated schedule name prefixes to time (default: all)")
    ap.add_argument("--experimental", action="store_true",
                    help="also the TMA tiles the search does not offer (not yet run on a GPU, or never the best)")
    ap.add_argument("--tiles", help="comma-separated TMA tile names to time besides (e.g. tma64x256s3ppe), "
                                    "listed anywhere or not")
    ap.add_argument("--shapes", help="comma-separated products to time instead of the fixed cases, named as "
                                     "the cases are: 'MxNxK[ bB] nn|nt f16|bf16|f32' (e.g. '1024x512x2048 nt f16')")

    def apply(a):
        global ONLY, EXPERIMENTAL, TILES
        from backends.cuda.templates.gemm_tma import TMAConfig
        ONLY = tuple(a.only.split(",")) if a.only else ()
        EXPERIMENTAL = a.experimental
        try:
            TILES = tuple(TMAConfig.from_name(n) for n in a.tiles.split(",")) if a.tiles else ()
        except ValueError as e:
            ap.error(str(e))
        if a.shapes:
            try:
                return [parse_case(t) for t in a.shapes.split(",")]
            except ValueError as e:
                ap.error(str(e))
        return None
    return apply


def main(argv=None) -> int:
    return schedule_tables.main(__doc__, CASES, run_case, _precompile, argv, repeat=20, label=label, summary=summary,
                                options=_options)


if __name__ == "__main__":
    raise SystemExit(main())
