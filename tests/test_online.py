"""The tuple-accumulator lowering of the online-softmax rules' two-level reductions
(ir/online.py, ir.kernel.Online): when it applies, that it keeps the meaning, and that
every backend runs it like the interpreter (odd tiles, halves, NaN/inf rows)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ir.lower import lower
from ir.online import affine_coefficient
from compiler.trace import spec, trace
from ir.dtypes import DType
from ir.interpreter import evaluate
from ir.kernel import Compute, Const, Online, Ref, evaluate_program
from ir.ops import Op
from tolerances import assert_close

LOG2E = 1.0 / math.log(2.0)


def two_level_softmax(t: int):
    """softmax over the last axis written the way the online rules leave it: the row split
    into tiles of t, m = max of tile maxes, l = sum of tile sums rescaled by exp(m_b - m)."""
    def fn(x):
        r, n = x.shape
        xb = x.reshape(r, n // t, t)
        mb = xb.max(-1, keepdim=True)                       # (r, B, 1)
        m = mb.max(-2, keepdim=True)                        # (r, 1, 1)
        lb = (xb - mb).exp().sum(-1, keepdim=True)          # (r, B, 1)
        l = (lb * (mb - m).exp()).sum(-2, keepdim=True)     # (r, 1, 1)
        return (x - m.reshape(r, 1)).exp() / l.reshape(r, 1)
    return fn


def onlines(program) -> list[Online]:
    return [l for k in program.kernels for l in k.lets if isinstance(l, Online)]


def test_affine_coefficient():
    m = Ref("m", DType.f32)
    x = Ref("x", DType.f32)
    c = lambda v: Const(v, DType.f32)
    mul = lambda a, b: Compute(Op.MUL, DType.f32, (a, b))
    add = lambda a, b: Compute(Op.ADD, DType.f32, (a, b))
    assert affine_coefficient(mul(add(x, mul(m, c(-1.0))), c(2.0)), "m") == -2.0
    assert affine_coefficient(add(mul(x, c(3.0)), mul(mul(m, c(-1.0)), c(3.0))), "m") == -3.0
    assert affine_coefficient(x, "m") == 0.0
    assert affine_coefficient(mul(m, m), "m") is None                  # not affine
    assert affine_coefficient(mul(m, x), "m") is None                  # not a constant factor
    assert affine_coefficient(Compute(Op.EXP2, DType.f32, (m,)), "m") is None


def test_plain_softmax_is_not_turned_online():
    """One level (no per-tile sums): the row reductions stay as they are; the backends fuse
    them into one row kernel. Only the rules' two-level form becomes an Online loop."""
    g = trace(lambda x: x.softmax(-1), spec((4, 256), "f32"))
    assert onlines(lower(g)) == []


def test_two_level_softmax_becomes_one_kernel_with_one_online_loop():
    g = trace(two_level_softmax(16), spec((4, 256), "f32"))
    p = lower(g)
    assert len(p.kernels) == 1 and not [b for b in p.buffers if b.kind == "temp"]
    (on,) = onlines(p)
    assert on.var.extent == 16 and len(on.sums) == 1 and on.scale == pytest.approx(LOG2E)
    # the row max Let was folded into the loop (no separate pass)
    assert [type(l).__name__ for l in p.kernels[0].lets] == ["Online"]


@settings(max_examples=25, deadline=None)
@given(rows=st.sampled_from([1, 3, 7]), tiles=st.sampled_from([1, 2, 5, 16]), t=st.sampled_from([1, 3, 8, 32]),
       dtype=st.sampled_from(["f32", "f16", "bf16"]), scale=st.sampled_from([1.0, 30.0]))
