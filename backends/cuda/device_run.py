"""Running a built program on the caller's device memory and stream, without host copies.

`DeviceProgram` is what an executable exposes for this: its cubin, its steps in order (each a
kernel whose arguments are device pointers, named by keys: graph nodes or buffer names), which
keys are the program's inputs and outputs, and the addresses of its own buffers for the rest
(intermediates, allocated once and reused on every call). `DeviceRunner` binds the caller's
input and output addresses into the steps and enqueues them on the caller's stream, as plain
launches or as a replayed CUDA graph (`graphs.GraphReplay`); it never synchronizes.

Lifetime: outputs are written straight into buffers the caller allocated for this call, so a
later call never overwrites a result the caller holds. Intermediates are shared by all calls:
each call records an event on its stream, and a call on another stream first waits for it;
`wait_idle()` blocks the host until the last call is done (before host-array calls, which
use the same buffers).

A step kind other than a module kernel (a library call) provides `make(module, pointers)`
returning an object with `values` (a ctypes `c_ulonglong` array: its pointer arguments in
`args` order, rebound per call) and `launch(stream)`, which must enqueue all its work on
`stream` (so that stream capture records it).
"""
from __future__ import annotations

from dataclasses import dataclass

from backends.cuda import driver
from backends.cuda import lanes as lanes_
from backends.cuda.graphs import GraphReplay
from backends.cuda.runtime import CUDAFailure


@dataclass
class KernelStep:
    name: str
    grid: tuple
    block: tuple
    shared: int
    args: list            # keys of the pointer arguments, in the kernel's parameter order
    maps: tuple = ()      # tensor maps of some of them, passed first (backends/cuda/tensor_map.py)

    def make(self, module: driver.RawModule, pointers: list[int]) -> driver.KernelLaunch:
        return driver.KernelLaunch(module.function(self.name, self.shared), self.grid, self.block, self.shared,
                                   pointers, self.maps)


@dataclass
class LibraryStep:
    """A launch run by a library (`Launch.library`, e.g. backends/cuda/cublas.py's CublasCall,
    whose `run(pointers, stream)` takes an object with the raw handle as `.handle`)."""
    name: str
    call: object
    args: list

    def make(self, module, pointers: list[int]) -> "_LibraryLaunch":
        return _LibraryLaunch(self, pointers)


class _Handle:
    def __init__(self, handle: int):
        self.handle = handle


class _LibraryLaunch:
    def __init__(self, step: LibraryStep, pointers: list[int]):
        import ctypes
        self.step = step
        self.values = (ctypes.c_ulonglong * len(pointers))(*pointers)

    def launch(self, stream: int) -> None:
        try:
            self.step.call.run(list(self.values), _Handle(stream))
        except CUDAFailure:
            raise
        except RuntimeError as e:
            raise CUDAFailure("launch", f"{self.step.name}: {e}") from None


@dataclass
class DeviceProgram:
    binary: bytes
    steps: list           # KernelStep (or another kind with make/args)
    inputs: list          # keys, in call order
    outputs: list         # keys, in result order (a key may repeat)
    buffers: dict         # key -> device address of the executable's own buffer
    lanes: lanes_.Lanes | None = None   # concurrent streams for independent steps (None: in order)


