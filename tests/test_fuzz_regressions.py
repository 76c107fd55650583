"""Failures `saturn fuzz` found, each kept as the smallest program that showed it."""
from __future__ import annotations

import numpy as np
import pytest

import compiler as saturn
from compiler import fuzz
from compiler.errors import DTypeError


@pytest.mark.parametrize("fn", [lambda a, b: a - b, lambda a, b: -a, lambda a, b: a.__rsub__(b)])
def test_bool_subtraction_and_negation_are_rejected(fn):
    # seeds 100173, 100250, 100257: bool - bool traced to an i32 difference (-1, 0, 1), where
    # PyTorch and numpy refuse; a later log_softmax or cast then computed on those values
    with pytest.raises(DTypeError, match="not defined on bool"):
        saturn.trace(fn, saturn.spec((3,), "bool"), saturn.spec((3,), "bool"))


def test_subtracting_an_int_from_bool_is_integer_arithmetic():
    g = saturn.trace(lambda a: 1 - a, saturn.spec((3,), "bool"))
    assert g.outputs[0].dtype.value == "i32"


# the programs of those seeds as drawn before casts to f64, i64, i8 and u8 were added (which
# changed what a seed draws)
FOUND_BOOL_SUBTRACTIONS = [
    '{"inputs": [[[1, 16, 31], "bool"], [[1, 16, 31], "bool"], [[31], "bool"], [[], "f32"]], "steps": [["binary", '
    '{"op": "maximum", "input": 1}], ["move", {"op": "unsqueeze"}], ["binary", {"op": "sub", "input": 2}], ["unary", '
    '{"op": "tanh"}], ["norm", {"op": "log_softmax", "axis": -1}], ["binary", {"op": "sub", "input": 3}]], '
    '"special": false, "seed": 100173}',
    '{"inputs": [[[], "f32"], [[], "bool"]], "steps": [["cast", {"to": "f32"}], ["move", {"op": "flatten"}], ["cast", '
    '{"to": "bool"}], ["binary", {"op": "sub", "input": 1}]], "special": true, "seed": 100250}',
    '{"inputs": [[[7, 3, 1, 64], "i32"], [[64], "bool"], [[64], "bool"]], "steps": [["unary", {"op": "tanh"}], '
    '["cast", {"to": "i32"}], ["cast", {"to": "i32"}], ["cast", {"to": "bool"}], ["binary", {"op": "where_gt", '
    '"input": 1}], ["binary", {"op": "sub", "input": 2}]], "special": false, "seed": 100257}',
]


@pytest.mark.parametrize("text", FOUND_BOOL_SUBTRACTIONS, ids=["100173", "100250", "100257"])
def test_found_programs_are_rejected_as_invalid(text):
    assert fuzz.check(fuzz.Program.from_json(text), "reference", 0.5)["status"] == "invalid"


def test_relu_of_minus_inf_is_zero_in_the_reference():
    # seed 100589: the reference computed relu as where(x > 0, x, 0 * x), NaN at -inf; Saturn's 0 was right
    prog = fuzz.Program([((), "f32")], [("unary", {"op": "relu"}), ("move", {"op": "flatten"})], special=True,
                        seed=100589)
    assert float(fuzz.inputs_for(prog)[0]) == -np.inf
    assert fuzz.check(prog, "reference", 0.5)["status"] == "ok"
    assert fuzz.check(fuzz.random_program(100589), "reference", 0.5)["status"] == "ok"


# H200 fuzz, seeds 310000..310799 (2026-12-02): the CUDA backend's original program failed
# verification on these (so no candidate passed): a buffer read through a transposing view
# was also loaded as a vector at the kernel's own element (310010, 310051, 310269, 310302),
# and empty tensors failed to build or launch (310506, 310546, 310685, 310686)
CUDA_FOUND = [310010, 310051, 310269, 310302, 310506, 310546, 310685, 310686]


@pytest.mark.gpu
@pytest.mark.parametrize("seed", CUDA_FOUND)
def test_cuda_fuzz_findings_compile_and_match(seed):
    from backends.cuda import CUDABackend
    reason = CUDABackend().unavailable_reason()
    if reason:
        pytest.skip(reason)
    res = fuzz.check(fuzz.random_program(seed), "cuda", 2.0)
    assert res["status"] == "ok", res


