"""`saturn explain WORKLOAD`: compile a built-in workload and show what the compiler chose and why.

Prints the e-graph size per phase, every candidate tried with its status and time, the chosen
program and the generated kernel source (CompiledFunction.explain()).
"""
from __future__ import annotations

import time

from compiler.errors import OptionError
from compiler.nn import attention
from compiler.trace import spec


def softmax(x):
    return x.softmax(-1)


def layernorm(x, w, b):
    return x.layer_norm((x.shape[-1],), w, b)


# name -> size -> input shapes; "small" (CPU), "large" (GPU), "long" (rows that do not fit on chip:
# a vocabulary-sized softmax or layer norm, where a single statistics pass and rows split across
# the GPU pay)
SIZES = {
    "softmax": {"small": [(256, 1024)], "large": [(4096, 4096)], "long": [(64, 131072)]},
    "layernorm": {"small": [(256, 1024), (1024,), (1024,)], "large": [(4096, 4096), (4096,), (4096,)],
                  "long": [(64, 131072), (131072,), (131072,)]},
    "attention": {"small": [(4, 128, 64)] * 3, "large": [(32, 1024, 64)] * 3},
}
FUNCTIONS = {"softmax": softmax, "layernorm": layernorm, "attention": attention}


def workload(name: str, size: str = "small", dtype: str = "f32"):
    """(function, input specs) of a built-in workload."""
    fn = FUNCTIONS[name]
    if size not in SIZES[name]:
        raise OptionError(f"{name} has no size {size!r} (sizes: {', '.join(SIZES[name])})", "explain")
    return fn, [spec(s, dtype) for s in SIZES[name][size]]


def add_arguments(p) -> None:
    p.add_argument("workload", choices=sorted(FUNCTIONS), help="what to compile")
    p.add_argument("--target", default="cpu", help="cpu (default), cuda or reference")
    p.add_argument("--size", default=None, choices=["small", "large", "long"],
                   help="input sizes (default: small on cpu, large on cuda; long: softmax/layernorm rows of 131072)")
    p.add_argument("--dtype", default="f32", help="f32 (default), f16 or bf16")
    p.add_argument("--budget", type=float, default=None, help="search seconds on a cold compile (default 10; 20 for cuda)")
    p.add_argument("--seed", type=int, default=0, help="search seed (default 0)")
    p.add_argument("--no-cache", action="store_true", help="search even if a cached winner exists")
    p.add_argument("--quiet", action="store_true", help="no progress line")


def run(args) -> int:
    from compiler.api import compile
    size = args.size or ("large" if args.target == "cuda" else "small")
    fn, specs = workload(args.workload, size, args.dtype)
    t0 = time.perf_counter()
    f = compile(fn, *specs, target=args.target, budget=args.budget, seed=args.seed,
                cache=False if args.no_cache else None, quiet=args.quiet)
    seconds = time.perf_counter() - t0
    print(f"{args.workload} ({', '.join(map(str, specs))}) on {args.target}: compiled in {seconds:.2f} s"
          f" (cache {f.cache})")
    print(f.explain())
    return 0
