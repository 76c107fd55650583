"""Every cached object is checked before use: a truncated, bit-flipped, foreign (another key's)
or unlabelled file is rejected and rebuilt, never loaded, and compiles still give correct
results. Cache write failures are warned about once on stderr. (The winners' entries have
their own tests in test_cache.py; here they are damaged together with the objects.)"""
from __future__ import annotations

import os
import stat
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import compiler as saturn
from backends import checked
from ir.interpreter import evaluate

pytest.importorskip("llvmlite")
from backends.llvm import LLVMBackend, jit  # noqa: E402

DAMAGES = ["truncate", "flip-payload", "flip-header", "empty", "raw-object", "foreign"]


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SATURN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(checked, "_WARNED", set())


def gelu(x):
    return (x * 1.7 + 0.3).gelu()


def softmax(x):
    return x.softmax(-1)


def _damage(path, how: str, foreign_path=None, magic: bytes = jit.OBJECT_MAGIC) -> None:
    data = Path(path).read_bytes()
    if how == "truncate":
        data = data[: len(data) // 2]
    elif how == "flip-payload":
        i = len(data) - len(data) // 3
        data = data[:i] + bytes([data[i] ^ 0x10]) + data[i + 1:]
    elif how == "flip-header":
        i = data.index(b'"sha256"') + 12
        data = data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1:]
    elif how == "empty":
        data = b""
    elif how == "raw-object":   # a bare object file, as the cache held before it was checked
        data = checked.unpack(data, magic)[1]
    elif how == "foreign":
        data = Path(foreign_path).read_bytes()
    Path(path).write_bytes(data)


def _objects(directory) -> set[str]:
    d = directory / "llvm"
    return {p for p in os.listdir(d) if p.endswith(".o")} if d.exists() else set()


@pytest.mark.parametrize("how", DAMAGES)
def test_damaged_object_is_rebuilt(tmp_path, how):
    be = LLVMBackend()
    g = saturn.trace(gelu, saturn.spec((64, 33)))
    first = be.build(g)
    assert not first.cache_hit
    (name,) = _objects(tmp_path)
    path = tmp_path / "llvm" / name
    good = Path(path).read_bytes()
    other = None
    if how == "foreign":   # another program's object, put where this one's belongs
        be.build(saturn.trace(softmax, saturn.spec((8, 33))))
        (other_name,) = _objects(tmp_path) - {name}
        other = tmp_path / "llvm" / other_name
    _damage(path, how, other)
    assert Path(path).read_bytes() != good
    again = be.build(g)
    assert not again.cache_hit                  # rejected, compiled again
    x = np.random.default_rng(0).standard_normal((64, 33)).astype(np.float32)
    np.testing.assert_allclose(again(x)[0], evaluate(g, [x])[0], rtol=2e-5, atol=2e-5)
    assert Path(path).read_bytes() == good      # and rewritten
    assert be.build(g).cache_hit


def test_compile_with_damaged_objects_and_entry(tmp_path):
    """compile() on the CPU after every cached file it wrote was bit-flipped: it searches again
    and the result is correct."""
    f = saturn.compile(softmax, saturn.spec((16, 40)), budget=1.0, quiet=True)
    assert f.cache == "stored"
    files = [tmp_path / "llvm" / n for n in _objects(tmp_path)]
    files += [tmp_path / n for n in os.listdir(tmp_path) if n.endswith(".entry")]
    assert len(files) >= 2
    for p in files:
        _damage(p, "flip-payload")
    g = saturn.compile(softmax, saturn.spec((16, 40)), budget=1.0, quiet=True)
    assert g.cache == "stored" and "ignored invalid entry" in g.result.cache
    x = np.random.default_rng(1).standard_normal((16, 40)).astype(np.float32)
    np.testing.assert_allclose(g(x), evaluate(g.graph, [x])[0], rtol=2e-5, atol=1e-6)
    assert saturn.compile(softmax, saturn.spec((16, 40)), budget=1.0, quiet=True).cache == "hit"


