"""Every high-level frontend op against numpy (float64 on the same inputs), over random shapes
(size-1 and odd sizes), dtypes (f32, f16, bf16) and views applied to the inputs inside the
traced function. The same cases run against PyTorch in test_frontend_torch.py."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import compiler
from compiler.tensor import Tensor
from ir.dtypes import DType
from ir.interpreter import evaluate
from tolerances import assert_close

SIZES = [1, 2, 3, 7, 13]
FLOATS = [DType.f32, DType.f16, DType.bf16]
# per case (there are ~60 cases); the "thorough" Hypothesis profile (see conftest) runs more
EXAMPLES = 150 if os.environ.get("SATURN_HYPOTHESIS_PROFILE") == "thorough" else 12


@dataclass
class Case:
    name: str
    ours: Callable            # (*Tensors, **params) -> Tensor
    ref: Callable             # (*float64 arrays, **params) -> array (numpy)
    torch: Callable | None    # (*torch tensors, **params) -> tensor, or None
    gen: Callable             # (data) -> (list of input shapes, params)
    dtypes: list = field(default_factory=lambda: list(FLOATS))
    domain: str = "any"       # any | positive | nonzero | small (integers and NaN, for ==)
    scale: float = 1.0        # tolerance multiplier (number of roundings)
    views: bool = True        # apply random views to the inputs


# --- shape generators ------------------------------------------------------------------------

def shape_of(data, min_rank=0, max_rank=3):
    return tuple(data.draw(st.lists(st.sampled_from(SIZES), min_size=min_rank, max_size=max_rank)))


def broadcast_partner(data, shape):
    """A shape that broadcasts with `shape`: some axes set to 1, some leading axes dropped."""
    drop = data.draw(st.integers(0, len(shape)))
    return tuple(1 if data.draw(st.booleans()) else s for s in shape[drop:])


def one(data):
    return [shape_of(data)], {}


def two_broadcast(data):
    s = shape_of(data)
    pair = [s, broadcast_partner(data, s)]
    return (pair if data.draw(st.booleans()) else pair[::-1]), {}


def three_broadcast(data):
    s = shape_of(data)
    return [broadcast_partner(data, s), s, broadcast_partner(data, s)], {}


def reduce_params(data):
    s = shape_of(data, 1)
    k = data.draw(st.integers(1, len(s)))
    axes = tuple(data.draw(st.permutations(range(len(s))))[:k])
    axes = tuple(a - len(s) if data.draw(st.booleans()) else a for a in axes)  # negative axes too
    return [s], {"axes": axes, "keepdim": data.draw(st.booleans())}


def last_axis(data):
    s = shape_of(data, 1)
    return [s], {"axis": data.draw(st.sampled_from([-1, 0, len(s) - 1]))}


def matmul_shapes(data):
    m, k, n = (data.draw(st.sampled_from(SIZES)) for _ in range(3))
    batch = shape_of(data, 0, 2)
    a = batch + (m, k) if data.draw(st.booleans()) else (k,) if data.draw(st.booleans()) else (m, k)
    b = broadcast_partner(data, batch) + (k, n) if data.draw(st.booleans()) else (k,)
    return [a, b], {}  # includes 1-D @ 1-D (a scalar) and batch broadcasting


def linear_shapes(data):
    batch = shape_of(data, 0, 2)
    k, n = data.draw(st.sampled_from(SIZES)), data.draw(st.sampled_from(SIZES))
    return [batch + (k,), (n, k), (n,)], {}


def norm_shapes(data):
    s = shape_of(data, 1)
    n = data.draw(st.integers(1, len(s)))
    return [s, s[len(s) - n:], s[len(s) - n:]], {"nshape": s[len(s) - n:]}


def reshape_params(data):
    s = shape_of(data, 1)
    numel = math.prod(s)
    target = data.draw(st.sampled_from([(numel,), (1, numel), s[::-1], (numel, 1), (-1,)]))
    return [s], {"shape": target}


def permute_params(data):
    s = shape_of(data, 1)
    return [s], {"order": tuple(data.draw(st.permutations(range(len(s)))))}


def expand_params(data):
    s = tuple(1 if data.draw(st.booleans()) else x for x in shape_of(data, 1))
    new = tuple(data.draw(st.sampled_from([1, 3])) if x == 1 else x for x in s)
    lead = tuple(data.draw(st.lists(st.sampled_from([1, 2]), max_size=1)))
    return [s], {"shape": lead + new}


def index_params(data):
    s = shape_of(data, 1)
    index = []
    for size in s:
        kind = data.draw(st.sampled_from(["int", "slice", "full", "none"]))
        if kind == "int":
            index.append(data.draw(st.integers(-size, size - 1)))
        elif kind == "slice":
            start = data.draw(st.one_of(st.none(), st.integers(-size - 1, size + 1)))
            stop = data.draw(st.one_of(st.none(), st.integers(-size - 1, size + 1)))
            index.append(slice(start, stop, data.draw(st.sampled_from([None, 1, 2, 3, -1, -2, -3]))))
        elif kind == "none":
            index += [None, slice(None)]
        else:
            index.append(slice(None))
    if data.draw(st.booleans()) and len(index) > 1:
        index = [Ellipsis] + index[data.draw(st.integers(1, len(index) - 1)):]
    return [s], {"index": tuple(index)}


def pad_params(data):
    s = shape_of(data, 1)
    pads = tuple((data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))) for _ in s)
    return [s], {"pads": pads, "value": data.draw(st.sampled_from([0.0, -1.5, 2.0]))}


def cat_params(data):
    s = shape_of(data, 1)
    axis = data.draw(st.integers(-len(s), len(s) - 1))
    shapes = []
    for _ in range(data.draw(st.integers(1, 3))):
        t = list(s)
        t[axis] = data.draw(st.sampled_from(SIZES))
        shapes.append(tuple(t))
    return shapes, {"axis": axis}


def astype_params(data):
    return [shape_of(data)], {"to": data.draw(st.sampled_from(["f32", "f16", "bf16", "i32", "bool"]))}


# --- numpy references (float64) ----------------------------------------------------------------

def np_gelu(x):
    from math import erf
    return 0.5 * x * (1 + np.vectorize(erf, otypes=[np.float64])(x / math.sqrt(2)))


def np_gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def np_softmax(x, axis):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def np_log_softmax(x, axis):
    s = x - x.max(axis, keepdims=True)
    return s - np.log(np.exp(s).sum(axis, keepdims=True))


def np_layer_norm(x, w, b, nshape):
    axes = tuple(range(x.ndim - len(nshape), x.ndim))
    d = x - x.mean(axes, keepdims=True)
    return d / np.sqrt((d * d).mean(axes, keepdims=True) + 1e-5) * w + b


def np_rms_norm(x, w, nshape):
    axes = tuple(range(x.ndim - len(nshape), x.ndim))
    return x / np.sqrt((x * x).mean(axes, keepdims=True) + 1e-6) * w


def np_index(x, index):
    return x[index]


def torch_mod():
    return lambda a, b: a % b


def _t():
    import torch
    return torch


def _tf():
    import torch.nn.functional as F
    return F


def np_astype(x, to):
    dt = {"f32": np.float32, "f16": np.float16, "i32": np.int32, "bool": np.bool_}.get(to)
    if to == "bf16":
        import ml_dtypes
        dt = ml_dtypes.bfloat16
    if to == "i32":
        return np.trunc(x).astype(np.int32)
    return x.astype(dt)


def torch_astype(x, to):
    torch = _t()
    return x.to({"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
                 "i32": torch.int32, "bool": torch.bool}[to])


def torch_var(a, axes, keepdim):
    import warnings
    with warnings.catch_warnings():  # torch warns (and returns NaN) when n - correction <= 0
        warnings.simplefilter("ignore", UserWarning)
        return a.var(axes, keepdim=keepdim)


CASES = [
    # arithmetic with broadcasting
    Case("add", lambda a, b: a + b, np.add, lambda a, b: a + b, two_broadcast),
    Case("sub", lambda a, b: a - b, np.subtract, lambda a, b: a - b, two_broadcast),
    Case("mul", lambda a, b: a * b, np.multiply, lambda a, b: a * b, two_broadcast),
    Case("div", lambda a, b: a / b, np.divide, lambda a, b: a / b, two_broadcast, domain="nonzero", scale=2),
    Case("mod", lambda a, b: a % b, np.mod, lambda a, b: a % b, two_broadcast, domain="nonzero", scale=4),
    Case("fmod", lambda a, b: a.fmod(b), np.fmod, lambda a, b: _t().fmod(a, b), two_broadcast, domain="nonzero"),
    Case("neg", lambda a: -a, np.negative, lambda a: -a, one),
    Case("pow_int", lambda a: a ** 3, lambda a: a ** 3, lambda a: a ** 3, one, scale=3),
    Case("pow_int_large", lambda a: a ** 5 + a ** -2, lambda a: a ** 5 + a ** -2.0, lambda a: a ** 5 + a ** -2,
         one, domain="nonzero", scale=8),
    Case("pow_float", lambda a: a ** 2.5, lambda a: a ** 2.5, lambda a: a ** 2.5, one, domain="positive", scale=4),
    Case("pow_tensor", lambda a, b: a ** b, np.power, lambda a, b: a ** b, two_broadcast, domain="positive", scale=8),
    Case("rpow", lambda a: 2.0 ** a, lambda a: 2.0 ** a, lambda a: 2.0 ** a, one, scale=4),
    Case("scalar_left", lambda a: 3 - a / 2 + 1.5 * a, lambda a: 3 - a / 2 + 1.5 * a,
         lambda a: 3 - a / 2 + 1.5 * a, one, scale=4),
    Case("rdiv", lambda a: 1 / a, lambda a: 1 / a, lambda a: 1 / a, one, domain="nonzero"),
    Case("maximum", lambda a, b: a.maximum(b), np.maximum, lambda a, b: _t().maximum(a, b), two_broadcast,
         domain="small"),
    Case("minimum", lambda a, b: a.minimum(b), np.minimum, lambda a, b: _t().minimum(a, b), two_broadcast,
         domain="small"),
    Case("clamp", lambda a: a.clamp(-0.5, 1.0), lambda a: np.clip(a, -0.5, 1.0), lambda a: a.clamp(-0.5, 1.0), one),
    # comparisons and where
    Case("lt", lambda a, b: a < b, np.less, lambda a, b: a < b, two_broadcast, domain="small"),
    Case("gt", lambda a, b: a > b, np.greater, lambda a, b: a > b, two_broadcast, domain="small"),
    Case("le", lambda a, b: a <= b, np.less_equal, lambda a, b: a <= b, two_broadcast, domain="small"),
    Case("ge", lambda a, b: a >= b, np.greater_equal, lambda a, b: a >= b, two_broadcast, domain="small"),
    Case("eq", lambda a, b: a == b, np.equal, lambda a, b: a == b, two_broadcast, domain="small"),
    Case("ne", lambda a, b: a != b, np.not_equal, lambda a, b: a != b, two_broadcast, domain="small"),
    Case("lt_scalar", lambda a: a < 1, lambda a: a < 1, lambda a: a < 1, one, domain="small"),
    Case("isnan", lambda a: a.isnan(), np.isnan, lambda a: a.isnan(), one, domain="small"),
    Case("isinf", lambda a: a.isinf(), np.isinf, lambda a: a.isinf(), one, domain="small"),
    Case("where", lambda c, a, b: (c > 0).where(a, b), lambda c, a, b: np.where(c > 0, a, b),
         lambda c, a, b: _t().where(c > 0, a, b), lambda d: three_broadcast(d)),
    Case("where_scalar", lambda c, a: (c > 0).where(a, -1.0), lambda c, a: np.where(c > 0, a, -1.0),
         lambda c, a: _t().where(c > 0, a, -1.0), two_broadcast),
    # unary math
    Case("exp", lambda a: a.exp(), np.exp, lambda a: a.exp(), one, scale=4),
    Case("log", lambda a: a.log(), np.log, lambda a: a.log(), one, domain="positive", scale=2),
    Case("sqrt", lambda a: a.sqrt(), np.sqrt, lambda a: a.sqrt(), one, domain="positive"),
    Case("rsqrt", lambda a: a.rsqrt(), lambda a: 1 / np.sqrt(a), lambda a: a.rsqrt(), one, domain="positive",
         scale=2),
    Case("sin", lambda a: a.sin(), np.sin, lambda a: a.sin(), one),
    Case("cos", lambda a: a.cos(), np.cos, lambda a: a.cos(), one, scale=4),
    Case("tanh", lambda a: a.tanh(), np.tanh, lambda a: a.tanh(), one, scale=4),
    Case("sigmoid", lambda a: a.sigmoid(), lambda a: 1 / (1 + np.exp(-a)), lambda a: a.sigmoid(), one, scale=2),
    Case("relu", lambda a: a.relu(), lambda a: np.maximum(a, 0), lambda a: a.relu(), one),
    Case("gelu", lambda a: a.gelu(), np_gelu, lambda a: _tf().gelu(a), one, scale=4),
    Case("gelu_tanh", lambda a: a.gelu("tanh"), np_gelu_tanh, lambda a: _tf().gelu(a, approximate="tanh"), one,
         scale=4),
    Case("silu", lambda a: a.silu(), lambda a: a / (1 + np.exp(-a)), lambda a: _tf().silu(a), one, scale=2),
    Case("abs", lambda a: a.abs(), np.abs, lambda a: a.abs(), one),
    Case("erf", lambda a: a.erf(), lambda a: np.vectorize(math.erf, otypes=[np.float64])(a),
         lambda a: a.erf(), one, scale=4),
    # reductions
    Case("sum", lambda a, axes, keepdim: a.sum(axes, keepdim), lambda a, axes, keepdim: a.sum(axes, keepdims=keepdim),
         lambda a, axes, keepdim: a.sum(axes, keepdim), reduce_params, scale=8),
    Case("max", lambda a, axes, keepdim: a.max(axes, keepdim), lambda a, axes, keepdim: a.max(axes, keepdims=keepdim),
         lambda a, axes, keepdim: a.amax(axes, keepdim), reduce_params),
    Case("min", lambda a, axes, keepdim: a.min(axes, keepdim), lambda a, axes, keepdim: a.min(axes, keepdims=keepdim),
         lambda a, axes, keepdim: a.amin(axes, keepdim), reduce_params),
    Case("mean", lambda a, axes, keepdim: a.mean(axes, keepdim),
         lambda a, axes, keepdim: a.mean(axes, keepdims=keepdim), lambda a, axes, keepdim: a.mean(axes, keepdim),
         reduce_params, scale=8),
    Case("var", lambda a, axes, keepdim: a.var(axes, keepdim),
         lambda a, axes, keepdim: a.var(axes, keepdims=keepdim, ddof=1) if math.prod(a.shape[x] for x in axes) > 1
         else np.full(np.sum(a, axes, keepdims=keepdim).shape, np.nan),
         lambda a, axes, keepdim: torch_var(a, axes, keepdim), reduce_params, scale=16),
    Case("var_biased", lambda a, axes, keepdim: a.var(axes, keepdim, correction=0),
         lambda a, axes, keepdim: a.var(axes, keepdims=keepdim),
         lambda a, axes, keepdim: a.var(axes, keepdim=keepdim, correction=0), reduce_params, scale=16),
    # matmul, softmax, norms
    Case("matmul", lambda a, b: a @ b, np.matmul, lambda a, b: a @ b, matmul_shapes, scale=16),
    Case("linear", lambda x, w, b: x.linear(w, b), lambda x, w, b: x @ w.T + b,
         lambda x, w, b: _tf().linear(x, w, b), lambda d: linear_shapes(d), scale=16),
    Case("softmax", lambda a, axis: a.softmax(axis), np_softmax, lambda a, axis: a.softmax(axis), last_axis,
         scale=8),
    Case("log_softmax", lambda a, axis: a.log_softmax(axis), np_log_softmax,
         lambda a, axis: a.log_softmax(axis), last_axis, scale=8),
    Case("layer_norm", lambda x, w, b, nshape: x.layer_norm(nshape, w, b, eps=1e-5), np_layer_norm,
         lambda x, w, b, nshape: _tf().layer_norm(x, nshape, w, b, eps=1e-5), norm_shapes, scale=32),
    Case("rms_norm", lambda x, w, b, nshape: x.rms_norm(nshape, w, eps=1e-6),
         lambda x, w, b, nshape: np_rms_norm(x, w, nshape),
         lambda x, w, b, nshape: _tf().rms_norm(x, nshape, w, eps=1e-6), norm_shapes, scale=16),
    # movement
    Case("reshape", lambda a, shape: a.reshape(shape), lambda a, shape: a.reshape(shape),
         lambda a, shape: a.reshape(shape), reshape_params),
    Case("permute", lambda a, order: a.permute(order), lambda a, order: a.transpose(order),
         lambda a, order: a.permute(order), permute_params),
    Case("transpose", lambda a: a.transpose(0, -1), lambda a: np.swapaxes(a, 0, -1),
         lambda a: a.transpose(0, -1), lambda d: ([shape_of(d, 1)], {})),
    Case("expand", lambda a, shape: a.expand(shape), lambda a, shape: np.broadcast_to(a, shape),
         lambda a, shape: a.expand(shape), expand_params),
    Case("getitem", lambda a, index: a[index], np_index, lambda a, index: a[index], index_params),
    Case("slice", lambda a, start, step: a.slice(-1, start, None, step),
         lambda a, start, step: a[..., start::step], lambda a, start, step: a[..., start::step],
         lambda d: ([shape_of(d, 1)], {"start": d.draw(st.integers(-3, 3)), "step": d.draw(st.integers(1, 3))})),
    Case("flatten_unsqueeze_squeeze", lambda a: a.unsqueeze(0).flatten(1).unsqueeze(-1).squeeze(),
         lambda a: a.reshape(1, -1, 1).squeeze(), lambda a: a.unsqueeze(0).flatten(1).unsqueeze(-1).squeeze(),
         lambda d: ([shape_of(d, 1)], {})),
    Case("pad", lambda a, pads, value: a.pad(pads, value),
         lambda a, pads, value: np.pad(a, pads, constant_values=value),
         lambda a, pads, value: _tf().pad(a, [p for pair in reversed(pads) for p in pair], value=value), pad_params),
    Case("cat", lambda *xs, axis: compiler.cat(xs, axis), lambda *xs, axis: np.concatenate(xs, axis),
         lambda *xs, axis: _t().cat(xs, axis), cat_params),
    Case("astype", lambda a, to: a.astype(to), np_astype, torch_astype, astype_params, domain="small_finite"),
]
from frontend_cases import NEW_CASES  # noqa: E402  (the nn-style and newer ops; uses the helpers above)
CASES += NEW_CASES
CASE_IDS = [c.name for c in CASES]


# --- input views -----------------------------------------------------------------------------

def draw_view(data, shape, pad_value):
    """(input shape, fn applied to a Tensor or a numpy array) giving an array of `shape`."""
    kinds = ["none", "permute", "step", "expand", "pad", "transpose_reshape"]
    kind = data.draw(st.sampled_from(kinds))
    rank = len(shape)
    if kind == "transpose_reshape" and rank >= 1:  # a reshape after a permute: two stacked views
        src = (shape[-1], math.prod(shape[:-1]))
        return src, lambda x: x.T.reshape(shape)
    if kind == "permute" and rank >= 2:
        q = tuple(data.draw(st.permutations(range(rank))))
        src = [0] * rank
        for i, qi in enumerate(q):
            src[qi] = shape[i]
        return tuple(src), lambda x: x.permute(q) if isinstance(x, Tensor) else x.transpose(q)
    if kind == "step" and rank >= 1 and min(shape) >= 1:
        i, k, o = data.draw(st.integers(0, rank - 1)), data.draw(st.sampled_from([2, 3])), data.draw(st.integers(0, 1))
        src = list(shape)
        src[i] = o + (shape[i] - 1) * k + 1 + data.draw(st.integers(0, 1))
        index = (slice(None),) * i + (slice(o, o + (shape[i] - 1) * k + 1, k),)
        return tuple(src), lambda x: x[index]
    if kind == "expand" and rank >= 1:
        src = tuple(1 if data.draw(st.booleans()) else s for s in shape)
        return src, lambda x: x.expand(shape) if isinstance(x, Tensor) else np.broadcast_to(x, shape)
    if kind == "pad" and rank >= 1 and max(shape) >= 2:
        i = data.draw(st.sampled_from([j for j, s in enumerate(shape) if s >= 2]))
        before = data.draw(st.integers(0, shape[i] - 1))
        after = data.draw(st.integers(0, shape[i] - 1 - before))
        pads = [(0, 0)] * rank
        pads[i] = (before, after)
        src = list(shape)
        src[i] -= before + after
        return tuple(src), lambda x: x.pad(pads, pad_value) if isinstance(x, Tensor) else \
            np.pad(x, pads, constant_values=pad_value)
    return tuple(shape), lambda x: x


def random_values(rng, shape, dtype: DType, domain: str) -> np.ndarray:
    if domain == "small":  # integers and NaN: equal values are common
        x = rng.integers(-2, 3, shape).astype(np.float64)
        x[rng.random(shape) < 0.1] = np.nan
    elif domain == "small_finite":
        x = rng.integers(-3, 4, shape) + rng.choice([0, 0.5, 0.25], shape)
    elif domain == "int_wide":   # the whole i32 range, and its ends
        x = rng.integers(-2 ** 31, 2 ** 31, shape, dtype=np.int64)
        x[rng.random(shape) < 0.1] = -2 ** 31
    elif domain == "bool":
        x = rng.random(shape) < 0.5
    elif domain == "unit":
        x = rng.uniform(-1.2, 1.2, shape)
    elif domain == "above_minus_one":
        x = rng.uniform(-0.95, 4.0, shape)
    elif domain == "near_one":
        x = rng.uniform(0.7, 1.4, shape) * rng.choice([-1, 1], shape)
    elif domain == "probability":
        x = rng.uniform(0.02, 0.98, shape)
    else:
        x = rng.standard_normal(shape) * 1.5
        if domain == "positive":
            x = np.abs(x) + 0.25
        elif domain == "nonzero":
            x = np.sign(x + 1e-9) * (np.abs(x) + 0.5)
    return np.asarray(x).astype(dtype.np)


@dataclass
class Drawn:
    dtype: DType
    params: dict
    arrays: list          # inputs as given to the compiled function (pre-view)
    views: list           # fn per input
    graph: object

    def viewed_f64(self):
        return [v(a.astype(np.float64)) for a, v in zip(self.arrays, self.views)]


def draw_case(data, case: Case, dtype: DType) -> Drawn:
    shapes, params = case.gen(data)
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    pad_value = 1.0 if case.domain in ("positive", "nonzero") or not dtype.is_float else 0.5
    views, arrays = [], []
    for s in shapes:
        src, fn = draw_view(data, s, pad_value) if case.views and data.draw(st.booleans()) else (s, lambda x: x)
        views.append(fn)
        arrays.append(random_values(rng, src, dtype, case.domain))
    specs = [compiler.spec(a.shape, dtype) for a in arrays]

    def traced(*xs):
        return case.ours(*(v(x) for v, x in zip(views, xs)), **params)

    return Drawn(dtype, params, arrays, views, compiler.trace(traced, *specs))


def run_ours(d: Drawn) -> np.ndarray:
    return evaluate(d.graph, d.arrays)[0]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_matches_numpy(case, data):
    dtype = data.draw(st.sampled_from(case.dtypes))
    d = draw_case(data, case, dtype)
    out = run_ours(d)
    with np.errstate(all="ignore"):
        expected = np.asarray(case.ref(*d.viewed_f64(), **d.params))
    assert out.shape == expected.shape
    out_dtype = DType.bool if out.dtype == np.bool_ else DType.i32 if out.dtype == np.int32 else dtype
    assert_close(out, expected.astype(out.dtype) if out_dtype in (DType.bool, DType.i32) else expected,
                 out_dtype, case.scale, err_msg=f"{case.name} {d.params}\n{d.graph}", graph=d.graph, args=d.arrays)