@pytest.mark.parametrize("seed", CUDA_FOUND)
def test_cuda_fuzz_findings_render_and_pass_on_the_cpu(seed):
    """Without a GPU: the programs render for CUDA (empty ones with no launch of an empty
    output) and pass on the CPU target."""
    from backends.cuda import render
    prog = fuzz.random_program(seed)
    g = saturn.trace(fuzz.saturn_fn(prog), *[saturn.spec(s, d) for s, d in prog.inputs])
    _, launches = render(g)
    assert all(l.output.numel > 0 and min(l.grid) > 0 for l in launches)
    assert fuzz.check(prog, "reference", 0.5)["status"] == "ok"


@pytest.mark.parametrize("shape", [(4, 64), (64, 64), (64, 256)])
def test_bf16_layer_norm_of_near_max_rows_keeps_its_scaling_under_every_cpu_schedule(shape):
    # seed 105532 (CPU fuzz): bf16 layer_norm of near-max rows gave NaN under every fast-math
    # schedule: with `reassoc`, LLVM factored the scaled mean's sum(x_i * s) into s * sum(x_i),
    # which overflows where the program scaled first; the strict schedule was right
    from backends.llvm import LLVMBackend
    from ir import numerics
    from ir.dtypes import DType
    from ir.interpreter import evaluate
    x, = numerics.random_inputs([(shape, DType.bf16)], 7, numerics.NEAR_MAX)
    g = saturn.trace(lambda t: t.layer_norm((shape[1],)), saturn.spec(shape, DType.bf16))
    want = evaluate(g, [x])[0].astype(np.float64)
    be = LLVMBackend()
    for sched in be.schedules(g):
        got = np.asarray(be.build(g, sched, use_cache=False)(x)[0]).astype(np.float64)
        assert not np.isnan(got).any(), sched.name
        np.testing.assert_allclose(got, want, rtol=0.02, atol=0.02, err_msg=sched.name)


@pytest.mark.parametrize("seed", [310506, 310546, 310685, 310686])
def test_cuda_executable_of_an_empty_program_has_a_buffer_for_every_read(seed):
    """Without a GPU (a stand-in runtime): the executable of a program with empty values
    allocates a buffer for every value a launch reads and every output, though an empty
    value has no kernel (the H200 run of 1e5ff3e failed these at build: an empty step's
    output, read by the next step, had no buffer)."""
    from backends.cuda import render
    from backends.cuda.executable import CUDAExecutable

    class Runtime:
        allocated = 0

        def function(self, *a):
            return None

        def alloc(self, n):
            Runtime.allocated += 1
            return Runtime.allocated

        def fill_unwritten(self, buf, n):
            pass

    prog = fuzz.random_program(seed)
    g = saturn.trace(fuzz.saturn_fn(prog), *[saturn.spec(s, d) for s, d in prog.inputs])
    from backends.cuda.plan import prepare
    src, launches = render(g)
    g = prepare(g)[0]                    # (the launches name the prepared graph's nodes, as in build)
    exe = CUDAExecutable(g, launches, src, None, Runtime())
    assert all(len(args) == 1 + len(l.inputs) for l, args in zip(launches, exe._args))
    assert all(o in exe.buffers for o in g.outputs)


def test_a_sum_of_terms_that_may_flip_bounds_their_rounding_too():
    # seed 310542 (H200 fuzz, also on the CPU): log_softmax -> u8 -> bool (may flip: bound 1)
    # times weights of ~1e4, summed: the bound was sum |w| (the reference's terms are 0) with
    # no room for the computed sum's own rounding, and 30002.1 against 3e4 rejected every
    # candidate. Roundings are now bounded relative to |value| + bound
    prog = fuzz.random_program(310542)
    assert [s[0] for s in prog.steps] == ["matmul", "norm", "cast", "cast", "cast", "matmul"]
    res = fuzz.check(prog, "cpu", 2.0)
    assert res["status"] == "ok", res


