"""Convolutions, pooling and interpolation as views (torch.nn.functional names).

A convolution reads its (padded) input through a sliding-window view — im2col without the
copy: `Tensor.windows` gives (N, C, *out, *kernel) with overlapping strides — and multiplies
it with the weight as one `matmul` per group, (O, C*K) @ (N, C*K, P), so the matmul rules and
the packed-product kernels see a plain contraction. Pooling reduces the same window view.
"""
from __future__ import annotations

import math

import numpy as np

from compiler.errors import DTypeError, ShapeError, UnsupportedError
from compiler.tensor import Tensor, cat, stack
from compiler.tensor_args import int_list, is_int
from ir.dtypes import DType

PADDING_MODES = {"zeros": "constant", "reflect": "reflect", "replicate": "replicate", "circular": "circular"}


def _batched(x: Tensor, nd: int, op: str) -> tuple[Tensor, bool]:
    """x as (N, C, *spatial); an unbatched (C, *spatial) input gets a batch axis of 1."""
    if not isinstance(x, Tensor):
        raise DTypeError(f"input must be a Tensor, got {type(x).__name__}", op)
    if x.ndim == nd + 1:
        return x.unsqueeze(0), True
    if x.ndim != nd + 2:
        raise ShapeError(f"expected a ({nd + 1}-d or {nd + 2}-d) input of rank {nd + 1} or {nd + 2}, "
                         f"got shape {x.shape}", op)
    return x, False


def _pad_spatial(x: Tensor, pads, mode: str, value: float = 0.0) -> Tensor:
    """Pad the trailing spatial axes by (before, after) pairs; negative amounts crop."""
    lead = x.ndim - len(pads)
    crop = [(max(-b, 0), max(-a, 0)) for b, a in pads]
    if any(c != (0, 0) for c in crop):
        x = x[(slice(None),) * lead + tuple(slice(b, x.shape[lead + i] - a) for i, (b, a) in enumerate(crop))]
    grow = [(max(b, 0), max(a, 0)) for b, a in pads]
    return x.pad([(0, 0)] * lead + grow, value, mode) if any(g != (0, 0) for g in grow) else x


