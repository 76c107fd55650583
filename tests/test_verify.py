"""The candidate checks: per-dtype tolerance, NaN and infinities, shapes, exact integers, inputs."""
from __future__ import annotations

import ml_dtypes
import numpy as np

import compiler as saturn
from ir import numerics
from compiler import verify
from ir.dtypes import DType
from ir.interpreter import evaluate


def _ref(n=1000, dtype=np.float32):
    return np.random.default_rng(0).standard_normal(n).astype(dtype)


def test_tolerance_is_relative_to_the_largest_reference_magnitude():
    e = _ref()
    scale = float(np.abs(e).max())
    assert verify.compare(e, e + np.float32(0.5e-4 * scale), DType.f32) is None
    assert "exceeds tolerance" in verify.compare(e, e + np.float32(2e-4 * scale), DType.f32)


def test_half_types_get_wider_tolerances():
    for dt, np_dt, ok, bad in [(DType.f16, np.float16, 5e-3, 3e-2), (DType.bf16, ml_dtypes.bfloat16, 1.5e-2, 8e-2)]:
        e = _ref(dtype=np_dt)
        scale = float(np.abs(e.astype(np.float32)).max())
        near = (e.astype(np.float32) + ok * scale).astype(np_dt)
        far = (e.astype(np.float32) + bad * scale).astype(np_dt)
        assert verify.compare(e, near, dt) is None, dt
        assert verify.compare(e, far, dt) is not None, dt


def test_nan_where_the_reference_has_none_is_rejected():
    e = _ref()
    g = e.copy()
    g[3] = np.nan
    assert "NaN in 1 of 1000" in verify.compare(e, g, DType.f32)
    e2 = e.copy()
    e2[3] = np.nan
    assert verify.compare(e2, g, DType.f32) is None          # NaN in the same place is fine
    assert "reference has NaN" in verify.compare(e2, e, DType.f32)


def test_infinities_must_match():
    e = _ref()
    g = e.copy()
    g[5] = np.inf
    assert "infinities" in verify.compare(e, g, DType.f32)
    e2 = e.copy()
    e2[5] = -np.inf
    assert "infinities" in verify.compare(e2, g, DType.f32)
    assert verify.compare(g, g.copy(), DType.f32) is None


def test_shape_dtype_and_exact_integers():
    e = _ref()
    assert "wrong shape" in verify.compare(e, e[:-1], DType.f32)
    assert "wrong dtype" in verify.compare(e, e.astype(np.float64), DType.f32)
    i = np.arange(10, dtype=np.int32)
    j = i.copy()
    j[2] += 1
    assert verify.compare(i, i.copy(), DType.i32) is None
    assert "1 of 10 elements differ" in verify.compare(i, j, DType.i32)


def test_verification_inputs_are_seeded_nonzero_and_varied():
    g = saturn.trace(lambda x, n: x * n.cast("f32"), saturn.spec((64, 33)), saturn.spec((64, 33), "i32"))
    a = verify.verification_inputs(g, 3)
    b = verify.verification_inputs(g, 3)
    c = verify.verification_inputs(g, 4)
    assert all(x.tobytes() == y.tobytes() for s, t in zip(a, b) for x, y in zip(s, t))
    assert a[0][0].tobytes() != c[0][0].tobytes()
    families = [f.name for f in numerics.verification_families([DType.f32, DType.i32])]
    assert families == ["normal", "logits", "offset", "cancel", "special"] and len(a) == 5
    for (floats, ints), family in zip(a, families):
        assert floats.dtype == np.float32 and ints.dtype == np.int32 and np.all(ints != 0)
        if family != "special":
            assert np.count_nonzero(floats) == floats.size
    assert float(a[1][0].std()) > 6                                     # logits
    assert abs(float(a[2][0].mean()) - 1e4) < 1 and abs(float(a[2][0].std()) - 1) < 0.1   # offset
    assert abs(float(np.abs(a[3][0]).mean()) - 1e4) < 1 and abs(float(a[3][0].mean())) < 2e3   # cancel
    special = a[4][0]
    assert np.isneginf(special[0, 0]) and np.isnan(special).any() and np.isposinf(special).any()
    assert (special == 0).any() and ((special != 0) & (np.abs(special) < 1e-38)).any()