def test_nested_bf16_norms_lower_without_comparing_trees_path_by_path():
    # seed 105449 (CPU fuzz, a hang at 60 s): layer_norm -> log -> std -> softmax on bf16; each
    # row-scaled norm rebuilds its scale at every use, and the lowering compared those values
    # tree by tree (22 s), then canonical() walked them path by path. It now compiles, and
    # its kernels are those of the program
    prog = fuzz.random_program(105449)
    assert [s[1].get("op") for s in prog.steps][:4] == ["layer_norm", "log", "std", "softmax"]
    res = fuzz.check(prog, "cpu", 1.0)
    assert res["status"] == "ok", res


def test_a_std_over_a_guarded_max_lowers_without_renaming_it_path_by_path():
    # seed 200749 (CPU fuzz on bf5adb1, a hang at 60 s): std -> var -> softmax on bf16; the
    # std's overflow guard uses its row max at every step, and canonical() renamed that max's
    # variables once per path (55 s a lowering, 172 s a budget-1 compile). Now 2 s
    # (the minimized program; the seed's own adds a transpose, a subtraction and a cast)
    prog = fuzz.Program.from_json(
        '{"inputs": [[[8, 8, 1, 2], "bf16"], [[], "bf16"]], "steps": [["reduce", {"op": "std", "axis": 0, '
        '"keepdim": false}], ["reduce", {"op": "var", "axis": -2, "keepdim": false}], ["norm", {"op": '
        '"softmax", "axis": -1}]], "special": false, "seed": 200749}')
    res = fuzz.check(prog, "cpu", 1.0)
    assert res["status"] == "ok", res


def test_nan_past_an_overflowing_f32_sum_is_not_held_against_the_program():
    # seed 106340 (CPU fuzz on 0f5f0d3): near-max bf16 products overflow the targets' f32
    # accumulation (the interpreter sums in float64), and a softmax over a length-1 axis then
    # gives NaN where the float64 reference is finite with an infinite bound: every schedule of
    # the original program was rejected. NaN is rejected only where the true result is infinite
    prog = fuzz.random_program(106340)
    res = fuzz.check(prog, "cpu", 1.0)
    assert res["status"] == "ok", res


def test_exp2_of_nan_is_nan_under_every_cpu_schedule():
    # seed 106798 (CPU fuzz on c266c3b): softmax of a fully masked length-1 row computes
    # -inf - (-inf) = NaN; exp2's integer part of NaN was an fptosi of NaN, poison to LLVM, which
    # folded the result to a finite value (1.5e-05) under every schedule, so no candidate passed
    from backends.llvm import LLVMBackend
    g = saturn.trace(lambda t: t.exp2(), saturn.spec((37,), "f32"))
    x = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, 1.0, -1.5, 200.5, -300.0] * 4 + [np.nan], np.float32)
    with np.errstate(over="ignore"):
        want = np.exp2(x).astype(np.float64)       # f32: 2**200.5 overflows, 2**-300 is 0
    be = LLVMBackend()
    for sched in be.schedules(g):
        got = np.asarray(be.build(g, sched, use_cache=False)(x)[0]).astype(np.float64)
        assert np.array_equal(np.isnan(got), np.isnan(want)), sched.name
        ok = ~np.isnan(want)
        np.testing.assert_allclose(got[ok], want[ok], rtol=1e-5, err_msg=sched.name)
    prog = fuzz.Program.from_json(
        '{"inputs": [[[8, 1], "f16"], [[1, 1], "f16"], [[1, 1], "f16"], [[1, 1], "bool"]], "steps": [["mask", '
        '{"input": 3, "additive": false}], ["norm", {"op": "softmax", "axis": -1}]], "special": false, "seed": 106798}')
    res = fuzz.check(prog, "cpu", 1.0)
    assert res["status"] == "ok", res


