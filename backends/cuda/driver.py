"""The few CUDA driver calls pycuda does not offer, through ctypes on libcuda.

pycuda (2026.1) launches only on its own `Stream` objects and has no graph API, so launches on
a caller's stream (a raw `CUstream` handle from PyTorch or CuPy) and CUDA graphs go through the
driver directly: modules are loaded a second time here from the same cubin to get `CUfunction`
handles. Every call's result is checked; a failure raises `CUDAFailure` naming the call and the
driver's error name. The library is loaded on first use, so importing this module needs no GPU.
"""
from __future__ import annotations

import ctypes
import ctypes.util

from backends.cuda.runtime import CUDAFailure

c_void_p, c_uint, c_int, c_size_t, c_ull = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_size_t, ctypes.c_ulonglong

CU_STREAM_NON_BLOCKING = 0x1
CU_EVENT_DISABLE_TIMING = 0x2
CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2
CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_UNIFIED = 1, 2, 4
CU_STREAM_LEGACY, CU_STREAM_PER_THREAD = 0x1, 0x2

# name -> (symbols to try, newest first; argument types)
_SIGNATURES = {
    "cuModuleLoadData": (["cuModuleLoadData"], [ctypes.POINTER(c_void_p), c_void_p]),
    "cuModuleUnload": (["cuModuleUnload"], [c_void_p]),
    "cuModuleGetFunction": (["cuModuleGetFunction"], [ctypes.POINTER(c_void_p), c_void_p, ctypes.c_char_p]),
    "cuFuncSetAttribute": (["cuFuncSetAttribute"], [c_void_p, c_int, c_int]),
    "cuLaunchKernel": (["cuLaunchKernel"], [c_void_p, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint,
                                             c_void_p, ctypes.POINTER(c_void_p), ctypes.POINTER(c_void_p)]),
    "cuStreamCreate": (["cuStreamCreate"], [ctypes.POINTER(c_void_p), c_uint]),
    "cuStreamDestroy": (["cuStreamDestroy_v2", "cuStreamDestroy"], [c_void_p]),
    "cuStreamSynchronize": (["cuStreamSynchronize"], [c_void_p]),
    "cuStreamWaitEvent": (["cuStreamWaitEvent"], [c_void_p, c_void_p, c_uint]),
    "cuEventCreate": (["cuEventCreate"], [ctypes.POINTER(c_void_p), c_uint]),
    "cuEventDestroy": (["cuEventDestroy_v2", "cuEventDestroy"], [c_void_p]),
    "cuEventRecord": (["cuEventRecord"], [c_void_p, c_void_p]),
    "cuEventSynchronize": (["cuEventSynchronize"], [c_void_p]),
    "cuMemcpyDtoDAsync": (["cuMemcpyDtoDAsync_v2", "cuMemcpyDtoDAsync"], [c_ull, c_ull, c_size_t, c_void_p]),
    "cuPointerGetAttribute": (["cuPointerGetAttribute"], [c_void_p, c_int, c_ull]),
    "cuStreamBeginCapture": (["cuStreamBeginCapture_v2"], [c_void_p, c_int]),
    "cuStreamEndCapture": (["cuStreamEndCapture"], [c_void_p, ctypes.POINTER(c_void_p)]),
    "cuGraphInstantiateWithFlags": (["cuGraphInstantiateWithFlags"], [ctypes.POINTER(c_void_p), c_void_p, c_ull]),
    "cuGraphLaunch": (["cuGraphLaunch"], [c_void_p, c_void_p]),
    "cuGraphDestroy": (["cuGraphDestroy"], [c_void_p]),
    "cuGraphExecDestroy": (["cuGraphExecDestroy"], [c_void_p]),
    "cuGetErrorName": (["cuGetErrorName"], [c_int, ctypes.POINTER(ctypes.c_char_p)]),
    "cuCtxGetCurrent": (["cuCtxGetCurrent"], [ctypes.POINTER(c_void_p)]),
    "cuTensorMapEncodeTiled": (["cuTensorMapEncodeTiled"], [c_void_p, c_int, c_uint, c_void_p, c_void_p, c_void_p,
                                                             c_void_p, c_void_p, c_int, c_int, c_int, c_int]),
}