def _conv_padding(padding, nd, kernel, stride, dilation, op) -> list[tuple[int, int]]:
    if padding == "valid":
        return [(0, 0)] * nd
    if padding == "same":
        if any(s != 1 for s in stride):
            raise ShapeError("padding='same' needs stride 1 (like torch)", op)
        total = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return [(t // 2, t - t // 2) for t in total]   # the odd element goes after, like torch
    p = int_list(op, "padding", padding, nd)
    if any(v < 0 for v in p):
        raise ShapeError(f"padding must be non-negative, got {p}", op)
    return [(v, v) for v in p]


def conv(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1,
         groups: int = 1, padding_mode: str = "zeros", nd: int = 2, op: str = "conv2d") -> Tensor:
    """An nd-dimensional convolution (cross-correlation, like torch)."""
    x, unbatched = _batched(x, nd, op)
    if not isinstance(weight, Tensor) or weight.ndim != nd + 2:
        raise ShapeError(f"weight must be (out_channels, in_channels/groups, *kernel) of rank {nd + 2}, "
                         f"got {getattr(weight, 'shape', type(weight).__name__)}", op)
    n, c = x.shape[:2]
    o, cg = weight.shape[:2]
    kernel = weight.shape[2:]
    if not is_int(groups) or groups < 1 or c % groups or o % groups or cg != c // groups:
        raise ShapeError(f"input channels {c}, weight {weight.shape} and groups={groups} do not fit "
                         f"(weight needs in_channels/groups = {c // groups if is_int(groups) and groups else '?'})", op)
    stride = int_list(op, "stride", stride, nd)
    dilation = int_list(op, "dilation", dilation, nd)
    if any(s < 1 for s in stride + dilation):
        raise ShapeError(f"stride {stride} and dilation {dilation} must be positive", op)
    if padding_mode not in PADDING_MODES:
        raise ShapeError(f"padding_mode must be one of {list(PADDING_MODES)}, got {padding_mode!r}", op)
    pads = _conv_padding(padding, nd, kernel, stride, dilation, op)
    if bias is not None and (not isinstance(bias, Tensor) or bias.shape != (o,)):
        raise ShapeError(f"bias must have shape ({o},), got {getattr(bias, 'shape', bias)}", op)
    x = _pad_spatial(x, pads, PADDING_MODES[padding_mode])
    out = _correlate(x, weight, stride, dilation, groups, op)
    if bias is not None:
        out = out + bias.reshape((o,) + (1,) * nd)
    return out.squeeze(0) if unbatched else out


def _check_window(x: Tensor, kernel, dilation, op: str) -> None:
    """A dilated kernel must fit the (padded) spatial axes of x."""
    for s, k, d in zip(x.shape[2:], kernel, dilation):
        if d * (k - 1) + 1 > s:
            raise ShapeError(f"kernel {tuple(kernel)} (dilation {tuple(dilation)}) is larger than the padded "
                             f"input {x.shape[2:]}", op)


def _correlate(x: Tensor, weight: Tensor, stride, dilation, groups: int, op: str) -> Tensor:
    nd = weight.ndim - 2
    n, c = x.shape[:2]
    o, cg = weight.shape[:2]
    kernel = weight.shape[2:]
    _check_window(x, kernel, dilation, op)
    w = x.windows(kernel, stride, dilation)                     # (N, C, *out, *kernel)
    out_sp = w.shape[2:2 + nd]
    p, kk = math.prod(out_sp), math.prod(kernel)
    w = w.reshape((n, groups, cg) + w.shape[2:])
    order = [0, 1, 2] + list(range(3 + nd, 3 + 2 * nd)) + list(range(3, 3 + nd))
    cols = w.permute(order).reshape(n, groups, cg * kk, p)     # (N, G, C/G * K, P)
    wm = weight.reshape(groups, o // groups, cg * kk)
    if groups == 1:
        out = wm.reshape(o, cg * kk) @ cols.reshape(n, cg * kk, p)
    else:
        out = wm @ cols                                         # (N, G, O/G, P)
    # materialized as (N, O, P) so that the product is one kernel with the output positions as
    # its column axis (the packed-product kernels need that); the spatial reshape is a view
    return out.contiguous().reshape((n, o) + out_sp)


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, padding_mode="zeros"):
    return conv(x, weight, bias, stride, padding, dilation, groups, padding_mode, 1, "conv1d")


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, padding_mode="zeros"):
    return conv(x, weight, bias, stride, padding, dilation, groups, padding_mode, 2, "conv2d")


def conv3d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, padding_mode="zeros"):
    return conv(x, weight, bias, stride, padding, dilation, groups, padding_mode, 3, "conv3d")


def _dilate(x: Tensor, stride, nd: int) -> Tensor:
    """Insert stride-1 zeros between the spatial elements (a padded view per axis)."""
    for i, s in enumerate(stride):
        if s == 1:
            continue
        a = x.ndim - nd + i
        size = x.shape[a]
        y = x.unsqueeze(a + 1).pad([(0, 0)] * (a + 1) + [(0, s - 1)] + [(0, 0)] * (x.ndim - a - 1))
        x = y.reshape(x.shape[:a] + (size * s,) + x.shape[a + 1:]).slice(a, 0, max((size - 1) * s + 1, 0))
    return x