@pytest.mark.parametrize("target", ["reference", "cpu"])
def test_tanh_near_zero_keeps_its_relative_accuracy_and_sign(target):
    # seed 340821 (H200 fuzz on 9347e3c, also on the CPU): sqrt(tanh(x)) of a tiny negative x
    # gave 0 where the reference is NaN: tanh was 2 sigmoid(2x) - 1, which cancels near 0
    # (relative error 1e-2 at 1e-5; -4e-45 became +0)
    x = np.array([1e-5, -1e-5, -4e-45, -0.0, 0.0, 0.02, -0.0249, 0.03, 0.5, -3.0, 20.0, 1e-30], np.float32)
    f = saturn.compile(lambda a: a.tanh(), saturn.spec(x.shape, "f32"), target=target, budget=2, quiet=True)
    got = np.asarray(f(x)).astype(np.float64).reshape(x.shape)
    want = np.tanh(x.astype(np.float64))
    assert np.array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=0)
    prog = fuzz.Program.from_json(
        '{"inputs": [[[1, 64, 16, 7], "f32"], [[16, 7], "f32"]], "steps": [["unary", {"op": "tanh"}], ["unary", '
        '{"op": "sqrt"}], ["binary", {"op": "div", "input": 1}]], "special": true, "seed": 340821}')
    assert fuzz.check(prog, target, 1.0)["status"] == "ok"


# CPU fuzz on c266c3b (2026-12-03): valid programs whose every candidate was rejected, the
# original program's too: a correct kernel gave NaN where float64 does not. 109504: sqrt of a
# layer_norm output within its rounding bound of 0; 108967, 110391: near-max half products
# whose f32 partial sums overflow both ways (108967 also met the reference's matmul of f16 by
# bf16, which promotes to f32)
MAY_GIVE_NAN = [
    '{"inputs": [[[16, 64, 16, 4], "f32"]], "steps": [["norm", {"op": "layer_norm", "axis": -1}], ["unary", {"op": '
    '"sqrt"}]], "special": false, "seed": 109504}',
    '{"inputs": [[[64, 4], "f32"], [[64, 4], "f16"], [[4, 1], "bf16"]], "steps": [["cast", {"to": "f16"}], '
    '["binary", {"op": "where_gt", "input": 1}], ["matmul", {"input": 2}]], "special": false, "seed": 108967}',
    '{"inputs": [[[1, 4], "bf16"], [[4, 16], "bf16"], [[16, 3], "bf16"]], "steps": [["unary", {"op": "sigmoid"}], '
    '["matmul", {"input": 1}], ["matmul", {"input": 2}]], "special": false, "seed": 110391}',
]


@pytest.mark.parametrize("text", MAY_GIVE_NAN, ids=["109504", "108967", "110391"])
def test_nan_a_correct_kernel_may_give_is_accepted(text):
    res = fuzz.check(fuzz.Program.from_json(text), "cpu", 1.0)
    assert res["status"] == "ok", res


# H200 fuzz on 3b370d9, seed 342715: softmax(q k^T + mask) v, a maximum with a scalar, then a
# transpose. The product is square, so the transposing view passed the epilogue's shape checks,
# and the gemm stored its result untransposed (every schedule at odd shapes)
SQUARE_TRANSPOSED = [
    lambda a, b, c: (a @ b).maximum(c).transpose(0, 1),
    lambda a, b, c: ((a @ b) * 2 + c).transpose(0, 1).reshape(-1),
    lambda a, b, c: (a @ b).transpose(0, 1) + c,
]


def _transposed_programs():
    for fn in SQUARE_TRANSPOSED:
        for n, dt in ((16, "f16"), (17, "f16"), (17, "f32"), (1, "f32")):
            yield fn, (saturn.spec((n, 8), dt), saturn.spec((8, n), dt), saturn.spec((), dt))
    prog = fuzz.random_program(342715)
    for shapes in ([s for s, _ in prog.inputs], [[17, 3], [3, 9], [9, 17], [1, 9], []]):
        yield fuzz.saturn_fn(prog), [saturn.spec(tuple(s), d) for s, (_, d) in zip(shapes, prog.inputs)]


