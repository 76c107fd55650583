"""compiler/codec.py: the data-only format of cache entries and saved functions. Every bench
workload's graph, schedules and lowered program round trip; crafted and damaged data is
rejected without running anything."""
from __future__ import annotations

import json
import math
import os
import pickle

import pytest

import compiler as saturn
from backends.cuda import CUDABackend
from backends.cuda.render import Schedule as CudaSchedule
from backends.cuda.templates.gemm_simt import SIMT_CONFIGS
from backends.llvm import LLVMBackend
from benchmarks.workloads import WORKLOADS
from compiler import cache, codec
from ir.lower import lower
from ir.dtypes import DType
from ir.view import ShapeTracker

CASES = [(w.name, fam, suite) for w in WORKLOADS for fam in ("cpu", "cuda") for suite in ("tiny", "odd")]


def _graph(name, family, suite):
    case = next(w for w in WORKLOADS if w.name == name).case(family, suite)
    specs = [saturn.spec(i.shape, i.dtype) for i in case.inputs]
    return saturn.trace(case.saturn_fn, *specs)


def _round_trip(value):
    return codec.loads(codec.dumps(value))


@pytest.mark.parametrize("name, family, suite", CASES)
def test_every_workload_graph_and_schedule_round_trips(name, family, suite, monkeypatch):
    g = _graph(name, family, suite)
    back = _round_trip(g)
    # nodes are hash-consed: an exact decode gives back the very same node objects
    assert back.inputs == g.inputs and back.outputs == g.outputs
    assert all(a is b for a, b in zip(back.outputs, g.outputs)) and str(back) == str(g)
    if family == "cpu":
        schedules = LLVMBackend().schedules(g)
    else:
        monkeypatch.setattr(CUDABackend, "_has_wgmma", staticmethod(lambda: True))
        schedules = CUDABackend().schedules(g) + [CudaSchedule(simt=c, arch="sm_90") for c in SIMT_CONFIGS]
    assert schedules and _round_trip(schedules) == schedules
    assert [type(s) for s in _round_trip(schedules)] == [type(s) for s in schedules]


@pytest.mark.parametrize("name", [w.name for w in WORKLOADS])
def test_every_workload_kernel_program_round_trips(name):
    program = lower(_graph(name, "cpu", "tiny"))
    back = _round_trip(program)
    assert back == program and str(back) == str(program)
    assert hash(back) == hash(program)      # fresh objects hash like the originals (no stale cached hash)


def test_floats_keep_their_bits():
    values = [-0.0, 0.0, math.inf, -math.inf, 1e-45, 3.4e38, 0.1]
    back = _round_trip(values)
    assert [math.copysign(1, v) for v in back] == [math.copysign(1, v) for v in values] and back == values
    assert math.isnan(_round_trip(math.nan))
    st = ShapeTracker.from_shape((3, 4)).pad(((1, 1), (0, 0)), fill=-math.inf)
    assert _round_trip(st) == st
    g = saturn.trace(lambda x: x.maximum(-0.0) + float("nan"), saturn.spec((2, 3), "bf16"))
    assert _round_trip(g).outputs == g.outputs


def test_a_10000_op_chain_encodes_without_recursion():
    def chain(x):
        for i in range(10000):
            x = x * 1.0001 if i % 2 else x + 0.5
        return x
    g = saturn.trace(chain, saturn.spec((4,)))
    assert _round_trip(g).outputs == g.outputs


def test_objects_outside_the_table_are_not_stored():
    with pytest.raises(codec.CodecError, match="cannot store"):
        codec.dumps({"x": object()})
    with pytest.raises(codec.CodecError, match="cannot store"):
        codec.dumps({1, 2})


def _doc(objects, value):
    return json.dumps({"format": codec.FORMAT, "objects": objects, "value": value}).encode()


