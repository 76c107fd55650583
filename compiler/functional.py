"""torch.nn.functional-style functions over lazy Tensors (`import compiler.functional as F`).

Activations and the methods of `Tensor` are re-exported as functions; norms and losses are
compositions here; convolutions, pooling and interpolation live in `compiler.conv`."""
from __future__ import annotations

import math

from compiler.conv import (adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d,  # noqa: F401
                           adaptive_max_pool1d, adaptive_max_pool2d, adaptive_max_pool3d, avg_pool1d, avg_pool2d,
                           avg_pool3d, conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, conv_transpose3d,
                           fold, unfold,
                           interpolate, max_pool1d, max_pool2d, max_pool3d)
from compiler.errors import DTypeError, ShapeError, UnsupportedError
from compiler.tensor import Tensor
from compiler.tensor_args import int_list
from ir.dtypes import DType

REDUCTIONS = ("mean", "sum", "none")


def _tensor(x, name: str, op: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise DTypeError(f"{name} must be a Tensor, got {type(x).__name__}", op)
    return x


# --- activations -------------------------------------------------------------------------------

def relu(x): return x.relu()
def relu6(x): return x.relu6()
def gelu(x, approximate: str = "none"): return x.gelu(approximate)
def silu(x): return x.silu()
def sigmoid(x): return x.sigmoid()
def tanh(x): return x.tanh()
def softplus(x, beta: float = 1.0, threshold: float = 20.0): return x.softplus(beta, threshold)
def leaky_relu(x, negative_slope: float = 0.01): return x.leaky_relu(negative_slope)
def elu(x, alpha: float = 1.0): return x.elu(alpha)
def selu(x): return x.selu()
def hardtanh(x, min_val: float = -1.0, max_val: float = 1.0): return x.hardtanh(min_val, max_val)
def hardsigmoid(x): return x.hardsigmoid()
def hardswish(x): return x.hardswish()
def mish(x): return x.mish()
def softmax(x, dim: int = -1): return x.softmax(dim)
def softmin(x, dim: int = -1): return (-x).softmax(dim)
def softsign(x): return x / (x.abs() + 1)
def tanhshrink(x): return x - x.tanh()


def celu(x, alpha: float = 1.0):
    """x above 0, alpha * expm1(x / alpha) below (torch's F.celu)."""
    if alpha == 0:
        raise ShapeError("celu needs a nonzero alpha", "celu")
    x = x._float()
    return (x > 0).where(x, (x / alpha).expm1() * alpha)


def hardshrink(x, lambd: float = 0.5):
    """0 where abs(x) <= lambd, else x (NaN stays NaN), like F.hardshrink."""
    return (x.abs() <= lambd).where(x * 0, x)


def softshrink(x, lambd: float = 0.5):
    """x - lambd above lambd, x + lambd below -lambd, 0 between (NaN stays NaN)."""
    return (x > lambd).where(x - lambd, (x < -lambd).where(x + lambd, x * 0))


def threshold(x, threshold: float, value: float):
    """value where x <= threshold, else x (NaN stays NaN), like F.threshold."""
    return (x <= threshold).where(value, x)


def prelu(x, weight):
    """x where x >= 0, weight * x below, one weight per channel (axis 1) or one for all."""
    weight = _tensor(weight, "weight", "prelu")
    if weight.ndim != 1 or (weight.shape[0] != 1 and (x.ndim < 2 or weight.shape[0] != x.shape[1])):
        raise ShapeError(f"prelu weight must have 1 or {x.shape[1] if x.ndim > 1 else 1} elements (the channels, "
                         f"axis 1), got shape {weight.shape}", "prelu")
    w = weight.reshape((weight.shape[0],) + (1,) * (x.ndim - 2)) if x.ndim >= 2 else weight
    return (x >= 0).where(x, w * x)


def rrelu(x, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False):
    """At inference a leaky ReLU of slope (lower + upper) / 2; random slopes (training) are not
    available."""
    if training:
        raise UnsupportedError("rrelu in training mode needs random numbers, which Saturn lacks", "rrelu")
    return x.leaky_relu((lower + upper) / 2)


def bilinear(x1, x2, weight, bias=None):
    """y[..., k] = x1 W[k] x2 (+ bias[k]), like F.bilinear: weight (out, in1, in2)."""
    from compiler.einsum import einsum
    for name, t in (("input1", x1), ("input2", x2), ("weight", weight)):
        _tensor(t, name, "bilinear")
    if weight.ndim != 3 or x1.shape[-1:] != weight.shape[1:2] or x2.shape[-1:] != weight.shape[2:3] \
            or x1.shape[:-1] != x2.shape[:-1]:
        raise ShapeError(f"bilinear needs inputs (..., {weight.shape[1:2]}) and (..., {weight.shape[2:3]}) with one "
                         f"batch shape and a weight (out, in1, in2); got {x1.shape}, {x2.shape}, {weight.shape}",
                         "bilinear")
    y = einsum("...i,kij,...j->...k", x1, weight, x2)
    return y if bias is None else y + bias


def upsample(x, size=None, scale_factor=None, mode: str = "nearest", align_corners=None):
    return interpolate(x, size, scale_factor, mode, align_corners)


def upsample_nearest(x, size=None, scale_factor=None):
    return interpolate(x, size, scale_factor, "nearest")


def upsample_bilinear(x, size=None, scale_factor=None):
    """F.upsample_bilinear: bilinear with align_corners=True."""
    return interpolate(x, size, scale_factor, "bilinear", True)


def glu(x, dim: int = -1):
    """a * sigmoid(b) of x's two halves along `dim` (torch's F.glu)."""
    from compiler.errors import ShapeError
    if x.ndim == 0 or x.shape[dim] % 2:
        raise ShapeError(f"glu halves dimension {dim}, which must have an even size (shape {x.shape})", "glu")
    a, b = x.chunk(2, dim)
    return a * b.sigmoid()


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False,
                                 scale=None, enable_gqa: bool = False):
    """torch's F.scaled_dot_product_attention (no dropout): compiler.nn.attention_with_scores."""
    from compiler.errors import UnsupportedError
    from compiler.nn import attention_with_scores
    if dropout_p:
        raise UnsupportedError(f"attention dropout_p={dropout_p} (inference only)", "scaled_dot_product_attention")
    return attention_with_scores(query, key, value, attn_mask, is_causal, scale)[0]


