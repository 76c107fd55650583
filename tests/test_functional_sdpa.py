"""F.scaled_dot_product_attention in the frontend matches PyTorch's: causal (square and
rectangular), grouped heads, bool and additive masks, a given scale; dropout is refused."""
from __future__ import annotations

import numpy as np
import pytest

import compiler as saturn
import compiler.functional as F
from compiler.errors import SaturnError
from ir.interpreter import evaluate

torch = pytest.importorskip("torch")

CASES = {
    "plain": ([(2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 4)], {}),
    "causal_rect": ([(1, 2, 5, 4), (1, 2, 7, 4), (1, 2, 7, 3)], {"is_causal": True}),
    "gqa_scale": ([(2, 4, 6, 8), (2, 2, 6, 8), (2, 2, 6, 8)], {"scale": 0.3, "enable_gqa": True}),
    "float_mask": ([(1, 3, 4, 8), (1, 3, 6, 8), (1, 3, 6, 8), (4, 6)], {}),
    "bool_mask": ([(1, 3, 4, 8), (1, 3, 6, 8), (1, 3, 6, 8), (4, 6)], {"bool": True}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_matches_torch(name):
    shapes, kw = CASES[name]
    kw = dict(kw)
    bool_mask = kw.pop("bool", False)
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    if bool_mask:
        arrays[3] = rng.random(shapes[3]) < 0.7
        arrays[3][:, 0] = True                                # no row entirely masked
    specs = [saturn.spec(a.shape, "bool" if a.dtype == np.bool_ else "f32") for a in arrays]
    ours = kw.copy()
    if len(arrays) == 4:
        g = saturn.trace(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m, **ours), *specs)
    else:
        g = saturn.trace(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **ours), *specs)
    got = evaluate(g, arrays)[0]
    t = [torch.from_numpy(a) for a in arrays]
    want = torch.nn.functional.scaled_dot_product_attention(*t[:3], attn_mask=t[3] if len(t) == 4 else None, **kw)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)


def test_dropout_is_refused_by_name():
    with pytest.raises(SaturnError, match="dropout_p"):
        saturn.trace(lambda q: F.scaled_dot_product_attention(q, q, q, dropout_p=0.1), saturn.spec((1, 2, 3, 4)))