def test_unwritable_cache_is_warned_once(tmp_path, monkeypatch, capfd):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the cache directory should be")
    monkeypatch.setenv("SATURN_CACHE_DIR", str(blocker))
    for shape in [(4, 9), (4, 10)]:
        f = saturn.compile(softmax, saturn.spec(shape), budget=1.0, quiet=True)
        x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(f(x), evaluate(f.graph, [x])[0], rtol=2e-5, atol=1e-6)
        assert f.cache == "off" and any("could not write the cache entry" in n for n in f.result.notes)
    err = capfd.readouterr().err
    assert err.count("could not write the compile cache") == 1, err
    assert err.count("could not write the CPU object cache") == 1, err


# --- CUDA binaries, with a stand-in nvcc (no GPU or toolkit needed) ------------------------

FAKE_NVCC = textwrap.dedent("""\
    #!{python}
    import sys
    args = sys.argv[1:]
    if "--version" in args:
        print("fake nvcc, release 0.0"); sys.exit(0)
    out, src = args[args.index("-o") + 1], args[-1]
    open(sys.argv[0] + ".calls", "a").write("x")
    open(out, "wb").write(b"CUBIN:" + open(src, "rb").read())
    print("ptxas info    : Used 8 registers", file=sys.stderr)
""")


@pytest.fixture
def fake_nvcc(tmp_path, monkeypatch):
    from backends.cuda import toolchain
    path = tmp_path / "bin" / "nvcc"
    path.parent.mkdir()
    path.write_text(FAKE_NVCC.format(python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("SATURN_NVCC", str(path))
    monkeypatch.setattr(toolchain, "_VERSION", {})
    return path


def _nvcc_calls(nvcc) -> int:
    calls = nvcc.parent / "nvcc.calls"
    return len(calls.read_text()) if calls.exists() else 0


@pytest.mark.parametrize("how", DAMAGES)
def test_damaged_cuda_binary_is_rebuilt(tmp_path, fake_nvcc, how):
    from backends.cuda.toolchain import BINARY_MAGIC, compile_source
    src = "__global__ void k() {}\n"
    first = compile_source(src, "sm_90")
    assert first.error is None and not first.cached and first.binary == b"CUBIN:" + src.encode()
    assert compile_source(src, "sm_90").cached and _nvcc_calls(fake_nvcc) == 1
    (name,) = [p for p in os.listdir(tmp_path / "cuda") if p.endswith(".cubin")]
    path = tmp_path / "cuda" / name
    other = None
    if how == "foreign":
        compile_source("__global__ void other() {}\n", "sm_90")
        (other_name,) = [p for p in os.listdir(tmp_path / "cuda") if p.endswith(".cubin") and p != name]
        other = tmp_path / "cuda" / other_name
    calls = _nvcc_calls(fake_nvcc)
    _damage(path, how, other, BINARY_MAGIC)
    again = compile_source(src, "sm_90")
    assert not again.cached and _nvcc_calls(fake_nvcc) == calls + 1
    assert again.binary == first.binary
    assert checked.unpack(Path(path).read_bytes(), BINARY_MAGIC)[1] == first.binary   # rewritten
    assert compile_source(src, "sm_90").cached


def test_entry_may_not_build_classes_a_module_only_imports(tmp_path):
    """backends.llvm.runtime imports ThreadPoolExecutor: an entry (with a valid checksum) naming
    it, as a pickle or as a type tag of the data format, is rejected; only the codec's table of
    Saturn classes can be built."""
    from compiler import cache
    key = {"k": 1}
    pickled = b"\x80\x02cbackends.llvm.runtime\nThreadPoolExecutor\n)R."   # GLOBAL, empty tuple, REDUCE
    tagged = b'{"format":1,"objects":[["backends.llvm.runtime.ThreadPoolExecutor",{}]],"value":{"ref":0}}'
    for payload, why_expected in ((pickled, "not JSON"), (tagged, "unknown type 'backends.llvm.runtime.ThreadPoolExecutor'")):
        path = cache.entry_path(key, str(tmp_path))
        checked.write_atomic(path, checked.pack(cache.MAGIC, {"format": cache.FORMAT, "key": key}, payload))
        entry, _, why = cache.load(key, str(tmp_path))
        assert entry is None and "payload rejected" in why and why_expected in why