_LIB = None
_FUNCS: dict = {}


def _lib():
    global _LIB
    if _LIB is None:
        names = ["libcuda.so.1", "libcuda.so", ctypes.util.find_library("cuda") or ""]
        errors = []
        for name in filter(None, names):
            try:
                _LIB = ctypes.CDLL(name)
                break
            except OSError as e:
                errors.append(f"{name}: {e}")
        else:
            raise CUDAFailure("driver", "libcuda could not be loaded (" + "; ".join(errors) + ")")
    return _LIB


def fn(name: str):
    """The ctypes function for driver call `name` (its newest exported symbol)."""
    f = _FUNCS.get(name)
    if f is None:
        symbols, argtypes = _SIGNATURES[name]
        lib = _lib()
        for sym in symbols:
            f = getattr(lib, sym, None)
            if f is not None:
                break
        if f is None:
            raise CUDAFailure("driver", f"libcuda exports none of {symbols}")
        f.argtypes, f.restype = argtypes, c_int
        _FUNCS[name] = f
    return f


def error_name(code: int) -> str:
    s = ctypes.c_char_p()
    try:
        if fn("cuGetErrorName")(code, ctypes.byref(s)) == 0 and s.value:
            return s.value.decode()
    except CUDAFailure:
        pass
    return f"CUresult {code}"


def call(name: str, *args, stage: str = "run") -> None:
    """Run driver call `name`; CUDAFailure(stage) unless it returns CUDA_SUCCESS."""
    code = fn(name)(*args)
    if code != 0:
        raise CUDAFailure(stage, f"{name} failed: {error_name(code)}")


# --- modules and launches ------------------------------------------------------------------

class RawModule:
    """A cubin loaded through the driver API, for launches on any stream."""

    def __init__(self, binary: bytes):
        self._binary = ctypes.create_string_buffer(binary, len(binary))   # kept alive while loading
        self.handle = c_void_p()
        call("cuModuleLoadData", ctypes.byref(self.handle), ctypes.cast(self._binary, c_void_p), stage="load")
        self._functions: dict[str, c_void_p] = {}

    def function(self, name: str, shared: int) -> c_void_p:
        f = self._functions.get(name)
        if f is None:
            f = c_void_p()
            call("cuModuleGetFunction", ctypes.byref(f), self.handle, name.encode(), stage="load")
            if shared > 48 * 1024:
                call("cuFuncSetAttribute", f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared, stage="resources")
            self._functions[name] = f
        return f

    def close(self) -> None:
        if self.handle:
            fn("cuModuleUnload")(self.handle)   # best effort at teardown
            self.handle = c_void_p()


class KernelLaunch:
    """One kernel launch whose arguments are device pointers, after the tensor maps `maps`
    (backends/cuda/tensor_map.py) of some of them; pointer slots may be rebound per call (the
    maps follow at the next launch)."""

    def __init__(self, function: c_void_p, grid, block, shared: int, pointers: list[int], maps: tuple = ()):
        from backends.cuda.tensor_map import MAP_BYTES, MapArgs
        self.function, self.shared = function, int(shared)
        self.grid = tuple(int(g) for g in (tuple(grid) + (1, 1, 1))[:3])
        self.block = tuple(int(b) for b in (tuple(block) + (1, 1, 1))[:3])
        n = len(pointers)
        self.values = (c_ull * n)(*pointers)
        base = ctypes.addressof(self.values)
        self.maps = MapArgs(tuple(maps)) if maps else None
        self._map_bufs = [(ctypes.c_ubyte * MAP_BYTES)() for _ in maps]
        self.params = (c_void_p * (len(maps) + n))(*[ctypes.addressof(m) for m in self._map_bufs],
                                                    *[base + 8 * i for i in range(n)])

    def launch(self, stream: int) -> None:
        """Enqueue on `stream` (a raw CUstream handle; 0 is the legacy default stream).
        The driver copies the argument values at launch, so slots may change right after."""
        if self.maps is not None:
            for buf, encoded in zip(self._map_bufs, self.maps.for_pointers(self.values)):
                ctypes.memmove(buf, encoded, len(encoded))
        g, b = self.grid, self.block
        code = fn("cuLaunchKernel")(self.function, g[0], g[1], g[2], b[0], b[1], b[2], self.shared,
                                    c_void_p(stream or None), self.params, None)
        if code != 0:
            raise CUDAFailure("launch", f"cuLaunchKernel failed: {error_name(code)}")