def conv_transpose(x: Tensor, weight: Tensor, bias=None, stride=1, padding=0, output_padding=0, groups: int = 1,
                   dilation=1, nd: int = 2, op: str = "conv_transpose2d") -> Tensor:
    """The transposed convolution (the gradient of conv): the input dilated by `stride`,
    padded by dilation*(k-1) - padding, correlated with the flipped, transposed weight."""
    x, unbatched = _batched(x, nd, op)
    if not isinstance(weight, Tensor) or weight.ndim != nd + 2:
        raise ShapeError(f"weight must be (in_channels, out_channels/groups, *kernel) of rank {nd + 2}, "
                         f"got {getattr(weight, 'shape', type(weight).__name__)}", op)
    c = x.shape[1]
    cin, og = weight.shape[:2]
    kernel = weight.shape[2:]
    if not is_int(groups) or groups < 1 or cin != c or c % groups:
        raise ShapeError(f"input channels {c}, weight {weight.shape} and groups={groups} do not fit", op)
    stride = int_list(op, "stride", stride, nd)
    dilation = int_list(op, "dilation", dilation, nd)
    padding = int_list(op, "padding", padding, nd)
    output_padding = int_list(op, "output_padding", output_padding, nd)
    if any(op_ >= max(s, d) for op_, s, d in zip(output_padding, stride, dilation)):
        raise ShapeError(f"output_padding {output_padding} must be smaller than stride or dilation", op)
    o = og * groups
    if bias is not None and (not isinstance(bias, Tensor) or bias.shape != (o,)):
        raise ShapeError(f"bias must have shape ({o},), got {getattr(bias, 'shape', bias)}", op)
    xd = _dilate(x, stride, nd)
    pads = [(d * (k - 1) - p, d * (k - 1) - p + q) for k, d, p, q in zip(kernel, dilation, padding, output_padding)]
    xd = _pad_spatial(xd, pads, "constant")
    w = weight.reshape((groups, c // groups, og) + kernel).permute([0, 2, 1] + list(range(3, 3 + nd)))
    w = w.reshape((o, c // groups) + kernel).flip(tuple(range(2, 2 + nd)))
    out = _correlate(xd, w, (1,) * nd, dilation, groups, op)
    if bias is not None:
        out = out + bias.reshape((o,) + (1,) * nd)
    return out.squeeze(0) if unbatched else out


def conv_transpose1d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation, 1, "conv_transpose1d")


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation, 2, "conv_transpose2d")


def conv_transpose3d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation, 3, "conv_transpose3d")


# --- pooling ------------------------------------------------------------------------------------

def _pool_geometry(shape, kernel, stride, padding, dilation, ceil_mode, op):
    """Output sizes and (before, after) pads per spatial axis, by torch's rules (a ceil-mode
    window must start inside the input or its left padding)."""
    out, pads = [], []
    for s, k, st, p, d in zip(shape, kernel, stride, padding, dilation):
        if p > k // 2:
            raise ShapeError(f"padding {padding} must be at most half the kernel {kernel}", op)
        span = s + 2 * p - d * (k - 1) - 1
        if span < 0:
            raise ShapeError(f"kernel {kernel} (dilation {dilation}) does not fit the input {tuple(shape)} "
                             f"padded by {padding}", op)
        o = (-(-span // st) if ceil_mode else span // st) + 1
        if ceil_mode and (o - 1) * st >= s + p:
            o -= 1
        out.append(o)
        pads.append((p, (o - 1) * st + d * (k - 1) + 1 - s - p))
    return out, pads


def _pool_args(x, kernel_size, stride, padding, dilation, nd, op):
    x, unbatched = _batched(x, nd, op)
    kernel = int_list(op, "kernel_size", kernel_size, nd)
    stride = int_list(op, "stride", stride if stride not in (None, []) else kernel, nd)
    padding = int_list(op, "padding", padding, nd)
    dilation = int_list(op, "dilation", dilation, nd)
    if any(v < 1 for v in kernel + stride + dilation) or any(p < 0 for p in padding):
        raise ShapeError(f"kernel {kernel}, stride {stride}, dilation {dilation} must be positive and "
                         f"padding {padding} non-negative", op)
    return x, unbatched, kernel, stride, padding, dilation


def max_pool(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False,
             nd: int = 2, op: str = "max_pool2d"):
    if return_indices:
        raise UnsupportedError("return_indices needs an argmax, which is not available here", op)
    x, unbatched, kernel, stride, padding, dilation = _pool_args(x, kernel_size, stride, padding, dilation, nd, op)
    if x.dtype.name == "bool":
        raise DTypeError("max pooling of bool", op)
    _, pads = _pool_geometry(x.shape[2:], kernel, stride, padding, dilation, ceil_mode, op)
    xp = _pad_spatial(x, pads, "constant", -math.inf)   # -inf reads as the i32 minimum for i32
    out = xp.windows(kernel, stride, dilation).max(tuple(range(-nd, 0)))
    return out.squeeze(0) if unbatched else out


def avg_pool(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
             divisor_override=None, nd: int = 2, op: str = "avg_pool2d"):
    x, unbatched, kernel, stride, padding, _ = _pool_args(x, kernel_size, stride, padding, 1, nd, op)
    if not x.dtype.is_float:
        raise DTypeError(f"average pooling needs a float input, got {x.dtype.value}", op)
    spatial = x.shape[2:]
    out_sp, pads = _pool_geometry(spatial, kernel, stride, padding, (1,) * nd, ceil_mode, op)
    axes = tuple(range(-nd, 0))
    total = _pad_spatial(x, pads, "constant").windows(kernel, stride).sum(axes)
    if divisor_override is not None:
        if not is_int(divisor_override) or divisor_override == 0:
            raise ShapeError(f"divisor_override must be a nonzero int, got {divisor_override!r}", op)
        out = total / int(divisor_override)
    elif count_include_pad and all(a == b for b, a in pads):
        out = total / math.prod(kernel)
    else:
        # the divisor per window: its taps inside the input (and inside the padding when those
        # count), never the ceil-mode overhang; a product of one vector per axis
        count = None
        for i, (n, k, st, p, (before, _), o) in enumerate(zip(spatial, kernel, stride, padding, pads, out_sp)):
            lo, hi = (-p, n + p) if count_include_pad else (0, n)
            taps = [min(j * st - before + k, hi) - max(j * st - before, lo) for j in range(o)]
            vec = _const_vector(taps, x.dtype).reshape((o,) + (1,) * (nd - 1 - i))
            count = vec if count is None else count * vec
        out = total / count
    return out.squeeze(0) if unbatched else out


def _const_vector(values, dtype) -> Tensor:
    """A constant vector from runs of equal values (constants joined with cat)."""
    pieces, i = [], 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[i]:
            j += 1
        pieces.append(Tensor.full((j - i + 1,), float(values[i]), dtype))
        i = j + 1
    return cat(pieces, 0)


def max_pool1d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    return max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 1, "max_pool1d")


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    return max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 2, "max_pool2d")


def max_pool3d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    return max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 3, "max_pool3d")


