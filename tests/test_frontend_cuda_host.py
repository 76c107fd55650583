"""The frontend's op table (tests/test_frontend_ops.py) rendered for the CUDA target and run on
the host (backends/cuda/hostsim.py: a block's threads as fibers where kernels sync), against
the reference interpreter on the same inputs: the CUDA templates' index arithmetic, masks,
casts and reductions for every op, checked where no GPU is (programs the templates cannot plan
through the kernel IR's rendering, as the backend does). A kernel kind the host does not
emulate (hostsim.EMULATED_KINDS) would be skipped, saying so; every kind the templates render
today is emulated."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from backends.cuda import hostsim
from ir.dtypes import DType
from ir.interpreter import evaluate
from test_frontend_ops import CASES, CASE_IDS, draw_case
from tolerances import assert_close

pytestmark = pytest.mark.skipif(hostsim.available() is not None, reason=str(hostsim.available()))


def check_on_host(case, data, run):
    dtype = data.draw(st.sampled_from(case.dtypes))
    d = draw_case(data, case, dtype)
    want = evaluate(d.graph, d.arrays)[0]
    try:
        got = run(d.graph, d.arrays)[0]
    except ValueError as e:
        if "cannot plan" in str(e):      # as the backend does: the kernel IR's rendering
            got = hostsim.run_kernel_ir(d.graph, d.arrays)[0]
        elif "need a GPU" in str(e):
            pytest.skip(str(e)[:120])
        else:
            raise
    assert got.shape == want.shape and got.dtype == want.dtype
    out_dtype = DType.bool if want.dtype == np.bool_ else DType.i32 if want.dtype == np.int32 else dtype
    assert_close(got, want, out_dtype, 8, err_msg=f"{case.name} {d.params}\n{d.graph}")


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@settings(max_examples=1, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_cuda_templates_on_host_match_interpreter(case, data):
    check_on_host(case, data, hostsim.run_templates)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_cuda_renderers_on_host_match_interpreter_more_examples(case, data):
    check_on_host(case, data, hostsim.run_templates)
    check_on_host(case, data, lambda g, a: hostsim.run_kernel_ir(g, a, row_threads=64))
