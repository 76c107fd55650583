"""The newer frontend ops (tests/frontend_cases.py) built for the CPU target and compared with
the reference interpreter on the same inputs: one drawn example per op (small shapes, views
on the inputs), so the lowering of window views, negative strides and the integer
compositions is exercised without a search."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ir.dtypes import DType
from ir.interpreter import evaluate
from test_frontend_ops import draw_case   # first: it loads frontend_cases (which imports it back)
from frontend_cases import NEW_CASES  # noqa: I001
from tolerances import assert_close

llvm = pytest.importorskip("backends.llvm")
pytest.importorskip("llvmlite")
BACKEND = llvm.LLVMBackend()


pytestmark = pytest.mark.usefixtures("module_cache_dir")


def check_on_cpu(case, data):
    dtype = data.draw(st.sampled_from(case.dtypes))
    d = draw_case(data, case, dtype)
    want = evaluate(d.graph, d.arrays)[0]
    got = BACKEND.build(d.graph)(*d.arrays)[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    out_dtype = DType.bool if want.dtype == np.bool_ else DType.i32 if want.dtype == np.int32 else dtype
    assert_close(got, want, out_dtype, 8, err_msg=f"{case.name} {d.params}\n{d.graph}")


@pytest.mark.parametrize("case", NEW_CASES, ids=[c.name for c in NEW_CASES])
@settings(max_examples=2, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_cpu_matches_interpreter(case, data):
    check_on_cpu(case, data)


@pytest.mark.slow
@pytest.mark.parametrize("case", NEW_CASES, ids=[c.name for c in NEW_CASES])
@settings(max_examples=25, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_cpu_matches_interpreter_more_examples(case, data):
    check_on_cpu(case, data)


def test_conv2d_lowers_to_a_packed_product():
    """The window view times the weight is one product kernel (output channels x positions,
    summed over C*kh*kw) that the packed-matmul renderer takes."""
    import compiler
    import compiler.functional as F
    from backends.llvm.matmul import product_layout
    for groups in (1, 2):
        graph = compiler.trace(lambda x, w: F.conv2d(x, w, stride=2, padding=1, groups=groups),
                               compiler.spec((2, 4, 9, 9)), compiler.spec((6, 4 // groups, 3, 3)))
        program = BACKEND.lower(graph)
        patterns = [product_layout(k, program) for k in program.kernels]
        products = [p for p in patterns if p is not None]
        assert len(products) == 1, str(program)
        assert (products[0].r.extent, products[0].i.extent, products[0].j.extent) == (4 // groups * 9, 6 // groups, 25)


def test_flip_after_a_permuted_reshape_reads_the_right_elements():
    """Two views: a permutation with an inserted axis, then a reversed axis over its flattened
    positions (how conv_transpose2d reads a permuted weight view). Its index is (3 - i) // 2
    and (3 - i) % 2, which the CPU once computed with a negative truncated quotient."""
    from ir.graph import Graph
    from ir.node import Node
    from ir.ops import Op
    from ir.view import ShapeTracker, View
    x = Node(Op.INPUT, DType.f32, (2, 2, 2, 2), (), (0, "x"))
    st = ShapeTracker((View((2, 2, 1, 2, 2), (8, 2, 0, 4, 1)), View((1, 2, 2, 4, 9), (0, 8, 4, -1, 0), 3)))
    view = Node(Op.VIEW, DType.f32, st.shape, (x,), st)
    graph = Graph((x,), (Node(Op.CONTIGUOUS, DType.f32, st.shape, (view,)),))
    a = np.arange(16, dtype=np.float32).reshape(2, 2, 2, 2)
    np.testing.assert_array_equal(BACKEND.build(graph)(a)[0], evaluate(graph, [a])[0])
