"""Programs cut into regions (ir/regions.py) and compiled region by region (compiler/regions.py)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import compiler
import compiler.errors
from compiler import nn
from compiler.errors import OptionError
from compiler.trace import trace
from ir import regions
from ir.interpreter import evaluate

TINY = dict(b=1, s=8, d=16, ffn=32)


def gpt2(layers: int):
    specs = nn.gpt2_decoder_specs(layers, TINY["b"], TINY["s"], TINY["d"], TINY["ffn"], "f32")
    return (lambda *xs: nn.gpt2_decoder(*xs, heads=2)), specs


def inputs(specs, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(s.shape) * 0.3).astype(np.float32) for s in specs]


def test_layers_become_identical_regions():
    fn, specs = gpt2(5)
    g = trace(fn, *specs)
    s = regions.split(g)
    assert s is not None and len(s.regions) == 5            # one region per layer
    keys = [r.key for r in s.regions]
    assert len(set(keys[1:])) == 1 and keys[0] != keys[1]   # the first layer also makes what all read
    # each layer reads its own slice of the stacked weights
    starts = [src.start for r in s.regions[1:] for src in r.sources if src.region == -1 and src.index == 4]
    assert starts == sorted(starts) and len(set(starts)) == 4


def test_compose_gives_back_the_program():
    fn, specs = gpt2(3)
    g = trace(fn, *specs)
    s = regions.split(g, min_ops=24)
    assert regions.compose(s, [r.graph for r in s.regions], g.inputs) == g   # hash-consed: the same nodes


def test_regions_evaluate_like_the_program():
    fn, specs = gpt2(3)
    g = trace(fn, *specs)
    s = regions.split(g)
    args = inputs(specs)
    made = []
    for r in s.regions:
        ins = [made[src.region][src.index] if src.region >= 0 else
               (args[src.index].reshape(-1)[src.start:src.stop] if src.stop else args[src.index])
               for src in r.sources]
        made.append(evaluate(r.graph, ins))
    got = made[s.outputs[0].region][s.outputs[0].index]
    np.testing.assert_array_equal(got, evaluate(g, args)[0])


def test_small_programs_are_not_cut():
    fn, specs = gpt2(1)
    assert regions.split(trace(fn, *specs)) is None


def test_compile_region_by_region_and_warm(tmp_path):
    fn, specs = gpt2(4)
    args = inputs(specs)
    want = compiler.compile(fn, *specs, target="reference")(*args)
    f = compiler.compile(fn, *specs, budget=2, regions=True, cache=tmp_path, quiet=True)
    np.testing.assert_allclose(f(*args), want, rtol=1e-4, atol=1e-5)
    text = str(f.report)
    assert "4 regions" in text and "2 distinct" in text and "region 1, 2, 3:" in text
    assert f.cache == "stored"
    # the budget goes by the work a region stands for: the first layer, searched first, gets
    # its ops' share of the ops of all 4 layers (by distinct regions' ops alone, about half)
    first, repeated = f.report.outcomes
    assert len(repeated.indices) == 3
    assert 0 < first.budget <= 2 * first.ops / (first.ops + 3 * repeated.ops)
    # a deeper model of the same layers: every region is a cache hit, nothing is searched
    fn6, specs6 = gpt2(6)
    g = compiler.compile(fn6, *specs6, budget=2, regions=True, cache=tmp_path, quiet=True)
    assert g.cache == "hit" and str(g.report).count("cache hit") == 2
    assert "region 1, 2, 3, 4, 5:" in g.explain()
    args6 = inputs(specs6, seed=1)
    np.testing.assert_allclose(g(*args6), compiler.compile(fn6, *specs6, target="reference")(*args6),
                               rtol=1e-4, atol=1e-5)


def test_regions_option_is_checked():
    fn, specs = gpt2(1)
    with pytest.raises(OptionError, match="regions"):
        compiler.compile(fn, *specs, regions="yes", cache=False, quiet=True)


def test_a_region_compile_saves_and_loads(tmp_path, monkeypatch):
    from compiler.saved import SavedFileError
    fn, specs = gpt2(3)
    f = compiler.compile(fn, *specs, budget=0, regions=True, cache=False, quiet=True)
    path = f.save(tmp_path / "f.saturn")
    g = compiler.load(path)
    args = inputs(specs)
    np.testing.assert_array_equal(g(*args), f(*args))
    assert "3 regions" in str(g.report)
    data = open(path, "rb").read()
    damaged = tmp_path / "damaged.saturn"
    damaged.write_bytes(data[:-10] + bytes(b ^ 1 for b in data[-10:]))
    with pytest.raises(SavedFileError, match="damaged"):
        compiler.load(damaged)
    # intact checksum, but a region reading a later region: refused before anything is built
    import json
    from backends import checked
    from compiler import cache as cache_mod
    header, payload = checked.unpack(data, cache_mod.MAGIC)
    body = json.loads(payload)
    body["regions"][0]["sources"][0] = [2, 0, 0, 0]
    forged = tmp_path / "forged.saturn"
    forged.write_bytes(checked.pack(cache_mod.MAGIC, {k: v for k, v in header.items() if k not in ("size", "sha256")},
                                    json.dumps(body).encode()))
    built = []
    monkeypatch.setattr(cache_mod, "build", lambda *a: built.append(a))
    with pytest.raises(SavedFileError, match="not an earlier one"):
        compiler.load(forged)
    # intact, but saved by another Saturn version: refused before anything is built
    old = dict(header["key"], version="0.0.0")
    other = tmp_path / "other.saturn"
    other.write_bytes(checked.pack(cache_mod.MAGIC, {"format": header["format"], "key": old}, payload))
    with pytest.raises(SavedFileError, match="saved by Saturn 0.0.0"):
        compiler.load(other)
    assert not built


def test_default_cuts_only_what_the_reference_cannot_check_whole():
    from compiler.regions import split_for
    fn, specs = gpt2(4)
    g = trace(fn, *specs)
    assert g.num_compute_ops() >= 200
    assert split_for(g, "cpu", None) is None                     # small enough to check and search whole
    assert split_for(g, "cpu", None, reference_limit=1e4) is not None
    assert split_for(g, "cpu", False, reference_limit=1e4) is None
    assert split_for(g, "cuda", True) is None                    # not on the CUDA target yet


class WrongOneThread:
    """The CPU backend, except that its one-thread schedule computes a wrong result (every
    `every`-th element of each output off by 1%) and claims to be fast: a kernel bug the
    search must catch."""
    name = "cpu"

    def __init__(self, every: int):
        from backends.llvm import LLVMBackend
        self.inner, self.every = LLVMBackend(), every

    def __getattr__(self, name):     # (not for 'inner' itself: unpickling asks before it is set)
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def build(self, graph, schedule=None, **kw):
        exe = self.inner.build(graph, schedule, **kw)
        return _Wrong(exe, self.every) if getattr(schedule, "name", "") == "1-thread" else exe


class _Wrong:
    def __init__(self, exe, every: int):
        self.exe, self.every = exe, every

    def __getattr__(self, name):
        if name == "exe":
            raise AttributeError(name)
        return getattr(self.exe, name)

    def __call__(self, *args):
        outs = [np.array(o, copy=True) for o in self.exe(*args)]
        for o in outs:
            o.reshape(-1)[::self.every] *= 1.01
        return outs

    def benchmark(self, args, warmup=3, repeat=20):
        return [1e-9] * repeat


@pytest.mark.parametrize("every", [10, 10 ** 9])     # every tenth element wrong; one element wrong
def test_region_verification_catches_a_wrong_kernel_the_whole_program_check_could_not(every):
    """The whole program is past the float64 reference's limit (its candidates would be checked
    against the original program's own output); each region is within it and is checked
    against the interpreter: the wrong, 'fast' schedule is rejected in every region."""
    from compiler import verify
    fn, specs = gpt2(4)
    g = trace(fn, *specs)
    s = regions.split(g)
    region_work = max(verify.reference_work(r.graph, matmul=True) for r in s.regions)
    limit = region_work * 1.5
    assert verify.reference_work(g, matmul=True) > limit
    f = compiler.compile(fn, *specs, backend=WrongOneThread(every), budget=30, max_schedules=2, reference_limit=limit,
                         cache=False, quiet=True)
    args = inputs(specs)
    np.testing.assert_allclose(f(*args), compiler.compile(fn, *specs, target="reference")(*args),
                               rtol=1e-4, atol=1e-5)
    text = str(f.report)
    assert "1-thread" not in f.report.summary()
    assert text.count("rejected") >= len(f.report.outcomes), text


@given(st.integers(0, 2 ** 31 - 1))
@settings(max_examples=60)
def test_any_program_cut_into_small_regions_computes_the_same(seed):
    """Random programs (the fuzzer's), cut into regions of as few as 2 ops: composing the
    regions gives back the very program, and running the regions one after another in the
    interpreter gives bit for bit the program's output."""
    from compiler import fuzz
    prog = fuzz.random_program(seed)
    try:
        g = trace(fuzz.saturn_fn(prog), *[compiler.spec(s, d) for s, d in prog.inputs])
    except compiler.errors.SaturnError:
        return                                   # an invalid random program: nothing to cut
    s = regions.split(g, min_ops=2)
    if s is None:
        return
    assert regions.compose(s, [r.graph for r in s.regions], g.inputs) == g
    args = fuzz.inputs_for(prog)
    made = []
    for r in s.regions:
        made.append(evaluate(r.graph, [made[x.region][x.index] if x.region >= 0 else
                                       (args[x.index].reshape(-1)[x.start:x.stop] if x.stop else args[x.index])
                                       for x in r.sources]))
    got = [made[o.region][o.index] for o in s.outputs]
    for a, b in zip(got, evaluate(g, args)):
        np.testing.assert_array_equal(a, b)
