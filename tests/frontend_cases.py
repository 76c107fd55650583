"""More rows of the frontend case table (tests/test_frontend_ops.py): rounding, activations,
floor division, integer bitwise ops, more reductions and movement, einsum, convolutions,
pooling, interpolation, norms and losses; each against numpy (float64) and PyTorch.

Shapes include size-0 axes and 0-d tensors where the op takes them."""
from __future__ import annotations

import math
import warnings

import numpy as np
from hypothesis import strategies as st

import compiler
import compiler.functional as F
import np_reference as R
from ir.dtypes import DType
from test_frontend_ops import SIZES, Case, _t, _tf, np_softmax, one, reduce_params, shape_of, two_broadcast

SIZES0 = SIZES + [0]
I32 = [DType.i32]


def one0(data):   # any rank 0..3, size-0 axes included
    return [tuple(data.draw(st.lists(st.sampled_from(SIZES0), max_size=3)))], {}


def two0(data):
    s = tuple(data.draw(st.lists(st.sampled_from(SIZES0), max_size=3)))
    other = tuple(1 if data.draw(st.booleans()) else x for x in s[data.draw(st.integers(0, len(s))):])
    return ([s, other] if data.draw(st.booleans()) else [other, s]), {}


def diag_params(data):   # a 1-d or 2-d shape (size 0 included) and a diagonal
    rank = data.draw(st.sampled_from([1, 2]))
    shape = tuple(data.draw(st.sampled_from(SIZES0)) for _ in range(rank))
    return [shape], {"k": data.draw(st.integers(-3, 3))}


def axis_params(data):   # rank 1..3 without size 0, an axis, a k in 1..n for kthvalue
    shape = shape_of(data, 1)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    return [shape], {"dim": axis, "k": data.draw(st.integers(1, shape[axis]))}


def np_kth(a, dim, k):
    """The k-th smallest along dim (NaN sorts last, as in torch)."""
    return np.take(np.sort(a, dim), k - 1, dim)


def np_logcumsumexp(a, dim, k):
    with np.errstate(all="ignore"):
        return np.logaddexp.accumulate(a, axis=dim)


def np_median(a, dim, k):
    m = np_kth(a, dim, (a.shape[dim] + 1) // 2)
    return np.where(np.isnan(a).any(dim), np.nan, m)


def vectors(data):   # two 1-d shapes (size 0 included) and whether they must agree
    return [(data.draw(st.sampled_from(SIZES0)),), (data.draw(st.sampled_from(SIZES0)),)], {}


def same_vectors(data):
    n = data.draw(st.sampled_from(SIZES0))
    return [(n,), (n,)], {}


def even_last(data):   # rank 1..3, the last axis of even size (glu halves it)
    s = list(shape_of(data, 1))
    s[-1] *= 2
    return [tuple(s)], {}


def np_nanmean(a, axes, keepdim):
    keep = ~np.isnan(a)
    with np.errstate(all="ignore"):
        return np.nansum(a, axes, keepdims=keepdim) / keep.sum(axes, keepdims=keepdim)


def np_logaddexp(a, b):
    with np.errstate(all="ignore"):
        return np.logaddexp(a, b)


def np_cosine(x, y, dim):
    w12, w1, w2 = (x * y).sum(dim), (x * x).sum(dim), (y * y).sum(dim)
    return w12 / np.sqrt(np.maximum(w1 * w2, 1e-16))


def cosine_params(data):
    s = shape_of(data, 1)
    return [s, s], {"dim": data.draw(st.integers(-len(s), len(s) - 1))}


def reduce0(data):
    shapes, params = reduce_params(data)
    s = list(shapes[0])
    if data.draw(st.booleans()):
        s[data.draw(st.integers(0, len(s) - 1))] = 0
    return [tuple(s)], params


def torch_quiet(fn):
    def wrapped(*a, **k):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(*a, **k)
    return wrapped


def np_sign(a):
    return np.where(np.isnan(a), 0.0, np.sign(a))


def np_softplus(a):
    return np.where(a > 20, a, np.log1p(np.exp(np.minimum(a, 20))))


def np_floordiv(a, b):
    return np.floor_divide(a, b)


def np_i64(fn):
    return lambda *xs: fn(*(x.astype(np.int64) for x in xs))


def i32_wrap(x):
    return ((np.asarray(x, np.int64) + 2 ** 31) % 2 ** 32 - 2 ** 31)


def np_std(a, axes, keepdim):
    n = math.prod(a.shape[x] for x in axes)
    if n <= 1:
        return np.full(np.sum(a, axes, keepdims=keepdim).shape, np.nan)
    return a.std(axes, keepdims=keepdim, ddof=1)


def np_logsumexp(a, axes, keepdim):
    if any(a.shape[x] == 0 for x in axes):
        return np.full(np.sum(a, axes, keepdims=keepdim).shape, -np.inf)
    m = a.max(axes, keepdims=True)
    out = np.log(np.exp(a - m).sum(axes, keepdims=True)) + m
    return out if keepdim else np.squeeze(out, axes)


# --- movement parameters ------------------------------------------------------------------------

def axes_subset(data, rank):
    axes = data.draw(st.lists(st.integers(0, rank - 1), unique=True, max_size=rank)) if rank else []
    return tuple(a - rank if data.draw(st.booleans()) else a for a in axes)


def flip_params(data):
    s = tuple(data.draw(st.lists(st.sampled_from(SIZES0), min_size=1, max_size=3)))
    return [s], {"dims": axes_subset(data, len(s))}


def roll_params(data):
    s = shape_of(data, 1)
    k = data.draw(st.integers(1, len(s)))
    dims = tuple(data.draw(st.permutations(range(len(s))))[:k])
    return [s], {"shifts": tuple(data.draw(st.integers(-15, 15)) for _ in dims), "dims": dims}


def repeat_params(data):
    s = shape_of(data, 0, 2)
    extra = data.draw(st.integers(0, 1))
    return [s], {"sizes": tuple(data.draw(st.sampled_from([0, 1, 2, 3])) for _ in range(len(s) + extra))}


def split_params(data):
    s = shape_of(data, 1)
    dim = data.draw(st.integers(-len(s), len(s) - 1))
    return [s], {"dim": dim, "k": data.draw(st.integers(1, 4))}


def pad_mode_params(data):   # torch pads the trailing axes of a batched input in these modes
    s = shape_of(data, 2, 4)
    mode = data.draw(st.sampled_from(["reflect", "replicate", "circular"]))
    pad = []
    for n in reversed(s[max(len(s) - 3, 1):]):
        hi = n - 1 if mode == "reflect" else n if mode == "circular" else 3
        pad += [data.draw(st.integers(0, hi)), data.draw(st.integers(0, hi))]
    return [s], {"pad": tuple(pad), "mode": mode}


def movedim_params(data):
    s = shape_of(data, 1)
    k = data.draw(st.integers(1, len(s)))
    src = tuple(data.draw(st.permutations(range(len(s))))[:k])
    dst = tuple(data.draw(st.permutations(range(len(s))))[:k])
    return [s], {"src": src, "dst": dst}


def unfold_params(data):
    s = shape_of(data, 1)
    dim = data.draw(st.integers(0, len(s) - 1))
    return [s], {"dim": dim, "size": data.draw(st.integers(1, s[dim])), "step": data.draw(st.integers(1, 3))}


def diagonal_params(data):
    s = shape_of(data, 2)
    a, b = data.draw(st.permutations(range(len(s))))[:2]
    return [s], {"offset": data.draw(st.integers(-2, 2)), "d1": a, "d2": b}


EINSUMS = [("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ii->i", [(3, 3)]),
           ("ij->", [(3, 4)]), ("i,j->ij", [(3,), (4,)]), ("...ij,...jk", [(2, 3, 4), (4, 5)]),
           ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]), ("ijk,jkl,lm->im", [(2, 3, 4), (3, 4, 5), (5, 2)]),
           ("iij->j", [(3, 3, 2)]), ("ij,ij->i", [(3, 4), (1, 4)]), ("nchw,oc->nohw", [(2, 3, 4, 5), (6, 3)]),
           ("i,i", [(0,), (0,)])]


def einsum_params(data):
    eq, shapes = data.draw(st.sampled_from(EINSUMS))
    return shapes, {"eq": eq}


# --- convolution and pooling parameters --------------------------------------------------------------

def conv_params(nd, transposed=False):
    def gen(data):
        groups = data.draw(st.sampled_from([1, 1, 2]))
        cg, og, n = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))
        kernel = [data.draw(st.integers(1, 3)) for _ in range(nd)]
        stride = [data.draw(st.integers(1, 2)) for _ in range(nd)]
        dilation = [data.draw(st.integers(1, 2)) for _ in range(nd)]
        padding = [data.draw(st.integers(0, 1)) for _ in range(nd)]
        size = [d * (k - 1) + 1 + data.draw(st.integers(0, 4)) for k, d in zip(kernel, dilation)]
        params = {"stride": tuple(stride), "padding": tuple(padding), "dilation": tuple(dilation), "groups": groups}
        if transposed:
            params["output_padding"] = tuple(data.draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation))
            params["padding"] = tuple(min(p, d * (k - 1)) for p, d, k in zip(padding, dilation, kernel))
            return [(n, cg * groups) + tuple(size), (cg * groups, og) + tuple(kernel), (og * groups,)], params
        params["padding_mode"] = mode = data.draw(st.sampled_from(["zeros", "reflect", "replicate", "circular"]))
        if mode == "reflect":
            params["padding"] = tuple(min(p, n - 1) for p, n in zip(padding, size))
        return [(n, cg * groups) + tuple(size), (og * groups, cg) + tuple(kernel), (og * groups,)], params
    return gen


