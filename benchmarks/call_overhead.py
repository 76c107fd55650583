"""Host time per call of a one-kernel Saturn function on CUDA tensors, and where it goes.

    python3 benchmarks/call_overhead.py [--calls N] [--profile FILE]

Compiles `x * 2 + 1` over 1024 f32 for target 'cuda', then times (host clock, after warm-up,
with the stream synchronized once at the end): the whole call with CUDA graphs on and off, and
with the repeat path (`compiler.device_args.FastPath`) off; PyTorch eager `x * 2 + 1` (two
kernels); each step of the device-array call path alone, so a change to that path can be
judged by its parts. With --profile, a cProfile of the graph
calls is written there (sorted by own time). Needs a CUDA device and torch.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def per_call_us(fn, n: int, sync) -> float:
    for _ in range(min(n // 10, 200)):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    sync()
    return (time.perf_counter() - t0) / n * 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=20000, help="calls per measurement (default 20000)")
    ap.add_argument("--profile", help="write a cProfile of the graph calls to this file")
    args = ap.parse_args(argv)
    import torch

    import compiler
    from compiler import device_args

    f = compiler.compile(lambda x: x * 2.0 + 1.0, compiler.spec((1024,), "f32"), target="cuda",
                         budget=3.0, quiet=True, max_schedules=1)
    x = torch.randn(1024, device="cuda")
    assert torch.equal(f(x), x * 2.0 + 1.0)
    sync = torch.cuda.synchronize
    n = args.calls
    rows = []

    def measure(name, fn):
        try:
            rows.append((name, per_call_us(fn, n, sync)))
        except Exception as e:  # noqa: BLE001 - one broken step must not lose the others
            rows.append((name, f"failed: {type(e).__name__}: {e}"))

    f.cuda_graphs = True
    measure("saturn call, CUDA graphs on", lambda: f(x))
    f.cuda_graphs = False
    measure("saturn call, plain launches", lambda: f(x))
    f.cuda_graphs = True
    plain, fast = device_args.plain_torch_call, f._fast
    device_args.plain_torch_call, f._fast = (lambda *a: False), None     # the full path on every call
    measure("saturn call, full path (no repeat path), graphs on", lambda: f(x))
    device_args.plain_torch_call, f._fast = plain, fast
    measure("torch eager x * 2 + 1 (2 kernels)", lambda: x * 2.0 + 1.0)
    measure("torch eager x.add_(0) (1 kernel)", lambda: x.add_(0.0))
    calls = f._device
    specs, outs = f.specs, f.graph.outputs
    measure("step: any_device", lambda: device_args.any_device((x,)))
    measure("step: classify", lambda: device_args.classify((x,), specs, "f", calls.pointer_device))
    inputs = device_args.classify((x,), specs, "f", calls.pointer_device)
    measure("step: choose_stream", lambda: device_args.choose_stream(inputs, None, calls.ordinal))
    measure("step: torch.cuda.current_stream()", lambda: torch.cuda.current_stream(0).cuda_stream)
    handle = device_args.choose_stream(inputs, None, calls.ordinal)
    measure("step: new_output (torch.empty)",
            lambda: device_args.new_output("torch", (1024,), outs[0].dtype, calls, handle, calls.ordinal, handle))
    measure("step: torch.empty alone", lambda: torch.empty(1024, device="cuda"))
    y = torch.empty(1024, device="cuda")
    ptrs, out_ptrs = [x.data_ptr()], [y.data_ptr()]
    measure("step: DeviceCalls.run (lock, context, replay, event)",
            lambda: calls.run(ptrs, out_ptrs, [4096], handle))
    from backends.cuda import driver
    runner = calls.runner
    def push_pop():
        with calls._on_device(calls.rt):
            pass
    measure("step: context push/pop under the lock", push_pop)
    binding = tuple(ptrs) + tuple(out_ptrs)
    graph = runner.graphs.graphs.get(binding)
    if graph is not None:
        measure("step: cuGraphLaunch alone", lambda: driver.graph_launch(graph, handle))
    measure("step: kernel launch alone (plain)", lambda: runner.plain(binding, handle))
    measure("step: cuEventRecord alone", lambda: driver.record(runner.event, handle))
    if args.profile:
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(n):
            f(x)
        sync()
        pr.disable()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(40)
        with open(args.profile, "w") as fh:
            fh.write(s.getvalue())
    print(f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}, {n} calls per row; host microseconds per call")
    for name, v in rows:
        print(f"{name:58s} {v:8.2f}" if isinstance(v, float) else f"{name:58s} {v}")
    print(f._device_stats.describe())
    print(f.explain().split("generated code:")[0].strip().splitlines()[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