def cosine_similarity(x1, x2, dim: int = 1, eps: float = 1e-8):
    """sum(x1 * x2) / sqrt(max(|x1|^2 |x2|^2, eps^2)) along `dim`, as torch computes it."""
    w12 = (x1 * x2).sum(dim)
    w1, w2 = (x1 * x1).sum(dim), (x2 * x2).sum(dim)
    return w12 / (w1 * w2).clamp_min(eps * eps).sqrt()
def log_softmax(x, dim: int = -1): return x.log_softmax(dim)
def logsigmoid(x): return -((-x).softplus())
def linear(x, weight, bias=None): return x.linear(weight, bias)


def layer_norm(x, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    return x.layer_norm(normalized_shape, weight, bias, eps)


def rms_norm(x, normalized_shape, weight=None, eps: float | None = None):
    return x.rms_norm(normalized_shape, weight, 1.1920928955078125e-07 if eps is None else eps)


def dropout(x, p: float = 0.5, training: bool = False):
    """Identity at inference (training=False); random masks are not available."""
    if training and p > 0:
        raise UnsupportedError("dropout in training mode needs random numbers, which Saturn lacks", "dropout")
    return x


def pad(x, pad, mode: str = "constant", value: float = 0.0):
    """torch's order: pad = (last_before, last_after, second_last_before, ...)."""
    p = int_list("pad", "pad", pad)
    if len(p) % 2 or len(p) // 2 > x.ndim:
        raise ShapeError(f"pad needs pairs for at most {x.ndim} trailing axes, got {pad}", "pad")
    pairs = [(0, 0)] * (x.ndim - len(p) // 2) + [(p[2 * i], p[2 * i + 1]) for i in reversed(range(len(p) // 2))]
    from compiler.conv import _pad_spatial
    return _pad_spatial(x, pairs, mode, value) if mode == "constant" else x.pad(pairs, value, mode)


def normalize(x, p: float = 2.0, dim: int = 1, eps: float = 1e-12):
    """x / max(||x||_p, eps) along `dim` (like F.normalize)."""
    norm = ((x.abs() ** p).sum(dim, keepdim=True) ** (1.0 / p)) if p != 2 else (x * x).sum(dim, keepdim=True).sqrt()
    return x / norm.maximum(eps)


# --- norms over channels ------------------------------------------------------------------------

def _channel_param(p, c: int, nd: int, name: str, op: str):
    if p is None:
        return None
    if not isinstance(p, Tensor) or p.shape != (c,):
        raise ShapeError(f"{name} must have shape ({c},) (one per channel), got {getattr(p, 'shape', p)}", op)
    return p.reshape((c,) + (1,) * nd)


def batch_norm(x, running_mean=None, running_var=None, weight=None, bias=None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5):
    """Inference uses the running statistics; training=True the batch's (biased variance).
    The running statistics are not updated (Saturn's programs have no side effects)."""
    op = "batch_norm"
    x = _tensor(x, "input", op)
    if x.ndim < 2:
        raise ShapeError(f"batch_norm needs (N, C, ...), got {x.shape}", op)
    c, nd = x.shape[1], x.ndim - 2
    axes = (0,) + tuple(range(2, x.ndim))
    if training or running_mean is None or running_var is None:
        if not training:
            raise ShapeError("inference batch_norm needs running_mean and running_var", op)
        mean, var = x.mean(axes, keepdim=True), x.var(axes, keepdim=True, correction=0)
    else:
        mean = _channel_param(running_mean, c, nd, "running_mean", op)
        var = _channel_param(running_var, c, nd, "running_var", op)
    return _affine((x - mean) * (var + eps).rsqrt(), weight, bias, c, nd, op)


def _affine(y, weight, bias, c, nd, op):
    w, b = _channel_param(weight, c, nd, "weight", op), _channel_param(bias, c, nd, "bias", op)
    if w is not None:
        y = y * w
    return y + b if b is not None else y


def instance_norm(x, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-5):
    """Each (sample, channel) normalized over its spatial axes."""
    op = "instance_norm"
    x = _tensor(x, "input", op)
    if x.ndim < 3:
        raise ShapeError(f"instance_norm needs (N, C, *spatial), got {x.shape}", op)
    if not use_input_stats:
        return batch_norm(x, running_mean, running_var, weight, bias, False, momentum, eps)
    axes = tuple(range(2, x.ndim))
    d = x - x.mean(axes, keepdim=True)
    y = d * (x.var(axes, keepdim=True, correction=0) + eps).rsqrt()
    return _affine(y, weight, bias, x.shape[1], x.ndim - 2, op)


def group_norm(x, num_groups: int, weight=None, bias=None, eps: float = 1e-5):
    """Channels split into `num_groups` groups, each normalized over its channels and space."""
    op = "group_norm"
    x = _tensor(x, "input", op)
    if x.ndim < 2 or not isinstance(num_groups, int) or num_groups < 1 or x.shape[1] % num_groups:
        raise ShapeError(f"{x.shape[1] if x.ndim > 1 else '?'} channels do not split into {num_groups} groups", op)
    n, c = x.shape[:2]
    g = x.reshape(n, num_groups, -1) if n * c else x.reshape(n, num_groups, c // num_groups)
    y = (g - g.mean(-1, keepdim=True)) * (g.var(-1, keepdim=True, correction=0) + eps).rsqrt()
    return _affine(y.reshape(x.shape), weight, bias, c, x.ndim - 2, op)


# --- losses --------------------------------------------------------------------------------------

def _reduce(loss: Tensor, reduction: str, op: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ShapeError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}", op)


def _pair(x, y, op: str):
    x, y = _tensor(x, "input", op), _tensor(y, "target", op)
    if x.shape != y.shape:
        raise ShapeError(f"input {x.shape} and target {y.shape} must have one shape", op)
    return x, y


def mse_loss(x, y, reduction: str = "mean"):
    x, y = _pair(x, y, "mse_loss")
    return _reduce((x - y).square(), reduction, "mse_loss")


def l1_loss(x, y, reduction: str = "mean"):
    x, y = _pair(x, y, "l1_loss")
    return _reduce((x - y).abs(), reduction, "l1_loss")


def smooth_l1_loss(x, y, reduction: str = "mean", beta: float = 1.0):
    x, y = _pair(x, y, "smooth_l1_loss")
    d = (x - y).abs()
    loss = d if beta == 0 else (d < beta).where(d * d * (0.5 / beta), d - 0.5 * beta)
    return _reduce(loss, reduction, "smooth_l1_loss")


def huber_loss(x, y, reduction: str = "mean", delta: float = 1.0):
    x, y = _pair(x, y, "huber_loss")
    d = (x - y).abs()
    return _reduce((d < delta).where(d * d * 0.5, (d - 0.5 * delta) * delta), reduction, "huber_loss")


def binary_cross_entropy_with_logits(x, y, weight=None, reduction: str = "mean", pos_weight=None):
    """(1 - y) x + (1 + (pos_weight - 1) y) (log1p(exp(-|x|)) + max(-x, 0)): stable for any x."""
    op = "binary_cross_entropy_with_logits"
    x, y = _pair(x, y, op)
    tail = (-x.abs()).exp().log1p() + (-x).relu()
    scale = 1 + (pos_weight - 1) * y if pos_weight is not None else 1
    loss = (1 - y) * x + scale * tail
    return _reduce(loss * weight if weight is not None else loss, reduction, op)


def binary_cross_entropy(x, y, weight=None, reduction: str = "mean"):
    """-(y log x + (1 - y) log(1 - x)), each log clamped at -100 like torch."""
    op = "binary_cross_entropy"
    x, y = _pair(x, y, op)
    loss = -(y * x.log().maximum(-100.0) + (1 - y) * (1 - x).log().maximum(-100.0))
    return _reduce(loss * weight if weight is not None else loss, reduction, op)


def _xlogy(a: Tensor, b: Tensor) -> Tensor:
    """a * log(b), 0 where a == 0 (unless b is NaN), like torch.xlogy."""
    return (a == 0).logical_and(b.isnan().logical_not()).where(0.0, a * b.log())


def kl_div(x, y, reduction: str = "mean", log_target: bool = False):
    """Pointwise y (log y - x) with x log-probabilities; reduction 'batchmean' divides the sum by
    the batch size."""
    op = "kl_div"
    x, y = _pair(x, y, op)
    loss = y.exp() * (y - x) if log_target else _xlogy(y, y) - y * x
    if reduction == "batchmean":
        return loss.sum() / (x.shape[0] if x.ndim else 1)
    return _reduce(loss, reduction, op)


def one_hot(x, num_classes: int = -1):
    """torch.nn.functional.one_hot: i32 (torch: int64) with a new last axis of `num_classes`;
    the number of classes must be given (inferring it from the data would make the shape
    data-dependent). An index outside [0, num_classes) gives a row of zeros (torch raises)."""
    from compiler.creation import positions
    x = _tensor(x, "input", "one_hot")
    if x.dtype.is_float or x.dtype == DType.bool:
        raise DTypeError(f"one_hot takes integer class indices, got {x.dtype.value}", "one_hot")
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 0:
        raise UnsupportedError(f"num_classes must be given as a non-negative int, got {num_classes!r} "
                               "(inferring it makes the shape depend on the data)", "one_hot")
    classes = positions(num_classes).reshape((1,) * x.ndim + (num_classes,))
    return (x.unsqueeze(-1) == classes).astype(DType.i32)


def embedding(input, weight, padding_idx=None, max_norm=None):
    """torch.nn.functional.embedding: the rows of `weight` (V, D) at the integer `input`, shape
    input.shape + (D,); `padding_idx` only matters for gradients."""
    op = "embedding"
    input, weight = _tensor(input, "input", op), _tensor(weight, "weight", op)
    if weight.ndim != 2:
        raise ShapeError(f"weight must be 2-D (num_embeddings, dim), got {weight.shape}", op)
    if max_norm is not None:
        raise UnsupportedError("max_norm renormalizes the weight in place", op)
    rows = weight.index_select(0, input.reshape(input.numel))
    return rows.reshape(input.shape + (weight.shape[1],))


def _class_mask(target: Tensor, c: int, axis: int) -> Tensor:
    """bool, True where the class axis (inserted at `axis`) equals the target's class."""
    from compiler.creation import positions
    classes = positions(c).reshape((c,) + (1,) * (target.ndim - axis))
    return target.unsqueeze(axis) == classes


def cross_entropy(x, target, weight=None, reduction: str = "mean", label_smoothing: float = 0.0,
                  ignore_index: int = -100):
    """Cross entropy over the class axis 1 (or 0 for an unbatched (C,) input): class-index
    targets (integers, the input's shape without the class axis) or probability targets (the
    input's shape, float)."""
    op = "cross_entropy"
    x, target = _tensor(x, "input", op), _tensor(target, "target", op)
    axis = 0 if x.ndim == 1 else 1
    c = x.shape[axis]
    logp = x.log_softmax(axis)
    if not target.dtype.is_float:
        return nll_loss(logp, target, weight, ignore_index=ignore_index, reduction=reduction,
                        _smoothing=label_smoothing)
    if target.shape != x.shape:
        raise ShapeError(f"probability targets must have the input's shape {x.shape}, got {target.shape}", op)
    if label_smoothing:
        target = target * (1 - label_smoothing) + label_smoothing / c
    terms = target * logp
    if weight is not None:
        terms = terms * _channel_param(weight, c, x.ndim - axis - 1, "weight", op)
    loss = -terms.sum(axis)
    if reduction == "mean":   # over the batch (and spatial) elements, like torch
        return loss.sum() / max(math.prod(loss.shape), 1) if loss.ndim else loss
    return _reduce(loss, reduction, op)


def nll_loss(x, target, weight=None, ignore_index: int = -100, reduction: str = "mean", _smoothing: float = 0.0):
    """-x[i, target[i]] (times weight[target[i]]); the mean divides by the summed weights."""
    op = "nll_loss"
    x, target = _tensor(x, "input", op), _tensor(target, "target", op)
    axis = 0 if x.ndim == 1 else 1
    c = x.shape[axis]
    if target.dtype.is_float or target.shape != x.shape[:axis] + x.shape[axis + 1:]:
        raise ShapeError(f"targets must be class indices of shape {x.shape[:axis] + x.shape[axis + 1:]}, "
                         f"got {target.dtype.value}{target.shape}", op)
    hit = _class_mask(target, c, axis)
    w = _channel_param(weight, c, x.ndim - axis - 1, "weight", op) if weight is not None else None
    keep = target != ignore_index
    # where, not a one-hot product: 0 * -inf would be NaN for the classes not picked
    chosen = hit.where(x * w if w is not None else x, 0.0).sum(axis)
    picked = keep.where(-chosen, 0.0)
    if _smoothing:
        smooth = keep.where(-(x * w if w is not None else x).sum(axis) / c, 0.0)
        picked = picked * (1 - _smoothing) + smooth * _smoothing
    wsum = keep.where(hit.where(w, 0.0).sum(axis) if w is not None else 1.0, 0.0)
    if reduction == "mean":
        return (picked.sum() / wsum.sum()).astype(x.dtype)
    return _reduce(picked, reduction, op)


# --- margin and likelihood losses, distances (compositions; torch's formulas) ----------------

def _same_shape(op: str, **tensors):
    ts = {k: _tensor(v, k, op) for k, v in tensors.items()}
    shapes = {t.shape for t in ts.values()}
    if len(shapes) > 1:
        raise ShapeError(" and ".join(f"{k} {t.shape}" for k, t in ts.items()) + " must have one shape", op)
    return list(ts.values())


def soft_margin_loss(x, y, reduction: str = "mean"):
    """log(1 + exp(-y x)), as softplus so that a large margin does not overflow."""
    x, y = _pair(x, y, "soft_margin_loss")
    return _reduce((-(y * x)).softplus(), reduction, "soft_margin_loss")


def margin_ranking_loss(x1, x2, y, margin: float = 0.0, reduction: str = "mean"):
    """max(0, -y (x1 - x2) + margin)."""
    x1, x2, y = _same_shape("margin_ranking_loss", input1=x1, input2=x2, target=y)
    return _reduce((-y * (x1 - x2) + margin).relu(), reduction, "margin_ranking_loss")


def hinge_embedding_loss(x, y, margin: float = 1.0, reduction: str = "mean"):
    """x where y is 1, max(0, margin - x) where y is -1; torch's sum of both terms for any other y."""
    x, y = _pair(x, y, "hinge_embedding_loss")
    loss = (y != 1).where((margin - x).relu(), 0.0) + (y != -1).where(x, 0.0)
    return _reduce(loss, reduction, "hinge_embedding_loss")


def poisson_nll_loss(x, y, log_input: bool = True, full: bool = False, eps: float = 1e-8,
                     reduction: str = "mean"):
    """exp(x) - y x (log_input), else x - y log(x + eps); `full` adds Stirling's term
    y log y - y + log(2 pi y) / 2 where y > 1."""
    x, y = _pair(x, y, "poisson_nll_loss")
    loss = x.exp() - y * x if log_input else x - y * (x + eps).log()
    if full:
        big = y > 1
        safe = big.where(y, 2.0)     # the term is 0 where y <= 1: keep log away from it there
        loss = loss + big.where(safe * safe.log() - safe + 0.5 * (2 * math.pi * safe).log(), 0.0)
    return _reduce(loss, reduction, "poisson_nll_loss")


def gaussian_nll_loss(x, y, var, full: bool = False, eps: float = 1e-6, reduction: str = "mean"):
    """(log(max(var, eps)) + (x - y)^2 / max(var, eps)) / 2 (+ log(2 pi) / 2 with `full`). `var`
    has the input's shape or broadcasts to it; torch rejects negative variances, which a
    compiled program cannot check: they clamp to eps here."""
    op = "gaussian_nll_loss"
    x, y = _pair(x, y, op)
    v = _tensor(var, "var", op).clamp_min(eps)
    loss = 0.5 * (v.log() + (x - y).square() / v)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction, op)


def pairwise_distance(x1, x2, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
    """||x1 - x2 + eps||_p along the last axis (the inputs broadcast)."""
    x1, x2 = _tensor(x1, "x1", "pairwise_distance"), _tensor(x2, "x2", "pairwise_distance")
    return _p_norm(x1 - x2 + eps, p, -1, keepdim)


def _p_norm(d, p: float, axis: int, keepdim: bool = False):
    if p == 2:
        return d.square().sum(axis, keepdim=keepdim).sqrt()
    if p == 1:
        return d.abs().sum(axis, keepdim=keepdim)
    if p == math.inf:
        return d.abs().max(axis, keepdim=keepdim)
    if p <= 0:
        raise UnsupportedError(f"p must be positive, got {p}", "pairwise_distance")
    return (d.abs() ** p).sum(axis, keepdim=keepdim) ** (1.0 / p)


def cdist(x1, x2, p: float = 2.0):
    """Distances between the rows of x1 (..., P, M) and x2 (..., R, M): (..., P, R), by the
    differences (torch may use x1^2 + x2^2 - 2 x1 x2 for p = 2 past 25 rows: less exact)."""
    op = "cdist"
    x1, x2 = _tensor(x1, "x1", op), _tensor(x2, "x2", op)
    if x1.ndim < 2 or x2.ndim < 2 or x1.shape[-1] != x2.shape[-1]:
        raise ShapeError(f"x1 {x1.shape} and x2 {x2.shape} must be (..., P, M) and (..., R, M)", op)
    return _p_norm(x1.unsqueeze(-2) - x2.unsqueeze(-3), p, -1)


def triplet_margin_loss(anchor, positive, negative, margin: float = 1.0, p: float = 2.0, eps: float = 1e-6,
                        swap: bool = False, reduction: str = "mean"):
    """max(d(a, p) - d(a, n) + margin, 0) with pairwise distances; `swap` takes the smaller of
    d(a, n) and d(p, n)."""
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = d_neg.minimum(pairwise_distance(positive, negative, p, eps))
    return _reduce((d_pos - d_neg + margin).relu(), reduction, "triplet_margin_loss")


def cosine_embedding_loss(x1, x2, y, margin: float = 0.0, reduction: str = "mean"):
    """1 - cos(x1, x2) where y is 1, max(0, cos - margin) where y is -1 (0 for other y); the
    cosine along the last axis as torch computes it (1e-12 added to each squared norm)."""
    op = "cosine_embedding_loss"
    x1, x2 = _tensor(x1, "input1", op), _tensor(x2, "input2", op)
    y = _tensor(y, "target", op)
    cos = (x1 * x2).sum(-1) / ((x1.square().sum(-1) + 1e-12) * (x2.square().sum(-1) + 1e-12)).sqrt()
    loss = (y == 1).where(1 - cos, 0.0) + (y == -1).where((cos - margin).relu(), 0.0)
    return _reduce(loss, reduction, op)


def pixel_shuffle(x, upscale_factor: int):
    """(..., C r^2, H, W) -> (..., C, H r, W r): a view."""
    x, r = _tensor(x, "input", "pixel_shuffle"), upscale_factor
    if x.ndim < 3 or r < 1 or x.shape[-3] % (r * r):
        raise ShapeError(f"pixel_shuffle needs (..., C*{r}^2, H, W), got {x.shape}", "pixel_shuffle")
    *lead, c, h, w = x.shape
    k = len(lead)
    y = x.reshape(*lead, c // (r * r), r, r, h, w)
    y = y.permute(*range(k), k, k + 3, k + 1, k + 4, k + 2)
    return y.reshape(*lead, c // (r * r), h * r, w * r)


def pixel_unshuffle(x, downscale_factor: int):
    """(..., C, H r, W r) -> (..., C r^2, H, W): the inverse view."""
    x, r = _tensor(x, "input", "pixel_unshuffle"), downscale_factor
    if x.ndim < 3 or r < 1 or x.shape[-2] % r or x.shape[-1] % r:
        raise ShapeError(f"pixel_unshuffle needs (..., C, H*{r}, W*{r}), got {x.shape}", "pixel_unshuffle")
    *lead, c, h, w = x.shape
    k = len(lead)
    y = x.reshape(*lead, c, h // r, r, w // r, r)
    y = y.permute(*range(k), k, k + 2, k + 4, k + 1, k + 3)
    return y.reshape(*lead, c * r * r, h // r, w // r)


def pdist(x, p: float = 2.0):
    """The distances between the rows of x (N, M) for i < j, in row order: N (N - 1) / 2 values."""
    from compiler.tensor import cat
    x = _tensor(x, "input", "pdist")
    if x.ndim != 2:
        raise ShapeError(f"pdist takes a 2-D input (N, M), got {x.shape}", "pdist")
    n = x.shape[0]
    if n < 2:
        return x.sum(1)[:0]
    rows = [_p_norm(x[i + 1:] - x[i], p, -1) for i in range(n - 1)]
    return cat(rows, 0)


def multilabel_soft_margin_loss(x, y, weight=None, reduction: str = "mean"):
    """-mean over classes of y log sigmoid(x) + (1 - y) log sigmoid(-x) (times `weight`), per sample."""
    op = "multilabel_soft_margin_loss"
    x, y = _pair(x, y, op)
    loss = -(y * logsigmoid(x) + (1 - y) * logsigmoid(-x))
    if weight is not None:
        loss = loss * _tensor(weight, "weight", op)
    return _reduce(loss.mean(-1), reduction, op)


def multi_margin_loss(x, target, p: int = 1, margin: float = 1.0, weight=None, reduction: str = "mean"):
    """Per sample, the sum over classes i != target of max(0, margin - x[target] + x[i])^p (times
    weight[target]), divided by the number of classes (torch's F.multi_margin_loss)."""
    op = "multi_margin_loss"
    x, target = _tensor(x, "input", op), _tensor(target, "target", op)
    if p not in (1, 2):
        raise ShapeError(f"p must be 1 or 2, got {p!r}", op)
    if x.ndim not in (1, 2) or target.ndim != x.ndim - 1 or (x.ndim == 2 and target.shape[0] != x.shape[0]):
        raise ShapeError(f"input (N, C) or (C,) and target (N,) or () expected, got {x.shape} and {target.shape}", op)
    if target.dtype.is_float or target.dtype == DType.bool:
        raise DTypeError(f"target must hold integer class indices, got {target.dtype.value}", op)
    c = x.shape[-1]
    mask = _class_mask(target, c, target.ndim)             # true at the target class
    picked = mask.where(x, 0.0).sum(-1, keepdim=True)
    z = (x - picked + margin).relu()
    z = z * z if p == 2 else z
    if weight is not None:
        w = _tensor(weight, "weight", op)
        z = z * mask.where(w, 0.0).sum(-1, keepdim=True)
    loss = mask.where(0.0, z).sum(-1) / c
    return _reduce(loss, reduction, op)


def local_response_norm(x, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
    """x / (k + alpha * mean of x^2 over `size` neighbouring channels)^beta, the window zero-padded
    (size // 2 before, (size - 1) // 2 after) and always divided by `size`, like torch."""
    op = "local_response_norm"
    x = _tensor(x, "input", op)
    if x.ndim < 3 or not isinstance(size, int) or size < 1:
        raise ShapeError(f"local_response_norm needs an input of 3 or more axes and a positive size, got "
                         f"{x.shape} and {size!r}", op)
    c = x.shape[1]
    sq = x.square().pad([(0, 0), (size // 2, (size - 1) // 2)] + [(0, 0)] * (x.ndim - 2))
    total = None
    for i in range(size):
        part = sq.narrow(1, i, c)
        total = part if total is None else total + part
    return x / (total * (alpha / size) + k) ** beta


def lp_pool1d(x, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False):
    """(sum over each window of x^p)^(1/p), as torch computes it: sign(s) relu(|s|) * k, to 1/p,
    with s the window's mean of x^p."""
    return _lp_pool(x, norm_type, kernel_size, stride, ceil_mode, 1)


def lp_pool2d(x, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False):
    return _lp_pool(x, norm_type, kernel_size, stride, ceil_mode, 2)


def _lp_pool(x, p, kernel_size, stride, ceil_mode, nd):
    from compiler.conv import avg_pool1d, avg_pool2d
    op = f"lp_pool{nd}d"
    x = _tensor(x, "input", op)
    k = int_list(op, "kernel_size", kernel_size, nd)
    s = avg_pool1d(x.pow(p), k, stride, 0, ceil_mode) if nd == 1 else avg_pool2d(x.pow(p), k, stride, 0, ceil_mode)
    return (s.sign() * s.abs().relu() * math.prod(k)) ** (1.0 / p)