def torch_conv(nd):
    def run(x, w, b, stride, padding, dilation, groups, padding_mode):
        if padding_mode != "zeros":
            pads = [p for v in reversed(padding) for p in (v, v)]
            x = _tf().pad(x, pads, mode=padding_mode)
            padding = 0
        return getattr(_tf(), f"conv{nd}d")(x, w, b, stride, padding, dilation, groups)
    return run


def pool_params(nd, kind):
    def gen(data):
        kernel = tuple(data.draw(st.integers(1, 3)) for _ in range(nd))
        params = {"kernel_size": kernel, "stride": data.draw(st.sampled_from([None, 1, 2, 3])),
                  "padding": tuple(data.draw(st.integers(0, k // 2)) for k in kernel),
                  "ceil_mode": data.draw(st.booleans())}
        if kind == "max":
            params["dilation"] = tuple(data.draw(st.integers(1, 2)) for _ in range(nd))
        else:
            params["count_include_pad"] = data.draw(st.booleans())
        dil = params.get("dilation", (1,) * nd)
        size = tuple(d * (k - 1) + 1 + data.draw(st.integers(0, 5)) for k, d in zip(kernel, dil))
        lead = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 3)))
        return [lead + size], params
    return gen


def adaptive_params(nd):
    def gen(data):
        size = tuple(data.draw(st.integers(1, 9)) for _ in range(nd))
        out = tuple(data.draw(st.integers(1, s + 2)) for s in size)
        return [(data.draw(st.integers(1, 2)), 2) + size], {"out": out}
    return gen


def interp_params(nd, mode):
    def gen(data):
        size = tuple(data.draw(st.integers(1, 6)) for _ in range(nd))
        out, ac = [], data.draw(st.booleans()) if mode != "nearest" else None
        for n in size:
            kind = data.draw(st.sampled_from(["up", "down", "same", "any"]))
            if kind == "up":
                m = n * data.draw(st.integers(2, 3))
            elif kind == "down" and n > 1:
                divs = [d for d in range(1, n + 1) if n % d == 0]
                m = data.draw(st.sampled_from(divs))
            elif kind == "any" and mode == "nearest":
                m = data.draw(st.integers(1, 13))
            else:
                m = n
            if ac and m > 1 and n > 1 and (m - 1) % (n - 1):
                m = (n - 1) * data.draw(st.integers(1, 3)) + 1
            if ac is False and n % m and m % n:
                m = n
            out.append(m)
        return [(data.draw(st.integers(1, 2)), 2) + size], {"size": tuple(out), "ac": ac}
    return gen


def norm_params(kind):
    def gen(data):
        c = data.draw(st.sampled_from([2, 4, 6]))
        shape = (data.draw(st.integers(1, 3)), c) + tuple(data.draw(st.lists(st.sampled_from([2, 3, 5]),
                                                                          min_size=1, max_size=2)))
        params = {"groups": data.draw(st.sampled_from([1, 2]))} if kind == "group" else {}
        return [shape, (c,), (c,), (c,), (c,)], params
    return gen


def loss_params(data):
    s = shape_of(data, 1)
    return [s, s], {"reduction": data.draw(st.sampled_from(["mean", "sum", "none"]))}


def class_params(data):
    n, c = data.draw(st.integers(1, 4)), data.draw(st.integers(2, 5))
    extra = tuple(data.draw(st.lists(st.sampled_from([1, 3]), max_size=1)))
    return [(n, c) + extra, (n, c) + extra, (c,)], {"reduction": data.draw(st.sampled_from(["mean", "sum", "none"])),
                                                    "smoothing": data.draw(st.sampled_from([0.0, 0.1]))}


def np_reduce(loss, reduction):
    return loss.mean() if reduction == "mean" else loss.sum() if reduction == "sum" else loss


def np_bce_logits(x, y, reduction):
    return np_reduce(np.maximum(x, 0) - x * y + np.log1p(np.exp(-np.abs(x))), reduction)


def np_cross_entropy(x, p, w, reduction, smoothing):
    c = x.shape[1]
    p = p / p.sum(1, keepdims=True)
    p = p * (1 - smoothing) + smoothing / c
    loss = -(p * R.log_softmax(x, 1) * R.channel(w, x.ndim)).sum(1)
    return loss.mean() if reduction == "mean" else loss.sum() if reduction == "sum" else loss


def ce_ours(x, p, w, reduction, smoothing):
    return F.cross_entropy(x, p / p.sum(1, keepdim=True), w, reduction, smoothing)


def ce_torch(x, p, w, reduction, smoothing):
    return _tf().cross_entropy(x, p / p.sum(1, keepdim=True), w, reduction=reduction, label_smoothing=smoothing)


def three_same(data):
    s = shape_of(data, 1)
    return [s, s, s], {"reduction": data.draw(st.sampled_from(["mean", "sum", "none"]))}


def margin_params(data):
    shapes, params = three_same(data)
    return shapes, {**params, "margin": data.draw(st.sampled_from([0.0, 0.5]))}


def poisson_params(data):
    shapes, params = loss_params(data)
    return shapes, {**params, "log_input": data.draw(st.booleans()), "full": data.draw(st.booleans())}


def np_poisson(x, y, reduction, log_input, full):
    loss = np.exp(x) - y * x if log_input else x - y * np.log(x + 1e-8)
    if full:
        safe = np.where(y > 1, y, 2.0)
        loss = loss + np.where(y > 1, safe * np.log(safe) - safe + 0.5 * np.log(2 * np.pi * safe), 0.0)
    return np_reduce(loss, reduction)


def gaussian_params(data):
    shapes, params = three_same(data)
    return shapes, {**params, "full": data.draw(st.booleans())}


def np_gaussian(x, y, v, reduction, full):
    v = np.maximum(v, 1e-6)
    return np_reduce(0.5 * (np.log(v) + (x - y) ** 2 / v) + (0.5 * np.log(2 * np.pi) if full else 0.0), reduction)


def distance_params(data):
    s = shape_of(data, 1)
    return [s, s], {"p": data.draw(st.sampled_from([1.0, 2.0, 3.0]))}


def np_p_norm(d, p, axis=-1):
    return (np.abs(d) ** p).sum(axis) ** (1.0 / p)


def cdist_params(data):
    lead = tuple(data.draw(st.lists(st.sampled_from([1, 2]), max_size=1)))
    m = data.draw(st.sampled_from(SIZES))
    return [lead + (data.draw(st.sampled_from(SIZES)), m), lead + (data.draw(st.sampled_from(SIZES)), m)], \
        {"p": data.draw(st.sampled_from([1.0, 2.0]))}


def triplet_params(data):
    s = (data.draw(st.sampled_from(SIZES)), data.draw(st.sampled_from(SIZES)))
    return [s, s, s], {"reduction": data.draw(st.sampled_from(["mean", "sum", "none"])), "swap": data.draw(st.booleans())}


def np_triplet(a, p, n, reduction, swap):
    dp, dn = np_p_norm(a - p + 1e-6, 2), np_p_norm(a - n + 1e-6, 2)
    if swap:
        dn = np.minimum(dn, np_p_norm(p - n + 1e-6, 2))
    return np_reduce(np.maximum(dp - dn + 1.0, 0.0), reduction)


def cosine_embedding_params(data):
    n, d = data.draw(st.sampled_from(SIZES)), data.draw(st.sampled_from(SIZES))
    return [(n, d), (n, d), (n,)], {"reduction": data.draw(st.sampled_from(["mean", "sum", "none"]))}


def np_cosine_embedding(a, b, y, reduction):
    cos = (a * b).sum(-1) / np.sqrt(((a * a).sum(-1) + 1e-12) * ((b * b).sum(-1) + 1e-12))
    return np_reduce(np.where(y == 1, 1 - cos, 0.0) + np.where(y == -1, np.maximum(cos - 0.25, 0.0), 0.0), reduction)


def shuffle_params(data):
    r = data.draw(st.sampled_from([1, 2, 3]))
    lead = tuple(data.draw(st.lists(st.sampled_from([1, 2]), max_size=1)))
    c, h, w = data.draw(st.sampled_from([1, 2])), data.draw(st.sampled_from([1, 3])), data.draw(st.sampled_from([1, 2]))
    return [lead + (c * r * r, h, w)], {"r": r}


def unshuffle_params(data):
    r = data.draw(st.sampled_from([1, 2, 3]))
    lead = tuple(data.draw(st.lists(st.sampled_from([1, 2]), max_size=1)))
    c, h, w = data.draw(st.sampled_from([1, 2])), data.draw(st.sampled_from([1, 3])), data.draw(st.sampled_from([1, 2]))
    return [lead + (c, h * r, w * r)], {"r": r}


def np_pixel_shuffle(x, r):
    *lead, c, h, w = x.shape
    k = len(lead)
    y = x.reshape(*lead, c // (r * r), r, r, h, w).transpose(*range(k), k, k + 3, k + 1, k + 4, k + 2)
    return y.reshape(*lead, c // (r * r), h * r, w * r)


def np_pixel_unshuffle(x, r):
    *lead, c, h, w = x.shape
    k = len(lead)
    y = x.reshape(*lead, c, h // r, r, w // r, r).transpose(*range(k), k, k + 2, k + 4, k + 1, k + 3)
    return y.reshape(*lead, c * r * r, h // r, w // r)


def fold_params(data):
    """unfold's input shape and window (kernel, dilation, padding, stride) that fits it."""
    k = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    d = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2)))
    p = (data.draw(st.integers(0, 1)), data.draw(st.integers(0, 1)))
    s = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2)))
    hw = tuple(max(dd * (kk - 1) + 1 - 2 * pp, 1) + data.draw(st.integers(0, 3)) for kk, dd, pp in zip(k, d, p))
    lead = (data.draw(st.sampled_from([1, 2])),) if data.draw(st.booleans()) else ()
    return [lead + (data.draw(st.sampled_from([1, 2, 3])),) + hw], {"k": k, "d": d, "p": p, "s": s}