class DeviceRunner:
    def __init__(self, program: DeviceProgram, graphs: bool = True):
        self.program = program
        outs = list(dict.fromkeys(program.outputs))
        clash = [k for k in outs if k in set(program.inputs)]
        if clash:
            raise CUDAFailure("build", f"output {clash[0]!r} is an input buffer: device calls need it computed")
        self._external = {k: i for i, k in enumerate(program.inputs)}
        for k in outs:
            self._external[k] = len(program.inputs) + outs.index(k)
        self._first_out = [outs.index(k) for k in program.outputs]   # result i is written at distinct slot
        self.module = driver.RawModule(program.binary)
        self.steps, self._slots = [], []
        for s in program.steps:
            pointers = [0 if a in self._external else int(program.buffers[a]) for a in s.args]
            step = s.make(self.module, pointers)
            self.steps.append(step)
            self._slots += [(step.values, j, self._external[a]) for j, a in enumerate(s.args) if a in self._external]
        self.capture_stream = driver.new_stream()
        self.event = driver.new_event()
        self.lanes = program.lanes if program.lanes is not None else lanes_.sequential(len(self.steps))
        self._side = [driver.new_stream() for _ in range(self.lanes.count - 1)]
        self._events = lanes_.new_events(self.lanes, driver.new_event)
        self.last_stream: int | None = None
        self.graphs = GraphReplay(self, enabled=graphs)
        self.copied_duplicates = 0

    # --- GraphReplay's recorder ---------------------------------------------------------------
    def _bind(self, binding: tuple) -> None:
        for values, j, e in self._slots:
            values[j] = binding[e]

    def _enqueue(self, stream: int) -> None:
        if self.lanes.count == 1:
            for step in self.steps:
                step.launch(stream)
            return
        handles = [stream] + self._side
        lanes_.enqueue(self.lanes, lambda i, k: self.steps[i].launch(handles[k]),
                       lambda e, k: driver.record(e, handles[k]), lambda k, e: driver.wait(handles[k], e),
                       self._events, self._events[-1])

    def plain(self, binding: tuple, stream: int) -> None:
        self._bind(binding)
        self._enqueue(stream)

    def capture(self, binding: tuple) -> int:
        self._bind(binding)
        driver.begin_capture(self.capture_stream)
        try:
            self._enqueue(self.capture_stream)   # (the other lanes join the capture through its events)
        except BaseException:
            try:   # end the capture so the stream stays usable; drop what was recorded
                driver.graph_destroy(driver.end_capture(self.capture_stream))
            except CUDAFailure:
                pass
            raise
        graph = driver.end_capture(self.capture_stream)
        try:
            return driver.instantiate(graph)
        finally:
            driver.graph_destroy(graph)

    def replay(self, handle: int, stream: int) -> None:
        driver.graph_launch(handle, stream)

    def destroy(self, handle: int) -> None:
        driver.graph_exec_destroy(handle)   # deferred by the driver while a launch is in flight

    # --- calls ----------------------------------------------------------------------------------
    def run(self, in_ptrs: list[int], out_ptrs: list[int], out_bytes: list[int], stream: int) -> str:
        """Enqueue one call on `stream`: inputs read and outputs written in place."""
        if len(in_ptrs) != len(self.program.inputs) or len(out_ptrs) != len(self.program.outputs):
            raise CUDAFailure("run", f"expected {len(self.program.inputs)} inputs and {len(self.program.outputs)} "
                                     f"outputs, got {len(in_ptrs)} and {len(out_ptrs)}")
        distinct = [None] * (len(self._external) - len(in_ptrs))
        for i, slot in enumerate(self._first_out):
            if distinct[slot] is None:
                distinct[slot] = out_ptrs[i]
        if self.last_stream is not None and self.last_stream != stream:
            driver.wait(stream, self.event)
        how = self.graphs.run(tuple(in_ptrs) + tuple(distinct), stream)
        for i, slot in enumerate(self._first_out):   # the same value returned twice: a copy each
            if out_ptrs[i] != distinct[slot]:
                driver.copy_d2d(out_ptrs[i], distinct[slot], out_bytes[i], stream)
                self.copied_duplicates += 1
        driver.record(self.event, stream)
        self.last_stream = stream
        return how

    def wait_idle(self) -> None:
        if self.last_stream is not None:
            driver.event_synchronize(self.event)

    def describe(self) -> str:
        return self.graphs.describe() + f"; {len(self.steps)} launches per call"


def program_of(exe) -> DeviceProgram:
    """The DeviceProgram of a built CUDA executable (the template path's or the kernel IR's)."""
    own = getattr(exe, "device_program", None)
    if own is not None:
        return own()
    program = getattr(exe, "program", None)
    if program is not None and hasattr(exe, "launches") and hasattr(exe, "buffers"):   # kir.KIRExecutable
        steps = [KernelStep(l.name, l.grid, l.block, 0, list(l.buffers)) for l in exe.launches]
        return DeviceProgram(exe.module.binary, steps, list(program.inputs), list(program.outputs),
                             {k: int(v) for k, v in exe.buffers.items()})
    raise CUDAFailure("run", f"{type(exe).__name__} cannot run on device arrays")


class DeviceCalls:
    """An executable's device-array entry points (what `compiler/device_args.py` calls), each
    under the device lock with the context current on the calling thread."""

    def __init__(self, exe, graphs: bool = True):
        from backends.cuda.executable import _DEVICE_LOCK, _on_device
        self._on_device, self._lock, self.rt = _on_device, _DEVICE_LOCK, exe.rt
        self.ordinal = exe.rt.ordinal
        self._context = getattr(exe.rt.context, "handle", None)   # the device's primary context
        with _on_device(self.rt):
            self.runner = DeviceRunner(program_of(exe), graphs)

    def run(self, in_ptrs: list[int], out_ptrs: list[int], out_bytes: list[int], stream: int) -> str:
        # a call enqueues through driver calls only (launches, graphs, events), which need the
        # context current on this thread, not pycuda's context stack: where PyTorch or an earlier
        # push left this device's primary context current, pushing it again is skipped
        with self._lock:
            if self._context is not None and driver.current_context() == self._context:
                return self.runner.run(in_ptrs, out_ptrs, out_bytes, stream)
            with self._on_device(self.rt):
                return self.runner.run(in_ptrs, out_ptrs, out_bytes, stream)

    def pointer_device(self, ptr: int) -> int:
        with self._on_device(self.rt):
            return driver.pointer_device(ptr)

    def new_array(self, shape: tuple, dtype, stream: int):
        from backends.cuda.device_array import DeviceArray
        with self._on_device(self.rt):
            return DeviceArray.allocate(self.rt, shape, dtype, stream)

    def copy(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        with self._on_device(self.rt):
            driver.copy_d2d(dst, src, nbytes, stream)

    def wait_idle(self) -> None:
        with self._on_device(self.rt):
            self.runner.wait_idle()

    def synchronize(self, stream: int) -> None:
        with self._on_device(self.rt):
            driver.stream_synchronize(stream)

    def set_graphs(self, enabled: bool) -> None:
        with self._on_device(self.rt):
            if enabled and self.runner.graphs.off_reason == "turned off (graphs=False)":
                self.runner.graphs.off_reason = ""
            elif not enabled:
                self.runner.graphs.disable("turned off (graphs=False)")

    def describe(self) -> str:
        return self.runner.describe()
