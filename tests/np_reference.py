"""Plain numpy (float64) references for the nn-style frontend ops, written from the PyTorch
documentation's formulas with loops and sliding windows, independent of the frontend's views."""
from __future__ import annotations

import itertools
import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def pad_torch_order(x, pad, mode="constant", value=0.0):
    pairs = [(0, 0)] * (x.ndim - len(pad) // 2) + [(pad[2 * i], pad[2 * i + 1]) for i in reversed(range(len(pad) // 2))]
    if mode == "constant":
        return np.pad(x, pairs, constant_values=value)
    return np.pad(x, pairs, mode={"reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode])


def conv(x, w, b=None, stride=1, padding=0, dilation=1, groups=1, padding_mode="zeros"):
    nd = w.ndim - 2
    stride, padding, dilation = ([v] * nd if isinstance(v, int) else list(v) for v in (stride, padding, dilation))
    mode = {"zeros": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}[padding_mode]
    pads = [(0, 0), (0, 0)] + [(p, p) for p in padding]
    x = np.pad(x, pads) if mode == "constant" else np.pad(x, pads, mode=mode)
    k = w.shape[2:]
    span = [d * (kk - 1) + 1 for d, kk in zip(dilation, k)]
    win = sliding_window_view(x, span, axis=tuple(range(2, 2 + nd)))
    win = win[(Ellipsis,) + tuple(slice(None, None, d) for d in dilation)]
    win = win[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in stride)]
    n, c = x.shape[:2]
    o = w.shape[0]
    win = win.reshape((n, groups, c // groups) + win.shape[2:])
    wg = w.reshape((groups, o // groups, c // groups) + k)
    sp, kk = "xyz"[:nd], "uvw"[:nd]
    out = np.einsum(f"ngc{sp}{kk},goc{kk}->ngo{sp}", win, wg).reshape((n, o) + win.shape[3:3 + nd])
    return out + b.reshape((o,) + (1,) * nd) if b is not None else out


def conv_transpose(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """The scatter definition: every input element adds its weighted kernel into the output."""
    nd = w.ndim - 2
    stride, padding, output_padding, dilation = ([v] * nd if isinstance(v, int) else list(v)
                                                 for v in (stride, padding, output_padding, dilation))
    n, cin = x.shape[:2]
    og = w.shape[1]
    k = w.shape[2:]
    full = [(s - 1) * st + d * (kk - 1) + 1 + op for s, st, d, kk, op in
            zip(x.shape[2:], stride, dilation, k, output_padding)]
    out = np.zeros((n, og * groups) + tuple(full))
    cg = cin // groups
    for pos in itertools.product(*(range(s) for s in x.shape[2:])):
        for tap in itertools.product(*(range(kk) for kk in k)):
            at = tuple(p * st + t * d for p, st, t, d in zip(pos, stride, tap, dilation))
            for g in range(groups):
                xs = x[(slice(None), slice(g * cg, (g + 1) * cg)) + pos]            # (n, cg)
                ws = w[(slice(g * cg, (g + 1) * cg), slice(None)) + tap]             # (cg, og)
                out[(slice(None), slice(g * og, (g + 1) * og)) + at] += xs @ ws
    out = out[(slice(None), slice(None)) + tuple(slice(p, f - p) for p, f in zip(padding, full))]
    return out + b.reshape((-1,) + (1,) * nd) if b is not None else out


def _pool_windows(shape, kernel, stride, padding, dilation, ceil_mode):
    """Per output position (tuple), the input index ranges (start, stop, step) per axis."""
    outs = []
    for s, k, st, p, d in zip(shape, kernel, stride, padding, dilation):
        span = s + 2 * p - d * (k - 1) - 1
        o = (math.ceil(span / st) if ceil_mode else span // st) + 1
        if ceil_mode and (o - 1) * st >= s + p:
            o -= 1
        outs.append(o)
    return outs


def pool(x, kind, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, count_include_pad=True):
    nd = x.ndim - 2
    as_list = lambda v: [v] * nd if isinstance(v, int) else list(v)   # noqa: E731
    kernel = as_list(kernel_size)
    stride = as_list(stride if stride is not None else kernel)
    padding, dilation = as_list(padding), as_list(dilation)
    outs = _pool_windows(x.shape[2:], kernel, stride, padding, dilation, ceil_mode)
    out = np.zeros(x.shape[:2] + tuple(outs))
    for o in itertools.product(*(range(v) for v in outs)):
        idx, counted = [], 1
        for oi, s, k, st, p, d in zip(o, x.shape[2:], kernel, stride, padding, dilation):
            taps = [oi * st - p + t * d for t in range(k)]
            idx.append([t for t in taps if 0 <= t < s])
            if kind == "avg":
                counted *= len(idx[-1]) if not count_include_pad else \
                    len([t for t in taps if -p <= t < s + p])
        block = x[(Ellipsis,) + np.ix_(*idx)]
        red = block.reshape(block.shape[:2] + (-1,))
        out[(Ellipsis,) + o] = red.max(-1) if kind == "max" else red.sum(-1) / counted
    return out


def adaptive_pool(x, kind, size):
    nd = x.ndim - 2
    size = [size] * nd if isinstance(size, int) else list(size)
    out = np.zeros(x.shape[:2] + tuple(size))
    for o in itertools.product(*(range(v) for v in size)):
        sl = tuple(slice((i * n) // m, -(-((i + 1) * n) // m)) for i, n, m in zip(o, x.shape[2:], size))
        block = x[(Ellipsis,) + sl].reshape(x.shape[:2] + (-1,))
        out[(Ellipsis,) + o] = block.max(-1) if kind == "max" else block.mean(-1)
    return out


def interpolate(x, size, mode, align_corners=False):
    """torch's per-axis source coordinates, in float64."""
    for axis, m in enumerate(size, start=2):
        n = x.shape[axis]
        i = np.arange(m)
        if mode == "nearest":
            src = np.minimum(np.floor(i * (n / m)).astype(int), n - 1)
            x = np.take(x, src, axis)
            continue
        if align_corners:
            pos = i * ((n - 1) / (m - 1)) if m > 1 else np.zeros(m)
        else:
            pos = np.maximum((i + 0.5) * (n / m) - 0.5, 0)
        i0 = np.minimum(np.floor(pos).astype(int), n - 1)
        i1 = np.minimum(i0 + 1, n - 1)
        lam = (pos - i0).reshape((-1,) + (1,) * (x.ndim - axis - 1))
        x = np.take(x, i0, axis) * (1 - lam) + np.take(x, i1, axis) * lam
    return x


def channel(p, ndim):
    return p.reshape((-1,) + (1,) * (ndim - 2))


def batch_norm(x, mean, var, w, b, eps=1e-5):
    return (x - channel(mean, x.ndim)) / np.sqrt(channel(var, x.ndim) + eps) * channel(w, x.ndim) + channel(b, x.ndim)


def instance_norm(x, w, b, eps=1e-5):
    axes = tuple(range(2, x.ndim))
    d = x - x.mean(axes, keepdims=True)
    return d / np.sqrt(x.var(axes, keepdims=True) + eps) * channel(w, x.ndim) + channel(b, x.ndim)


def group_norm(x, groups, w, b, eps=1e-5):
    g = x.reshape(x.shape[0], groups, -1)
    y = (g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + eps)
    return y.reshape(x.shape) * channel(w, x.ndim) + channel(b, x.ndim)


def log_softmax(x, axis):
    s = x - x.max(axis, keepdims=True)
    return s - np.log(np.exp(s).sum(axis, keepdims=True))
