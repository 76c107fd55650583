"""The pycuda layer: one device context, modules from cubins, launches whose failures are data.

pycuda is imported here only (lazily, by `get_runtime`), so the rest of the backend can render
and compile kernels on machines without a GPU. The context is the device's primary context,
shared with other CUDA users in the process (PyTorch uses the same one).
"""
from __future__ import annotations

import atexit
import os
from dataclasses import dataclass

_RUNTIME = None


class CUDAFailure(RuntimeError):
    """A candidate rejected on the device: compile error, resources, launch failure, fault."""

    def __init__(self, stage: str, reason: str, log: str = ""):
        super().__init__(f"{stage}: {reason}")
        self.stage, self.reason, self.log = stage, reason, log


@dataclass
class DeviceInfo:
    name: str
    arch: str                 # e.g. "sm_90", from the compute capability
    sm_count: int
    l2_bytes: int
    smem_per_block_optin: int
    max_threads_per_block: int


class Runtime:
    def __init__(self):
        import pycuda.driver as drv
        self.drv = drv
        drv.init()
        if drv.Device.count() == 0:
            raise CUDAFailure("device", "no CUDA device")
        self.ordinal = int(os.environ.get("SATURN_CUDA_DEVICE", "0"))
        self.device = drv.Device(self.ordinal)
        self.context = self.device.retain_primary_context()
        self.context.push()
        atexit.register(self._close)
        a = drv.device_attribute
        cc = self.device.compute_capability()
        self.info = DeviceInfo(
            name=self.device.name(), arch=f"sm_{cc[0]}{cc[1]}",
            sm_count=self.device.get_attribute(a.MULTIPROCESSOR_COUNT),
            l2_bytes=self.device.get_attribute(a.L2_CACHE_SIZE),
            smem_per_block_optin=self.device.get_attribute(a.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
            max_threads_per_block=self.device.get_attribute(a.MAX_THREADS_PER_BLOCK))
        self._pool: dict[int, list] = {}

    def _close(self):
        try:
            self.context.pop()
        except Exception:
            pass

    # --- memory ----------------------------------------------------------------------------
    def alloc(self, nbytes: int):
        """A device buffer of at least nbytes (reused from the pool when one is free). The pool
        keeps released buffers by exact size, so a search whose candidates need other sizes
        grows it: where the device is out of memory the pool is freed and the allocation tried
        once more."""
        nbytes = max(256, (nbytes + 255) // 256 * 256)
        free = self._pool.get(nbytes)
        if free:
            return free.pop()
        try:
            return self.drv.mem_alloc(nbytes)
        except self.drv.MemoryError:
            if not self.trim():
                raise
            return self.drv.mem_alloc(nbytes)

    def trim(self) -> int:
        """Free every pooled buffer; how many bytes that returned to the device."""
        freed = 0
        for size, bufs in self._pool.items():
            for buf in bufs:
                buf.free()
                freed += size
        self._pool.clear()
        return freed

    def fill_unwritten(self, buf, nbytes: int) -> None:
        """Every byte 0xFF (NaN for floats, -1 for integers): a pooled buffer may hold another
        executable's correct result, which would hide the elements a kernel leaves unwritten."""
        self.drv.memset_d8(buf, 0xFF, nbytes)

    def release(self, buf, nbytes: int) -> None:
        nbytes = max(256, (nbytes + 255) // 256 * 256)
        self._pool.setdefault(nbytes, []).append(buf)

    # --- modules and launches ---------------------------------------------------------------
    def load(self, cubin: bytes) -> "LoadedModule":
        try:
            return LoadedModule(self.drv.module_from_buffer(cubin), cubin)
        except self.drv.Error as e:
            raise CUDAFailure("load", str(e)) from None

    def function(self, module, name: str, threads: int, shared: int, nargs: int):
        """The kernel `name`, checked against its launch shape; prepared for `nargs` pointers."""
        drv = self.drv
        try:
            f = module.get_function(name)
        except drv.Error as e:
            raise CUDAFailure("load", f"{name}: {e}") from None
        fa = drv.function_attribute
        max_threads = f.get_attribute(fa.MAX_THREADS_PER_BLOCK)
        if threads > max_threads:
            raise CUDAFailure("resources", f"{name}: {threads} threads per block but only {max_threads} fit "
                                           f"its {f.get_attribute(fa.NUM_REGS)} registers per thread")
        static = f.get_attribute(fa.SHARED_SIZE_BYTES)
        if static + shared > self.info.smem_per_block_optin:
            raise CUDAFailure("resources", f"{name}: {static + shared} bytes of shared memory, the device "
                                           f"allows {self.info.smem_per_block_optin}")
        if shared > 48 * 1024:
            try:
                f.set_attribute(fa.MAX_DYNAMIC_SHARED_SIZE_BYTES, shared)
            except drv.Error as e:
                raise CUDAFailure("resources", f"{name}: cannot raise shared memory to {shared}: {e}") from None
        f.prepare("P" * nargs)
        return f

    def synchronize(self) -> None:
        try:
            self.context.synchronize()
        except self.drv.Error as e:
            raise CUDAFailure("run", f"kernel fault: {e}") from None


class LoadedModule:
    """A pycuda module and the cubin it came from (the device-array path loads the same cubin
    through the driver API, `backends/cuda/driver.py`, to launch on a caller's stream)."""

    def __init__(self, module, binary: bytes):
        self.module, self.binary = module, binary

    def get_function(self, name: str):
        return self.module.get_function(name)


def get_runtime() -> Runtime:
    global _RUNTIME
    if _RUNTIME is None:
        _RUNTIME = Runtime()
    return _RUNTIME
