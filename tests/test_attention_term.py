"""The online-contraction term `attend` (rewrites/kernels.py): made from a product of a softmax,
its meaning and error bound, and run by every target (the CPU and the CUDA kernel IR as its
definition, the CUDA plan as the flash kernel or its definition), checked against float64
numpy on odd shapes, masks with fully masked entries, and large score offsets."""
import math

import numpy as np
import pytest

import compiler
from backends import get_backend
from compiler import nn, spec
from compiler.explore import Limits, explore
from ir import node as N
from ir.bounds import evaluate_bounded
from ir.dtypes import DType
from ir.graph import Graph
from ir.interpreter import evaluate
from ir.ops import Op
from ir.terms import attend_primitives, expand_terms
from tolerances import assert_close


def _np_attention(q, k, v, mask=None):
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s + mask.astype(np.float64)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def _qkv(shape, dtype, seed=0, offset=0.0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(shape) + (offset if i == 0 else 0.0)).astype(DType(dtype).np) for i in range(3)]


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_traced_attention_is_one_attend_term(dtype):
    g = compiler.trace(nn.attention, *[spec((2, 3, 7, 16), dtype)] * 3)
    ops = g.op_counts()
    assert ops.get("attend") == 1 and ops.get("contract") == 1, ops
    assert "exp2" not in ops and "max" not in ops        # the softmax is inside the term


def test_each_decoder_layer_has_one_attend_term():
    specs = nn.llama_decoder_specs(2, 1, 16, 64, 4, 2, 96, "f32")
    g = compiler.trace(lambda *xs: nn.llama_decoder(*xs, heads=4, kv_heads=2), *specs)
    assert g.op_counts().get("attend") == 2


@pytest.mark.parametrize("dtype", [DType.f32, DType.f16, DType.bf16])
def test_meaning_matches_its_definition_within_the_bound(dtype):
    shape = (3, 9, 5)
    a, b = N.input_(0, "a", shape, dtype), N.input_(1, "b", shape, dtype)
    term = Graph((a, b), (N.attend(a, b, 1),))
    definition = Graph((a, b), (attend_primitives(a, b, 1),))
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(shape) * 8 + 3000.0).astype(dtype.np)     # a large offset
    x[0, :4] = -np.inf                                                 # partly masked rows
    y = rng.standard_normal(shape).astype(dtype.np)
    got, ref = evaluate(term, [x, y])[0], evaluate(definition, [x, y])[0]
    xs = x.astype(np.float64)
    p = np.exp2(xs - xs.max(1, keepdims=True))
    exact = (p * y.astype(np.float64)).sum(1, keepdims=True) / p.sum(1, keepdims=True)
    bound = evaluate_bounded(term, [x, y])[0]
    assert np.all(np.isfinite(got)) and np.all(np.isfinite(bound.bound))
    assert np.all(np.abs(got.astype(np.float64) - exact) <= bound.bound + 1e-12)
    assert_close(ref, exact, dtype)


def test_fully_masked_row_is_nan_like_the_program_it_replaces():
    a, b = N.input_(0, "a", (2, 4, 3), DType.f32), N.input_(1, "b", (2, 4, 3), DType.f32)
    x = np.zeros((2, 4, 3), np.float32)
    x[1] = -np.inf
    out = evaluate(Graph((a, b), (N.attend(a, b, 1),)), [x, np.ones_like(x)])[0]
    assert np.all(out[0] == 1.0) and np.all(np.isnan(out[1]))


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("shape", [(1, 1, 1, 8), (1, 2, 7, 16), (2, 3, 50, 8), (1, 1, 257, 4)])
def test_cpu_build_matches_float64(shape, dtype):
    g = compiler.trace(nn.attention, *[spec(shape, dtype)] * 3)
    q, k, v = _qkv(shape, dtype, offset=50.0)
    got = get_backend("cpu").build(g)(q, k, v)[0]
    assert_close(got, _np_attention(q, k, v), dtype, scale=4.0, graph=g, args=[q, k, v])


