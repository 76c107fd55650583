import sys, numpy as np
from compiler.explain_cli import workload
from compiler.trace import trace
from compiler.explore import explore
from backends import get_backend
be = get_backend("cuda")
for name in sys.argv[1].split(","):
    fn, specs = workload(name, "long", "f32")
    g = trace(fn, *specs)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s.shape).astype(np.float32) for s in specs]
    for c in explore(g).candidates:
        try:
            exe = be.build(c.graph)
            t = np.median(exe.benchmark(args, warmup=5, repeat=30))
            prof = exe.profile(args)
            print(f"{name} {c.description[:50]:50s} {t*1e6:8.1f} us")
            for (n, s), l in zip(prof, exe.launches):
                print(f"      {n:12s} {s*1e6:8.1f} us  {l.kind} grid={l.grid} block={l.block}")
        except Exception as e:
            print(name, c.description[:50], "FAIL", e)
