"""The device buffer pool (backends/cuda/runtime.py) against a stand-in driver with a fixed
amount of memory: buffers released by one candidate are kept for the next of the same size,
and an allocation the device cannot satisfy frees the pool and is tried again."""
from __future__ import annotations

import pytest

from backends.cuda.runtime import Runtime


class _Driver:
    class MemoryError(Exception):
        pass

    def __init__(self, capacity: int):
        self.capacity, self.used = capacity, 0

    def mem_alloc(self, nbytes: int):
        if self.used + nbytes > self.capacity:
            raise self.MemoryError("cuMemAlloc failed: out of memory")
        self.used += nbytes
        driver = self

        class Allocation:
            def free(self):
                driver.used -= nbytes
        return Allocation()


def _runtime(capacity: int) -> Runtime:
    rt = object.__new__(Runtime)        # (no device: only the pool's logic)
    rt.drv, rt._pool = _Driver(capacity), {}
    return rt


def test_a_released_buffer_serves_the_next_request_of_its_size():
    rt = _runtime(4096)
    a = rt.alloc(1000)
    rt.release(a, 1000)
    assert rt.alloc(1024) is a and rt.drv.used == 1024


def test_out_of_memory_frees_the_pool_and_retries():
    rt = _runtime(4096)
    for size in (1024, 2048):        # two candidates' buffers, released into the pool
        rt.release(rt.alloc(size), size)
    assert rt.drv.used == 3072
    rt.alloc(3072)                   # another size: fits only once the pool is freed
    assert rt.drv.used == 3072 and rt._pool == {}


def test_out_of_memory_with_an_empty_pool_is_reported():
    rt = _runtime(1024)
    rt.alloc(1024)
    with pytest.raises(_Driver.MemoryError):
        rt.alloc(256)