def test_cuda_product_epilogues_never_pass_through_a_transpose():
    """Without a GPU: in every gemm step, the path from the step's output down to its product
    holds only elementwise ops and pure reshapes (the epilogue reads the accumulator as the
    product's value at the output's own element)."""
    from backends.cuda.match import is_pure_reshape
    from backends.cuda.plan import plan
    for fn, specs in _transposed_programs():
        steps = plan(saturn.trace(fn, *specs))
        for st in (s for s in steps if s.kind == "gemm"):
            stack, seen = [st.output], set()
            while stack:
                n = stack.pop()
                if n is st.gemm.reduce or n in seen or n.op.name == "INPUT":
                    continue
                seen.add(n)
                assert not (n.op.name == "VIEW" and not is_pure_reshape(n) and _reads(n, st.gemm.reduce)), n
                stack.extend(n.srcs)


def _reads(n, target) -> bool:
    return n is target or any(_reads(s, target) for s in n.srcs)


@pytest.mark.gpu
def test_cuda_transposed_square_products_match_numpy():
    from backends.cuda import CUDABackend
    reason = CUDABackend().unavailable_reason()
    if reason:
        pytest.skip(reason)
    assert fuzz.check(fuzz.random_program(342715), "cuda", 2.0)["status"] == "ok"
    for fn, specs in _transposed_programs():
        from compiler import verify
        from ir.interpreter import evaluate
        g = saturn.trace(fn, *specs)
        args = verify.random_inputs(g, 3)
        exe = CUDABackend().build(g)
        got = np.asarray(exe(*args)[0]).astype(np.float64)
        want = np.asarray(evaluate(g, args)[0]).astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)


def test_maximum_of_equal_zeros_is_the_first_operand_as_in_pytorch():
    # seed 113018 (CPU fuzz on 648b5e5): 1 / maximum(+0, -0) is +inf in PyTorch and in Saturn;
    # the fuzz reference used numpy's maximum, which gives the second operand (-0, so -inf)
    x = np.array([0.0, -0.0, -0.0, 0.0, 1.0], np.float32)
    y = np.array([-0.0, 0.0, -0.0, 0.0, np.nan], np.float32)
    want = np.array([np.inf, -np.inf, -np.inf, np.inf, np.nan])
    for target in ("reference", "cpu"):
        f = saturn.compile(lambda a, b: 1 / a.maximum(b), saturn.spec((5,)), saturn.spec((5,)), target=target,
                           budget=1, quiet=True)
        np.testing.assert_array_equal(np.asarray(f(x, y)).astype(np.float64), want)
    torch = pytest.importorskip("torch")
    np.testing.assert_array_equal((1 / torch.maximum(torch.from_numpy(x), torch.from_numpy(y))).numpy(), want)
    prog = fuzz.Program.from_json(
        '{"inputs": [[[4, 3, 4, 3], "f32"], [[3], "f32"]], "steps": [["binary", {"op": "maximum", "input": 1}], '
        '["unary", {"op": "recip"}]], "special": true, "seed": 113018}')
    assert fuzz.check(prog, "cpu", 1.0)["status"] == "ok"


def test_no_candidate_turns_an_infinite_score_into_nan_by_scaling_the_query():
    # seed 114227 (CPU fuzz on 957c23c): softmax((q @ k) * 0.125) @ v with a subnormal query
    # entry facing an infinite key. The rule that moved the scale into q made q * c underflow to
    # 0, and 0 * inf is NaN where the program's score is -inf: rows the program computes were NaN
    # in every rewritten candidate, and one of them was chosen. The rule is now unstable
    from compiler.explore import Limits, explore
    from ir.interpreter import evaluate
    prog = fuzz.random_program(114227)
    specs = [saturn.spec(s, d) for s, d in prog.inputs]
    g = saturn.trace(fuzz.saturn_fn(prog), *specs)
    args = fuzz.inputs_for(prog)
    want = np.asarray(fuzz.reference(prog, args)[0], np.float64)
    for c in explore(g, limits=Limits.for_budget(1.0)).candidates:
        got = np.asarray(evaluate(c.graph, args)[0]).astype(np.float64).reshape(want.shape)
        assert not (np.isnan(got) & ~np.isnan(want)).any(), c.description
    assert fuzz.check(prog, "cpu", 1.0)["status"] == "ok"


