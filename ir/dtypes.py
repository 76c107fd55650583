"""Element types: f32, f16, bf16, i32, bool, with their numpy equivalents and promotion."""
from __future__ import annotations

import enum

import ml_dtypes
import numpy as np


class DType(enum.Enum):
    f32 = "f32"
    f16 = "f16"
    bf16 = "bf16"
    i32 = "i32"
    bool = "bool"

    def __repr__(self) -> str:
        return f"dtypes.{self.value}"

    @property
    def np(self) -> np.dtype:
        return _TO_NUMPY[self]

    @property
    def itemsize(self) -> int:
        return self.np.itemsize

    @property
    def is_float(self) -> bool:
        return self in FLOATS

    @property
    def compute(self) -> "DType":
        """The type arithmetic runs in: half types compute in f32 and round on store."""
        return DType.f32 if self in HALVES else self


FLOATS = frozenset({DType.f32, DType.f16, DType.bf16})
HALVES = frozenset({DType.f16, DType.bf16})

_TO_NUMPY = {
    DType.f32: np.dtype(np.float32),
    DType.f16: np.dtype(np.float16),
    DType.bf16: np.dtype(ml_dtypes.bfloat16),
    DType.i32: np.dtype(np.int32),
    DType.bool: np.dtype(np.bool_),
}
_FROM_NUMPY = {v: k for k, v in _TO_NUMPY.items()}
_NAMES = {"float32": DType.f32, "float16": DType.f16, "bfloat16": DType.bf16,
          "int32": DType.i32, "half": DType.f16, "float": DType.f32, "int": DType.i32}

# dtypes PyTorch and numpy have that Saturn does not, with what to use instead
_MISSING = {"int64": "i32 (the values must fit)", "long": "i32 (the values must fit)",
            "float64": "f32", "double": "f32", "int8": "i32", "uint8": "i32", "int16": "i32",
            "uint16": "i32", "uint32": "i32", "uint64": "i32"}

# Promotion order for mixed binary ops (like PyTorch: bool < i32 < f16/bf16 < f32; f16+bf16 -> f32).
_RANK = {DType.bool: 0, DType.i32: 1, DType.f16: 2, DType.bf16: 2, DType.f32: 3}


def as_dtype(x) -> DType:
    """Accept a DType, its name ('f16', 'float16'), a numpy dtype, or a torch dtype or its name."""
    if isinstance(x, DType):
        return x
    if type(x).__module__ == "torch":  # torch.float16 and friends, without importing torch
        x = str(x)
    if isinstance(x, str):
        name = x.removeprefix("torch.")
        if name in DType.__members__:
            return DType[name]
        if name in _NAMES:
            return _NAMES[name]
        if name in _MISSING:
            raise TypeError(_missing_message(name))
        raise TypeError(f"unknown dtype {x!r}; expected one of {[d.value for d in DType]}")
    try:
        return _FROM_NUMPY[np.dtype(x)]
    except (TypeError, KeyError):
        name = np.dtype(x).name if x is not None and _is_numpy_dtype(x) else None   # dtype(None) is f64
        if name in _MISSING:
            raise TypeError(_missing_message(name)) from None
        raise TypeError(f"unsupported dtype {x!r}; Saturn supports {[d.value for d in DType]}") from None


def _is_numpy_dtype(x) -> bool:
    try:
        np.dtype(x)
        return True
    except TypeError:
        return False


def _missing_message(name: str) -> str:
    return (f"dtype {name} is not supported: Saturn has {', '.join(d.value for d in DType)} "
            f"(no 8-, 16-bit integer or 64-bit types); use {_MISSING[name]}")


def promote(a: DType, b: DType) -> DType:
    if a == b:
        return a
    if {a, b} == HALVES:
        return DType.f32
    return a if _RANK[a] > _RANK[b] else b


class dtypes:
    """Namespace so users can write `dtypes.f16`."""
    f32, f16, bf16, i32, bool = DType.f32, DType.f16, DType.bf16, DType.i32, DType.bool