def current_context() -> int | None:
    """The calling thread's current context handle (None where none is current)."""
    c = c_void_p()
    call("cuCtxGetCurrent", ctypes.byref(c))
    return c.value


# --- streams, events, graphs ---------------------------------------------------------------

def new_stream() -> int:
    s = c_void_p()
    call("cuStreamCreate", ctypes.byref(s), CU_STREAM_NON_BLOCKING)
    return s.value


def new_event() -> int:
    e = c_void_p()
    call("cuEventCreate", ctypes.byref(e), CU_EVENT_DISABLE_TIMING)
    return e.value


def destroy_stream(stream: int) -> None:
    fn("cuStreamDestroy_v2")(c_void_p(stream))


def destroy_event(event: int) -> None:
    fn("cuEventDestroy_v2")(c_void_p(event))


def record(event: int, stream: int) -> None:
    call("cuEventRecord", c_void_p(event), c_void_p(stream or None))


def wait(stream: int, event: int) -> None:
    call("cuStreamWaitEvent", c_void_p(stream or None), c_void_p(event), 0)


def event_synchronize(event: int) -> None:
    call("cuEventSynchronize", c_void_p(event))


def stream_synchronize(stream: int) -> None:
    call("cuStreamSynchronize", c_void_p(stream or None))


def copy_d2d(dst: int, src: int, nbytes: int, stream: int) -> None:
    if nbytes:
        call("cuMemcpyDtoDAsync", dst, src, nbytes, c_void_p(stream or None))


def pointer_device(ptr: int) -> int:
    """The device ordinal that owns device pointer `ptr`; CUDAFailure if it is not device memory."""
    kind, ordinal = c_uint(), c_int()
    call("cuPointerGetAttribute", ctypes.byref(kind), CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr, stage="pointer")
    if kind.value not in (CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_UNIFIED):
        raise CUDAFailure("pointer", f"{ptr:#x} is host memory (memory type {kind.value}), not device memory")
    call("cuPointerGetAttribute", ctypes.byref(ordinal), CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr, stage="pointer")
    return ordinal.value


def begin_capture(stream: int) -> None:
    call("cuStreamBeginCapture", c_void_p(stream), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, stage="capture")


def end_capture(stream: int) -> int:
    """The captured graph (CUgraph handle); raises if the capture was invalidated."""
    g = c_void_p()
    call("cuStreamEndCapture", c_void_p(stream), ctypes.byref(g), stage="capture")
    if not g.value:
        raise CUDAFailure("capture", "cuStreamEndCapture returned no graph")
    return g.value


def instantiate(graph: int) -> int:
    e = c_void_p()
    call("cuGraphInstantiateWithFlags", ctypes.byref(e), c_void_p(graph), 0, stage="capture")
    return e.value


def graph_launch(graph_exec: int, stream: int) -> None:
    call("cuGraphLaunch", c_void_p(graph_exec), c_void_p(stream or None), stage="launch")


def graph_destroy(graph: int) -> None:
    fn("cuGraphDestroy")(c_void_p(graph))


def graph_exec_destroy(graph_exec: int) -> None:
    fn("cuGraphExecDestroy")(c_void_p(graph_exec))
