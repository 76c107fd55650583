"""Big verification data sets travel to the workers as files, not through the pipe.

Each array is written as its raw bytes; what it takes to read it back (Saturn dtype name, shape,
byte count, CRC-32 of the bytes) travels in the request as a `StoredArray`. The dtype goes by
Saturn's name rather than in a .npy header because numpy's format cannot name bf16 (an
ml_dtypes type): it would come back as a 2-byte void type. A file whose size or checksum does
not match is rejected with `DamagedDataError`, never read as data.
"""
from __future__ import annotations

import os
import zlib
from dataclasses import dataclass

import numpy as np

from ir.dtypes import DType, as_dtype

FILE_BYTES = 16 << 20  # data sets larger than this are written once to files, not piped


class DamagedDataError(RuntimeError):
    """A stored array's file is missing, of the wrong size, or does not match its checksum."""


@dataclass(frozen=True)
class StoredArray:
    """Where one array's bytes are and what they must be."""
    path: str
    dtype: str             # a Saturn dtype name ('bf16', 'f32', ...)
    shape: tuple[int, ...]
    nbytes: int
    crc32: int


def _bytes_of(a: np.ndarray) -> np.ndarray:
    """The array's bytes in C order, as a flat uint8 array (no copy when already contiguous)."""
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def write_array(a, path: str) -> StoredArray:
    a = np.asarray(a)
    dtype = as_dtype(a.dtype)   # a type Saturn lacks is a bug upstream: fail here, not in the worker
    raw = _bytes_of(a)
    with open(path, "wb") as f:
        f.write(raw.data)
    return StoredArray(path, dtype.value, tuple(a.shape), raw.size, zlib.crc32(raw.data))


def read_array(s: StoredArray) -> np.ndarray:
    """The stored array, read-only and mapped from its file (every worker of a search reads the
    same pages instead of its own copy: an embedding table's five input sets are 0.8 GB)."""
    try:
        raw = np.asarray(np.memmap(s.path, dtype=np.uint8, mode="r")) if s.nbytes else np.fromfile(s.path, dtype=np.uint8)
    except (OSError, ValueError) as e:
        raise DamagedDataError(f"stored array {s.path} cannot be read: {e}") from None
    if raw.size != s.nbytes:
        raise DamagedDataError(f"stored array {s.path} has {raw.size} bytes, expected {s.nbytes}")
    if zlib.crc32(raw.data) != s.crc32:
        raise DamagedDataError(f"stored array {s.path} does not match its checksum (the file is damaged)")
    return raw.view(DType(s.dtype).np).reshape(s.shape)


def store_arrays(sets, directory: str, name: str, limit: int | None = None):
    """`sets` (lists of arrays) as is when their total size is at most `limit` bytes (default
    FILE_BYTES), else as lists of `StoredArray`s written under `directory`."""
    limit = FILE_BYTES if limit is None else limit
    if sets is None or any(isinstance(a, StoredArray) for s in sets for a in s) \
            or sum(np.asarray(a).nbytes for s in sets for a in s) <= limit:
        return sets     # (sets already stored stay as they are)
    return [[write_array(a, os.path.join(directory, f"{name}-{i}-{j}.bin")) for j, a in enumerate(arrays)]
            for i, arrays in enumerate(sets)]


def load_arrays(sets):
    """The inverse of `store_arrays` (stored arrays come back read-only, mapped from their files)."""
    if not sets:
        return sets
    return [[read_array(a) if isinstance(a, StoredArray) else a for a in arrays] for arrays in sets]
