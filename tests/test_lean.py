"""The interpreter's evaluation without materialized broadcasts (ir/lean.py), and the
verification of big programs that relies on it."""
import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

import compiler as saturn
from compiler import fuzz, verify
from compiler.trace import trace, trace_primitives
from ir import numerics
from ir.bounds import allowed, evaluate_bounded
from ir.dtypes import DType
from ir.interpreter import evaluate
from ir.lean import _summed_products, evaluate_lean
from ir.ops import Op


def _agree(got, want, dtype, allowed=None) -> None:
    """Equal NaN and infinity positions; finite values within the output tolerance of the type,
    relative to the largest magnitude (the sums run in another order), or within twice
    `allowed` per element where given (each of two correct evaluations lies within the
    program's propagated error bound of the exact value: an output that is rounding noise,
    e.g. a norm of a row that cancels to zero, may differ entirely between orders)."""
    got, want = np.asarray(got).astype(np.float64), np.asarray(want).astype(np.float64)
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.where(np.isinf(want), want, 0), np.where(np.isinf(got), got, 0))
    fin = np.isfinite(want)
    top = float(np.max(np.abs(want[fin]), initial=0.0))
    diff = np.abs(got[fin] - want[fin])
    ok = diff <= numerics.OUTPUT_TOLERANCE[dtype] * max(top, 1e-30)
    if allowed is not None:
        ok |= diff <= 2 * np.broadcast_to(allowed, want.shape)[fin]
    assert np.all(ok), float(np.max(diff, initial=0))


def test_matmul_attention_and_summed_products_match_the_interpreter():
    """A product (CONTRACT), attention (ATTEND) and a sum of an elementwise product, with their
    broadcast operands never formed, in the program's own types and in float64."""
    def fn(q, k, v, x, w):
        att = ((q @ k.transpose(-1, -2)) * 0.125).softmax(-1) @ v
        return att.sum(-1) + (x.reshape(5, 1, 7) * w.reshape(1, 3, 7)).sum(-1).sum()
    specs = [saturn.spec((2, 5, 8)), saturn.spec((2, 6, 8)), saturn.spec((2, 6, 4)),
             saturn.spec((5, 7)), saturn.spec((3, 7))]
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(s.shape).astype(np.float32) for s in specs]
    kernels, primitives = trace(fn, *specs), trace_primitives(fn, *specs)
    assert {Op.CONTRACT, Op.ATTEND} <= {n.op for n in kernels.nodes}
    assert len(_summed_products(primitives.nodes, set(primitives.outputs))) == 3
    for g in (kernels, primitives):
        for wide in (False, True):
            (got,), (want,) = evaluate_lean(g, args, wide=wide), evaluate(g, args, wide=wide)
            _agree(got, want, DType.f32)


@given(st.integers(0, 2 ** 31 - 1))
@example(72451)    # layer norms, a mean that cancels to zero, a bf16 rms norm of it: rounding noise
@settings(max_examples=40)
def test_random_programs_match_the_interpreter(seed):
    """The fuzzer's random programs (views with masks and pads, gathers, casts, half types,
    products, attention): each output as the interpreter gives it, up to the sums' order
    (within the type's tolerance, or where the output is ill-conditioned within the program's
    propagated error bound)."""
    prog = fuzz.random_program(seed)
    specs = [saturn.spec(s, d) for s, d in prog.inputs]
    try:
        g = trace(fuzz.saturn_fn(prog), *specs)
    except saturn.errors.SaturnError:
        return
    args = fuzz.inputs_for(prog)
    try:
        bounded = evaluate_bounded(trace_primitives(fuzz.saturn_fn(prog), *specs), args)
    except Exception:   # (a bound too costly to form: the type's tolerance alone)
        bounded = [None] * len(g.outputs)
    for got, want, out, b in zip(evaluate_lean(g, args, wide=False), evaluate(g, args, wide=False), g.outputs,
                                 bounded):
        if out.dtype.is_float:
            _agree(got, want, out.dtype, None if b is None else allowed(b.value, b.bound, out.dtype))
        else:
            np.testing.assert_array_equal(got, want)


def test_views_are_not_copied_and_outputs_are_fresh():
    g = trace(lambda x: x.reshape(4, 1, 6).expand(4, 1000, 6) + 0.0, saturn.spec((4, 6)))
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    (got,) = evaluate_lean(g, [x])
    np.testing.assert_array_equal(got, np.broadcast_to(x.reshape(4, 1, 6), (4, 1000, 6)))
    assert got.flags.writeable and got.flags.c_contiguous and not np.shares_memory(got, x)


def test_a_big_program_s_verification_rejects_one_wrong_element():
    """One Llama-style decoder layer at s250 d384 (1.5e9 element-ops in the interpreter): its
    float64 reference's first-order bounds are infinite on every output element, so before
    the lean own-types run it accepted any output; now an output wrong by 1 % on one element
    is rejected and the program's own run passes."""
    from benchmarks import workloads as W
    case = W.decoder("odd", layers=1, b=1, s=250, d=384, heads=6, kv_heads=2, ffn=1000)
    g = trace(case.saturn_fn, *[saturn.spec(i.shape, i.dtype) for i in case.inputs])
    assert verify.reference_work(g) > verify.NATIVE_LIMIT >= verify.reference_work(g, matmul=True)
    inputs = verify.verification_inputs(g, 0)[0]        # the normal family
    (expected,) = verify.reference(g, inputs, calibrate=True)
    (own,) = evaluate_lean(g, inputs, wide=False)
    assert verify.compare(expected, own, g.outputs[0].dtype) is None
    wrong = own.copy()
    wrong.reshape(-1)[wrong.size // 3] *= 1.01
    assert "1 of" in verify.compare(expected, wrong, g.outputs[0].dtype)