def _blocks(hw, k, d, p, s):
    return [(h + 2 * pp - dd * (kk - 1) - 1) // ss + 1 for h, kk, dd, pp, ss in zip(hw, k, d, p, s)]


def np_unfold(x, k, d, p, s):
    lead = x.shape[:-3]
    x = x.reshape((-1,) + x.shape[-3:])
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    oh, ow = _blocks((h, w), k, d, p, s)
    out = np.zeros((n, c, k[0], k[1], oh, ow))
    for i in range(k[0]):
        for j in range(k[1]):
            out[:, :, i, j] = xp[:, :, i * d[0]:i * d[0] + s[0] * (oh - 1) + 1:s[0], j * d[1]:j * d[1] + s[1] * (ow - 1) + 1:s[1]]
    return out.reshape(lead + (c * k[0] * k[1], oh * ow))


def fold_of_params(data):
    """fold's input: the shape unfold gives for a drawn image, and that image's size."""
    shapes, q = fold_params(data)
    *lead, c, h, w = shapes[0]
    oh, ow = _blocks((h, w), q["k"], q["d"], q["p"], q["s"])
    return [tuple(lead) + (c * q["k"][0] * q["k"][1], oh * ow)], {**q, "size": (h, w)}


def np_fold(x, size, k, d, p, s):
    lead = x.shape[:-2]
    x = x.reshape((-1,) + x.shape[-2:])
    n = x.shape[0]
    c = x.shape[1] // (k[0] * k[1])
    h, w = size
    oh, ow = _blocks(size, k, d, p, s)
    cols = x.reshape(n, c, k[0], k[1], oh, ow)
    out = np.zeros((n, c, h + 2 * p[0], w + 2 * p[1]))
    for i in range(k[0]):
        for j in range(k[1]):
            out[:, :, i * d[0]:i * d[0] + s[0] * (oh - 1) + 1:s[0], j * d[1]:j * d[1] + s[1] * (ow - 1) + 1:s[1]] += cols[:, :, i, j]
    return out[:, :, p[0]:p[0] + h, p[1]:p[1] + w].reshape(lead + (c, h, w))


def np_lgamma(a):
    def one(v):
        if math.isnan(v):
            return math.nan
        if math.isinf(v) or (v <= 0 and v == math.floor(v)):
            return math.inf
        return math.lgamma(v)
    return np.vectorize(one, otypes=[np.float64])(a)


def np_digamma(a):
    import mpmath

    def one(v):
        if math.isnan(v) or v == -math.inf or (v < 0 and v == math.floor(v)):
            return math.nan
        if v == math.inf:
            return math.inf
        if v == 0:
            return -math.inf if math.copysign(1.0, v) > 0 else math.inf
        return float(mpmath.digamma(v))
    return np.vectorize(one, otypes=[np.float64])(a)


# --- PyTorch method names (compiler/tensor_aliases.py) ----------------------------------------

def mm_shapes(data):   # (m, k) @ (k, n)
    m, k, n = (data.draw(st.sampled_from(SIZES)) for _ in range(3))
    return [(m, k), (k, n)], {}


def bmm_shapes(data):
    b, m, k, n = (data.draw(st.sampled_from(SIZES)) for _ in range(4))
    return [(b, m, n), (b, m, k), (b, k, n)], {}


def addmm_shapes(data):   # self broadcast to (m, n), mat1, mat2
    m, k, n = (data.draw(st.sampled_from(SIZES)) for _ in range(3))
    return [broadcast_partner_of(data, (m, n)), (m, k), (k, n)], {}


def broadcast_partner_of(data, shape):
    drop = data.draw(st.integers(0, len(shape)))
    return tuple(1 if data.draw(st.booleans()) else s for s in shape[drop:])


def inner_shapes(data):
    k = data.draw(st.sampled_from(SIZES0))
    a = tuple(data.draw(st.lists(st.sampled_from(SIZES), max_size=2))) + (k,)
    b = tuple(data.draw(st.lists(st.sampled_from(SIZES), max_size=2))) + (k,)
    return [a, b], {}


def kron_shapes(data):
    return [tuple(data.draw(st.lists(st.sampled_from([1, 2, 3]), max_size=3))) for _ in range(2)], {}


def rot90_params(data):   # rank 2..3, k in -5..5, two different dims
    shape = shape_of(data, 2)
    a, b = data.draw(st.permutations(range(-len(shape), 0)))[:2]
    return [shape], {"k": data.draw(st.integers(-5, 5)), "dims": (a, b)}


def np_rot90(a, k, dims):
    return np.rot90(a, k, dims)


def diff_params(data):   # rank 1..3 (size 0 included), n in 0..3, a dim, maybe prepend/append
    shape = tuple(data.draw(st.lists(st.sampled_from(SIZES0), min_size=1, max_size=3)))
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    extra = list(shape)
    extra[dim] = data.draw(st.sampled_from([1, 2]))
    shapes = [shape] + ([tuple(extra)] if data.draw(st.booleans()) else [])
    return shapes, {"n": data.draw(st.integers(0, 3)), "dim": dim}


def np_diff(a, *pre, n, dim):
    return np.diff(a, n, dim, prepend=pre[0]) if pre else np.diff(a, n, dim)


def square_shapes(data):
    return [(data.draw(st.sampled_from(SIZES0)), data.draw(st.sampled_from(SIZES0)))], {}


def cross_shapes(data):   # one axis of size 3, broadcast partner
    s = list(shape_of(data, 0, 2))
    dim = data.draw(st.integers(0, len(s)))
    s.insert(dim, 3)
    s = tuple(s)
    other = tuple(1 if (i != dim and data.draw(st.booleans())) else x for i, x in enumerate(s))
    return [s, other], {"dim": dim - len(s) if data.draw(st.booleans()) else dim}


def pnorm_params(data):   # a p, axes (or all) and keepdim
    shape = shape_of(data, 1)
    p = data.draw(st.sampled_from(["fro", 1, 2, 3, 0.5, 0, math.inf, -math.inf]))
    axes = None if data.draw(st.booleans()) else data.draw(st.integers(-len(shape), len(shape) - 1))
    return [shape], {"p": p, "dim": axes, "keepdim": data.draw(st.booleans())}


def np_norm(a, p, dim, keepdim):
    x = np.abs(a)
    axes = tuple(range(a.ndim)) if dim is None else dim
    if p in ("fro", 2):
        return np.sqrt((x * x).sum(axes, keepdims=keepdim))
    if p == math.inf:
        return x.max(axes, keepdims=keepdim)
    if p == -math.inf:
        return x.min(axes, keepdims=keepdim)
    if p == 0:
        return (x != 0).sum(axes, keepdims=keepdim).astype(np.float64)
    return (x ** p).sum(axes, keepdims=keepdim) ** (1.0 / p)


def np_div_trunc(a, b):
    with np.errstate(all="ignore"):
        return np.trunc(a / b)


def np_signbit_of(a):
    return np.signbit(a) & ~np.isnan(a)


def np_heaviside(a, b):     # torch.heaviside: 0 at NaN (numpy's gives NaN)
    return np.where(a == 0, b, np.where(a > 0, 1.0, 0.0))


def np_fmax(a, b):
    return np.fmax(a, b)


def np_logaddexp2(a, b):
    with np.errstate(all="ignore"):
        return np.logaddexp2(a, b)


def np_isclose(a, b):
    return np.isclose(a, b, rtol=1e-2, atol=1e-3)


def np_kron(a, b):
    n = max(a.ndim, b.ndim)
    return np.kron(a.reshape((1,) * (n - a.ndim) + a.shape), b.reshape((1,) * (n - b.ndim) + b.shape))


# --- more of torch.nn.functional --------------------------------------------------------------

def prelu_params(data):
    s = shape_of(data, 2)
    return [s, (data.draw(st.sampled_from([1, s[1]])),)], {}


def np_prelu(x, w):
    return np.where(x >= 0, x, w.reshape((-1,) + (1,) * (x.ndim - 2)) * x)


def bilinear_params(data):
    batch = shape_of(data, 0, 2)
    i, j, k = (data.draw(st.sampled_from(SIZES)) for _ in range(3))
    return [batch + (i,), batch + (j,), (k, i, j), (k,)], {}


def np_bilinear(a, b, w, bias):
    return np.einsum("...i,kij,...j->...k", a, w, b) + bias


def pdist_params(data):
    return [(data.draw(st.integers(1, 5)), data.draw(st.sampled_from(SIZES)))], {"p": data.draw(st.sampled_from([1.0, 2.0, 3.0]))}


def np_pdist(x, p):
    n = x.shape[0]
    return np.array([np.sum(np.abs(x[i] - x[j]) ** p) ** (1.0 / p) for i in range(n) for j in range(i + 1, n)])


def class_margin_params(data):
    n, c = data.draw(st.integers(1, 4)), data.draw(st.integers(2, 5))
    return [(n, c), (n, c), (c,)], {"reduction": data.draw(st.sampled_from(["mean", "sum", "none"])),
                                    "p": data.draw(st.sampled_from([1, 2])), "margin": data.draw(st.sampled_from([0.5, 1.0]))}


def np_multilabel_soft_margin(x, y, w, reduction, p, margin):
    yy = (y > 0).astype(np.float64)
    loss = -(yy * -np.logaddexp(0.0, -x) + (1 - yy) * -np.logaddexp(0.0, x)) * w
    return np_reduce(loss.mean(-1), reduction)


def np_multi_margin(x, y, w, reduction, p, margin):
    t = np.argmax(y, -1)
    picked = np.take_along_axis(x, t[:, None], -1)
    z = np.maximum(margin - picked + x, 0) ** p * w[t][:, None]
    z[np.arange(x.shape[0]), t] = 0
    return np_reduce(z.sum(-1) / x.shape[1], reduction)


def lrn_params(data):
    s = (data.draw(st.integers(1, 3)), data.draw(st.sampled_from(SIZES))) + tuple(
        data.draw(st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=2)))
    return [s], {"size": data.draw(st.integers(1, 4))}


