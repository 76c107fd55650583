"""Device arrays in and out of a compiled function (target 'cuda'), without host copies.

An argument is a *device array* when it is a PyTorch CUDA tensor, a CuPy array, any object with
`__cuda_array_interface__`, or a DLPack object on a CUDA device (read through torch or CuPy's
`from_dlpack`). A call whose inputs are device arrays:

- checks each input's shape, dtype and device against the compiled specs (an error names the
  input), and reads it in place; a non-contiguous input, or one whose address is not 256-byte
  aligned (Saturn's kernels assume the alignment of their own buffers), is first copied into a
  fresh contiguous device buffer on the call's stream (counted in `explain()`);
- runs on the caller's stream: `stream=` if given (an int handle or a torch / CuPy / pycuda
  stream object), else torch's current stream when a torch tensor is among the inputs, else
  CuPy's current stream, else the stream a `__cuda_array_interface__` names, else the legacy
  default stream; it does not synchronize;
- returns fresh device arrays of the first input's kind (torch in -> torch out, CuPy in -> CuPy
  out, else `backends.cuda.device_array.DeviceArray`), so a later call never overwrites them.

Host inputs (numpy, CPU tensors) never mix with device inputs: that is an error naming the
argument, not a hidden copy.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field

import numpy as np

from compiler.errors import DTypeError, SaturnError, ShapeError, TargetError, UnsupportedError
from ir.dtypes import DType, as_dtype

ALIGN = 256
TORCH, CUPY, CAI = "torch", "cupy", "cuda array"
_TORCH_NAMES = {DType.f32: "float32", DType.f16: "float16", DType.bf16: "bfloat16", DType.f64: "float64",
                DType.i32: "int32", DType.i64: "int64", DType.i8: "int8", DType.u8: "uint8", DType.bool: "bool"}
_DLPACK_CUDA = (2, 13)   # kDLCUDA, kDLCUDAManaged


class DeviceArgumentError(SaturnError, ValueError):
    """A device array that cannot be an input as it is: host memory, another device, a mask."""


def _torch():
    return sys.modules.get("torch")


def _cupy():
    return sys.modules.get("cupy")


def kind_of(a) -> str | None:
    """'torch', 'cupy' or 'cuda array' for a device array; None for anything else (host data)."""
    torch, cupy = _torch(), _cupy()
    if torch is not None and isinstance(a, torch.Tensor):
        return TORCH if a.is_cuda else None
    if cupy is not None and isinstance(a, cupy.ndarray):
        return CUPY
    if hasattr(type(a), "__cuda_array_interface__") or hasattr(a, "__cuda_array_interface__"):
        return CAI
    dev = getattr(a, "__dlpack_device__", None)
    if dev is not None and not isinstance(a, np.ndarray):
        try:
            device_type = int(dev()[0])
        except Exception:  # noqa: BLE001 - not a usable DLPack object: treated as host data
            return None
        return "dlpack" if device_type in _DLPACK_CUDA else None
    return None


def any_device(args) -> bool:
    return any(kind_of(a) is not None for a in args)


@dataclass
class Input:
    index: int
    kind: str
    array: object          # the object whose memory is read (kept alive for the call)
    ptr: int
    shape: tuple
    dtype: DType | None    # None: a 2-byte void type ('<V2', how bf16 travels through the interface)
    contiguous: bool
    device: int | None     # the ordinal when the array says; None: asked of the driver
    stream: int | None     # a `__cuda_array_interface__` stream to synchronize with


def _dtype_or_none(dt) -> DType | None:
    dt = np.dtype(dt)
    if dt.kind == "V" and dt.itemsize == 2:
        return None
    return as_dtype(dt)


def _c_strides(shape: tuple, itemsize: int) -> tuple:
    out, step = [], itemsize
    for s in reversed(shape):
        out.append(step)
        step *= max(s, 1)
    return tuple(reversed(out))


def _contiguous(shape: tuple, strides, itemsize: int) -> bool:
    if strides is None:
        return True
    return all(st == c for s, st, c in zip(shape, strides, _c_strides(shape, itemsize)) if s > 1)


def _from_dlpack(a, i: int):
    torch, cupy = _torch(), _cupy()
    if torch is None:
        try:
            import torch
        except ImportError:
            torch = None
    if torch is not None:
        return TORCH, torch.from_dlpack(a)
    if cupy is not None:
        return CUPY, cupy.from_dlpack(a)
    raise UnsupportedError(f"input {i} is a DLPack array on a CUDA device; reading DLPack needs torch or cupy "
                           f"(or pass an object with __cuda_array_interface__)", "call")


def describe(a, i: int, kind: str) -> Input:
    """What a device array is: address, shape, dtype, layout, device."""
    if kind == TORCH:
        try:
            dtype = as_dtype(a.dtype)
        except TypeError:
            dtype = a.dtype
        return Input(i, kind, a, a.data_ptr(), tuple(a.shape), dtype, a.is_contiguous(), a.device.index, None)
    if kind == CUPY:
        return Input(i, kind, a, int(a.data.ptr), tuple(a.shape), _maybe_dtype(a.dtype),
                     bool(a.flags.c_contiguous), int(a.device.id), None)
    cai = a.__cuda_array_interface__
    if cai.get("mask") is not None:
        raise DeviceArgumentError(f"input {i} has a mask (__cuda_array_interface__ 'mask'); Saturn reads dense arrays",
                                  "call")
    shape = tuple(int(s) for s in cai["shape"])
    dt = np.dtype(cai["typestr"])
    strides = cai.get("strides")
    stream = cai.get("stream")
    return Input(i, kind, a, int(cai["data"][0]), shape, _maybe_dtype(dt),
                 _contiguous(shape, strides, dt.itemsize), None, int(stream) if stream is not None else None)


def _maybe_dtype(dt):
    try:
        return _dtype_or_none(dt)
    except TypeError:
        return np.dtype(dt)


def classify(args, specs, name: str, ordinal_of) -> list[Input]:
    """Every argument as a checked device Input (errors name the argument).
    `ordinal_of(ptr)` asks the driver which device owns an address (raises for host memory)."""
    inputs = []
    for i, (a, s) in enumerate(zip(args, specs)):
        kind = kind_of(a)
        label = f"input {i}" + (f" ({s.name})" if getattr(s, "name", None) else "")
        if kind is None:
            raise DeviceArgumentError(f"{label} is host data ({type(a).__name__}) but other inputs are device arrays; "
                                      f"pass every input on the device, or every input on the host", "call")
        if kind == "dlpack":
            kind, a = _from_dlpack(a, i)
        x = describe(a, i, kind)
        if x.shape != tuple(s.shape):
            raise ShapeError(f"{label} has shape {x.shape}, expected {tuple(s.shape)}", "call")
        ok = x.dtype == s.dtype or (x.dtype is None and s.dtype == DType.bf16)
        if not ok:
            got = x.dtype.value if isinstance(x.dtype, DType) else str(x.dtype)
            raise DTypeError(f"{label} has dtype {got}, expected {s.dtype.value}; convert it first "
                             f"(e.g. .to(torch.{_TORCH_NAMES[s.dtype]}) or .astype)", "call")
        if x.device is None and x.ptr and math.prod(x.shape):
            try:
                x.device = ordinal_of(x.ptr)
            except Exception as e:  # noqa: BLE001 - the driver's reason, named for this input
                raise DeviceArgumentError(f"{label} is not device memory Saturn can read: {e}", "call") from None
        inputs.append(x)
    return inputs


def check_devices(inputs: list[Input], ordinal: int, name: str) -> None:
    for x in inputs:
        if x.device is not None and x.device != ordinal:
            raise DeviceArgumentError(f"input {x.index} is on cuda:{x.device}, but {name} runs on cuda:{ordinal} "
                                      f"(move it with .to('cuda:{ordinal}') or set SATURN_CUDA_DEVICE)", "call")


# --- streams ---------------------------------------------------------------------------------

def stream_handle(stream) -> int:
    """A raw CUstream handle from an int or a torch / CuPy / pycuda stream object."""
    if isinstance(stream, bool):
        raise TypeError("a bool is not a stream")
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr", "handle"):
        v = getattr(stream, attr, None)
        if isinstance(v, int):
            return v
    raise TypeError(f"stream must be an int handle or a torch/cupy/pycuda stream, got {type(stream).__name__}")


def choose_stream(inputs: list[Input], stream, ordinal: int) -> int:
    if stream is not None:
        return stream_handle(stream)
    if any(x.kind == TORCH for x in inputs):
        return _torch().cuda.current_stream(ordinal).cuda_stream
    if any(x.kind == CUPY for x in inputs):
        return _cupy().cuda.get_current_stream().ptr
    for x in inputs:
        if x.stream is not None:
            return x.stream
    return 0


# --- the call ----------------------------------------------------------------------------------

def _torch_stream(handle: int, ordinal: int):
    torch = _torch()
    if handle == 0:
        return torch.cuda.default_stream(ordinal)
    return torch.cuda.ExternalStream(handle, device=torch.device("cuda", ordinal))


class _TorchStream:
    """torch's current stream set to `handle` for allocations and copies, if it differs
    (`current`: torch's current stream handle when the caller already knows it)."""

    def __init__(self, handle: int, ordinal: int, current: int | None = None):
        self.handle, self.ordinal, self.ctx, self.current = handle, ordinal, None, current

    def __enter__(self):
        torch = _torch()
        current = self.current if self.current is not None else torch.cuda.current_stream(self.ordinal).cuda_stream
        if current != self.handle:
            self.ctx = torch.cuda.stream(_torch_stream(self.handle, self.ordinal))
            self.ctx.__enter__()
        return self

    def __exit__(self, *exc):
        if self.ctx is not None:
            self.ctx.__exit__(*exc)


def _cupy_stream(handle: int):
    cupy = _cupy()
    return cupy.cuda.Stream.null if handle == 0 else cupy.cuda.ExternalStream(handle)


def _contiguous_copy(x: Input, calls, stream: int, ordinal: int):
    """(address, owner, owned by Saturn) of a fresh contiguous, aligned copy of `x` made on `stream`.
    PyTorch's and CuPy's allocators order the reuse of their memory on the stream; Saturn's own
    temporaries are freed at once, so the call synchronizes before dropping them."""
    if x.kind == TORCH:
        with _TorchStream(stream, ordinal):
            c = x.array.contiguous() if not x.contiguous else x.array.clone()
        return c.data_ptr(), c, False
    if x.kind == CUPY:
        cupy = _cupy()
        with cupy.cuda.Device(ordinal), _cupy_stream(stream):
            c = cupy.ascontiguousarray(x.array) if not x.contiguous else x.array.copy()
        return int(c.data.ptr), c, False
    if x.contiguous:   # misaligned only: one device-to-device copy
        nbytes = math.prod(x.shape) * _itemsize(x)
        c = calls.new_array(x.shape, np.uint8 if x.dtype is None else x.dtype.np, stream)
        calls.copy(c.ptr, x.ptr, nbytes, stream)
        return c.ptr, c, True
    torch = _torch()
    if torch is None:
        try:
            import torch
        except ImportError:
            torch = None
    if torch is not None:
        with _TorchStream(stream, ordinal):
            c = torch.as_tensor(x.array, device=torch.device("cuda", ordinal)).contiguous()
        return c.data_ptr(), c, False
    raise UnsupportedError(f"input {x.index} is a strided __cuda_array_interface__ array; copying it needs torch "
                           f"(or pass a contiguous array)", "call")


def _itemsize(x: Input) -> int:
    return 2 if x.dtype is None else x.dtype.itemsize


def new_output(kind: str, shape: tuple, dtype: DType, calls, stream: int, ordinal: int, torch_current=None):
    """(array, address) of a fresh device array of `kind`."""
    if kind == TORCH:
        torch = _torch()
        with _TorchStream(stream, ordinal, torch_current):
            t = torch.empty(shape, dtype=getattr(torch, _TORCH_NAMES[dtype]), device=torch.device("cuda", ordinal))
        return t, t.data_ptr()
    if kind == CUPY and dtype != DType.bf16:   # CuPy has no bfloat16: those come back as DeviceArray
        cupy = _cupy()
        with cupy.cuda.Device(ordinal), _cupy_stream(stream):
            c = cupy.empty(shape, dtype=dtype.np)
        return c, int(c.data.ptr)
    d = calls.new_array(shape, dtype.np, stream)
    return d, d.ptr


@dataclass
class Stats:
    calls: int = 0
    copied_inputs: int = 0     # non-contiguous or misaligned inputs copied on the device
    streams: set = field(default_factory=set)
    fast_calls: int = 0        # calls that took the repeat path (FastPath)

    def describe(self) -> str:
        return (f"device-array calls: {self.calls} ({self.fast_calls} by the repeat path); inputs copied on the "
                f"device (non-contiguous or unaligned): {self.copied_inputs}; streams used: {len(self.streams)}")


def call(calls, args, specs, outputs, stream, name: str, stats: Stats):
    """Run one device-array call through `calls` (backends.cuda.device_run.DeviceCalls or a
    stand-in with the same methods); returns the outputs as a list."""
    inputs = classify(args, specs, name, calls.pointer_device)
    check_devices(inputs, calls.ordinal, name)
    handle = choose_stream(inputs, stream, calls.ordinal)
    keep, sync = [], False    # temporaries that must live until the call's work is done
    ptrs = []
    for x in inputs:
        empty = not math.prod(x.shape)
        if empty or (x.contiguous and x.ptr % ALIGN == 0):
            ptrs.append(x.ptr)
            continue
        ptr, owner, owned = _contiguous_copy(x, calls, handle, calls.ordinal)
        ptrs.append(ptr)
        keep.append(owner)
        sync |= owned
        stats.copied_inputs += 1
    for h in {x.stream for x in inputs if x.stream is not None and x.stream != handle}:
        calls.synchronize(h)   # another producer's stream (a __cuda_array_interface__ hint): wait for it
    torch_current = _torch().cuda.current_stream(calls.ordinal).cuda_stream \
        if any(x.kind == TORCH for x in inputs) else None
    if stream is not None and torch_current is not None and torch_current != handle:
        s = _torch_stream(handle, calls.ordinal)   # torch's allocator must not reuse them before we are done
        for x in inputs:
            if x.kind == TORCH:
                x.array.record_stream(s)
    kind = inputs[0].kind if inputs else CAI
    results, out_ptrs, out_bytes = [], [], []
    for o in outputs:
        arr, ptr = new_output(kind, tuple(o.shape), o.dtype, calls, handle, calls.ordinal, torch_current)
        results.append(arr)
        out_ptrs.append(ptr)
        out_bytes.append(math.prod(o.shape) * o.dtype.itemsize)
    calls.run(ptrs, out_ptrs, out_bytes, handle)
    if sync:
        calls.synchronize(handle)
    stats.calls += 1
    stats.streams.add(handle)
    return results


def plain_torch_call(args, stream) -> bool:
    """Whether a call that just ran was one FastPath repeats: no stream= and every input a
    contiguous, aligned PyTorch CUDA tensor (the devices and specs were checked by the call)."""
    torch = _torch()
    return (stream is None and torch is not None and len(args) > 0 and
            all(isinstance(a, torch.Tensor) and a.is_cuda and a.is_contiguous() and a.data_ptr() % ALIGN == 0
                for a in args))


class FastPath:
    """The repeat of a plain call on PyTorch CUDA tensors, checked in a few attribute reads per
    input: a tensor on the function's device with the compiled shape and dtype, contiguous and
    256-byte aligned; no stream= (torch's current stream); fresh torch outputs. Anything else
    returns None and the caller takes the full path, which checks, copies or names the problem.
    `torch` is the module (a stand-in in tests)."""

    def __init__(self, torch, specs, outputs, ordinal: int):
        self.torch, self.ordinal = torch, ordinal
        self.device = torch.device("cuda", ordinal)
        self.inputs = [(tuple(s.shape), getattr(torch, _TORCH_NAMES[s.dtype])) for s in specs]
        self.outputs = [(tuple(o.shape), getattr(torch, _TORCH_NAMES[o.dtype])) for o in outputs]
        self.out_bytes = [math.prod(o.shape) * o.dtype.itemsize for o in outputs]
        raw = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)
        self.current_stream = raw if raw is not None else (
            lambda ordinal: torch.cuda.current_stream(ordinal).cuda_stream)

    def __call__(self, calls, args, stats: Stats):
        if len(args) != len(self.inputs):
            return None
        tensor, ptrs = self.torch.Tensor, []
        for a, (shape, dtype) in zip(args, self.inputs):
            if not (isinstance(a, tensor) and a.is_cuda and a.dtype == dtype and a.shape == shape
                    and a.get_device() == self.ordinal and a.is_contiguous()):
                return None
            p = a.data_ptr()
            if p % ALIGN:
                return None
            ptrs.append(p)
        handle = self.current_stream(self.ordinal)
        empty, device = self.torch.empty, self.device
        outs = [empty(shape, dtype=dtype, device=device) for shape, dtype in self.outputs]
        calls.run(ptrs, [o.data_ptr() for o in outs], self.out_bytes, handle)
        stats.calls += 1
        stats.fast_calls += 1
        stats.streams.add(handle)
        return outs


def device_calls_for(executable, graphs: bool):
    """The executable's device-array entry points: its own `device_calls(graphs)` if it has one
    (a stand-in in tests), else the CUDA backend's `DeviceCalls`."""
    own = getattr(executable, "device_calls", None)
    if own is not None:
        return own(graphs)
    from backends.cuda.device_run import DeviceCalls
    return DeviceCalls(executable, graphs)


def host_call_error(target: str, kind: str, index: int, name: str) -> SaturnError:
    return TargetError(f"input {index} is a {kind} device array, but {name} was compiled for {target!r}; "
                       f"compile with target='cuda' or pass host arrays", "call")