def test_cpu_build_with_a_causal_mask_and_grouped_heads():
    b, heads, kv, s, hd = 1, 4, 2, 13, 8
    specs = [spec((b, heads, s, hd)), spec((b, kv, s, hd)), spec((b, kv, s, hd)), spec((s, s))]
    g = compiler.trace(lambda q, k, v, m: nn.grouped_attention(q, k, v, m, kv), *specs)
    assert g.op_counts().get("attend") == 1
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal(sp.shape).astype(np.float32) for sp in specs[:3])
    mask = np.triu(np.full((s, s), -np.inf, np.float32), 1)
    got = get_backend("cpu").build(g)(q, k, v, mask)[0]
    kk, vv = np.repeat(k, heads // kv, 1), np.repeat(v, heads // kv, 1)
    assert_close(got, _np_attention(q, kk, vv, mask), "f32", scale=4.0, graph=g, args=[q, k, v, mask])


def test_non_contiguous_operands():
    # q, k, v read through a permute (the heads split of a (b, s, h*d) projection)
    def fn(x):
        t = x.reshape(1, 11, 3, 3, 8).permute(2, 0, 3, 1, 4)     # (3, b, h, s, d)
        return nn.attention(t[0], t[1], t[2])
    g = compiler.trace(fn, spec((1, 11, 72)))
    assert g.op_counts().get("attend") == 1
    x = np.random.default_rng(6).standard_normal((1, 11, 72)).astype(np.float32)
    t = x.reshape(1, 11, 3, 3, 8).transpose(2, 0, 3, 1, 4)
    assert_close(get_backend("cpu").build(g)(x)[0], _np_attention(t[0], t[1], t[2]), "f32", scale=4.0)


def test_egraph_holds_the_term_and_the_softmax_forms():
    """Exploration starts from the term (the traced program has it) and still reaches the
    softmax and its online forms (attention-as-softmax), so measurement sees both; every
    candidate computes attention."""
    g = compiler.trace(nn.attention, *[spec((1, 2, 256, 16))] * 3)
    exp = explore(g, limits=Limits.for_budget(2), max_candidates=12)
    with_term = [c for c in exp.candidates if c.graph.op_counts().get("attend")]
    without = [c for c in exp.candidates if not c.graph.op_counts().get("attend")]
    assert with_term and without, [c.description for c in exp.candidates]
    assert any(c.graph.op_counts().get("exp2", 0) >= 2 for c in without)      # a rescaled (online) form
    q, k, v = _qkv((1, 2, 256, 16), "f32", seed=1)
    want = _np_attention(q, k, v)
    for c in exp.candidates:
        assert_close(evaluate(c.graph, [q, k, v])[0], want, "f32", scale=4.0, err_msg=c.description)


def test_expand_terms_leaves_no_term_and_keeps_the_meaning():
    g = compiler.trace(nn.attention, *[spec((1, 2, 9, 8))] * 3)
    e = expand_terms(g)
    assert "attend" not in e.op_counts() and e.inputs == g.inputs
    q, k, v = _qkv((1, 2, 9, 8), "f32", seed=2)
    assert_close(evaluate(e, [q, k, v])[0], evaluate(g, [q, k, v])[0], "f32", scale=2.0)


def test_attend_rejects_ill_formed_operands():
    a = N.input_(0, "a", (3, 4), DType.f32)
    with pytest.raises(ValueError):
        N.attend(a, N.input_(1, "b", (3, 5), DType.f32), 1)
    with pytest.raises(ValueError):
        N.attend(a, a, 2)
    i = N.input_(2, "i", (3, 4), DType.i32)
    with pytest.raises(ValueError):
        N.attend(i, i, 0)
    assert N.attend(a, a, 0).op == Op.ATTEND


# --- on the GPU: the term as one flash kernel ---------------------------------------------------

@pytest.fixture(scope="module")
def cuda(cuda_backend):
    return cuda_backend


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("shape", [(1, 2, 7, 16), (2, 3, 50, 64), (1, 1, 1000, 64), (1, 2, 4097, 64),
                                   (1, 2, 130, 128), (1, 1, 1, 64)])
def test_cuda_runs_the_term_as_one_flash_kernel(cuda, shape, dtype):
    g = compiler.trace(nn.attention, *[spec(shape, dtype)] * 3)
    exe = cuda.build(g)
    if shape[2] > 1:
        assert [l.kind for l in exe.launches] == ["attention"], exe.explain()
    q, k, v = _qkv(shape, dtype, seed=3, offset=30.0)
    # (no propagated bound here: the reference interpreter would hold the (.., q, key, d) broadcast)
    assert_close(exe(q, k, v)[0], _np_attention(q, k, v), dtype, scale=4.0)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_cuda_flash_with_causal_mask_and_grouped_heads(cuda, dtype):
    b, heads, kv, s, hd = 2, 8, 2, 333, 64
    specs = [spec((b, heads, s, hd), dtype), spec((b, kv, s, hd), dtype), spec((b, kv, s, hd), dtype),
             spec((s, s), dtype)]
    g = compiler.trace(lambda q, k, v, m: nn.grouped_attention(q, k, v, m, kv), *specs)
    exe = cuda.build(g)
    assert [l.kind for l in exe.launches] == ["attention"], exe.explain()
    rng = np.random.default_rng(8)
    q, k, v = (rng.standard_normal(sp.shape).astype(DType(dtype).np) for sp in specs[:3])
    mask = np.triu(np.full((s, s), -np.inf), 1).astype(DType(dtype).np)
    got = exe(q, k, v, mask)[0]
    kk, vv = np.repeat(k, heads // kv, 1), np.repeat(v, heads // kv, 1)
    assert_close(got, _np_attention(q, kk, vv, mask), dtype, scale=4.0)


@pytest.mark.gpu
def test_cuda_f32_term_runs_as_its_definition(cuda):
    shape = (1, 2, 77, 32)
    g = compiler.trace(nn.attention, *[spec(shape)] * 3)
    exe = cuda.build(g)
    assert [l.kind.split("_")[0] for l in exe.launches] == ["gemm", "row", "gemm"], exe.explain()
    q, k, v = _qkv(shape, "f32", seed=4, offset=30.0)
    assert_close(exe(q, k, v)[0], _np_attention(q, k, v), "f32", scale=4.0, graph=g, args=[q, k, v])


def test_candidates_are_verified_against_the_program_as_written(monkeypatch):
    """A bf16 softmax rounded before its product: the term skips that rounding, so its error
    bound is tighter than the user's program's. compile() hands the search the program as
    written (no kernel terms) as the reference, whose bound is the one every candidate meets."""
    from compiler import api, verify
    from compiler.trace import trace_primitives
    specs = [spec((1, 2, 33, 16), "bf16")] * 3
    written = trace_primitives(nn.attention, *specs)
    traced = compiler.trace(nn.attention, *specs)
    assert "attend" not in written.op_counts() and written.inputs == traced.inputs
    args = verify.verification_inputs(traced, 0)[0]
    tight, loose = verify.reference(traced, args)[0], verify.reference(written, args)[0]
    assert np.all(loose[1] >= tight[1] * (1 - 1e-9)) and np.any(loose[1] > tight[1])
    seen = {}
    real = api.search

    def spy(graph, *a, **kw):
        seen["written"] = kw.get("written")
        return real(graph, *a, **kw)
    monkeypatch.setattr(api, "search", spy)
    f = compiler.compile(nn.attention, *specs, target="cpu", budget=1, cache=False)
    assert seen["written"] is not None and "attend" not in seen["written"].op_counts()
    q, k, v = _qkv((1, 2, 33, 16), "bf16", seed=9)
    assert_close(f(q, k, v), _np_attention(q, k, v), "bf16", scale=4.0)
