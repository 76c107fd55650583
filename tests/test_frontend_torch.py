"""The frontend cases of test_frontend_ops.py, checked against PyTorch (skipped without torch).

PyTorch runs in the same dtype as Saturn on the same (viewed) inputs, so this checks dtype
promotion, half-precision behaviour and the exact semantics (remainder, NaN handling,
correction in var, ...) against the library users compare with."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from ir.dtypes import DType
from test_frontend_ops import CASE_IDS, CASES, EXAMPLES, draw_case, run_ours
from tolerances import assert_close

TORCH_DTYPES = {DType.f32: "float32", DType.f16: "float16", DType.bf16: "bfloat16", DType.i32: "int32",
                DType.bool: "bool"}


def to_torch(x: np.ndarray, dtype: DType):
    import torch
    return torch.from_numpy(np.array(x, order="C", copy=True)).to(getattr(torch, TORCH_DTYPES[dtype]))


def from_torch(t) -> np.ndarray:
    import torch
    if t.dtype in (torch.float16, torch.bfloat16):
        t = t.float()
    return t.detach().numpy()


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_matches_torch(case, data):
    pytest.importorskip("torch")
    if case.torch is None:
        pytest.skip("no PyTorch counterpart (i32 results PyTorch computes in int64)")
    dtype = data.draw(st.sampled_from(case.dtypes))
    d = draw_case(data, case, dtype)
    # PyTorch slices only with positive steps; Saturn's negative steps follow numpy (checked
    # against numpy in test_frontend_ops.py)
    assume(not any(isinstance(i, slice) and (i.step or 1) < 0 for i in d.params.get("index", ())))
    out = run_ours(d)
    expected = from_torch(case.torch(*(to_torch(x, dtype) for x in d.viewed_f64()), **d.params))
    assert out.shape == expected.shape, (out.shape, expected.shape)
    out_dtype = DType.bool if out.dtype == np.bool_ else DType.i32 if out.dtype == np.int32 else dtype
    # both sides round to the storage type: allow one extra rounding step
    assert_close(out, expected, out_dtype, case.scale * 2, err_msg=f"{case.name} {d.params}\n{d.graph}")
