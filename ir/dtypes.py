"""Element types: f64, f32, f16, bf16, i64, i32, i8, u8, bool, with their numpy equivalents
and promotion. numpy's bf16 comes from ml_dtypes, imported when a bf16 array is first needed:
its import takes 1.2 s (it registers all of its float8 and int4 types), which every process
(each search worker, the command line) paid before."""
from __future__ import annotations

import enum

import numpy as np


class DType(enum.Enum):
    f32 = "f32"
    f16 = "f16"
    bf16 = "bf16"
    f64 = "f64"
    i32 = "i32"
    i64 = "i64"
    i8 = "i8"
    u8 = "u8"
    bool = "bool"

    def __repr__(self) -> str:
        return f"dtypes.{self.value}"

    @property
    def np(self) -> np.dtype:
        dt = _TO_NUMPY.get(self)
        return dt if dt is not None else _bf16()

    @property
    def itemsize(self) -> int:
        return self.np.itemsize

    @property
    def is_float(self) -> bool:
        return self in FLOATS

    @property
    def is_int(self) -> bool:
        """An integer type (bool is not one)."""
        return self in INTS

    @property
    def is_signed(self) -> bool:
        return self in FLOATS or self in (DType.i64, DType.i32, DType.i8)

    @property
    def compute(self) -> "DType":
        """The type arithmetic runs in: half types compute in f32 and round on store."""
        return DType.f32 if self in HALVES else self

    @property
    def lowest(self):
        """The smallest value (-inf for floats): the identity of a max reduction."""
        if self.is_float:
            return float("-inf")
        return False if self == DType.bool else int(np.iinfo(self.np).min)

    @property
    def highest(self):
        """The largest value (inf for floats)."""
        if self.is_float:
            return float("inf")
        return True if self == DType.bool else int(np.iinfo(self.np).max)

    def wrap(self, value: int) -> int:
        """An integer reduced into this integer type's range, modulo 2**bits (as a cast does)."""
        bits = 8 * self.itemsize
        v = int(value) % (1 << bits)
        return v - (1 << bits) if self.is_signed and v >= 1 << (bits - 1) else v


FLOATS = frozenset({DType.f64, DType.f32, DType.f16, DType.bf16})
HALVES = frozenset({DType.f16, DType.bf16})
INTS = frozenset({DType.i64, DType.i32, DType.i8, DType.u8})
# integer types narrower than i32: their sums accumulate in i32 (see docs/ir.md), like bool's
SMALL_INTS = frozenset({DType.i8, DType.u8})

_TO_NUMPY = {
    DType.f32: np.dtype(np.float32),
    DType.f16: np.dtype(np.float16),
    DType.f64: np.dtype(np.float64),
    DType.i32: np.dtype(np.int32),
    DType.i64: np.dtype(np.int64),
    DType.i8: np.dtype(np.int8),
    DType.u8: np.dtype(np.uint8),
    DType.bool: np.dtype(np.bool_),
}
_FROM_NUMPY = {v: k for k, v in _TO_NUMPY.items()}


def _bf16() -> np.dtype:
    import ml_dtypes
    dt = np.dtype(ml_dtypes.bfloat16)
    _TO_NUMPY[DType.bf16], _FROM_NUMPY[dt] = dt, DType.bf16
    return dt


_NAMES = {"float32": DType.f32, "float16": DType.f16, "bfloat16": DType.bf16, "float64": DType.f64,
          "int32": DType.i32, "int64": DType.i64, "int8": DType.i8, "uint8": DType.u8,
          "half": DType.f16, "float": DType.f32, "double": DType.f64, "int": DType.i32, "long": DType.i64}

# dtypes PyTorch and numpy have that Saturn does not, with what to use instead
_MISSING = {"int16": "i32", "short": "i32", "uint16": "i32", "uint32": "i64 (the values fit)",
            "uint64": "i64 (the values must fit)", "float8_e4m3fn": "f16 or bf16", "float8_e5m2": "f16 or bf16"}

# Promotion order for mixed binary ops, like PyTorch: bool < u8, i8 < i32 < i64 < f16, bf16 <
# f32 < f64; f16 + bf16 -> f32 (as in PyTorch); u8 + i8 -> i32 (PyTorch: int16, which Saturn lacks).
_RANK = {DType.bool: 0, DType.u8: 1, DType.i8: 1, DType.i32: 2, DType.i64: 3, DType.f16: 4, DType.bf16: 4,
         DType.f32: 5, DType.f64: 6}


def as_dtype(x) -> DType:
    """Accept a DType, its name ('f16', 'float16'), a numpy dtype, or a torch dtype or its name."""
    if isinstance(x, DType):
        return x
    if x is None:    # np.dtype(None) would be float64
        raise TypeError(f"no dtype given; expected one of {[d.value for d in DType]}")
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
        dt = np.dtype(x)
        if dt.name == "bfloat16" and dt not in _FROM_NUMPY:   # an ml_dtypes array: it is imported
            _bf16()
        return _FROM_NUMPY[dt]
    except (TypeError, KeyError):
        name = np.dtype(x).name if _is_numpy_dtype(x) else None
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
            f"(no 16-bit or unsigned integers but u8); use {_MISSING[name]}")


def promote(a: DType, b: DType) -> DType:
    if a == b:
        return a
    if {a, b} == HALVES:
        return DType.f32
    if {a, b} == SMALL_INTS:
        return DType.i32
    return a if _RANK[a] > _RANK[b] else b


class dtypes:
    """Namespace so users can write `dtypes.f16`."""
    f32, f16, bf16, f64, i32, i64, i8, u8, bool = (DType.f32, DType.f16, DType.bf16, DType.f64, DType.i32,
                                                   DType.i64, DType.i8, DType.u8, DType.bool)
