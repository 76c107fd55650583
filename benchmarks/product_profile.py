"""One matrix product under one schedule, and cuBLAS on the same operands: a short program to
run under a profiler or a memory checker (`ncu`, `compute-sanitizer`), which see every launch.

    python -m benchmarks.product_profile CASE [--schedule NAME] [--calls N] [--no-cublas]

CASE names a product as `benchmarks.product_kernels` does (`1024x5632x2048 nt f16`, `4096x4096x128
b64 nn bf16`); NAME is a schedule the backend offers for it (default: the one it picks first) or
any TMA tile by name (`tma64x256s3ppe`). The schedule's kernels run once (checked against
PyTorch in float32: max error over the output's largest magnitude, printed) and then N times
with inputs resident on the device; cuBLAS (`torch.matmul`) N times after them. Needs a GPU,
pycuda and torch with CUDA.
"""
from __future__ import annotations

import argparse
import re
import sys


def parse_case(text: str) -> tuple:
    """`MxNxK [bB] nt|nn f16|bf16|f32` as product_kernels' case tuple (m, n, k, batch, layout, dtype)."""
    m = re.fullmatch(r"\s*(\d+)x(\d+)x(\d+)(?:\s+b(\d+))?\s+(nt|nn)\s+(f16|bf16|f32)\s*", text)
    if m is None:
        raise ValueError(f"{text!r} is not a product case (e.g. '1024x5632x2048 nt f16')")
    mm, n, k, b, layout, dtype = m.groups()
    return int(mm), int(n), int(k), int(b or 1), layout, dtype


def schedule_for(be, g, name: str | None):
    from backends.cuda.render import Schedule
    from backends.cuda.templates.gemm_tma import TMAConfig
    offered = be.schedules(g)
    if name is None:
        return offered[0]
    for s in offered:
        if s.name == name:
            return s
    try:
        return Schedule(tma=TMAConfig.from_name(name), gemm="wgmma", name=name)
    except ValueError:
        raise ValueError(f"no schedule {name!r} for this product; offered: {', '.join(s.name for s in offered)}") from None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.product_profile", description=__doc__.split("\n\n")[0])
    ap.add_argument("case", help="e.g. '1024x5632x2048 nt f16'")
    ap.add_argument("--schedule", help="a schedule's name (default: the backend's first) or a TMA tile's")
    ap.add_argument("--calls", type=int, default=3, help="timed-style runs of each after the checked one (default 3)")
    ap.add_argument("--no-cublas", action="store_true", help="leave cuBLAS out")
    a = ap.parse_args(argv)
    try:
        case = parse_case(a.case)
    except ValueError as e:
        ap.error(str(e))
    import numpy as np
    import torch
    from backends.cuda import CUDABackend
    from benchmarks.product_kernels import _program, max_error, operands
    g = _program(*case)
    be = CUDABackend()
    try:
        sched = schedule_for(be, g, a.schedule)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    prod, want, args = operands(case, g)
    exe, why = be.try_build(g, sched)
    if exe is None:
        print(f"{sched.name}: not built: {why}", file=sys.stderr)
        return 1
    print(f"{a.case} {sched.name}: max error {max_error(exe, args, want):.2e} of the largest output; launches "
          f"{', '.join(l.kind for l in exe.launches)}")
    if a.calls > 0:
        times = exe.benchmark(args, warmup=0, repeat=a.calls)
        print(f"{sched.name}: {1e3 * float(np.median(times)):.4f} ms (median of {a.calls})")
    exe.close()
    if not a.no_cublas:
        for _ in range(a.calls):
            prod()
        torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
