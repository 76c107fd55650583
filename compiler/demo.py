"""`saturn demo`: compile a small transformer block for a target, run it, check it, print."""
from __future__ import annotations

import time

import numpy as np

from compiler.api import compile
from compiler.nn import transformer_block, transformer_block_specs
from ir.interpreter import evaluate


def add_arguments(p):
    p.add_argument("--target", default="cpu", help="cpu (default), cuda or reference")
    p.add_argument("--seq", type=int, default=64, help="sequence length (default 64)")
    p.add_argument("--dim", type=int, default=64, help="model width (default 64)")
    p.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")


def run(args) -> int:
    specs = transformer_block_specs(1, args.seq, args.dim, 4 * args.dim)
    fn = lambda *xs: transformer_block(*xs, heads=args.heads)  # noqa: E731
    fn.__name__ = "transformer_block"
    t0 = time.perf_counter()
    f = compile(fn, *specs, target=args.target)
    t1 = time.perf_counter()
    rng = np.random.default_rng(0)
    xs = [(rng.standard_normal(s.shape) * (0.1 if i else 1.0)).astype(s.dtype.np) for i, s in enumerate(specs)]
    y = f(*xs)
    t2 = time.perf_counter()
    ref = evaluate(f.graph, xs)[0]
    err = float(np.max(np.abs(y.astype(np.float64) - ref)) / max(np.max(np.abs(ref)), 1e-30))
    print(f"transformer block (seq={args.seq}, dim={args.dim}, heads={args.heads}) on target '{args.target}': "
          f"{f.graph.num_compute_ops()} primitive ops")
    print(f"compile {t1 - t0:.2f} s, first run {1e3 * (t2 - t1):.1f} ms")
    print(f"output {y.shape} {y.dtype}: mean {y.mean():+.6f}, std {y.std():.6f}, y[0,0,:4] = {np.round(y[0, 0, :4], 5)}")
    print(f"max relative error vs reference interpreter: {err:.2e}")
    return 0 if err < 1e-3 else 1