def test_online_lowering_keeps_the_meaning(rows, tiles, t, dtype, scale):
    """The kernel-IR evaluator (the Online's defining meaning) and the CPU backend (the
    one-pass running-max loop) both match the interpreter on the two-level program."""
    from backends import get_backend
    g = trace(two_level_softmax(t), spec((rows, tiles * t), dtype))
    x = (np.random.default_rng(rows * 100 + t).standard_normal((rows, tiles * t)) * scale).astype(DType(dtype).np)
    want = evaluate(g, [x])[0]
    p = lower(g)
    if rows > 1:          # (size-1 axes are not loops)
        assert bool(onlines(p)) == (tiles > 1 and t > 1)
    assert_close(evaluate_program(p, [x])[0], want, dtype)
    assert_close(get_backend("cpu").build(g)(x)[0], want, dtype)


@pytest.mark.parametrize("rows", [5, 8])
def test_online_loop_propagates_nan_and_inf_like_the_program(rows):
    """NaN, +inf and all -inf rows; with 8 rows the CPU runs them as one block of rows
    (KernelSchedule.rows), where a row whose max did not grow must keep its sums. The loop
    means the softmax the rules started from: a first tile of -inf (which the two-level
    program itself turns into NaN, -inf - (-inf)) contributes nothing."""
    from backends import get_backend
    g = trace(two_level_softmax(8), spec((rows, 64), "f32"))
    x = np.random.default_rng(0).standard_normal((rows, 64)).astype(np.float32)
    x[1, 3] = np.nan
    x[2, 40] = np.inf
    x[3, :] = -np.inf
    x[4, :8] = -np.inf               # a first tile of -inf: the running max starts at -inf
    x[0, :20] = -np.inf              # and a prefix of -inf past the first tile
    want = evaluate(trace(lambda t: t.softmax(-1), spec((rows, 64), "f32")), [x])[0]
    assert np.isfinite(want[[0, 4]]).all()
    got = get_backend("cpu").build(g)(x)[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-5, atol=1e-7)


def test_rules_online_softmax_candidate_lowers_to_one_online_loop():
    """The e-graph's online-softmax candidate (not a hand-written one) becomes a single
    kernel with an Online loop, and every lowered candidate still means the same."""
    from compiler.explore import explore
    g = trace(lambda x: x.softmax(-1), spec((3, 1024), "f32"))
    x = (np.random.default_rng(3).standard_normal((3, 1024)) * 8).astype(np.float32)
    want = evaluate(g, [x])[0]
    found = 0
    for c in explore(g).candidates:
        p = lower(c.graph)
        found += bool(onlines(p)) and len(p.kernels) == 1
        assert_close(evaluate_program(p, [x])[0], want, "f32")
    assert found >= 1


def test_kernel_ir_cuda_rendering_of_online_runs_on_host():
    from backends.cuda import hostsim
    reason = hostsim.available()
    if reason:
        pytest.skip(reason)
    for dtype in ("f32", "f16"):
        g = trace(two_level_softmax(8), spec((3, 40), dtype))
        x = (np.random.default_rng(4).standard_normal((3, 40)) * 4).astype(DType(dtype).np)
        assert_close(hostsim.run_kernel_ir(g, [x])[0], evaluate(g, [x])[0], dtype)


def test_online_program_round_trips_through_the_cache(tmp_path):
    """A winner whose lowered program holds an Online loop is stored and rebuilt on a hit
    (the cache keeps the kernel program; the cache's data format must carry Online)."""
    import compiler as saturn
    from compiler.explore import explore

    def fn(x):
        return x.softmax(-1)
    # the rules' online form, verified against softmax itself (a hand-written two-level program
    # means NaN on an all -inf first tile, where its Online loop restarts: verification feeds such rows)
    shape = (4, 1024)    # long rows: the extraction's cheapest program is the online form
    online = [c for c in explore(trace(fn, spec(shape))).candidates if onlines(lower(c.graph))][:1]
    assert online
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    f = saturn.compile(fn, spec(shape), target="cpu", budget=0, quiet=True, cache=str(tmp_path), candidates=online)
    g = saturn.compile(fn, spec(shape), target="cpu", quiet=True, cache=str(tmp_path), candidates=online)
    assert g.cache == "hit"
    assert any(isinstance(l, Online) for k in g.executable.program.kernels for l in k.lets)
    assert g(x).tobytes() == f(x).tobytes()