def test_f64_tanh_near_zero_is_accurate_to_f64():
    # seed 119334 (CPU fuzz on 1fbd04b): the near-zero branch x - x^3/3 is within f32 rounding
    # but 1e-9 off in f64 at x = 0.02
    from ir.interpreter import evaluate
    x = np.concatenate([np.linspace(-0.03, 0.03, 601), [1e-300, -1e-8, 0.0249, 0.0251]])
    g = saturn.trace(lambda t: t.tanh(), saturn.spec(x.shape, "f64"))
    got = np.asarray(evaluate(g, [x])[0])
    ok = np.abs(got - np.tanh(x)) <= 64 * 2.0 ** -53 * np.abs(np.tanh(x))
    assert ok.all(), x[~ok][:5]
    prog = fuzz.Program.from_json('{"inputs": [[[4, 4], "f32"], [[], "f64"]], "steps": [["cast", {"to": "f64"}], '
                                  '["unary", {"op": "square"}], ["norm", {"op": "softmax", "axis": -1}], '
                                  '["move", {"op": "flatten"}], ["unary", {"op": "tanh"}]], "special": false, "seed": 119334}')
    assert fuzz.check(prog, "cpu", 1.0)["status"] == "ok"


def test_a_reference_nan_at_a_rounding_edge_accepts_the_bounded_value():
    # seed 119874 (CPU fuzz on 1fbd04b): sqrt of a layer norm of a constant row: float64 numpy
    # computed its 0 as -1e-17 (NaN after sqrt), the bounded evaluation as +8e-8; Saturn gave 0
    prog = fuzz.Program.from_json('{"inputs": [[[7, 16, 7], "i32"]], "steps": [["norm", {"op": "log_softmax", '
                                  '"axis": -1}], ["norm", {"op": "layer_norm", "axis": -1}], ["unary", {"op": "sqrt"}]], '
                                  '"special": false, "seed": 119874}')
    assert fuzz.check(prog, "cpu", 1.0)["status"] == "ok"
    assert fuzz.check(prog, "reference", 1.0)["status"] == "ok"


@pytest.mark.parametrize("seed", [129437, 129502, 129563])
def test_half_typed_attention_is_not_held_to_its_own_run(seed):
    # CPU fuzz on da00ef6: bf16 / f16 attention programs whose attend term computes in f32 (the
    # program rounds the probabilities to the half type) had every candidate rejected once the
    # normal set was calibrated on the program's own run (1 bf16 ulp against a 1e-4 or 1e-12
    # tolerance); a half program is held at the half tolerance, and only where its run with f32
    # values agrees too (`verify.promoted_to_f32`; seed 129502 moves 10 % there)
    res = fuzz.check(fuzz.random_program(seed), "cpu", 1.0)
    assert res["status"] == "ok", res


def test_the_bound_of_a_reciprocal_of_a_huge_value_is_not_lost():
    # seed 130409 (CPU fuzz on a072790, and on 4a1f807 before it): sigmoid in f64 of an f32
    # quotient near -600 is 1 / (1 + 2^866); the reciprocal's bound ea / (m (m - ea)) overflowed
    # float64 to 0 there, so the f32 rounding of the quotient (relative 5e-6 after exp2) was held
    # against every schedule at the odd shapes
    from ir.bounds import evaluate_bounded
    g = saturn.trace(lambda x: 1.0 / (x * 1.5).astype("f64").exp(), saturn.spec((1,), "f32"))
    b, = evaluate_bounded(g, [np.array([400.0], np.float32)])     # 1 / e^600: m * m overflows
    assert b.bound[0] > 1e-5 * abs(b.value[0])      # the f32 product's rounding, through exp
    res = fuzz.check(fuzz.random_program(130409), "cpu", 1.0)
    assert res["status"] == "ok", res


def test_an_output_that_is_zero_up_to_rounding_is_not_calibrated_below_rounding():
    # seed 132173 (CPU fuzz on a072790): logsumexp of a log_softmax is 0 up to rounding; the
    # calibrated tolerance, relative to the output's largest value (4e-16), was 4e-20, and every
    # target (exp2 / log2 within an ulp or two of numpy's) errs by 1e-7 there
    res = fuzz.check(fuzz.random_program(132173), "cpu", 1.0)
    assert res["status"] == "ok", res