def test_odd_variant_retraces_shape_generic_functions_only():
    specs = [saturn.spec((8, 64))]
    g = verify.odd_variant_graph(lambda *s: saturn.trace(lambda x: x.softmax(-1), *s), specs)
    assert g is not None and g.inputs[0].shape == (9, 65)
    # a function with a hard-coded size traces with that size kept and the others odd
    fixed = verify.odd_variant_graph(lambda *s: saturn.trace(lambda x: x.layer_norm((64,)), *s), specs)
    assert fixed is not None and fixed.inputs[0].shape == (9, 64)
    # one that traces at no other size at all has no variant
    assert verify.odd_variant_graph(lambda *s: saturn.trace(lambda x: x.reshape(8, 8, 8), *s), [saturn.spec((8, 64))]) is None
    # a program too big for the interpreter is shrunk until it fits
    big = [saturn.spec((512, 512)), saturn.spec((512, 512))]
    small = verify.odd_variant_graph(lambda *s: saturn.trace(lambda a, b: a @ b, *s), big)
    assert small is not None and verify.reference_work(small) <= verify.REFERENCE_LIMIT
    assert all(n % 2 == 1 for x in small.inputs for n in x.shape)


def test_odd_variant_of_a_decoder_keeps_its_coupled_sizes():
    # width = heads x head size and an even head size (rotary embedding): no size-by-one change
    # of the width traces; the sizes shrink together and the sequence and hidden sizes turn odd
    from compiler import nn
    specs = nn.llama_decoder_specs(2, 1, 250, 384, 6, 2, 1000, "f32")
    g = verify.odd_variant_graph(lambda *s: saturn.trace(lambda *xs: nn.llama_decoder(*xs, heads=6, kv_heads=2), *s),
                                 specs)
    assert g is not None and verify.reference_work(g) <= verify.REFERENCE_LIMIT
    x, mask = g.inputs[0].shape, g.inputs[1].shape
    assert x[1] % 2 == 1 and mask == (x[1], x[1]) and x[2] % 6 == 0 and (x[2] // 6) % 2 == 0
    assert any(n % 2 == 1 and n > 8 for i in g.inputs for n in i.shape if n not in x)   # the hidden size


def test_max_relative_error_counts_bf16_outputs():
    # bf16's numpy dtype is of kind "V", not "f": it must still count as a float output
    e = np.array([1.0, 2.0, 4.0], dtype=ml_dtypes.bfloat16)
    g = np.array([1.0, 2.0, 5.0], dtype=ml_dtypes.bfloat16)
    assert verify.max_relative_error([e], [g]) == 0.25
    assert verify.max_relative_error([e.astype(np.float16)], [g.astype(np.float16)]) == 0.25


def test_nan_is_rejected_where_the_bound_is_free_but_the_program_gives_no_nan():
    """var of near-max bf16 rows: float64 gives inf, the bound there is infinite (past bf16's
    range), so once any value passed. A rewritten program that takes the row scale out of the
    sum gave NaN rows on the H200; the program as written gives inf, so NaN is rejected."""
    from test_numerics import N, _bf16_rows_near_its_max
    x, w, b = _bf16_rows_near_its_max()
    fn = lambda x, w, b: x.var(-1, keepdim=True) * w + b          # noqa: E731
    g = saturn.trace(fn, saturn.spec((4, N), DType.bf16), saturn.spec((N,)), saturn.spec((N,)))
    ref = verify.reference(g, [x, w, b])[0]
    assert ref.shape == (3, 4, N)                                  # value, bound, where NaN is acceptable
    assert not np.isfinite(ref[1][:2]).any()                       # the near-max rows: free
    good = evaluate(g, [x, w, b])[0]
    assert verify.compare(ref, good, DType.f32) is None
    nan_rows = good.copy()
    nan_rows[:2] = np.nan
    assert "NaN where the reference has none" in verify.compare(ref, nan_rows, DType.f32)
    inf_flipped = good.copy()
    inf_flipped[:2] = -good[:2]                                    # other values there stay free
    assert verify.compare(ref, inf_flipped, DType.f32) is None


def test_nan_is_accepted_where_a_sqrt_operand_is_within_its_bound_of_a_negative_value():
    """sqrt(x - mean(x)) at mean 1e4: a deviation of +5e-4 is within its rounding bound of 0,
    so a correct kernel may take the root of a tiny negative value (seed 109504, sqrt of a
    layer_norm). NaN is accepted there, a finite value there is still checked, and NaN where
    the operand is certainly positive is still rejected."""
    x = np.array([10000.0, 10000.0009765625, 10010.0, 9990.0], np.float32)
    g = saturn.trace(lambda t: (t - t.mean(-1, keepdim=True)).sqrt(), saturn.spec((4,)))
    ref = verify.reference(g, [x])[0]
    good = evaluate(g, [x])[0]
    assert verify.compare(ref, good, DType.f32) is None
    near = good.copy()
    near[:2] = np.nan                                # the two deviations within their bound of 0
    assert verify.compare(ref, near, DType.f32) is None
    far = good.copy()
    far[1] = 5.0
    assert verify.compare(ref, far, DType.f32) is not None
    positive = good.copy()
    positive[2] = np.nan                             # sqrt(+10): never NaN
    assert "NaN where the reference has none" in verify.compare(ref, positive, DType.f32)


def test_nan_is_accepted_where_f32_partial_sums_may_overflow_both_ways():
    """Near-max bf16 products of both signs: an f32 accumulation may reach +inf in one block
    and -inf in another (seeds 108967, 110391). Where every term is positive a partial sum can
    only reach +inf, so NaN is still rejected there."""
    big = float(np.finfo(ml_dtypes.bfloat16).max) / 2
    a = np.ones((2, 9), ml_dtypes.bfloat16)
    w = np.array([[big, big]] * 6 + [[-big, big]] * 3, ml_dtypes.bfloat16)
    g = saturn.trace(lambda a, w: a @ w, saturn.spec((2, 9), DType.bf16), saturn.spec((9, 2), DType.bf16))
    ref = verify.reference(g, [a, w])[0]
    got = evaluate(g, [a, w])[0].astype(np.float64)
    mixed = got.copy()
    mixed[:, 0] = np.nan                             # 6 big - 3 big = inf, and may be inf + -inf
    assert verify.compare(ref, mixed.astype(ml_dtypes.bfloat16), DType.bf16) is None
    one_way = got.copy()
    one_way[:, 1] = np.nan                           # nine +big terms: only +inf is reachable
    assert "NaN where the reference has none" in verify.compare(ref, one_way.astype(ml_dtypes.bfloat16), DType.bf16)


def test_variants_of_product_free_programs_get_half_the_reference_work():
    """Every verification family runs a variant's bounded reference: a program without matrix
    products gets half the work (an elementwise 4096x4096 chain at 1025x1025, not 2049x2049),
    one with products the whole (its variant must hold a product's tiles)."""
    import compiler
    from compiler.trace import trace
    from compiler.verify import REFERENCE_LIMIT, odd_variant_graph, reference_work

    def variant(fn, *shapes):
        return odd_variant_graph(lambda *s: trace(fn, *s), [compiler.spec(s) for s in shapes])
    chain = variant(lambda x: (x * 2 + 1).relu(), (4096, 4096))
    assert chain.inputs[0].shape == (1025, 1025)
    assert reference_work(chain) <= REFERENCE_LIMIT / 2
    product = variant(lambda a, b: (a @ b).relu(), (800, 800), (800, 800))
    assert REFERENCE_LIMIT / 2 < reference_work(product) <= REFERENCE_LIMIT


def test_a_size_that_coincides_with_a_coupled_one_is_made_odd_alone():
    """A layer norm over a hard-coded 1024 of a 1024x1024 input: 1024 -> 1025 everywhere does not
    trace, but the rows alone can change, so the variant is 1025x1024 (it had none)."""
    import compiler
    from compiler.trace import trace
    from compiler.verify import odd_variant_graph
    specs = [compiler.spec((1024, 1024)), compiler.spec((1024,)), compiler.spec((1024,))]
    g = odd_variant_graph(lambda *s: trace(lambda x, w, b: x.layer_norm((1024,), w, b), *s), specs)
    assert g is not None and [n.shape for n in g.inputs] == [(1025, 1024), (1024,), (1024,)]