def test_rules_flash_form_lowers_to_one_online_loop_with_a_lane_accumulator():
    """The e-graph's flash form of attention: the running max, the rescaled sum and the
    accumulator over the head dim (a lane sum, computed in gemv form) in one Online loop; the
    kernel-IR meaning, the CPU backend and the CUDA kernel-IR text (on the host) all match the
    interpreter."""
    from backends import get_backend
    from backends.cuda import hostsim
    from compiler import nn
    from compiler.explore import explore
    g = trace(nn.attention, *[spec((1, 2, 256, 16))] * 3)
    xs = [(np.random.default_rng(i).standard_normal((1, 2, 256, 16)) * 3).astype(np.float32) for i in range(3)]
    want = evaluate(g, xs)[0]
    flash = []
    for c in explore(g, max_candidates=12).candidates:
        p = lower(c.graph)
        lanes = [l for l in onlines(p) if l.lane is not None]
        if lanes:
            flash.append((c.graph, p))
            assert len(lanes[0].sums) == 2 and lanes[0].lane.extent == 16
    assert flash, "no candidate lowered to an Online loop with a lane accumulator"
    graph, program = flash[0]
    assert_close(evaluate_program(program, xs)[0], want, "f32", scale=10)
    assert_close(get_backend("cpu").build(graph)(*xs)[0], want, "f32", scale=10)
    if hostsim.available() is None:
        assert_close(hostsim.run_kernel_ir(graph, xs)[0], want, "f32", scale=10)


