"""One matrix product under one schedule, and cuBLAS on the same operands: a short program to
run under a profiler or a memory checker (`ncu`, `compute-sanitizer`), which see every launch.

    python -m benchmarks.product_profile CASE [--schedule NAME] [--calls N] [--no-cublas] [--wrong-tiles]

CASE names a product as `benchmarks.product_kernels` does (`1024x5632x2048 nt f16`, `4096x4096x128
b64 nn bf16`); NAME is a schedule the backend offers for it (default: the one it picks first) or
any TMA tile by name (`tma64x256s3ppe`). The schedule's kernels run once (checked against
PyTorch in float32: max error over the output's largest magnitude, printed) and then N times
with inputs resident on the device; cuBLAS (`torch.matmul`) N times after them. Needs a GPU,
pycuda and torch with CUDA. With --wrong-tiles (a TMA tile, unbatched): which of its output
tiles are wrong, by each tile's index within its persistent block, and what the first wrong
one holds (`wrong_tiles`).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from benchmarks.product_kernels import parse_case


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


def wrong_tiles(got, want, a, b, cfg, tol: float = 1e-2) -> list[str]:
    """Lines describing the output tiles of TMA tile `cfg` (unbatched `got` = a @ b.T, b given as
    n x k) whose error passes `tol` of the output's largest magnitude: each with its walk index t,
    its block (t % SMS) and its index within the block (t // SMS, the ping-pong warpgroup's turn is
    that index's parity); then, for the first, whether it misses or doubles one 64-wide k-step, or
    holds another tile's values."""
    from backends.cuda.templates.gemm_tma import SMS, tile_corner
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    err = np.abs(got - want) / max(float(np.abs(want).max()), 1e-30)
    m, n = want.shape
    mt, nt = -(-m // cfg.bm), -(-n // cfg.bn)

    def corner(t):
        return tile_corner(t, mt, nt, cfg.bm, cfg.bn)

    def box(x, t):
        m0, n0 = corner(t)
        return x[m0:m0 + cfg.bm, n0:n0 + cfg.bn]

    bad = [t for t in range(mt * nt) if box(err, t).max() > tol]
    lines = [f"{len(bad)} of {mt * nt} tiles wrong (max error {err.max():.3g})"]
    by_turn: dict[int, int] = {}
    for t in bad:
        by_turn[t // SMS] = by_turn.get(t // SMS, 0) + 1
        if len(lines) <= 12:
            lines.append(f"  tile {t} at {corner(t)}: block {t % SMS}, index {t // SMS} in its block, "
                         f"max error {box(err, t).max():.3g}, {(box(err, t) > tol).sum()} elements")
    if bad:
        lines.append(f"  wrong tiles by index in their block: {dict(sorted(by_turn.items()))}")
        t = bad[0]
        m0, n0 = corner(t)
        diff = box(got, t) - box(want, t)
        scale = float(np.abs(want).max())
        a64, b64 = np.asarray(a, np.float64)[m0:m0 + cfg.bm], np.asarray(b, np.float64)[n0:n0 + cfg.bn]
        steps = [(float(np.abs(diff - sign * a64[:, s:s + 64] @ b64[:, s:s + 64].T).max()) / scale, s // 64, sign)
                 for s in range(0, a64.shape[1], 64) for sign in (1, -1)]
        res, step, sign = min(steps)
        lines.append(f"  tile {t} differs from the product by {'+' if sign > 0 else '-'}(k-step {step}'s partial "
                     f"product) up to {res:.3g}")
        same = [u for u in range(mt * nt) if u != t and box(want, u).shape == diff.shape
                and float(np.abs(box(got, t) - box(want, u)).max()) / scale < tol]
        if same:
            lines.append(f"  tile {t} holds tile {same[0]}'s values")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.product_profile", description=__doc__.split("\n\n")[0])
    ap.add_argument("case", help="e.g. '1024x5632x2048 nt f16'")
    ap.add_argument("--schedule", help="a schedule's name (default: the backend's first) or a TMA tile's")
    ap.add_argument("--calls", type=int, default=3, help="timed-style runs of each after the checked one (default 3)")
    ap.add_argument("--no-cublas", action="store_true", help="leave cuBLAS out")
    ap.add_argument("--wrong-tiles", action="store_true",
                    help="(a TMA tile, unbatched) which output tiles are wrong, and how")
    a = ap.parse_args(argv)
    try:
        case = parse_case(a.case)
    except ValueError as e:
        ap.error(str(e))
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
    if a.wrong_tiles:
        if sched.tma is None or case[3] > 1:
            print("--wrong-tiles: needs a TMA tile and an unbatched product", file=sys.stderr)
            return 2
        b = args[1].T if case[4] == "nn" else args[1]
        for line in wrong_tiles(exe(*args)[0], want.cpu().numpy(), args[0], b, sched.tma):
            print(line)
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
