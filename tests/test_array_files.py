"""Verification data written to files for the workers comes back bit for bit in every dtype
(bf16 included, which a .npy file cannot name), and a damaged file is rejected, never misread."""
from __future__ import annotations

import numpy as np
import pytest

import compiler as saturn
from compiler import array_files
from compiler.array_files import DamagedDataError, StoredArray, load_arrays, read_array, store_arrays, write_array
from ir.dtypes import DType


def _awkward_values(dtype: DType, shape) -> np.ndarray:
    """Random bits of the type (NaN payloads, -0, infinities, subnormals for floats)."""
    rng = np.random.default_rng(11)
    if dtype == DType.bool:
        return rng.random(shape) < 0.5
    bits = rng.integers(0, 256, size=int(np.prod(shape)) * dtype.itemsize, dtype=np.uint8)
    return bits.view(dtype.np).reshape(shape)


@pytest.mark.parametrize("dtype", list(DType), ids=[d.value for d in DType])
def test_every_dtype_round_trips_bit_for_bit(dtype, tmp_path):
    a = _awkward_values(dtype, (3, 5, 7))
    b = read_array(write_array(a, str(tmp_path / "a.bin")))
    assert b.dtype == dtype.np and b.shape == a.shape
    assert b.tobytes() == a.tobytes()


def test_non_contiguous_and_zero_dimensional_arrays_round_trip(tmp_path):
    a = _awkward_values(DType.bf16, (6, 8))[::2, 1::3]
    assert not a.flags.c_contiguous
    b = read_array(write_array(a, str(tmp_path / "a.bin")))
    assert b.dtype == a.dtype and b.tobytes() == np.ascontiguousarray(a).tobytes()
    s = np.array(3.5, dtype=DType.bf16.np)
    assert read_array(write_array(s, str(tmp_path / "s.bin"))).tobytes() == s.tobytes()


def test_only_sets_over_the_limit_go_to_files(tmp_path):
    sets = [[_awkward_values(DType.bf16, (4, 4)), _awkward_values(DType.i8, (3,))]]
    assert store_arrays(sets, str(tmp_path), "small") is sets            # 35 bytes, under the default
    stored = store_arrays(sets, str(tmp_path), "big", limit=16)
    assert all(isinstance(s, StoredArray) for s in stored[0])
    back = load_arrays(stored)
    assert [(b.dtype, b.tobytes()) for b in back[0]] == [(a.dtype, a.tobytes()) for a in sets[0]]


@pytest.mark.parametrize("damage", ["truncated", "extended", "flipped", "missing"])
def test_a_damaged_file_is_rejected(damage, tmp_path):
    path = tmp_path / "a.bin"
    stored = write_array(_awkward_values(DType.f32, (16,)), str(path))
    raw = bytearray(path.read_bytes())
    if damage == "truncated":
        path.write_bytes(raw[:-1])
    elif damage == "extended":
        path.write_bytes(raw + b"\0")
    elif damage == "flipped":
        raw[17] ^= 0x10
        path.write_bytes(raw)
    else:
        path.unlink()
    with pytest.raises(DamagedDataError, match="a.bin"):
        read_array(stored)


def test_a_type_saturn_lacks_is_refused_when_written(tmp_path):
    with pytest.raises(TypeError, match="int16"):
        write_array(np.zeros(3, np.int16), str(tmp_path / "a.bin"))


def test_bf16_compile_verifies_through_files(monkeypatch):
    # limit 0: every data set goes through files, as data sets over 16 MiB do (before the fix,
    # bf16 came back from .npy files as void '|V2' and every trial was rejected)
    written = []
    real_write = array_files.write_array
    monkeypatch.setattr(array_files, "FILE_BYTES", 0)
    monkeypatch.setattr(array_files, "write_array", lambda a, path: written.append(path) or real_write(a, path))
    f = saturn.compile(lambda x, b: x * 2 + b, saturn.spec((64, 32), "bf16"), saturn.spec((32,), "bf16"),
                       target="cpu", budget=1.0, quiet=True, cache=False, max_candidates=1)
    assert written, "the data sets did not go through files"
    assert f.result.winner is not None and f.result.winner.status == "chosen"
    x = np.random.default_rng(3).standard_normal((64, 32)).astype(DType.bf16.np)
    b = np.linspace(-1, 1, 32, dtype=np.float32).astype(DType.bf16.np)
    expected = (x.astype(np.float32) * 2 + b.astype(np.float32)).astype(DType.bf16.np)
    assert np.asarray(f(x, b)).tobytes() == expected.tobytes()


def test_stored_arrays_come_back_read_only(tmp_path):
    """Workers map the files instead of copying them; nothing a worker runs may change a data set."""
    a = _awkward_values(DType.f32, (64, 64))
    b = read_array(write_array(a, str(tmp_path / "a.bin")))
    assert not b.flags.writeable and type(b) is np.ndarray
    with pytest.raises(ValueError):
        b[0, 0] = 1.0
