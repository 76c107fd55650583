"""A built graph on the device: kernels in order over device buffers.

Called with host arrays, host<->device copies happen only at the boundaries (inputs in, outputs
out); intermediates stay on the device in buffers owned by the executable and reused on every
call. Called with device arrays, `device_program()` describes the same launches for
`backends/cuda/device_run.py`, which reads the caller's inputs and writes its outputs in place,
on the caller's stream (and replays CUDA graphs). Every launch kind must appear in both paths:
here in `launch_all`, there as a step of `device_program()` that enqueues on the given stream.

With `concurrent = True` (set before the first device-array call), launches that do not depend
on each other run on concurrent streams (backends/cuda/lanes.py); by default they run in order
on one stream.

Calls from several threads are safe and serialized: every public entry point (call, benchmark,
profile, close) holds one process-wide lock, because the buffers, the runtime's buffer pool and
the context stack are shared (and one call's kernels fill the device anyway, so a lock costs
little device time). The calling thread makes the device context current for the call, as a CUDA
context is current only on the thread that pushed it.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

import numpy as np

from ir.graph import Graph
from ir.node import Node
from ir.ops import Op
from backends.cuda import driver, lanes as lanes_
from backends.cuda.device_run import DeviceProgram, KernelStep, LibraryStep
from backends.cuda.render import Launch
from backends.cuda.runtime import CUDAFailure, Runtime


_DEVICE_LOCK = threading.RLock()


@contextmanager
def _on_device(rt: Runtime):
    """Hold the device for one call: the lock, and the context current on this thread."""
    with _DEVICE_LOCK:
        rt.context.push()
        try:
            yield
        finally:
            rt.context.pop()


class CUDAExecutable:
    def __init__(self, graph: Graph, launches: list[Launch], source: str, module, rt: Runtime, compile_log: str = ""):
        self.graph, self.launches, self.source, self.rt = graph, launches, source, rt
        self.compile_log = compile_log
        self.functions = [None if l.library is not None else   # a library call (cuBLAS) has no kernel
                          rt.function(module, l.name, l.block[0] * l.block[1] * l.block[2], l.shared,
                                      1 + len(l.inputs)) for l in launches]
        self.module = module
        # kernels taking tensor maps launch through the driver (kernelParams): pycuda's packed
        # argument buffer gave them an illegal instruction on the H100 (their maps by value)
        self._map_launches = {}
        if any(l.tensor_maps for l in launches):
            raw = driver.RawModule(module.binary)
            self._map_launches = {i: driver.KernelLaunch(raw.function(l.name, l.shared), l.grid, l.block, l.shared,
                                                         [0] * (1 + len(l.inputs)), l.tensor_maps)
                                  for i, l in enumerate(launches) if l.tensor_maps}
            self._raw_module = raw
        # one device buffer per graph input, per step output and per value a step reads; an
        # empty value has no kernel (render_program) but still a buffer, which nothing reads
        self.buffers: dict[Node, object] = {}
        self._sizes: dict[Node, int] = {}
        produced = {l.output for l in launches}
        for o in graph.outputs:
            if o.numel and o.op != Op.INPUT and o not in produced:
                raise CUDAFailure("build", f"output {o!r} has no producing kernel")
        for n in list(graph.inputs) + [l.output for l in launches] + [x for l in launches for x in l.inputs] \
                + list(graph.outputs):
            if n not in self.buffers:
                self._sizes[n] = max(n.numel * n.dtype.itemsize, 1)
                self.buffers[n] = rt.alloc(self._sizes[n])
                if n.op != Op.INPUT:
                    rt.fill_unwritten(self.buffers[n], self._sizes[n])
        self._args = self._arg_lists(self.buffers)
        self.lanes = lanes_.plan_lanes([l.output for l in launches], [list(l.inputs) for l in launches],
                                       [l.library is not None for l in launches])
        self.concurrent = False          # off until measured on a GPU (benchmarks/lanes_ab.py)
        self._side: list = []            # a pycuda stream per lane and their events (lanes.new_events),
        self._events: dict = {}          # made on the first concurrent call

    @property
    def code_identity(self) -> str:
        """Everything a call runs: the source and each launch (geometry, library call, which
        buffers it reads and writes). Executables with equal identities compute the same thing
        equally fast, whatever schedule made them (the search times one of them)."""
        number = {n: f"in{i}" for i, n in enumerate(self.graph.inputs)}
        number.update({l.output: f"v{i}" for i, l in enumerate(self.launches) if l.output not in number})
        launches = [(l.name, l.kind, l.grid, l.block, l.shared, repr(l.library), repr(l.tensor_maps),
                     [number.get(n, "?") for n in [l.output] + list(l.inputs)]) for l in self.launches]
        outputs = [number.get(o, "?") for o in self.graph.outputs]
        return f"{self.source}\n{launches!r}\n{outputs!r}"

    def _arg_lists(self, buffers) -> list[list[int]]:
        return [[int(buffers[l.output])] + [int(buffers[n]) for n in l.inputs] for l in self.launches]

    def device_program(self) -> DeviceProgram:
        """The launches over keys (graph nodes) for device-array calls (backends/cuda/device_run.py)."""
        steps = [LibraryStep(l.name, l.library, [l.output] + list(l.inputs)) if l.library is not None else
                 KernelStep(l.name, l.grid, l.block, l.shared, [l.output] + list(l.inputs), l.tensor_maps)
                 for l in self.launches]
        return DeviceProgram(self.module.binary, steps, list(self.graph.inputs), list(self.graph.outputs),
                             {n: int(b) for n, b in self.buffers.items()},
                             lanes=self.lanes if self.concurrent else None)

    # --- running ---------------------------------------------------------------------------
    def upload(self, args, buffers=None) -> None:
        buffers = buffers or self.buffers
        drv = self.rt.drv
        if len(args) != len(self.graph.inputs):
            raise ValueError(f"expected {len(self.graph.inputs)} inputs, got {len(args)}")
        for node, a in zip(self.graph.inputs, args):
            arr = np.ascontiguousarray(a, dtype=node.dtype.np)
            if arr.size != node.numel:
                raise ValueError(f"input {node.arg} has {arr.size} elements, expected {node.numel}")
            if arr.size:   # as bytes: bf16 (ml_dtypes) arrays do not export a buffer
                drv.memcpy_htod(buffers[node], arr.reshape(-1).view(np.uint8))

    def launch_all(self, args_lists=None, stream=None) -> None:
        args_lists = args_lists or self._args
        drv = self.rt.drv

        def launch(i: int, s) -> None:
            l = self.launches[i]
            try:
                self._launch(i, l, self.functions[i], args_lists[i], s)
            except (drv.Error, RuntimeError) as e:
                raise CUDAFailure("launch", f"{l.name}: {e}") from None

        if not self.concurrent or self.lanes.count == 1:
            for i in range(len(self.launches)):
                launch(i, stream)
            return
        # every lane on a stream of the executable's own (pycuda's, which are blocking): the legacy
        # default stream's work before the call (uploads) precedes them, and its work after the
        # call (downloads, the benchmark's stop event) waits for them, with no explicit join
        if not self._side:
            self._side = [drv.Stream() for _ in range(self.lanes.count)]
            self._events = lanes_.new_events(self.lanes, driver.new_event)
        streams = self._side if stream is None else [stream] + self._side[1:]
        handles = [int(s.handle) for s in streams]
        lanes_.enqueue(self.lanes, lambda i, k: launch(i, streams[k]),
                       lambda e, k: driver.record(e, handles[k]), lambda k, e: driver.wait(handles[k], e),
                       self._events, self._events[-1])

    def _launch(self, i: int, l: Launch, f, args, stream=None) -> None:
        if l.library is not None:
            l.library.run(args, stream)     # on the same stream (cublasSetStream)
        elif i in self._map_launches:
            k = self._map_launches[i]
            k.values[:] = args              # (its maps follow the pointers)
            k.launch(int(stream.handle) if stream is not None else 0)
        elif stream is None:
            f.prepared_call(l.grid, l.block, *args, shared_size=l.shared)
        else:
            f.prepared_async_call(l.grid, l.block, stream, *args, shared_size=l.shared)

    def download(self) -> list[np.ndarray]:
        outs = []
        for o in self.graph.outputs:
            arr = np.empty(o.shape, dtype=o.dtype.np)
            if arr.size:
                self.rt.drv.memcpy_dtoh(arr.reshape(-1).view(np.uint8), self.buffers[o])
            outs.append(arr)
        return outs

    def __call__(self, *args) -> list[np.ndarray]:
        with _on_device(self.rt):
            self.upload(args)
            self.launch_all()
            self.rt.synchronize()
            return self.download()

    def benchmark(self, args, warmup: int = 10, repeat: int = 50) -> list[float]:
        """Seconds per run (CUDA events around each run) on device-resident inputs.

        When all inputs together are smaller than 2x the L2 cache, several copies are kept on
        the device and the runs rotate through them, so repeated runs do not time the cache.
        """
        with _on_device(self.rt):
            return self._benchmark(args, warmup, repeat)

    def _benchmark(self, args, warmup: int, repeat: int) -> list[float]:
        drv = self.rt.drv
        in_bytes = sum(n.numel * n.dtype.itemsize for n in self.graph.inputs)
        copies = 1 if in_bytes >= 2 * self.rt.info.l2_bytes or in_bytes == 0 else \
            min(8, -(-2 * self.rt.info.l2_bytes // max(in_bytes, 1)))
        self.upload(args)
        sets = [self._args]
        extra = []
        for _ in range(copies - 1):
            bufs = dict(self.buffers)
            for n in self.graph.inputs:
                bufs[n] = self.rt.alloc(self._sizes[n])
                extra.append((bufs[n], self._sizes[n]))
            self.upload(args, bufs)
            sets.append(self._arg_lists(bufs))
        try:
            for i in range(warmup):
                self.launch_all(sets[i % len(sets)])
            self.rt.synchronize()
            times = []
            start, stop = drv.Event(), drv.Event()
            for i in range(repeat):
                start.record()
                self.launch_all(sets[i % len(sets)])
                stop.record()
                stop.synchronize()
                times.append(stop.time_since(start) / 1e3)
            self.rt.synchronize()
            return times
        finally:
            for buf, size in extra:
                self.rt.release(buf, size)

    def profile(self, args, repeat: int = 20) -> list[tuple[str, float]]:
        """Median seconds per launch (CUDA events around each one) over `repeat` runs, in order."""
        with _on_device(self.rt):
            return self._profile(args, repeat)

    def _profile(self, args, repeat: int) -> list[tuple[str, float]]:
        drv = self.rt.drv
        self.upload(args)
        self.launch_all()
        events = [drv.Event() for _ in range(len(self.launches) + 1)]
        times: list[list[float]] = [[] for _ in self.launches]
        for _ in range(repeat):
            events[0].record()
            for i, (l, f, a) in enumerate(zip(self.launches, self.functions, self._args)):
                self._launch(i, l, f, a)
                events[i + 1].record()
            events[-1].synchronize()
            for i in range(len(self.launches)):
                times[i].append(events[i + 1].time_since(events[i]) / 1e3)
        return [(l.name, float(np.median(t))) for l, t in zip(self.launches, times)]

    def close(self) -> None:
        with _DEVICE_LOCK:
            if self._events:
                with _on_device(self.rt):
                    for e in self._events.values():
                        driver.destroy_event(e)
                self._events, self._side = {}, []
            if self._map_launches:
                self._raw_module.close()
                self._map_launches = {}
            for n, buf in self.buffers.items():
                self.rt.release(buf, self._sizes[n])
            self.buffers = {}

    def explain(self) -> str:
        return "\n".join(f"{l.name}: {l.kind} grid={l.grid} block={l.block} smem={l.shared} {l.detail}"
                         for l in self.launches)