def test_nothing_past_an_unsure_integer_cast_is_held_to_the_programs_own_run():
    # seed 347485 (CUDA fuzz on 8c658b5; the CPU target fails it the same way, when the search
    # verifies the original at its odd shapes): softmax, cast to i32, layer norm. Where a softmax
    # value is within its bound of 1, the cast may give 0 or 1 and the row's layer norm jumps by
    # 2; the bound there is free, but the calibrated reference held it to numpy's f32 run,
    # which took one side while the compiled kernel took the other
    from backends import get_backend
    from compiler import verify
    from ir.bounds import evaluate_bounded
    _, g, args, expected = _calibrated_case(
        '{"inputs": [[[5, 65, 9, 5], "f32"], [[9, 5], "f32"], [[5], "i32"]], "steps": [["binary", {"op": "div", '
        '"input": 1}], ["norm", {"op": "softmax", "axis": -1}], ["cast", {"to": "i32"}], ["norm", {"op": '
        '"layer_norm", "axis": -1}]], "special": false, "seed": 347485}')
    jumps: list = []
    evaluate_bounded(g, args, jumps=jumps)
    assert {n.op.value for n in jumps} == {"cast"}
    assert verify.compare(expected, get_backend("cpu").build(g)(*args)[0], g.outputs[0].dtype) is None


def _calibrated_case(text: str):
    """(program, graph, the normal family's inputs, their calibrated reference) of a fuzz case."""
    from compiler import verify
    prog = fuzz.Program.from_json(text)
    g = saturn.trace(fuzz.saturn_fn(prog), *[saturn.spec(s, d) for s, d in prog.inputs])
    args = verify.verification_inputs(g, 0)[0]            # the normal family: the calibrated one
    return prog, g, args, verify.reference(g, args, calibrate=True)[0]


def test_an_element_another_rounding_moves_is_not_held_to_the_programs_own_run():
    # seed 347811 (CUDA fuzz on ef526b9 and 7418cdc; every schedule rejected): the variance of
    # bool columns with equal counts, then layer and RMS norms over those two values. Exactly
    # 0 in float64 and in numpy's f32 run, so the calibrated reference held it to 1e-4; the GPU
    # summed the variances in another order, the two differed by an ulp, and the norms blew
    # that up to 0.0094 (and to a NaN in another run). Bool inputs cannot be nudged, so only
    # a run with other roundings (`perturbed_roundings`) shows the element is ill-conditioned.
    from compiler import verify
    from ir import bounds
    from ir.interpreter import evaluate, perturbed_roundings
    prog, g, args, expected = _calibrated_case(
        '{"inputs": [[[7, 31, 64, 2], "bool"]], "steps": [["reduce", {"op": "var", "axis": 1, "keepdim": true}], '
        '["norm", {"op": "layer_norm", "axis": -1}], ["norm", {"op": "rms_norm", "axis": -1}]], '
        '"special": false, "seed": 347811}')
    value, bound, _, _ = bounds.unpack(expected)
    assert value[1, 0, 57, 1] == 0 and not bound[1, 0, 57, 1] < np.inf
    for seed in (11, 12, 13):   # other correct roundings pass
        other = evaluate(g, args, wide=False, after=perturbed_roundings(seed=seed))[0]
        assert verify.compare(expected, other, g.outputs[0].dtype) is None
    assert fuzz.check(prog, "cpu", 1.0)["status"] == "ok"


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_abs_of_negative_zero_is_positive_zero(dtype):
    # seed 178191: 1 / abs(x) gave -inf at x = -0.0 (abs was where(x < 0, -x, x), and -0.0 is
    # not below zero); numpy, PyTorch and IEEE's abs clear the sign bit
    from ir.interpreter import evaluate
    x = np.array([-0.0, 0.0, np.nan, -np.inf, np.inf, -1e-40, 3, -2], np.float32).astype(dtype.replace("f", "float"))
    fn = lambda t: t.abs().reciprocal()
    want = np.reciprocal(np.abs(x))
    g = saturn.trace(fn, saturn.spec(x.shape, dtype))
    np.testing.assert_array_equal(np.asarray(evaluate(g, [x])[0]), want)
    got = saturn.compile(fn, saturn.spec(x.shape, dtype), target="cpu", budget=1, quiet=True, cache=False)(x)
    np.testing.assert_array_equal(np.asarray(got), want)
    a = np.asarray(saturn.compile(lambda t: t.abs(), saturn.spec(x.shape, dtype), target="cpu", budget=1, quiet=True,
                                  cache=False)(x))
    assert not np.signbit(a[:2]).any() and np.isnan(a[2]) and (a[3:5] == np.inf).all()


