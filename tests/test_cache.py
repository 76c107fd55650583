"""The winner cache: round trip, and truncated / corrupted / foreign / hostile entries are ignored."""
from __future__ import annotations

import hashlib
import json
import os
import pickle

import numpy as np
import pytest

import compiler as saturn
from backends.reference import ReferenceBackend
from compiler import cache
from ir.interpreter import evaluate

SPEC = saturn.spec((4, 17))


def softmax(x):
    return x.softmax(-1)


def layernorm(x):
    return x.layer_norm((17,))


class _Original:
    def __init__(self, graph):
        self.graph, self.cost, self.description = graph, 1.0, "original program"


def _compile(fn, directory):
    # an injected backend runs the full search (target 'reference' alone would skip it); the
    # original program is the only candidate, to keep these tests about the cache
    return saturn.compile(fn, SPEC, target="refsearch", backend=ReferenceBackend(), budget=1.0, quiet=True,
                          cache=str(directory), candidates=[_Original(saturn.trace(fn, SPEC))])


def _x():
    return np.random.default_rng(1).standard_normal((4, 17)).astype(np.float32)


def _entry_file(directory):
    files = [f for f in os.listdir(directory) if f.endswith(".entry")]
    assert len(files) == 1, files
    return os.path.join(directory, files[0])


def test_round_trip(tmp_path):
    cold = _compile(softmax, tmp_path)
    assert cold.cache == "stored" and cold.result is not None
    warm = _compile(softmax, tmp_path)
    assert warm.cache == "hit" and warm.result is None
    assert warm.chosen.structural_hash() == cold.chosen.structural_hash()
    x = _x()
    assert warm(x).tobytes() == cold(x).tobytes()
    text = warm.explain()
    assert "cache hit" in text and "candidates:" in text and "generated code:" in text
    # no temporary files left behind by the atomic write
    assert [f for f in os.listdir(tmp_path) if f.startswith(".tmp-")] == []


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_damaged_entry_is_ignored_and_replaced(tmp_path, damage):
    _compile(softmax, tmp_path)
    path = _entry_file(tmp_path)
    data = open(path, "rb").read()
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":
        data = data[:-10] + bytes([data[-10] ^ 0xFF]) + data[-9:]
    elif damage == "garbage":
        data = b"\x80\x04not a cache entry at all"
    else:
        data = b""
    open(path, "wb").write(data)
    f = _compile(softmax, tmp_path)
    assert f.cache == "stored" and f.result.cache.startswith("miss (ignored invalid entry")
    x = _x()
    np.testing.assert_allclose(f(x), evaluate(f.graph, [x])[0], rtol=1e-6)
    assert _compile(softmax, tmp_path).cache == "hit"  # the rewritten entry is good again


def test_foreign_entry_is_ignored(tmp_path):
    # put layernorm's winner where softmax's entry belongs: the key inside does not match
    a, b = tmp_path / "a", tmp_path / "b"
    _compile(layernorm, a)
    _compile(softmax, b)
    os.replace(_entry_file(a), _entry_file(b))
    f = _compile(softmax, b)
    assert f.cache == "stored" and "different program" in f.result.cache
    x = _x()
    np.testing.assert_allclose(f(x), evaluate(f.graph, [x])[0], rtol=1e-6)


def test_entry_whose_program_does_not_fit_is_ignored(tmp_path):
    # a well-formed entry under softmax's key that holds another program (output shape differs)
    f = _compile(softmax, tmp_path)
    path = _entry_file(tmp_path)
    data = open(path, "rb").read()
    end = data.index(b"\n", len(cache.MAGIC))
    key = json.loads(data[len(cache.MAGIC):end])["key"]
    other = saturn.trace(lambda x: x.sum(-1, keepdim=True), SPEC)
    cache.store(key, cache.Entry(other, None, "not softmax", 1e-6, "forged"), str(tmp_path))
    g = _compile(softmax, tmp_path)
    assert g.cache == "stored" and "does not fit" in g.result.cache
    x = _x()
    assert g(x).tobytes() == f(x).tobytes()


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo owned > /dev/null",))


def test_entry_with_a_valid_checksum_but_foreign_code_is_not_unpickled(tmp_path, monkeypatch):
    payload = pickle.dumps(_Evil(), protocol=4)
    calls = []
    monkeypatch.setattr(os, "system", lambda *a: calls.append(a))
    _compile(softmax, tmp_path)
    path = _entry_file(tmp_path)
    data = open(path, "rb").read()
    end = data.index(b"\n", len(cache.MAGIC))
    header = json.loads(data[len(cache.MAGIC):end])
    header.update(size=len(payload), sha256=hashlib.sha256(payload).hexdigest())
    open(path, "wb").write(cache.MAGIC + json.dumps(header).encode() + b"\n" + payload)
    entry, _, why = cache.load(header["key"], str(tmp_path))
    assert entry is None and "payload rejected: not JSON" in why and not calls   # never unpickled


def test_key_covers_shapes_dtypes_target_device_version():
    g = saturn.trace(softmax, SPEC)
    base = cache.make_key(g, [SPEC], "cpu", "dev", "1")
    digests = {cache.key_digest(base)}
    g2 = saturn.trace(softmax, saturn.spec((4, 18)))
    g3 = saturn.trace(softmax, saturn.spec((4, 17), "f16"))
    for k in [cache.make_key(g2, [saturn.spec((4, 18))], "cpu", "dev", "1"),
              cache.make_key(g3, [saturn.spec((4, 17), "f16")], "cpu", "dev", "1"),
              cache.make_key(g, [SPEC], "cuda", "dev", "1"),
              cache.make_key(g, [SPEC], "cpu", "other", "1"),
              cache.make_key(g, [SPEC], "cpu", "dev", "2")]:
        digests.add(cache.key_digest(k))
    assert len(digests) == 6


def test_cache_dir_env_override(monkeypatch, tmp_path):
    monkeypatch.setenv("SATURN_CACHE_DIR", str(tmp_path / "c"))
    assert cache.cache_dir() == str(tmp_path / "c")
    f = saturn.compile(softmax, SPEC, target="refsearch", backend=ReferenceBackend(), budget=1.0,
                       quiet=True, cache=True, candidates=[_Original(saturn.trace(softmax, SPEC))])
    assert f.cache == "stored" and os.listdir(tmp_path / "c")


def test_cache_directory_as_path(monkeypatch, tmp_path):
    # a pathlib.Path names the directory just as a str does (not the default location)
    monkeypatch.setenv("SATURN_CACHE_DIR", str(tmp_path / "default"))
    f = saturn.compile(softmax, SPEC, target="refsearch", backend=ReferenceBackend(), budget=1.0,
                       quiet=True, cache=tmp_path / "given", candidates=[_Original(saturn.trace(softmax, SPEC))])
    assert f.cache == "stored" and os.listdir(tmp_path / "given")
    assert not (tmp_path / "default").exists()
