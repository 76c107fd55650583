"""compiler.saved: a compiled function saved to a file loads back and gives the same results;
a damaged or inconsistent file is rejected before anything in it is built."""
from __future__ import annotations

import json

import numpy as np
import pytest

import compiler
from compiler import cache as cache_mod
from compiler import saved
from compiler.saved import SavedFileError

SPECS = (compiler.spec((16, 40)), compiler.spec((40,)))


def block(x, w):
    return (x * w).gelu().softmax(-1)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return compiler.compile(block, *SPECS, budget=0.5, quiet=True, max_schedules=1,
                            cache=str(tmp_path_factory.mktemp("cache")))


def _inputs():
    rng = np.random.default_rng(3)
    return rng.standard_normal((16, 40), dtype=np.float32), rng.standard_normal(40, dtype=np.float32)


def test_round_trip_gives_identical_results(compiled, tmp_path):
    path = saved.save(compiled, tmp_path / "block.saturn")
    loaded = saved.load(path)
    x, w = _inputs()
    np.testing.assert_array_equal(loaded(x, w), compiled(x, w))
    assert loaded.cache == "loaded" and "loaded from" in loaded.explain()
    assert [str(s) for s in loaded.specs] == [str(s) for s in SPECS]


def test_a_cache_hit_saves_too(compiled, tmp_path):
    hit = compiler.compile(block, *SPECS, budget=0.5, quiet=True, cache=compiled.result.cache_path.rsplit("/", 1)[0])
    assert hit.cache == "hit"
    loaded = saved.load(saved.save(hit, tmp_path / "hit.saturn"))
    x, w = _inputs()
    np.testing.assert_array_equal(loaded(x, w), compiled(x, w))


def _damage(path, how):
    data = bytearray(path.read_bytes())
    if how == "flipped byte":
        data[-10] ^= 0x40
    elif how == "truncated":
        data = data[:-25]
    elif how == "bad magic":
        data[:6] = b"NOTSAT"
    elif how == "header inputs":   # a consistent checksum, but a header that lies about the inputs
        magic_end = data.index(b"\n") + 1
        end = data.index(b"\n", magic_end)
        header = json.loads(data[magic_end:end])
        header["key"]["inputs"][0][0] = [16, 41]
        data = data[:magic_end] + json.dumps(header, sort_keys=True).encode() + data[end:]
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how, why", [("flipped byte", "checksum mismatch"), ("truncated", "truncated"),
                                      ("bad magic", "bad magic"), ("header inputs", "inconsistent: its program takes")])
def test_a_damaged_file_is_rejected_and_never_built(compiled, tmp_path, monkeypatch, how, why):
    path = tmp_path / "block.saturn"
    saved.save(compiled, path)
    _damage(path, how)
    built = []
    monkeypatch.setattr(cache_mod, "build", lambda *a: built.append(a))
    with pytest.raises(SavedFileError, match=why):
        saved.load(path)
    assert not built


def test_nothing_to_save_for_the_interpreter(tmp_path):
    f = compiler.compile(block, *SPECS, target="reference")
    with pytest.raises(SavedFileError, match="no built program"):
        saved.save(f, tmp_path / "ref.saturn")


def test_missing_file(tmp_path):
    with pytest.raises(SavedFileError, match="no such file"):
        saved.load(tmp_path / "nope.saturn")