def test_fuzz_seed_178191_runs_clean():
    prog = fuzz.Program.from_json('{"inputs": [[[31, 64, 8], "f32"], [[64, 8], "f32"]], "steps": [["unary", '
                                  '{"op": "abs"}], ["unary", {"op": "recip"}]], "special": true, "seed": 178191}')
    assert fuzz.check(prog, "cpu", budget=1.0)["status"] == "ok"


def test_dividing_by_a_subnormal_f64_is_the_documented_overflow_of_its_reciprocal():
    # seed 353503 (CUDA fuzz on e05c731, the CPU too): `a / b` is `a * recip(b)` (docs/ir.md),
    # and 1 / 1.5e-323 overflows float64, so a finite quotient became -inf; the bound of the
    # program as written had called that exact (float64's own overflow went unseen)
    prog = fuzz.random_program(353503)
    assert fuzz.check(prog, "cpu", 1.0)["status"] == "ok"
    from ir.bounds import evaluate_bounded
    from compiler.trace import spec, trace_primitives
    g = trace_primitives(lambda a, b: (a / b).sum(), spec((3,), "f64"), spec((3,), "f64"))
    b = evaluate_bounded(g, [np.array([1.0, 2.0, 3.0]), np.array([1.5e-323, 0.0, 4.0])])[0]
    assert b.bound[()] == np.inf and np.isinf(b.value[()])     # unknown: the intermediate overflowed
    g = trace_primitives(lambda a, b: a / b, spec((2,), "f64"), spec((2,), "f64"))
    b = evaluate_bounded(g, [np.array([1.0, 1.0]), np.array([0.0, 4.0])])[0]
    assert list(b.value) == [np.inf, 0.25] and b.bound[0] == 0 and b.bound[1] < 1e-15   # 1 / 0 is exact


@pytest.mark.parametrize("seed", [402151, 402300, 401597])
def test_cuda_host_findings_pass(seed):
    """cuda-host fuzz findings: an f32 tanh whose e-graph import squared the series' factor
    (402151, 402300: the candidate was wrong on every target), and a product over an empty
    axis whose empty operand had no buffer in the host runner (401597)."""
    from backends.cuda import hostsim
    if hostsim.available():
        pytest.skip(hostsim.available())
    assert fuzz.check(fuzz.random_program(seed), "cuda-host", 1.0) == {"status": "ok"}


def test_cuda_host_candidates_are_verified_as_compile_verifies_them():
    """mean(x / y, axis 0) with y = -0.0 and zeros in x's column (special inputs, seed 405999):
    the e-graph's candidate sum(x) * (1 / y) * 1/8 (`sum-factor-*`, exact for finite factors)
    gives -inf where the program's 0 * -inf gives NaN. Verification's special inputs reject it
    (compile never runs it), so the cuda-host fuzz compares only verified candidates; the
    candidate is still proposed and still rejected."""
    from backends.cuda import hostsim
    from compiler.explore import Limits, explore
    if hostsim.available():
        pytest.skip(hostsim.available())
    prog = fuzz.random_program(405999)
    graph = saturn.trace(fuzz.saturn_fn(prog), *[saturn.spec(s, d) for s, d in prog.inputs])
    rewritten = [c.graph for c in explore(graph, limits=Limits(seconds=5), max_candidates=4).candidates
                 if c.graph is not graph]
    references = fuzz.verification_references(graph)
    assert any(not fuzz.passes_verification(graph, g, *references) for g in rewritten)
    assert fuzz.check(prog, "cuda-host", 1.0) == {"status": "ok"}
