"""The bridge (IR <-> egglog terms) and what saturation + extraction find: the online
softmax / flash-attention form and single-pass normalization statistics."""
import numpy as np
import pytest

import compiler as saturn
from compiler import nn
from compiler.explore import Limits, explore
from ir.interpreter import evaluate
from ir.ops import Op
from rewrites.bridge import EGraphSession, decompose_view
from rewrites.extract import PROFILES, choose, class_infos, rebuild
from tests.online_forms import online_softmax_stats, single_pass_statistics


def _args(g, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(n.shape) * scale).astype(n.dtype.np) for n in g.inputs]


def _same(g1, g2, seed=0, scale=1.0, rtol=1e-4):
    args = _args(g1, seed, scale)
    for a, b in zip(evaluate(g1, args), evaluate(g2, args)):
        np.testing.assert_allclose(b, a, rtol=rtol, atol=rtol * max(1.0, float(np.abs(a).max())))


def _views_program(x, y):
    t = x.transpose(0, 1)[1:4, ::2]               # permute, slice, step: opaque views
    p = y.pad(((0, 1), (2, 0)), value=-3.0)       # a padded view with a fill value
    return (t * 2.0).exp() .sum(1, keepdim=True) + p[:3, :2].max(1, keepdim=True)


@pytest.mark.parametrize("fn,specs", [
    (lambda x: x.softmax(-1), [(4, 40)]),
    (_views_program, [(6, 5), (3, 2)]),
    (lambda x, w: (x @ w).relu().sum(0), [(3, 4), (4, 5)]),
])
def test_round_trip_without_rules(fn, specs):
    g = saturn.trace(fn, *[saturn.spec(s) for s in specs])
    session = EGraphSession(g)
    eg = session.serialize()
    back = rebuild(eg, choose(eg, class_infos(eg), PROFILES[0]))
    assert back.inputs == g.inputs
    assert [(o.shape, o.dtype) for o in back.outputs] == [(o.shape, o.dtype) for o in g.outputs]
    _same(g, back)


def test_shared_subterms_stay_shared():
    g = saturn.trace(lambda x: x.exp() + x.exp() * 2.0, saturn.spec((8,)))
    eg = EGraphSession(g).serialize()
    back = rebuild(eg, choose(eg, class_infos(eg), PROFILES[0]))
    assert sum(1 for n in back.nodes if n.op == Op.EXP2) == 1


def test_expand_views_become_structured():
    g = saturn.trace(lambda x: x.max(-1, keepdim=True).expand(4, 16), saturn.spec((4, 16)))
    view = g.outputs[0]
    core, exps = decompose_view(view.srcs[0].shape, view.arg)
    assert core is None and exps == [(1, 16)]


def test_online_softmax_is_found_and_ranked_first():
    g = saturn.trace(lambda x: x.softmax(-1), saturn.spec((4, 1024)))
    exp = explore(g, limits=Limits(seconds=20))
    online = [c for c in exp.candidates if online_softmax_stats(c.graph)]
    assert online, str(exp)
    assert exp.candidates[0] is online[0]          # the static cost ranks it first
    assert not online_softmax_stats(g)
    for c in exp.candidates:
        _same(g, c.graph)
        _same(g, c.graph, seed=1, scale=30.0)      # large logits: still no overflow


def test_flash_attention_form_is_found():
    g = saturn.trace(nn.attention, *[saturn.spec((1, 512, 16))] * 3)
    exp = explore(g, limits=Limits(seconds=30))
    # ranked first by the static cost: the online-contraction term (one streaming kernel)
    assert exp.candidates[0].graph.op_counts().get("attend") == 1, str(exp)
    # the rules' own online form (both running sums, l = sum_b exp(m_b - m) l_b, and the
    # accumulator O = sum_b exp(m_b - m) (exp(s_b - m_b) @ v_b), over 512 / 16 = 32 tiles of K/V)
    # needs the softmax's scale moved into the query (`scale-into-operand`), unstable since
    # 2026-12-03 (0 * inf where a subnormal query times the scale underflows; fuzz seed 114227):
    # the default search no longer reaches it, the attend term above is its fast form
    assert not online_softmax_stats(g)
    for c in exp.candidates:
        _same(g, c.graph, rtol=1e-4)
        _same(g, c.graph, seed=2, scale=10.0, rtol=1e-4)


@pytest.mark.parametrize("name,fn,specs", [
    ("layernorm", lambda x: x.layer_norm((1024,)), [(4, 1024)]),
    ("rmsnorm", lambda x, w: x.rms_norm((1024,), w), [(4, 1024), (1024,)]),
])
def test_single_pass_statistics(name, fn, specs):
    g = saturn.trace(fn, *[saturn.spec(s) for s in specs])
    exp = explore(g, limits=Limits(seconds=20))
    one_pass = [c for c in exp.candidates if single_pass_statistics(c.graph, big=4096)]
    if name == "layernorm":
        assert not single_pass_statistics(g, big=4096)   # mean first, then sum((x - mean)^2)
        # its one-pass form, E[x^2] - E[x]^2, needs the distributing rules marked unstable
        # (rewrites/algebra.py): the default search does not produce it
        assert not one_pass, str(exp)
    else:
        assert one_pass, str(exp)
    for c in exp.candidates:
        _same(g, c.graph, rtol=2e-4)


def test_non_divisible_axis_is_padded_with_the_identity():
    g = saturn.trace(lambda x: x.sum(-1) + x.max(-1), saturn.spec((4, 1000)))   # 1000 % 32 != 0
    exp = explore(g)
    fills = {n.arg.fill for c in exp.candidates for n in c.graph.nodes if n.op == Op.VIEW and n.arg.has_mask}
    assert fills == {0.0, float("-inf")}          # sum pads with 0, max with -inf
    for c in exp.candidates:
        _same(g, c.graph)
        _same(g, c.graph, seed=3, scale=-50.0)    # all-negative-ish rows: a 0 pad would win a max