def np_lrn(x, size):
    c = x.shape[1]
    sq = np.pad(x * x, [(0, 0), (size // 2, (size - 1) // 2)] + [(0, 0)] * (x.ndim - 2))
    total = sum(sq[:, i:i + c] for i in range(size))
    return x / (total * (1e-4 / size) + 1.0) ** 0.75


def lp_params(nd):
    def gen(data):
        n, c = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 3))
        k = tuple(data.draw(st.integers(1, 3)) for _ in range(nd))
        sp = tuple(data.draw(st.integers(kk, kk + 4)) for kk in k)
        return [(n, c) + sp], {"p": data.draw(st.sampled_from([1.0, 2.0, 3.0])), "k": k,
                               "stride": data.draw(st.sampled_from([None, 1, 2]))}
    return gen


def np_lp_pool(x, p, k, stride):
    s = R.pool(x ** p, "avg", kernel_size=k, stride=stride)
    return (np.sign(s) * np.maximum(np.abs(s), 0) * math.prod(k)) ** (1.0 / p)


def searchsorted_params(data):   # a 1-d sequence (sorted by the case) and values of any shape
    return [(data.draw(st.sampled_from(SIZES)),), shape_of(data, 0, 3)], {}


def np_searchsorted(a, b):
    s = np.sort(a)
    return np.searchsorted(s, b, side="left") + 100 * np.searchsorted(s, b, side="right")


NEW_CASES = [
    # rounding and sign (exact; halves too), with size-0 and 0-d shapes
    Case("floor", lambda a: a.floor(), np.floor, lambda a: a.floor(), one0, domain="small_finite"),
    Case("ceil", lambda a: a.ceil(), np.ceil, lambda a: a.ceil(), one0, domain="small_finite"),
    Case("round", lambda a: a.round(), np.round, lambda a: a.round(), one0, domain="small_finite"),
    Case("round_any", lambda a: a.round(), np.round, lambda a: a.round(), one0),
    Case("trunc", lambda a: a.trunc(), np.trunc, lambda a: a.trunc(), one0, domain="small_finite"),
    Case("frac", lambda a: a.frac(), lambda a: a - np.trunc(a), lambda a: a.frac(), one0),
    Case("sign", lambda a: a.sign(), np_sign, lambda a: a.sign(), one0, domain="small"),
    Case("int_rounding", lambda a: a.floor() + a.ceil() * 2 + a.round() * 3 + a.trunc() * 4 + a.sign(),
         lambda a: a * 10 + np.sign(a), lambda a: a.floor() + a.ceil() * 2 + a.round() * 3 + a.trunc() * 4 + a.sign(),
         one0, dtypes=I32),
    # transcendental composites and activations
    Case("tan", lambda a: a.tan(), np.tan, lambda a: a.tan(), one0, domain="unit", scale=8),
    Case("atan", lambda a: a.atan(), np.arctan, lambda a: a.atan(), one0, scale=4),
    Case("log1p", lambda a: a.log1p(), np.log1p, lambda a: a.log1p(), one0, domain="above_minus_one", scale=4),
    Case("expm1", lambda a: a.expm1(), np.expm1, lambda a: a.expm1(), one0, scale=4),
    Case("softplus", lambda a: F.softplus(a), np_softplus, lambda a: _tf().softplus(a), one0, scale=4),
    Case("softplus_beta", lambda a: F.softplus(a, 2.0, 3.0),
         lambda a: np.where(2 * a > 3, a, np.log1p(np.exp(2 * a)) / 2), lambda a: _tf().softplus(a, 2.0, 3.0), one0,
         scale=4),
    Case("leaky_relu", lambda a: F.leaky_relu(a, 0.1), lambda a: np.where(a > 0, a, 0.1 * a),
         lambda a: _tf().leaky_relu(a, 0.1), one0),
    Case("elu", lambda a: F.elu(a, 0.7), lambda a: np.where(a > 0, a, 0.7 * np.expm1(a)),
         lambda a: _tf().elu(a, 0.7), one0, scale=4),
    Case("selu", lambda a: F.selu(a), lambda a: 1.0507009873554805 * np.where(a > 0, a, 1.6732632423543772 * np.expm1(a)),
         lambda a: _tf().selu(a), one0, scale=4),
    Case("hardtanh", lambda a: F.hardtanh(a, -0.5, 1.5), lambda a: np.clip(a, -0.5, 1.5),
         lambda a: _tf().hardtanh(a, -0.5, 1.5), one0),
    Case("relu6", lambda a: F.relu6(a * 4), lambda a: np.clip(a * 4, 0, 6), lambda a: _tf().relu6(a * 4), one0),
    Case("hardsigmoid", lambda a: F.hardsigmoid(a * 3), lambda a: np.clip(a * 3 + 3, 0, 6) / 6,
         lambda a: _tf().hardsigmoid(a * 3), one0, scale=2),
    Case("hardswish", lambda a: F.hardswish(a * 3), lambda a: a * 3 * np.clip(a * 3 + 3, 0, 6) / 6,
         lambda a: _tf().hardswish(a * 3), one0, scale=4),
    Case("mish", lambda a: F.mish(a), lambda a: a * np.tanh(np_softplus(a)), lambda a: _tf().mish(a), one0, scale=8),
    Case("logsigmoid", lambda a: F.logsigmoid(a), lambda a: -np_softplus(-a), lambda a: _tf().logsigmoid(a), one0,
         scale=4),
    # two-argument composites and replacements
    Case("atan2", lambda a, b: a.atan2(b), np.arctan2, lambda a, b: a.atan2(b), two0, scale=4),
    Case("atan2_specials", lambda a, b: a.atan2(b), np.arctan2, lambda a, b: a.atan2(b), two0, domain="small"),
    Case("hypot", lambda a, b: a.hypot(b), np.hypot, lambda a, b: a.hypot(b), two0, scale=4),
    Case("nan_to_num", lambda a: (a / a.abs()).nan_to_num(0.5, 7.0, -9.0),
         lambda a: np.nan_to_num(a / np.abs(a), nan=0.5, posinf=7.0, neginf=-9.0),
         lambda a: (a / a.abs()).nan_to_num(0.5, 7.0, -9.0), one0, domain="small"),
    Case("masked_fill", lambda a, b: a.masked_fill(b > 0, -2.5), lambda a, b: np.where(b > 0, -2.5, a),
         lambda a, b: a.masked_fill(b > 0, -2.5), two_broadcast),
    Case("diag", lambda a, k: a.diag(k), lambda a, k: np.diag(a, k), lambda a, k: a.diag(k), diag_params,
         dtypes=[DType.f32, DType.f16, DType.i32]),
    Case("logcumsumexp", lambda a, dim, k: a.logcumsumexp(dim), np_logcumsumexp,
         lambda a, dim, k: a.logcumsumexp(dim), axis_params, scale=8),
    Case("logcumsumexp_offset", lambda a, dim, k: (a + 1e4).logcumsumexp(dim), lambda a, dim, k: np_logcumsumexp(a + 1e4, dim, k),
         None, axis_params, dtypes=[DType.f32], scale=8),
    # hyperbolic functions, logs, and their kin
    Case("lgamma", lambda a: a.lgamma(), np_lgamma, lambda a: a.lgamma(), one0, scale=32),
    # (f32 only: a half-typed x * 30 rounds onto negative integers, lgamma's poles)
    Case("lgamma_wide", lambda a: (a * 30).lgamma(), lambda a: np_lgamma(a * 30), lambda a: (a * 30).lgamma(), one0,
         dtypes=[DType.f32], scale=32),
    Case("digamma", lambda a: a.digamma(), np_digamma, lambda a: a.digamma(), one0, scale=32),
    Case("sinh", lambda a: a.sinh(), np.sinh, lambda a: a.sinh(), one0, scale=4),
    Case("sinh_wide", lambda a: (a * 15).sinh(), lambda a: np.sinh(a * 15), lambda a: (a * 15).sinh(), one0,
         dtypes=[DType.f32], scale=8),
    Case("cosh", lambda a: a.cosh(), np.cosh, lambda a: a.cosh(), one0, scale=4),
    Case("asinh", lambda a: a.asinh(), np.arcsinh, lambda a: a.asinh(), one0, scale=4),
    Case("asinh_wide", lambda a: (a * 1e20).asinh(), lambda a: np.arcsinh(a * 1e20), lambda a: (a * 1e20).asinh(),
         one0, dtypes=[DType.f32], scale=4),
    Case("acosh", lambda a: (a.abs() + 1).acosh(), lambda a: np.arccosh(np.abs(a) + 1), lambda a: (a.abs() + 1).acosh(),
         one0, scale=4),
    Case("asin_acos", lambda a: a.asin() + a.acos() * 2, lambda a: np.arcsin(a) + np.arccos(a) * 2,
         lambda a: a.asin() + a.acos() * 2, one0, domain="unit", scale=4),
    Case("atanh", lambda a: a.atanh(), np.arctanh, lambda a: a.atanh(), one0, domain="unit", scale=4),
    Case("log10", lambda a: a.log10(), np.log10, lambda a: a.log10(), one0, domain="positive", scale=4),
    Case("logaddexp", lambda a, b: a.logaddexp(b), np_logaddexp, lambda a, b: a.logaddexp(b), two0, scale=4),
    Case("logaddexp_specials", lambda a, b: (a / (b * 0)).logaddexp(b), lambda a, b: np_logaddexp(a / (b * 0), b),
         lambda a, b: (a / (b * 0)).logaddexp(b), two0, domain="small"),
    Case("xlogy", lambda a, b: a.xlogy(b), lambda a, b: np.where((a == 0) & ~np.isnan(b), 0.0, a * np.log(b)),
         lambda a, b: a.xlogy(b), two0, domain="small"),
    Case("lerp", lambda a, b: a.lerp(b, 0.3) + a.lerp(b, 0.8), lambda a, b: (a + 0.3 * (b - a)) + (b - 0.2 * (b - a)),
         lambda a, b: a.lerp(b, 0.3) + a.lerp(b, 0.8), two0, scale=4),
    Case("clamp_min_max", lambda a: a.clamp_min(-0.5) + a.clamp_max(0.25), lambda a: np.maximum(a, -0.5) + np.minimum(a, 0.25),
         lambda a: a.clamp_min(-0.5) + a.clamp_max(0.25), one0),
    Case("nansum", lambda a, axes, keepdim: a.nansum(axes, keepdim), lambda a, axes, keepdim: np.nansum(a, axes, keepdims=keepdim),
         lambda a, axes, keepdim: a.nansum(axes, keepdim), reduce0, domain="small"),
    Case("nanmean", lambda a, axes, keepdim: a.nanmean(axes, keepdim), np_nanmean,
         lambda a, axes, keepdim: a.nanmean(axes, keepdim), reduce0, domain="small"),
    Case("outer", lambda a, b: a.outer(b), np.outer, lambda a, b: a.outer(b), vectors),
    Case("dot", lambda a, b: a.dot(b), np.dot, lambda a, b: a.dot(b), same_vectors, scale=4),
    Case("softmin", lambda a, axis: F.softmin(a, axis), lambda a, axis: np.exp(-a - (-a).max(axis, keepdims=True)) / np.exp(-a - (-a).max(axis, keepdims=True)).sum(axis, keepdims=True),
         lambda a, axis: _tf().softmin(a, axis), lambda d: ([shape_of(d, 1)], {"axis": -1}), scale=4),
    Case("softsign_tanhshrink", lambda a: F.softsign(a) + F.tanhshrink(a), lambda a: a / (1 + np.abs(a)) + a - np.tanh(a),
         lambda a: _tf().softsign(a) + _tf().tanhshrink(a), one0, scale=4),
    Case("glu", lambda a: F.glu(a), lambda a: np.split(a, 2, -1)[0] / (1 + np.exp(-np.split(a, 2, -1)[1])),
         lambda a: _tf().glu(a), even_last, scale=4),
    Case("cosine_similarity", lambda a, b, dim: F.cosine_similarity(a, b, dim), np_cosine,
         lambda a, b, dim: _tf().cosine_similarity(a, b, dim), cosine_params, scale=16),
    Case("kthvalue", lambda a, dim, k: a.kthvalue(k, dim)[0], np_kth, lambda a, dim, k: a.kthvalue(k, dim)[0],
         axis_params, domain="small"),
    Case("median", lambda a, dim, k: a.median(dim)[0], np_median, lambda a, dim, k: a.median(dim)[0], axis_params,
         domain="small"),
    Case("median_all", lambda a, dim, k: a.median(), lambda a, dim, k: np_median(a.reshape(-1), 0, 1),
         lambda a, dim, k: a.median(), axis_params, domain="small"),
    Case("remainder", lambda a, b: a.remainder(b), np.remainder, lambda a, b: a.remainder(b), two0, domain="nonzero"),
    # floor division (Python/torch semantics) and i32 bitwise ops, exact over the whole range
    Case("floordiv", lambda a, b: a // b, np_floordiv, lambda a, b: a // b, two0, domain="nonzero", scale=2),
    Case("floordiv_scalar", lambda a: a // -0.75, lambda a: np.floor_divide(a, -0.75), lambda a: a // -0.75, one0,
         scale=2),
    Case("floordiv_i32", lambda a, b: a // (b * b + 1), lambda a, b: np.floor_divide(a, b * b + 1),
         lambda a, b: a // (b * b + 1), two0, dtypes=I32),
    Case("floordiv_i32_wide", lambda a, b: a // b, np_i64(lambda a, b: np.where(b == 0, 0, i32_wrap(
         np.floor_divide(a, np.where(b == 0, 1, b))))), None, two_broadcast, dtypes=I32, domain="int_wide"),
    Case("bitwise_i32", lambda a, b: (a & b) + (a | b) * 3 + (a ^ b) * 5 + ~a,
         np_i64(lambda a, b: i32_wrap((a & b) + (a | b) * 3 + (a ^ b) * 5 + ~a)),
         lambda a, b: (a & b) + (a | b) * 3 + (a ^ b) * 5 + ~a, two_broadcast, dtypes=I32, domain="int_wide"),
    Case("shifts_i32", lambda a: (a << 3) + (a >> 5) + (a >> 31), np_i64(lambda a: i32_wrap((a << 3) + (a >> 5) + (a >> 31))),
         lambda a: (a << 3) + (a >> 5) + (a >> 31), one0, dtypes=I32, domain="int_wide"),
    Case("bitwise_bool", lambda a, b: (a & b) | (~a ^ b), lambda a, b: (a.astype(bool) & b.astype(bool)) |
         (~a.astype(bool) ^ b.astype(bool)), lambda a, b: (a & b) | (~a ^ b), two0, dtypes=[DType.bool], domain="bool"),
    Case("min_i32", lambda a, axes, keepdim: a.min(axes, keepdim),
         lambda a, axes, keepdim: a.min(axes, keepdims=keepdim), lambda a, axes, keepdim: a.amin(axes, keepdim),
         reduce_params, dtypes=I32, domain="int_wide"),
    Case("pow_float_of_i32", lambda a: a ** 2.0, lambda a: a ** 2.0, lambda a: a ** 2.0, one0, dtypes=I32),
    Case("pow_negative_base", lambda a: (a * 3) ** 0.3 + (a * 2) ** 3.0,
         lambda a: np.where(a * 3 == -np.inf, np.inf, (a * 3) ** 0.3) + (a * 2) ** 3.0,
         lambda a: (a * 3) ** 0.3 + (a * 2) ** 3.0, one0, scale=8),
    # reductions
    Case("prod", lambda a, axes, keepdim: a.prod(axes, keepdim) if len(axes) == 1 else a.prod(),
         lambda a, axes, keepdim: a.prod(axes, keepdims=keepdim) if len(axes) == 1 else a.prod(),
         lambda a, axes, keepdim: a.prod(axes[0], keepdim) if len(axes) == 1 else a.prod(),
         reduce0, domain="near_one", scale=16),
    Case("prod_i32", lambda a, axes, keepdim: a.prod(axes, keepdim),
         lambda a, axes, keepdim: i32_wrap(np.prod(a.astype(np.int64), axes, keepdims=keepdim)), None,
         reduce0, dtypes=I32),
    Case("std", lambda a, axes, keepdim: a.std(axes, keepdim), np_std,
         torch_quiet(lambda a, axes, keepdim: a.std(axes, keepdim=keepdim)), reduce_params, scale=16),
    Case("all", lambda a, axes, keepdim: a.all(axes, keepdim), lambda a, axes, keepdim: np.all(a != 0, axes, keepdims=keepdim),
         lambda a, axes, keepdim: a.all(dim=axes, keepdim=keepdim), reduce0, domain="small"),
    Case("any", lambda a, axes, keepdim: a.any(axes, keepdim), lambda a, axes, keepdim: np.any(a != 0, axes, keepdims=keepdim),
         lambda a, axes, keepdim: a.any(dim=axes, keepdim=keepdim), reduce0, domain="small"),
    Case("count_nonzero", lambda a, axes, keepdim: a.count_nonzero(axes),
         lambda a, axes, keepdim: np.count_nonzero(a, axes), lambda a, axes, keepdim: _t().count_nonzero(a, axes),
         reduce0, domain="small"),
    Case("logsumexp", lambda a, axes, keepdim: a.logsumexp(axes, keepdim), np_logsumexp,
         lambda a, axes, keepdim: a.logsumexp(axes, keepdim), reduce0, scale=8),
    # movement
    Case("flip", lambda a, dims: a.flip(dims), lambda a, dims: np.flip(a, dims), lambda a, dims: a.flip(dims),
         flip_params),
    Case("roll", lambda a, shifts, dims: a.roll(shifts, dims), lambda a, shifts, dims: np.roll(a, shifts, dims),
         lambda a, shifts, dims: a.roll(shifts, dims), roll_params),
    Case("roll_flat", lambda a: a.roll(5), lambda a: np.roll(a, 5), lambda a: a.roll(5), lambda d: ([shape_of(d, 1)], {})),
    Case("repeat", lambda a, sizes: a.repeat(sizes), lambda a, sizes: np.tile(a, sizes),
         lambda a, sizes: a.repeat(sizes), repeat_params),
    Case("tile", lambda a, sizes: a.tile(sizes[:1]), lambda a, sizes: np.tile(a, sizes[:1]),
         lambda a, sizes: a.tile(sizes[:1]), repeat_params),
    Case("chunk_split", lambda a, dim, k: compiler.cat(a.chunk(k, dim)[::-1] + a.split(k, dim), dim),
         lambda a, dim, k: np.concatenate(np.array_split(a, range(-(-a.shape[dim] // k), a.shape[dim], -(-a.shape[dim] // k)), dim)[::-1]
                                          + np.array_split(a, range(k, a.shape[dim], k), dim), dim),
         lambda a, dim, k: _t().cat(a.chunk(k, dim)[::-1] + a.split(k, dim), dim), split_params),
    Case("stack", lambda a, b: compiler.stack([a, b * 2, a], -1), lambda a, b: np.stack([a, b * 2, a], -1),
         lambda a, b: _t().stack([a, b * 2, a], -1), lambda d: ([shape_of(d)] * 2, {})),
    Case("narrow_movedim", lambda a, src, dst: a.movedim(src, dst).narrow(-1, 0, 1),
         lambda a, src, dst: np.moveaxis(a, src, dst)[..., :1],
         lambda a, src, dst: a.movedim(src, dst).narrow(-1, 0, 1), movedim_params),
    Case("unflatten", lambda a: a.flatten().unflatten(0, (1, -1)), lambda a: a.reshape(1, -1),
         lambda a: a.flatten().unflatten(0, (1, -1)), one),
    Case("unfold", lambda a, dim, size, step: a.unfold(dim, size, step),
         lambda a, dim, size, step: np.moveaxis(np.lib.stride_tricks.sliding_window_view(a, size, dim)[
             (slice(None),) * dim + (slice(None, None, step),)], -1, -1),
         lambda a, dim, size, step: a.unfold(dim, size, step), unfold_params),
    Case("diagonal", lambda a, offset, d1, d2: a.diagonal(offset, d1, d2),
         lambda a, offset, d1, d2: np.diagonal(a, offset, d1, d2),
         lambda a, offset, d1, d2: a.diagonal(offset, d1, d2), diagonal_params),
    Case("list_index", lambda a: a[..., [0, -1, 0]], lambda a: a[..., [0, -1, 0]], lambda a: a[..., [0, -1, 0]],
         lambda d: ([shape_of(d, 1)], {})),
    Case("pad_modes", lambda a, pad, mode: F.pad(a, pad, mode), lambda a, pad, mode: R.pad_torch_order(a, pad, mode),
         lambda a, pad, mode: _tf().pad(a, pad, mode=mode), pad_mode_params),
    Case("einsum", lambda *xs, eq: compiler.einsum(eq, *xs), lambda *xs, eq: np.einsum(eq, *xs),
         lambda *xs, eq: _t().einsum(eq, *xs), einsum_params, scale=16),
    # convolutions and pooling (window views)
    Case("conv1d", lambda x, w, b, **p: F.conv1d(x, w, b, **p), lambda x, w, b, **p: R.conv(x, w, b, **p),
         torch_conv(1), conv_params(1), scale=16),
    Case("conv2d", lambda x, w, b, **p: F.conv2d(x, w, b, **p), lambda x, w, b, **p: R.conv(x, w, b, **p),
         torch_conv(2), conv_params(2), scale=16),
    Case("conv3d", lambda x, w, b, **p: F.conv3d(x, w, b, **p), lambda x, w, b, **p: R.conv(x, w, b, **p),
         torch_conv(3), conv_params(3), scale=16),
    Case("conv_transpose1d", lambda x, w, b, **p: F.conv_transpose1d(x, w, b, **p),
         lambda x, w, b, **p: R.conv_transpose(x, w, b, **p), lambda x, w, b, **p: _tf().conv_transpose1d(x, w, b, **p),
         conv_params(1, True), scale=16),
    Case("conv_transpose2d", lambda x, w, b, **p: F.conv_transpose2d(x, w, b, **p),
         lambda x, w, b, **p: R.conv_transpose(x, w, b, **p), lambda x, w, b, **p: _tf().conv_transpose2d(x, w, b, **p),
         conv_params(2, True), scale=16),
    Case("max_pool1d", lambda x, **p: F.max_pool1d(x, **p), lambda x, **p: R.pool(x, "max", **p),
         lambda x, **p: _tf().max_pool1d(x, **p), pool_params(1, "max")),
    Case("max_pool2d", lambda x, **p: F.max_pool2d(x, **p), lambda x, **p: R.pool(x, "max", **p),
         lambda x, **p: _tf().max_pool2d(x, **p), pool_params(2, "max")),
    Case("max_pool3d", lambda x, **p: F.max_pool3d(x, **p), lambda x, **p: R.pool(x, "max", **p),
         lambda x, **p: _tf().max_pool3d(x, **p), pool_params(3, "max")),
    Case("avg_pool1d", lambda x, **p: F.avg_pool1d(x, **p), lambda x, **p: R.pool(x, "avg", **p),
         lambda x, **p: _tf().avg_pool1d(x, **p), pool_params(1, "avg"), scale=8),
    Case("avg_pool2d", lambda x, **p: F.avg_pool2d(x, **p), lambda x, **p: R.pool(x, "avg", **p),
         lambda x, **p: _tf().avg_pool2d(x, **p), pool_params(2, "avg"), scale=8),
    Case("avg_pool3d", lambda x, **p: F.avg_pool3d(x, **p), lambda x, **p: R.pool(x, "avg", **p),
         lambda x, **p: _tf().avg_pool3d(x, **p), pool_params(3, "avg"), dtypes=[DType.f32], scale=8),  # no f16 in torch
    Case("adaptive_avg_pool2d", lambda x, out: F.adaptive_avg_pool2d(x, out),
         lambda x, out: R.adaptive_pool(x, "avg", out), lambda x, out: _tf().adaptive_avg_pool2d(x, out),
         adaptive_params(2), scale=8),
    Case("adaptive_max_pool1d", lambda x, out: F.adaptive_max_pool1d(x, out),
         lambda x, out: R.adaptive_pool(x, "max", out), lambda x, out: _tf().adaptive_max_pool1d(x, out),
         adaptive_params(1)),
    Case("adaptive_avg_pool3d", lambda x, out: F.adaptive_avg_pool3d(x, out),
         lambda x, out: R.adaptive_pool(x, "avg", out), lambda x, out: _tf().adaptive_avg_pool3d(x, out),
         adaptive_params(3), scale=8),
    Case("interpolate_nearest", lambda x, size, ac: F.interpolate(x, size),
         lambda x, size, ac: R.interpolate(x, size, "nearest"), lambda x, size, ac: _tf().interpolate(x, size),
         interp_params(2, "nearest")),
    Case("interpolate_bilinear", lambda x, size, ac: F.interpolate(x, size, mode="bilinear", align_corners=ac),
         lambda x, size, ac: R.interpolate(x, size, "linear", ac),
         lambda x, size, ac: _tf().interpolate(x, size, mode="bilinear", align_corners=ac),
         interp_params(2, "bilinear"), scale=8),
    Case("interpolate_linear", lambda x, size, ac: F.interpolate(x, size, mode="linear", align_corners=ac),
         lambda x, size, ac: R.interpolate(x, size, "linear", ac),
         lambda x, size, ac: _tf().interpolate(x, size, mode="linear", align_corners=ac),
         interp_params(1, "linear"), scale=8),
    # norms and losses
    Case("batch_norm", lambda x, m, v, w, b: F.batch_norm(x, m, v * v + 0.5, w, b),
         lambda x, m, v, w, b: R.batch_norm(x, m, v * v + 0.5, w, b),
         lambda x, m, v, w, b: _tf().batch_norm(x, m, v * v + 0.5, w, b), norm_params("batch"), scale=16),
    Case("instance_norm", lambda x, m, v, w, b: F.instance_norm(x, weight=w, bias=b),
         lambda x, m, v, w, b: R.instance_norm(x, w, b), lambda x, m, v, w, b: _tf().instance_norm(x, weight=w, bias=b),
         norm_params("instance"), scale=32),
    Case("group_norm", lambda x, m, v, w, b, groups: F.group_norm(x, groups, w, b),
         lambda x, m, v, w, b, groups: R.group_norm(x, groups, w, b),
         lambda x, m, v, w, b, groups: _tf().group_norm(x, groups, w, b), norm_params("group"), scale=32),
    Case("mse_loss", lambda a, b, reduction: F.mse_loss(a, b, reduction), lambda a, b, reduction: np_reduce((a - b) ** 2, reduction),
         lambda a, b, reduction: _tf().mse_loss(a, b, reduction=reduction), loss_params, scale=16),
    Case("l1_loss", lambda a, b, reduction: F.l1_loss(a, b, reduction), lambda a, b, reduction: np_reduce(np.abs(a - b), reduction),
         lambda a, b, reduction: _tf().l1_loss(a, b, reduction=reduction), loss_params, scale=16),
    Case("smooth_l1_loss", lambda a, b, reduction: F.smooth_l1_loss(a, b, reduction, beta=0.7),
         lambda a, b, reduction: np_reduce(np.where(np.abs(a - b) < 0.7, 0.5 * (a - b) ** 2 / 0.7, np.abs(a - b) - 0.35), reduction),
         lambda a, b, reduction: _tf().smooth_l1_loss(a, b, reduction=reduction, beta=0.7), loss_params, scale=16),
    Case("huber_loss", lambda a, b, reduction: F.huber_loss(a, b, reduction, delta=1.3),
         lambda a, b, reduction: np_reduce(np.where(np.abs(a - b) < 1.3, 0.5 * (a - b) ** 2, 1.3 * (np.abs(a - b) - 0.65)), reduction),
         lambda a, b, reduction: _tf().huber_loss(a, b, reduction=reduction, delta=1.3), loss_params, scale=16),
    Case("bce_with_logits", lambda a, b, reduction: F.binary_cross_entropy_with_logits(a * 4, b.sigmoid(), reduction=reduction),
         lambda a, b, reduction: np_bce_logits(a * 4, 1 / (1 + np.exp(-b)), reduction),
         lambda a, b, reduction: _tf().binary_cross_entropy_with_logits(a * 4, b.sigmoid(), reduction=reduction),
         loss_params, scale=16),
    Case("kl_div", lambda a, b, reduction: F.kl_div(a, b, reduction),
         lambda a, b, reduction: np_reduce(np.where(b == 0, 0, b * np.log(np.where(b > 0, b, 1))) - b * a, reduction),
         lambda a, b, reduction: _tf().kl_div(a, b, reduction=reduction), loss_params, domain="probability", scale=16),
    Case("cross_entropy_probs", ce_ours, np_cross_entropy, ce_torch, class_params, domain="probability", scale=32),
    Case("soft_margin_loss", lambda a, b, reduction: F.soft_margin_loss(a, b, reduction),
         lambda a, b, reduction: np_reduce(np.logaddexp(0.0, -b * a), reduction),
         # (torch computes log(1 + exp(-y x)) in the half type itself: inf past a margin of ~11)
         lambda a, b, reduction: _tf().soft_margin_loss(a.float(), b.float(), reduction=reduction).to(a.dtype),
         loss_params, scale=16),
    Case("margin_ranking_loss", lambda a, b, y, reduction, margin: F.margin_ranking_loss(a, b, y, margin, reduction),
         lambda a, b, y, reduction, margin: np_reduce(np.maximum(0.0, -y * (a - b) + margin), reduction),
         lambda a, b, y, reduction, margin: _tf().margin_ranking_loss(a, b, y, margin=margin, reduction=reduction),
         margin_params, scale=16),
    Case("hinge_embedding_loss", lambda a, y, reduction: F.hinge_embedding_loss(a, y, 1.5, reduction),
         lambda a, y, reduction: np_reduce(np.where(y != 1, np.maximum(0.0, 1.5 - a), 0.0) + np.where(y != -1, a, 0.0),
                                           reduction),
         lambda a, y, reduction: _tf().hinge_embedding_loss(a, y, margin=1.5, reduction=reduction), loss_params,
         domain="small", scale=16),
    Case("poisson_nll_loss", lambda a, b, reduction, log_input, full: F.poisson_nll_loss(a, b, log_input, full,
                                                                                       reduction=reduction),
         np_poisson, lambda a, b, reduction, log_input, full: _tf().poisson_nll_loss(a, b, log_input=log_input, full=full,
                                                                                     reduction=reduction),
         poisson_params, domain="positive", scale=32),
    Case("gaussian_nll_loss", lambda a, b, v, reduction, full: F.gaussian_nll_loss(a, b, v, full, reduction=reduction),
         np_gaussian, lambda a, b, v, reduction, full: _tf().gaussian_nll_loss(a, b, v, full=full, reduction=reduction),
         gaussian_params, domain="positive", scale=32),
    Case("pairwise_distance", lambda a, b, p: F.pairwise_distance(a, b, p), lambda a, b, p: np_p_norm(a - b + 1e-6, p),
         lambda a, b, p: _tf().pairwise_distance(a, b, p=p), distance_params, scale=32),
    Case("cdist", lambda a, b, p: F.cdist(a, b, p), lambda a, b, p: np_p_norm(a[..., :, None, :] - b[..., None, :, :], p),
         lambda a, b, p: _t().cdist(a.float(), b.float(), p=p).to(a.dtype), cdist_params, scale=32),   # (no CPU f16)
    Case("triplet_margin_loss", lambda a, p, n, reduction, swap: F.triplet_margin_loss(a, p, n, swap=swap, reduction=reduction),
         np_triplet, lambda a, p, n, reduction, swap: _tf().triplet_margin_loss(a, p, n, swap=swap, reduction=reduction),
         triplet_params, scale=32),
    Case("cosine_embedding_loss", lambda a, b, y, reduction: F.cosine_embedding_loss(a, b, y.sign(), 0.25, reduction),
         lambda a, b, y, reduction: np_cosine_embedding(a, b, np.sign(y), reduction),
         lambda a, b, y, reduction: _tf().cosine_embedding_loss(a, b, y.sign(), margin=0.25, reduction=reduction),
         cosine_embedding_params, scale=32),
    Case("pixel_shuffle", lambda a, r: F.pixel_shuffle(a, r), np_pixel_shuffle, lambda a, r: _tf().pixel_shuffle(a, r),
         shuffle_params),
    Case("pixel_unshuffle", lambda a, r: F.pixel_unshuffle(a, r), np_pixel_unshuffle,
         lambda a, r: _tf().pixel_unshuffle(a, r), unshuffle_params),
    Case("F.unfold", lambda a, k, d, p, s: F.unfold(a, k, d, p, s), np_unfold,
         lambda a, k, d, p, s: _tf().unfold(a, k, d, p, s), fold_params),
    Case("F.fold", lambda a, size, k, d, p, s: F.fold(a, size, k, d, p, s), np_fold,
         lambda a, size, k, d, p, s: _tf().fold(a, size, k, d, p, s), fold_of_params, scale=8),
    # PyTorch method names (compiler/tensor_aliases.py)
    Case("add_sub_alpha", lambda a, b: a.add(b, alpha=2) + a.sub(b, alpha=0.5) * a.mul(b),
         lambda a, b: (a + 2 * b) + (a - 0.5 * b) * (a * b),
         lambda a, b: a.add(b, alpha=2) + a.sub(b, alpha=0.5) * a.mul(b), two0, scale=8),
    Case("div_rounding", lambda a, b: a.div(b) + a.div(b, rounding_mode="floor") * 3 + a.div(b, rounding_mode="trunc"),
         lambda a, b: a / b + np.floor(a / b) * 3 + np_div_trunc(a, b),
         lambda a, b: a.div(b) + a.div(b, rounding_mode="floor") * 3 + a.div(b, rounding_mode="trunc"), two0,
         dtypes=[DType.f32], domain="nonzero", scale=4),
    # (divisors b^2 + 1 and its negation: an integer division by zero is an error in torch)
    Case("div_trunc_int", lambda a, b: a.div(b * b + 1, rounding_mode="trunc") * 3 + a.div(-(b * b + 1), rounding_mode="trunc"),
         lambda a, b: np.trunc(a / (b * b + 1)) * 3 + np.trunc(a / -(b * b + 1)),
         lambda a, b: a.div(b * b + 1, rounding_mode="trunc") * 3 + a.div(-(b * b + 1), rounding_mode="trunc"), two0,
         dtypes=I32),
    Case("compare_methods", lambda a, b: a.eq(b).logical_or(a.lt(b)).logical_xor(a.ge(b).logical_and(a.ne(b))),
         lambda a, b: ((a == b) | (a < b)) ^ ((a >= b) & (a != b)),
         lambda a, b: a.eq(b).logical_or(a.lt(b)).logical_xor(a.ge(b).logical_and(a.ne(b))), two0, domain="small"),
    Case("pow_neg_methods", lambda a: a.pow(2).neg() + a.negative(), lambda a: -(a ** 2) - a,
         lambda a: a.pow(2).neg() + a.negative(), one0, scale=2),
    Case("mm", lambda a, b: a.mm(b), np.matmul, lambda a, b: a.mm(b), mm_shapes, scale=16),
    Case("bmm_baddbmm", lambda c, a, b: c.baddbmm(a, b, beta=0.5, alpha=2) - a.bmm(b),
         lambda c, a, b: 0.5 * c + 2 * np.matmul(a, b) - np.matmul(a, b),
         lambda c, a, b: c.baddbmm(a, b, beta=0.5, alpha=2) - a.bmm(b), bmm_shapes, scale=32),
    Case("addmm", lambda c, a, b: c.addmm(a, b, beta=2, alpha=0.5), lambda c, a, b: 2 * c + 0.5 * (a @ b),
         lambda c, a, b: c.addmm(a, b, beta=2, alpha=0.5), addmm_shapes, scale=16),
    Case("addmm_beta0", lambda c, a, b: (c / c * 0).addmm(a, b, beta=0), lambda c, a, b: a @ b,
         lambda c, a, b: (c / c * 0).addmm(a, b, beta=0), addmm_shapes, scale=16),
    Case("inner", lambda a, b: a.inner(b), lambda a, b: np.inner(a, b), lambda a, b: a.inner(b), inner_shapes,
         scale=16),
    Case("mv", lambda a, b: a.mv(b[:, 0]), lambda a, b: a @ b[:, 0], lambda a, b: a.mv(b[:, 0]), mm_shapes, scale=16),
    Case("addcmul_addcdiv", lambda a, b: a.addcmul(b, a, value=0.5).addcdiv(a, b, value=2),
         lambda a, b: a + 0.5 * b * a + 2 * a / b, lambda a, b: a.addcmul(b, a, value=0.5).addcdiv(a, b, value=2),
         two0, domain="nonzero", scale=8),
    Case("kron", lambda a, b: a.kron(b), np_kron, lambda a, b: a.kron(b), kron_shapes),
    Case("t_expand_view_as", lambda a: a.t().expand_as(a.t()).view_as(a.t()).broadcast_to((2,) + a.t().shape),
         lambda a: np.broadcast_to(a.T, (2,) + a.T.shape),
         lambda a: a.t().expand_as(a.t()).view_as(a.t()).broadcast_to((2,) + a.t().shape), square_shapes),
    Case("rot90", lambda a, k, dims: a.rot90(k, dims), np_rot90, lambda a, k, dims: a.rot90(k, dims), rot90_params),
    Case("fliplr_flipud", lambda a: a.fliplr() - a.flipud(), lambda a: np.fliplr(a) - np.flipud(a),
         lambda a: a.fliplr() - a.flipud(), square_shapes),
    Case("diff", lambda a, *pre, n, dim: a.diff(n, dim, *pre), np_diff,
         lambda a, *pre, n, dim: a.diff(n, dim, *pre), diff_params, dtypes=[DType.f32, DType.f16, DType.i32]),
    Case("trace", lambda a: a.trace(), np.trace, lambda a: a.trace(), square_shapes, scale=8),
    Case("cross", lambda a, b, dim: a.cross(b, dim=dim), lambda a, b, dim: np.cross(*np.broadcast_arrays(a, b), axis=dim),
         lambda a, b, dim: _t().cross(*_t().broadcast_tensors(a, b), dim=dim), cross_shapes, scale=4),
    Case("norm", lambda a, p, dim, keepdim: a.norm(p, dim, keepdim), np_norm,
         lambda a, p, dim, keepdim: a.norm(p, dim, keepdim), pnorm_params, scale=16),
    Case("dist", lambda a, b: a.dist(b, 3), lambda a, b: np_norm(a - b, 3, None, False), lambda a, b: a.dist(b, 3),
         two0, scale=16),
    Case("var_std_mean", lambda a, axis, k: a.var_mean(dim=axis)[0] + a.std_mean(dim=axis, correction=0)[0]
         + a.var_mean(axis)[1], lambda a, axis, k: a.var(axis, ddof=1) + a.std(axis) + a.mean(axis),
         lambda a, axis, k: _t().var_mean(a, dim=axis)[0] + _t().std_mean(a, dim=axis, correction=0)[0]
         + _t().var_mean(a, axis)[1], lambda d: (lambda s: ([s], {"axis": d.draw(st.integers(-len(s), len(s) - 1)),
                                                                "k": 0}))(shape_of(d, 1, 3)),
         scale=32),
    Case("clip_sgn", lambda a: a.clip(-0.5, 0.7) + a.sgn(), lambda a: np.clip(a, -0.5, 0.7) + np.sign(a),
         lambda a: a.clip(-0.5, 0.7) + a.sgn(), one0),
    Case("signbit", lambda a: (a * 0).signbit().logical_or(a.signbit()), lambda a: np_signbit_of(a * 0) | np_signbit_of(a),
         lambda a: (a * 0).signbit().logical_or(a.signbit()), one0),
    Case("copysign", lambda a, b: a.copysign(b), lambda a, b: np.copysign(a, np.where(np.isnan(b), 1.0, b)),
         lambda a, b: a.copysign(b), two0),
    Case("heaviside", lambda a, b: a.heaviside(b), np_heaviside, lambda a, b: a.heaviside(b), two0, domain="small"),
    Case("searchsorted_bucketize",
         lambda a, b: a.sort(-1)[0].searchsorted(b) + b.bucketize(a.sort(-1)[0], right=True) * 100, np_searchsorted,
         lambda a, b: _t().searchsorted(_t().sort(a).values, b)
         + _t().bucketize(b, _t().sort(a).values, right=True) * 100,
         searchsorted_params, domain="small_finite"),
    Case("isposinf_isneginf", lambda a: (a / (a * 0)).isposinf().logical_or((a / 0).isneginf()),
         lambda a: np.isposinf(a / (a * 0)) | np.isneginf(a / 0),
         lambda a: (a / (a * 0)).isposinf().logical_or((a / 0).isneginf()), one0, domain="small"),
    Case("fmax_fmin", lambda a, b: a.fmax(b) + a.fmin(b) * 2, lambda a, b: np.fmax(a, b) + np.fmin(a, b) * 2,
         lambda a, b: a.fmax(b) + a.fmin(b) * 2, two0, domain="small"),
    Case("deg2rad_rad2deg", lambda a: a.deg2rad() + a.rad2deg(), lambda a: np.deg2rad(a) + np.rad2deg(a),
         lambda a: a.deg2rad() + a.rad2deg(), one0, scale=4),
    Case("logit", lambda a: a.sigmoid().logit() + a.sigmoid().logit(eps=0.1),
         lambda a: np.log(1 / (1 + np.exp(-a)) / (1 - 1 / (1 + np.exp(-a))))
         + np.log(np.clip(1 / (1 + np.exp(-a)), 0.1, 0.9) / (1 - np.clip(1 / (1 + np.exp(-a)), 0.1, 0.9))),
         lambda a: a.sigmoid().logit() + a.sigmoid().logit(eps=0.1), one0, dtypes=[DType.f32], scale=64),
    Case("logaddexp2", lambda a, b: a.logaddexp2(b), np_logaddexp2, lambda a, b: a.logaddexp2(b), two0, scale=8),
    Case("sinc", lambda a: a.sinc(), np.sinc, lambda a: a.sinc(), one0, scale=8),
    Case("isclose", lambda a, b: a.isclose(b, rtol=1e-2, atol=1e-3), np_isclose,
         lambda a, b: a.isclose(b, rtol=1e-2, atol=1e-3), two0, dtypes=[DType.f32]),
    Case("dim_and_axis_keywords", lambda a, axis, k: a.sum(dim=axis) + a.softmax(dim=axis).amax(axis=axis)
         + a.cumsum(axis=axis).mean(dim=axis),
         lambda a, axis, k: a.sum(axis) + np_softmax(a, axis).max(axis) + np.cumsum(a, axis).mean(axis),
         lambda a, axis, k: a.sum(dim=axis) + a.softmax(dim=axis).amax(axis) + a.cumsum(axis=axis).mean(dim=axis),
         lambda d: (lambda s: ([s], {"axis": d.draw(st.integers(-len(s), len(s) - 1)), "k": 0}))(shape_of(d, 1, 3)),
         scale=32),
    # more of torch.nn.functional
    Case("celu", lambda a: F.celu(a, 0.7), lambda a: np.where(a > 0, a, 0.7 * np.expm1(a / 0.7)),
         lambda a: _tf().celu(a, 0.7), one0, scale=4),
    Case("hardshrink_softshrink", lambda a: F.hardshrink(a, 0.5) + F.softshrink(a, 0.3),
         lambda a: np.where(np.abs(a) <= 0.5, 0.0, a) + np.where(a > 0.3, a - 0.3, np.where(a < -0.3, a + 0.3, 0.0)),
         lambda a: _tf().hardshrink(a, 0.5) + _tf().softshrink(a, 0.3), one0, scale=2),
    Case("threshold", lambda a: F.threshold(a, 0.1, -2.0), lambda a: np.where(a <= 0.1, -2.0, a),
         lambda a: _tf().threshold(a, 0.1, -2.0), one0),
    Case("rrelu_eval", lambda a: F.rrelu(a), lambda a: np.where(a >= 0, a, a * (1 / 8 + 1 / 3) / 2),
         lambda a: _tf().rrelu(a, training=False), one0, scale=2),
    Case("prelu", lambda a, w: F.prelu(a, w), np_prelu, lambda a, w: _tf().prelu(a, w), prelu_params),
    Case("bilinear", lambda a, b, w, bias: F.bilinear(a, b, w, bias), np_bilinear,
         lambda a, b, w, bias: _tf().bilinear(a, b, w, bias), bilinear_params, scale=32),
    Case("upsample", lambda a: F.upsample_nearest(a, scale_factor=2) + F.upsample_bilinear(a, scale_factor=2),
         lambda a: R.interpolate(a, tuple(2 * v for v in a.shape[2:]), "nearest")
         + R.interpolate(a, tuple(2 * v for v in a.shape[2:]), "linear", True),
         lambda a: _tf().interpolate(a, scale_factor=2, mode="nearest")
         + _tf().interpolate(a, scale_factor=2, mode="bilinear", align_corners=True),
         lambda d: ([(1, 2, d.draw(st.integers(1, 4)), d.draw(st.integers(1, 4)))], {}), scale=8),
    # (torch has no half pdist or local_response_norm on the CPU: it runs them in f32, then rounds)
    Case("pdist", lambda a, p: F.pdist(a, p), np_pdist, lambda a, p: _tf().pdist(a.float(), p).to(a.dtype), pdist_params, scale=16),
    Case("multilabel_soft_margin_loss",
         lambda x, y, w, reduction, p, margin: F.multilabel_soft_margin_loss(x, (y > 0).astype(x.dtype), w, reduction),
         np_multilabel_soft_margin,
         lambda x, y, w, reduction, p, margin: _tf().multilabel_soft_margin_loss(x, (y > 0).to(x.dtype), w,
                                                                                  reduction=reduction),
         class_margin_params, scale=32),
    Case("multi_margin_loss",
         lambda x, y, w, reduction, p, margin: F.multi_margin_loss(x, y.argmax(-1), p, margin, w, reduction),
         np_multi_margin,
         lambda x, y, w, reduction, p, margin: _tf().multi_margin_loss(x, y.argmax(-1), p, margin, w,
                                                                        reduction=reduction),
         class_margin_params, dtypes=[DType.f32], scale=32),
    Case("local_response_norm", lambda a, size: F.local_response_norm(a, size), np_lrn,
         lambda a, size: _tf().local_response_norm(a.float(), size).to(a.dtype), lrn_params, scale=16),
    Case("lp_pool1d", lambda a, p, k, stride: F.lp_pool1d(a, p, k, stride), np_lp_pool,
         lambda a, p, k, stride: _tf().lp_pool1d(a, p, k[0], stride), lp_params(1), domain="positive", scale=16),
    Case("lp_pool2d", lambda a, p, k, stride: F.lp_pool2d(a, p, k, stride), np_lp_pool,
         lambda a, p, k, stride: _tf().lp_pool2d(a, p, k, stride), lp_params(2), domain="positive", scale=16),
]