def avg_pool1d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    return avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, None, 1, "avg_pool1d")


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
    return avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 2, "avg_pool2d")


def avg_pool3d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
    return avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 3, "avg_pool3d")


def _adaptive_axis(x: Tensor, axis: int, size: int, reduce: str) -> Tensor:
    """Adaptive pooling along one axis: window i spans [floor(i*n/size), ceil((i+1)*n/size))."""
    n = x.shape[axis]
    if size == n:
        return x
    fn = (lambda t, a: t.max(a, keepdim=True)) if reduce == "max" else (lambda t, a: t.mean(a, keepdim=True))
    if n % size == 0:   # equal windows: a reshape
        y = x.reshape(x.shape[:axis] + (size, n // size) + x.shape[axis + 1:])
        return fn(y, axis + 1).squeeze(axis + 1)
    pieces = [fn(x.slice(axis, (i * n) // size, -(-((i + 1) * n) // size)), axis) for i in range(size)]
    return cat(pieces, axis)


def adaptive_pool(x, output_size, reduce: str, nd: int, op: str):
    x, unbatched = _batched(x, nd, op)
    if isinstance(output_size, (tuple, list)):
        output_size = tuple(x.shape[2 + i] if s is None else s for i, s in enumerate(output_size))
    size = int_list(op, "output_size", output_size, nd)
    if any(s < 1 for s in size) or any(n == 0 for n in x.shape[2:]):
        raise ShapeError(f"output_size {size} must be positive, and the input {x.shape} non-empty", op)
    if reduce == "mean" and not x.dtype.is_float:
        raise DTypeError(f"average pooling needs a float input, got {x.dtype.value}", op)
    for i, s in enumerate(size):   # separable: a box max/mean is a max/mean of maxes/means
        x = _adaptive_axis(x, 2 + i, s, reduce)
    return x.squeeze(0) if unbatched else x


def adaptive_avg_pool1d(x, output_size): return adaptive_pool(x, output_size, "mean", 1, "adaptive_avg_pool1d")
def adaptive_avg_pool2d(x, output_size): return adaptive_pool(x, output_size, "mean", 2, "adaptive_avg_pool2d")
def adaptive_avg_pool3d(x, output_size): return adaptive_pool(x, output_size, "mean", 3, "adaptive_avg_pool3d")


def adaptive_max_pool1d(x, output_size, return_indices=False):
    if return_indices:
        raise UnsupportedError("return_indices needs an argmax", "adaptive_max_pool1d")
    return adaptive_pool(x, output_size, "max", 1, "adaptive_max_pool1d")


def adaptive_max_pool2d(x, output_size, return_indices=False):
    if return_indices:
        raise UnsupportedError("return_indices needs an argmax", "adaptive_max_pool2d")
    return adaptive_pool(x, output_size, "max", 2, "adaptive_max_pool2d")


def adaptive_max_pool3d(x, output_size, return_indices=False):
    if return_indices:
        raise UnsupportedError("return_indices needs an argmax", "adaptive_max_pool3d")
    return adaptive_pool(x, output_size, "max", 3, "adaptive_max_pool3d")


# --- interpolation ---------------------------------------------------------------------------------

def _nearest_axis(x: Tensor, axis: int, out: int, op: str) -> Tensor:
    """torch's 'nearest': output i reads floor(i * n / out), as views (repeat or step) when
    one size divides the other, else runs of repeated slices joined with cat."""
    n = x.shape[axis]
    if out == n:
        return x
    if out % n == 0:
        k = out // n
        y = x.unsqueeze(axis + 1).expand(x.shape[:axis + 1] + (k,) + x.shape[axis + 1:])
        return y.reshape(x.shape[:axis] + (out,) + x.shape[axis + 1:])
    if n % out == 0:
        return x.slice(axis, 0, None, n // out)
    src = [min((i * n) // out, n - 1) for i in range(out)]
    pieces, i = [], 0
    while i < out:
        j = i
        while j + 1 < out and src[j + 1] == src[i]:
            j += 1
        piece = x.slice(axis, src[i], src[i] + 1)
        pieces.append(piece.expand(piece.shape[:axis] + (j - i + 1,) + piece.shape[axis + 1:]))
        i = j + 1
    return cat(pieces, axis)


def _linear_axis(x: Tensor, axis: int, out: int, align_corners: bool, op: str) -> Tensor:
    """torch's linear interpolation along one axis, where the weights repeat with a period
    (an integer scale): a weighted sum of shifted views per phase, interleaved with stack."""
    n = x.shape[axis]
    if out == n:
        return x
    if n == 1:
        return x.expand(x.shape[:axis] + (out,) + x.shape[axis + 1:])
    sl = lambda t, a, b: t.slice(axis, a, b)   # noqa: E731
    if align_corners:
        if out == 1:
            return sl(x, 0, 1)
        if (out - 1) % (n - 1):
            return _linear_by_weights(x, axis, out, True)
        k = (out - 1) // (n - 1)
        phases = [sl(x, 0, n - 1) * (1 - t / k) + sl(x, 1, n) * (t / k) for t in range(k)]
        body = stack(phases, axis + 1).reshape(x.shape[:axis] + ((n - 1) * k,) + x.shape[axis + 1:])
        return cat([body, sl(x, n - 1, n)], axis)
    if out % n == 0:   # upsampling by k: source (i + 0.5) / k - 0.5, clamped to the edges
        k = out // n
        edge = x.pad([(0, 0)] * axis + [(1, 1)] + [(0, 0)] * (x.ndim - axis - 1), mode="replicate")
        phases = []
        for t in range(k):
            d = (t + 0.5) / k - 0.5
            if d < 0:
                phases.append(sl(edge, 0, n) * -d + x * (1 + d))
            else:
                phases.append(x * (1 - d) + sl(edge, 2, n + 2) * d)
        return stack(phases, axis + 1).reshape(x.shape[:axis] + (out,) + x.shape[axis + 1:])
    if n % out == 0:   # downsampling by k: source i*k + (k-1)/2
        k = n // out
        if k % 2:
            return x.slice(axis, (k - 1) // 2, None, k)
        return (x.slice(axis, k // 2 - 1, None, k) + x.slice(axis, k // 2, None, k)) * 0.5
    return _linear_by_weights(x, axis, out, False)


def _linear_by_weights(x: Tensor, axis: int, out: int, align_corners: bool) -> Tensor:
    """Linear interpolation along `axis` for sizes whose weights do not repeat: a product with
    the constant (n, out) matrix of tent weights max(0, 1 - |src_i - j|), src_i being torch's
    source position of output i, computed in f32 like torch (halves interpolate in f32)."""
    from compiler.creation import positions
    n = x.shape[axis]
    i = positions(out).astype(DType.f32)
    if align_corners:
        src = i * float(np.float32(n - 1) / np.float32(out - 1))
    else:
        src = ((i + 0.5) * float(np.float32(n) / np.float32(out)) - 0.5).maximum(0.0)
    src = src.minimum(float(n - 1))   # past the last input torch weighs the last one twice: weight 1
    j = positions(n).astype(DType.f32)
    weights = (1.0 - (j.reshape(n, 1) - src.reshape(1, out)).abs()).maximum(0.0)   # (n, out)
    y = x._float().movedim(axis, -1) @ weights
    return y.movedim(-1, axis).astype(x.dtype)


def interpolate(x: Tensor, size=None, scale_factor=None, mode: str = "nearest", align_corners=None):
    """Like torch.nn.functional.interpolate for mode 'nearest', 'linear', 'bilinear',
    'trilinear' (one axis at a time; see the supported sizes in docs/ir.md)."""
    op = "interpolate"
    if not isinstance(x, Tensor) or x.ndim < 3:
        raise ShapeError(f"interpolate needs an (N, C, *spatial) Tensor, got {getattr(x, 'shape', x)}", op)
    nd = x.ndim - 2
    want = {"linear": 1, "bilinear": 2, "trilinear": 3}
    if mode not in ("nearest",) + tuple(want):
        raise UnsupportedError(f"mode {mode!r}; supported: nearest, linear, bilinear, trilinear", op)
    if mode in want and want[mode] != nd:
        raise ShapeError(f"mode {mode!r} needs {want[mode]} spatial axes, got input {x.shape}", op)
    if mode == "nearest" and align_corners is not None:
        raise ShapeError("align_corners only applies to the linear modes", op)
    if (size is None) == (scale_factor is None):
        raise ShapeError("give exactly one of size and scale_factor", op)
    if size is not None:
        out = int_list(op, "size", size, nd)
    else:
        scales = (scale_factor,) * nd if isinstance(scale_factor, (int, float)) else tuple(scale_factor)
        if len(scales) != nd:
            raise ShapeError(f"scale_factor needs {nd} values, got {scale_factor}", op)
        out = tuple(int(math.floor(s * f)) for s, f in zip(x.shape[2:], scales))
        for s, f, o in zip(x.shape[2:], scales, out):
            if o and not (o % s == 0 and o // s == f or s % o == 0 and s / o == 1 / f):
                raise UnsupportedError(f"scale_factor {f} on an axis of {s}: only integer up- or downscales "
                                       "are supported", op)
    if any(o < 1 for o in out):
        raise ShapeError(f"output size {out} must be positive", op)
    for i, o in enumerate(out):
        axis = 2 + i
        x = _nearest_axis(x, axis, o, op) if mode == "nearest" else _linear_axis(x, axis, o, bool(align_corners), op)
    return x


def _fold_args(op: str, kernel_size, dilation, padding, stride):
    kernel = int_list(op, "kernel_size", kernel_size, 2)
    dilation, padding, stride = (int_list(op, name, v, 2) for name, v in
                                 (("dilation", dilation), ("padding", padding), ("stride", stride)))
    if any(v < 1 for v in kernel + dilation + stride) or any(p < 0 for p in padding):
        raise ShapeError(f"kernel_size {kernel}, dilation {dilation} and stride {stride} must be positive, "
                         f"padding {padding} non-negative", op)
    return kernel, dilation, padding, stride


def unfold(x, kernel_size, dilation=1, padding=0, stride=1):
    """torch.nn.functional.unfold (im2col): (N, C, H, W) -> (N, C*kh*kw, L), L the window
    positions; a zero-padded window view, reshaped."""
    op = "unfold"
    kernel, dilation, padding, stride = _fold_args(op, kernel_size, dilation, padding, stride)
    x, unbatched = _batched(x, 2, op)
    n, c = x.shape[:2]
    x = _pad_spatial(x, [(p, p) for p in padding], "constant")
    _check_window(x, kernel, dilation, op)
    w = x.windows(kernel, stride, dilation)                     # (N, C, oh, ow, kh, kw)
    oh, ow = w.shape[2:4]
    out = w.permute(0, 1, 4, 5, 2, 3).reshape(n, c * kernel[0] * kernel[1], oh * ow)
    return out.squeeze(0) if unbatched else out


def fold(x, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """torch.nn.functional.fold (col2im, unfold's adjoint): (N, C*kh*kw, L) -> (N, C, H, W), the
    sum of the overlapping blocks: each kernel offset's (N, C, oh, ow) block, spread by the
    stride, padded into place, summed."""
    op = "fold"
    kernel, dilation, padding, stride = _fold_args(op, kernel_size, dilation, padding, stride)
    size = int_list(op, "output_size", output_size, 2)
    if not isinstance(x, Tensor):
        raise DTypeError(f"input must be a Tensor, got {type(x).__name__}", op)
    unbatched = x.ndim == 2
    x = x.unsqueeze(0) if unbatched else x
    padded = [s + 2 * p for s, p in zip(size, padding)]
    blocks = [(s - d * (k - 1) - 1) // st + 1 for s, k, d, st in zip(padded, kernel, dilation, stride)]
    kk = kernel[0] * kernel[1]
    if x.ndim != 3 or x.shape[1] % kk or x.shape[2] != blocks[0] * blocks[1] or min(blocks) < 1:
        raise ShapeError(f"expected (N, C*{kk}, {max(blocks[0], 0) * max(blocks[1], 0)}) for output_size {tuple(size)}, "
                         f"kernel {tuple(kernel)}, got {x.shape}", op)
    n, c = x.shape[0], x.shape[1] // kk
    cols = x.reshape(n, c, kernel[0], kernel[1], blocks[0], blocks[1])
    out = None
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            blk = _dilate(cols[:, :, i, j], stride, 2)           # (N, C, (oh-1)*sh+1, (ow-1)*sw+1)
            at = (i * dilation[0], j * dilation[1])
            pads = [(a, s - a - e) for a, s, e in zip(at, padded, blk.shape[2:])]
            blk = _pad_spatial(blk, pads, "constant")
            out = blk if out is None else out + blk
    out = out[:, :, padding[0]:padded[0] - padding[0], padding[1]:padded[1] - padding[1]]
    return out.squeeze(0) if unbatched else out
