"""A device array Saturn allocates: results of calls whose inputs were neither PyTorch nor CuPy
arrays (any object with `__cuda_array_interface__`). It exposes the same interface (version 3),
so PyTorch, CuPy, Numba and others read it without copies, and owns its memory (freed when the
last reference goes)."""
from __future__ import annotations

import numpy as np

from backends.cuda import driver


class DeviceArray:
    def __init__(self, allocation, shape: tuple, dtype, stream: int):
        self._allocation = allocation          # a pycuda DeviceAllocation (or any int()-able owner)
        self.ptr = int(allocation)
        self.shape, self.dtype = tuple(int(s) for s in shape), np.dtype(dtype)
        self.stream = int(stream)              # the stream the data was written on

    @classmethod
    def allocate(cls, rt, shape: tuple, dtype, stream: int) -> "DeviceArray":
        nbytes = max(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize, 1)
        return cls(rt.drv.mem_alloc(nbytes), shape, dtype, stream)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def __cuda_array_interface__(self) -> dict:
        # stream 0 is not allowed by the protocol: the legacy default stream is 1
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "version": 3,
                "strides": None, "stream": self.stream or driver.CU_STREAM_LEGACY}

    def numpy(self) -> np.ndarray:
        """A host copy, after the work on the array's stream is done."""
        from backends.cuda.runtime import get_runtime
        from backends.cuda.executable import _on_device
        rt = get_runtime()
        out = np.empty(self.shape, self.dtype)
        with _on_device(rt):
            driver.stream_synchronize(self.stream)
            if out.size:
                rt.drv.memcpy_dtoh(out.reshape(-1).view(np.uint8), self.ptr)
        return out

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, ptr={self.ptr:#x})"