def two_level_attention(t: int):
    """softmax(q k^T) v with the keys split into tiles of t, written the way the online rules
    leave it: per tile m_b, P_b = exp(s - m_b), l_b, acc_b = P_b v_b; across tiles the combine
    rescaled by exp(m_b - m)."""
    def fn(q, k, v):
        n, m, dv = q.shape[0], k.shape[0], v.shape[1]
        s = (q @ k.transpose(0, 1)).reshape(n, m // t, t)             # (n, B, t)
        mb = s.max(-1, keepdim=True)                                    # (n, B, 1)
        mx = mb.max(-2, keepdim=True)                                   # (n, 1, 1)
        p = (s - mb).exp()                                              # (n, B, t)
        r = (mb - mx).exp()                                             # (n, B, 1)
        l = (p.sum(-1, keepdim=True) * r).sum(-2, keepdim=True)        # (n, 1, 1)
        accb = (p.reshape(n, m // t, t, 1) * v.reshape(1, m // t, t, dv)).sum(-2, keepdim=True)
        acc = (accb * r.reshape(n, m // t, 1, 1)).sum(-3)              # (n, 1, dv)
        return acc.reshape(n, dv) / l.reshape(n, 1)
    return fn


@settings(max_examples=15, deadline=None)
@given(n=st.sampled_from([2, 5]), tiles=st.sampled_from([2, 3]), t=st.sampled_from([4, 8]),
       d=st.sampled_from([3, 8]), dv=st.sampled_from([8, 16, 5]), dtype=st.sampled_from(["f32", "f16"]))
def test_lane_accumulator_keeps_the_meaning(n, tiles, t, d, dv, dtype):
    """Attention in the rules' two-level form: one Online with a lane sum over the value dim
    (vector path when dv is a multiple of the vector width, scalar path otherwise); the
    kernel-IR meaning and the CPU backend match the interpreter."""
    from backends import get_backend
    m = tiles * t
    g = trace(two_level_attention(t), spec((n, d), dtype), spec((m, d), dtype), spec((m, dv), dtype))
    rng = np.random.default_rng(n * 1000 + m * 10 + dv)
    xs = [(rng.standard_normal(s) * 2).astype(DType(dtype).np) for s in [(n, d), (m, d), (m, dv)]]
    want = evaluate(g, xs)[0]
    p = lower(g)
    assert any(l.lane is not None and l.lane.extent == dv for l in onlines(p)), str(p)
    assert_close(evaluate_program(p, xs)[0], want, dtype, scale=10)
    assert_close(get_backend("cpu").build(g)(*xs)[0], want, dtype, scale=10)


def deferred_attention(q, k, v, scale=None):
    """softmax(q k^T) v (q scaled first when `scale` is given; any leading batch axes) with the
    normalization moved after the product, the form the rules reach in one step (no key
    tiles): (sum_j exp(s_j - m) v_j) / (sum_j exp(s_j - m))."""
    s = (q if scale is None else q * scale) @ k.transpose(-1, -2)       # (..., n, m)
    e = (s - s.max(-1, keepdim=True)).exp()
    return (e @ v) / e.sum(-1, keepdim=True)


@settings(max_examples=15, deadline=None)
@given(n=st.sampled_from([2, 5]), m=st.sampled_from([1, 7, 33]), d=st.sampled_from([3, 8]),
       dv=st.sampled_from([16, 5]), dtype=st.sampled_from(["f32", "f16"]), scale=st.sampled_from([1.0, 30.0]))
def test_one_level_attention_runs_as_one_online_with_a_lane_sum(n, m, d, dv, dtype, scale):
    """The deferred-normalization form: one key per step, the value row read directly as the
    lane factor. One Online per query row carries max, sum and the accumulator over the value
    dim (before, an Online ran per output element and recomputed every score dv times); the
    kernel-IR meaning, the CPU backend and the CUDA text on the host match the interpreter."""
    from backends import get_backend
    from backends.cuda import hostsim
    g = trace(deferred_attention, spec((n, d), dtype), spec((m, d), dtype), spec((m, dv), dtype))
    rng = np.random.default_rng(n * 1000 + m * 10 + dv)
    xs = [(rng.standard_normal(s) * scale).astype(DType(dtype).np) for s in [(n, d), (m, d), (m, dv)]]
    want = evaluate(g, xs)[0]
    p = lower(g)
    ons = onlines(p)
    if m > 1 and dtype == "f32":    # (one key: folded away; f16 as traced: its casts are materialized)
        assert len(ons) == 1 and ons[0].lane is not None and ons[0].lane.extent == dv, str(p)
        assert any(form and form[1] is None for form in ons[0].gemv), str(p)
    assert_close(evaluate_program(p, xs)[0], want, dtype, scale=10)
    assert_close(get_backend("cpu").build(g)(*xs)[0], want, dtype, scale=10)
    if hostsim.available() is None:
        assert_close(hostsim.run_kernel_ir(g, xs)[0], want, dtype, scale=10)


@pytest.mark.parametrize("rows", [1, 2, 4, 8])
def test_online_row_blocks_match_one_row_at_a_time(monkeypatch, rows):
    """KernelSchedule.rows: the CPU backend runs an Online for several query rows in one pass
    over the keys. Chunks of the parallel loop start at unaligned rows (forced here: many
    chunks on two threads), blocks must not straddle a batch boundary, and rows that do not
    fill a block run one by one; every row matches the interpreter."""
    from backends import get_backend
    from backends.llvm import runtime
    from ir.kernel import KernelSchedule, Schedule

    monkeypatch.setattr(runtime, "MIN_CHUNK_WORK", 1)
    # head dims: 16 (the scores as one FMA per vector per row and lane_sums) and 9 (scalar dots)
    for d in (16, 9):
        g = trace(deferred_attention, spec((3, 12, d)), spec((3, 10, d)), spec((3, 10, 16)))
        rng = np.random.default_rng(rows)
        xs = [(rng.standard_normal(s) * 3).astype(np.float32) for s in [(3, 12, d), (3, 10, d), (3, 10, 16)]]
        want = evaluate(g, xs)[0]
        assert len(onlines(lower(g))) == 1
        be = get_backend("cpu")
        exe = be.build(g, Schedule(threads=2, default=KernelSchedule(vector_width=16, rows=rows)))
        assert len(exe.launches[-1].chunks) > 2
        if rows > 1:
            assert any(a % rows for a, _ in exe.launches[-1].chunks), exe.launches[-1].chunks   # unaligned starts
        assert (".v.head" in exe.source) == (rows > 1 and d == 16)      # the vector dot ran where it applies
        assert_close(exe(*xs)[0], want, "f32", scale=10)
        # a NaN in one query row, +inf in one key: NaN rows stay NaN and only there
        xs[0][1, 5, 0], xs[1][2, 3, 1] = np.nan, np.inf
        assert_close(exe(*xs)[0], evaluate(g, xs)[0], "f32", scale=10)


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_lane_sums_reduce_each_vector(n):
    """lane_sums: lane u of the result is the sum of vector u's lanes (checked in a JIT-compiled
    function against numpy for vectors of 16 and 8 lanes)."""
    import ctypes

    from llvmlite import ir as llir

    from backends.llvm import jit
    from backends.llvm.common import F32, PTR, lane_sums
    for width in (16, 8):
        if n > width:
            continue
        module = llir.Module(name="t")
        fn = llir.Function(module, llir.FunctionType(llir.VoidType(), [PTR, PTR]), "f")
        b = llir.IRBuilder(fn.append_basic_block())
        vty = llir.VectorType(F32, width)
        vs = [b.load(b.gep(fn.args[0], [llir.Constant(llir.IntType(64), u)], source_etype=vty), typ=vty, align=4)
              for u in range(n)]
        b.store(lane_sums(b, vs, width), fn.args[1], align=4)
        b.ret_void()
        x = np.random.default_rng(n).standard_normal((n, width)).astype(np.float32)
        out = np.zeros(width, np.float32)
        addrs, _, engine = jit.load(str(module), ["f"], use_cache=False)
        ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(addrs["f"])(x.ctypes.data, out.ctypes.data)
        np.testing.assert_allclose(out[:n], x.sum(1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("keys", [16, 37, 64])
@pytest.mark.parametrize("rows", [1, 8])
def test_online_key_blocks_match_the_interpreter(monkeypatch, keys, rows):
    """KernelSchedule.keys: the CPU backend steps an attention Online over whole blocks of a
    vector's width of keys (scores as one vector, their exps as one vector, the value rows
    into registers), then the keys left over one by one; with row blocks each row takes the
    block in turn. Key counts that fill no block, one block and some, several blocks; vector
    widths 16 and 8; a NaN query row, +inf and -inf keys; the same within rounding as one key
    per step. The scores come from the K panel (packed once per batch and chunk, so chunks
    that start inside a batch and rows of the next batch both repack), a constant factor on
    the scores applied after the panel products."""
    from backends import get_backend
    from backends.llvm import runtime
    from ir.kernel import KernelSchedule, Schedule

    def batched(q, k, v):
        return deferred_attention(q, k, v, 0.25)

    shapes = [(3, 9, 32), (3, keys, 32), (3, keys, 16)]
    g = trace(batched, *[spec(s) for s in shapes])
    rng = np.random.default_rng(keys * 10 + rows)
    xs = [(rng.standard_normal(s) * 3).astype(np.float32) for s in shapes]
    be = get_backend("cpu")
    monkeypatch.setattr(runtime, "MIN_CHUNK_WORK", 1)      # two threads, many chunks with unaligned starts
    for w in (16, 8):
        exe = be.build(g, Schedule(threads=2, default=KernelSchedule(vector_width=w, rows=rows)))
        assert len(exe.launches[-1].chunks) > 2
        assert ".blk.head" in exe.source                        # the key-block path ran
        assert "pack.key.head" in exe.source                    # ... with the scores from the K panel
        one_key = be.build(g, Schedule(threads=1, default=KernelSchedule(vector_width=w, rows=rows, keys=False)))
        assert ".blk.head" not in one_key.source
        cases = [[x.copy() for x in xs] for _ in range(3)]
        cases[1][0][1, 4, 0] = np.nan                                 # a NaN query row
        cases[1][1][0, keys - 1, 2] = np.inf                          # +inf in the last key (a leftover one)
        cases[2][1][1, 0, :] = -np.inf                                # a key scoring -inf or NaN
        for case in cases:
            want = evaluate(g, case)[0]
            got = exe(*case)[0]
            assert_close(got, want, "f32", scale=10)
            assert_close(got, one_key(*case)[0], "f32", scale=10)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.sampled_from([1, 3]), rows=st.sampled_from([1, 5, 17]), keys=st.sampled_from([16, 23, 48, 70]),
       d=st.sampled_from([16, 32, 20]), dv=st.sampled_from([16, 48, 7]), scale=st.sampled_from([0.1, 1.0, 6.0]),
       row_block=st.sampled_from([1, 2, 8]), width=st.sampled_from([8, 16]), threads=st.sampled_from([1, 2]))
def test_attention_key_blocks_property(monkeypatch, batch, rows, keys, d, dv, scale, row_block, width, threads):
    """Attention as the rules' one-level form on the CPU over random shapes and schedules: key
    blocks with the K panel (head dims that are multiples of the vector width), key blocks by
    lane sums or one key at a time (others), value dims in registers or not, row blocks and
    thread chunks; always the interpreter's result. Scores stay below ~600 in magnitude: f32
    scores of 10^4 carry ~10^-3 of absolute rounding into every exp, whichever program computes
    them (at scale 40 the interpreter itself is 6e-5 off the float64 result). (monkeypatch only
    lowers the work a thread chunk needs, the same for every example.)"""
    from backends import get_backend
    from backends.llvm import runtime
    from ir.kernel import KernelSchedule, Schedule

    def batched(q, k, v):
        return deferred_attention(q, k, v, 0.5)

    shapes = [(batch, rows, d), (batch, keys, d), (batch, keys, dv)]
    g = trace(batched, *[spec(s) for s in shapes])
    rng = np.random.default_rng(batch * 7 + rows * 11 + keys + d + dv)
    xs = [(rng.standard_normal(s) * scale).astype(np.float32) for s in shapes]
    monkeypatch.setattr(runtime, "MIN_CHUNK_WORK", 1)
    exe = get_backend("cpu").build(g, Schedule(threads=threads, default=KernelSchedule(vector_width=width,
                                                                                         rows=row_block)))
    # (with one query row per batch the rows are the batches, whose keys differ: no panel)
    if rows > 1 and d % width == 0 and dv % width == 0 and keys >= width:
        assert "pack.key.head" in exe.source
    # outputs are weighted means of value rows: compared relative to the values' magnitude, as
    # a mean that cancels to near zero keeps the rounding of the values it averages
    v_max = float(np.max(np.abs(xs[2])))
    assert_close(exe(*xs)[0] / v_max, evaluate(g, xs)[0] / v_max, "f32", scale=10)


def test_rules_tiled_softmax_candidates_keep_a_masks_trailing_minus_inf_tiles():
    """softmax(x + mask) with a causal-style mask (-inf past a cut per row, so whole trailing
    tiles are -inf after finite ones): every e-graph candidate, built for the CPU, gives the
    program's values. The tiled form once subtracted such a tile's max of -inf from itself (NaN)."""
    from backends.llvm import LLVMBackend
    from compiler.explore import explore
    rows, cols = 6, 1024
    g = trace(lambda x, m: (x + m).softmax(-1), spec((rows, cols), "f32"), spec((rows, cols), "f32"))
    rng = np.random.default_rng(5)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    cut = np.array([1, 5, 100, 333, 700, 1024])
    mask = np.where(np.arange(cols) < cut[:, None], 0.0, -np.inf).astype(np.float32)
    want = evaluate(g, [x, mask])[0]
    backend, tiled = LLVMBackend(), 0
    for c in explore(g).candidates:
        tiled += "two-level" in c.description and "(0 two-level" not in c.description
        got = np.asarray(backend.build(c.graph, use_cache=False)(x, mask)[0])
        assert not np.isnan(got).any(), c.description
        assert_close(got, want, "f32")
    assert tiled >= 1
