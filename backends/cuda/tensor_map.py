"""Tensor maps (CUtensorMap): what a TMA copy needs to know of a global tensor, encoded by the
driver (`cuTensorMapEncodeTiled`) for one device address.

A kernel that copies by TMA takes its maps as its first parameters (128 bytes each, passed by
value), then its pointers. A map embeds the tensor's address, so it is encoded again whenever a
call binds another buffer to the operand (`MapArgs`, which keeps the last few sets); encoding is
a host-side call of a few microseconds and needs no device work.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

from ir.dtypes import DType

MAP_BYTES = 128
# CUtensorMapDataType, and the enums' values used here
_DATA_TYPE = {DType.f16: 6, DType.bf16: 9, DType.f32: 7}
_SWIZZLE_128B, _L2_PROMOTION_128B, _INTERLEAVE_NONE, _FILL_ZERO = 3, 2, 0, 0


@dataclass(frozen=True)
class TensorMap:
    """A tiled view of the launch's pointer argument `arg`: `dims` innermost first, element
    `strides` of the outer dims, a `box` copied at a time, starting `offset` elements in."""
    arg: int
    dtype: DType
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    offset: int = 0

    def describe(self) -> str:
        return f"map of arg {self.arg}: dims {list(self.dims)} box {list(self.box)}"


def encode(m: TensorMap, pointer: int) -> bytes:
    """The 128-byte CUtensorMap of `m` over the buffer at `pointer` (128-byte swizzle, zeros
    past the edges)."""
    from backends.cuda import driver
    size = m.dtype.itemsize
    rank = len(m.dims)
    room = (ctypes.c_ubyte * (MAP_BYTES + 64))()        # the driver wants the map 64-byte aligned
    at = -ctypes.addressof(room) % 64
    out = (ctypes.c_ubyte * MAP_BYTES).from_buffer(room, at)
    dims = (ctypes.c_ulonglong * rank)(*m.dims)
    strides = (ctypes.c_ulonglong * max(rank - 1, 1))(*[s * size for s in m.strides])
    box = (ctypes.c_uint * rank)(*m.box)
    unit = (ctypes.c_uint * rank)(*([1] * rank))
    driver.call("cuTensorMapEncodeTiled", out, _DATA_TYPE[m.dtype], rank,
                ctypes.c_void_p(pointer + m.offset * size), dims, strides, box, unit,
                _INTERLEAVE_NONE, _SWIZZLE_128B, _L2_PROMOTION_128B, _FILL_ZERO, stage="launch")
    return bytes(out)


class MapArgs:
    """The encoded maps of one launch for its last few sets of pointer arguments: a caller that
    cycles through a few buffers (the timing loop's rotated input copies, a framework's
    allocator) encodes each set once, so no timed launch waits on the host's encoding."""

    KEEP = 16

    def __init__(self, maps: tuple[TensorMap, ...]):
        self.maps = maps
        self._encoded: dict[tuple, list[bytes]] = {}

    def for_pointers(self, pointers) -> list[bytes]:
        key = tuple(int(pointers[m.arg]) for m in self.maps)
        got = self._encoded.pop(key, None)
        if got is None:
            if len(self._encoded) >= self.KEEP:
                del self._encoded[next(iter(self._encoded))]     # the set used longest ago
            got = [encode(m, p) for m, p in zip(self.maps, key)]
        self._encoded[key] = got                                 # (now the newest)
        return got