@pytest.mark.parametrize("data, why", [
    (pickle.dumps(("os", "system")), "not JSON"),
    (_doc([["os.system", {}]], {"ref": 0}), "unknown type 'os.system'"),
    (_doc([["backends.llvm.runtime.ThreadPoolExecutor", {}]], None), "unknown type"),
    (_doc([["Var", {"name": "i", "extent": 4, "__class__": 1}]], {"ref": 0}), "fields"),
    (_doc([["Var", {"name": "i"}]], {"ref": 0}), "fields"),
    (_doc([["Lin", {"terms": {"tuple": []}, "const": {"ref": 0}}]], {"ref": 0}), "not a stored value"),  # self
    (_doc([], {"ref": 3}), "not a stored value"),
    (_doc([], 1.5), "not a stored value"),
    (b'{"format": 1, "objects": [], "value": NaN}', "NaN"),
    (_doc([], {"eval": "__import__('os')"}), "not a stored value"),
    (_doc([["Node", {"op": {"op": "add"}, "dtype": {"dtype": "f32"}, "shape": {"tuple": [2]},
                     "srcs": {"tuple": []}, "arg": None}]], {"ref": 0}), "rejected"),          # arity
    (_doc([["Node", {"op": {"op": "nope"}, "dtype": {"dtype": "f32"}, "shape": {"tuple": []},
                     "srcs": {"tuple": []}, "arg": None}]], {"ref": 0}), "not a stored value"),
    (json.dumps({"format": 99, "objects": [], "value": None}).encode(), "format 99"),
    (b"[" * 100000 + b"]" * 100000, "deep|not JSON"),
])
def test_crafted_data_is_rejected(data, why):
    with pytest.raises(codec.CodecError, match=why):
        codec.loads(data)


# --- entries in the cache ---------------------------------------------------------------------

SPEC = saturn.spec((4, 17))


def _entry_and_key():
    g = saturn.trace(lambda x: x.softmax(-1), SPEC)
    key = cache.make_key(g, [SPEC], "cpu", "dev", "1")
    return g, key, cache.Entry(g, LLVMBackend().default_schedule(), "original", 1e-5, "report", program=lower(g))


def _write_raw(key, payload, directory, fmt=None):
    from backends import checked
    path = cache.entry_path(key, directory)
    checked.write_atomic(path, checked.pack(cache.MAGIC, {"format": fmt or cache.FORMAT, "key": key}, payload))


def test_an_entry_round_trips(tmp_path):
    g, key, entry = _entry_and_key()
    cache.store(key, entry, str(tmp_path))
    got, _, why = cache.load(key, str(tmp_path))
    assert why == "" and got.graph.outputs == g.outputs and got.schedule == entry.schedule
    assert got.program == entry.program and (got.description, got.median, got.report) == ("original", 1e-5, "report")


class _Boom:
    def __reduce__(self):
        return (os.system, ("echo owned > /dev/null",))


BOOM = pickle.dumps(_Boom())


@pytest.mark.parametrize("payload", [
    BOOM,
    codec.dumps({"graph": None, "schedule": None, "description": "x", "median": 0, "report": "", "created": 0,
                 "program": None}),                                    # no graph
    codec.dumps([1, 2, 3]),
    b'{"format": 1, "objects": [["subprocess.Popen", {"args": "id"}]], "value": {"ref": 0}}',
])
def test_crafted_entry_with_a_valid_checksum_is_rejected_and_runs_nothing(tmp_path, monkeypatch, payload):
    calls = []
    monkeypatch.setattr(os, "system", lambda *a: calls.append(a))
    _, key, _ = _entry_and_key()
    _write_raw(key, payload, str(tmp_path))
    entry, _, why = cache.load(key, str(tmp_path))
    assert entry is None and "invalid entry" in why and not calls


@pytest.mark.parametrize("how", ["truncated", "flipped", "old format"])
def test_damaged_or_old_entries_are_ignored(tmp_path, how):
    _, key, entry = _entry_and_key()
    path = cache.store(key, entry, str(tmp_path))
    data = bytearray(open(path, "rb").read())
    if how == "truncated":
        data = data[:len(data) // 2]
    elif how == "flipped":
        data[-40] ^= 0x01
    else:
        _write_raw(key, pickle.dumps(entry), str(tmp_path), fmt=1)   # what format 1 wrote
        data = bytearray(open(path, "rb").read())
    open(path, "wb").write(bytes(data))
    got, _, why = cache.load(key, str(tmp_path))
    assert got is None and why.startswith("ignored invalid entry")
