"""Convolution, pooling, batch norm and interpolation ATen operators in terms of Saturn's
frontend (`compiler.conv`, `compiler.functional`), registered in `registry.OPS`.

Operators with an indices result (`max_pool2d_with_indices`, `adaptive_max_pool2d`) compute
the values only and give None for the indices: a graph that reads the indices keeps the node
in PyTorch (`translate.why_unsupported`). Interpolation reaches this table as
`saturn.interpolate`, the opaque operator `upsample.py` puts in place of
`torch.nn.functional.interpolate` (ATen's own upsampling decomposes into int64 index
arithmetic, which Saturn does not have).
"""
from __future__ import annotations

from compiler import conv as C
from compiler import functional as F
from compiler.torch_backend.registry import OPS, Unsupported, op


# --- convolution ----------------------------------------------------------------------------

@op("convolution.default")
def convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):  # noqa: A002
    nd = weight.ndim - 2
    if nd not in (1, 2, 3):
        raise Unsupported(f"a {nd}-d convolution (Saturn has 1-d to 3-d)")
    if transposed:
        return C.conv_transpose(input, weight, bias, list(stride), list(padding), list(output_padding), groups,
                                list(dilation), nd, f"conv_transpose{nd}d")
    if any(output_padding):
        raise Unsupported(f"output_padding {list(output_padding)} on a convolution that is not transposed")
    return C.conv(input, weight, bias, list(stride), list(padding), list(dilation), groups, "zeros", nd, f"conv{nd}d")


# --- pooling --------------------------------------------------------------------------------

def _max_pool(nd: int):
    name = f"max_pool{nd}d"

    def max_pool(self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
        return C.max_pool(self, list(kernel_size), list(stride) or None, padding, dilation, ceil_mode, False, nd, name)
    return max_pool


def _max_pool_with_indices(nd: int):
    values = _max_pool(nd)
    return lambda *args, **kwargs: (values(*args, **kwargs), None)


for _nd in (1, 2, 3):
    if _nd > 1:
        OPS[f"aten.max_pool{_nd}d_with_indices.default"] = _max_pool_with_indices(_nd)
    OPS[f"aten.max_pool{_nd}d.default"] = _max_pool(_nd)


def _avg_pool(nd: int):
    name = f"avg_pool{nd}d"

    def avg_pool(self, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        return C.avg_pool(self, list(kernel_size), list(stride) or None, padding, ceil_mode, count_include_pad,
                          divisor_override, nd, name)
    return avg_pool


for _nd in (1, 2, 3):
    OPS[f"aten.avg_pool{_nd}d.default"] = _avg_pool(_nd)


def _adaptive(nd: int, reduce: str):
    name = f"adaptive_{'avg' if reduce == 'mean' else 'max'}_pool{nd}d"

    def adaptive(self, output_size):
        out = C.adaptive_pool(self, list(output_size), reduce, nd, name)
        return out if reduce == "mean" else (out, None)
    return adaptive


for _nd in (1, 2, 3):
    OPS[f"aten._adaptive_avg_pool{_nd}d.default"] = OPS[f"aten.adaptive_avg_pool{_nd}d.default"] = \
        _adaptive(_nd, "mean")
    OPS[f"aten.adaptive_max_pool{_nd}d.default"] = _adaptive(_nd, "max")


# --- padding --------------------------------------------------------------------------------

def _pad(mode: str):
    def pad(self, padding):
        return F.pad(self, list(padding), mode)
    return pad


for _nd in (1, 2, 3):
    OPS[f"aten.reflection_pad{_nd}d.default"] = _pad("reflect")
    OPS[f"aten.replication_pad{_nd}d.default"] = _pad("replicate")
OPS["aten._pad_circular.default"] = _pad("circular")


# --- channels and space ----------------------------------------------------------------------

@op("pixel_shuffle.default")
def pixel_shuffle(self, upscale_factor):
    return F.pixel_shuffle(self, upscale_factor)


@op("pixel_unshuffle.default")
def pixel_unshuffle(self, downscale_factor):
    return F.pixel_unshuffle(self, downscale_factor)


@op("im2col.default")
def im2col(self, kernel_size, dilation, padding, stride):
    return C.unfold(self, kernel_size, dilation, padding, stride)


@op("col2im.default")
def col2im(self, output_size, kernel_size, dilation, padding, stride):
    return C.fold(self, output_size, kernel_size, dilation, padding, stride)


# --- normalization --------------------------------------------------------------------------

@op("_native_batch_norm_legit_no_training.default")
def batch_norm_inference(input, weight, bias, running_mean, running_var, momentum, eps):  # noqa: A002
    """Inference batch norm with the running statistics; the saved mean and rstd (empty in
    inference) are not computed."""
    return F.batch_norm(input, running_mean, running_var, weight, bias, False, momentum, eps), None, None


@op("native_group_norm.default")
def group_norm(input, weight, bias, N, C, HxW, group, eps):  # noqa: A002, N803 - ATen's names
    """The normalized input, and each (sample, group)'s mean and rstd, shape (N, group)."""
    out = F.group_norm(input, group, weight, bias, eps)
    g = input._float().reshape(N, group, -1)
    return out, g.mean(-1), (g.var(-1, correction=0) + eps).rsqrt()


# --- interpolation (the opaque operator of upsample.py) -------------------------------------

def interpolate(input, size, scale_factor, mode, align_corners):  # noqa: A002
    return C.interpolate(input, size=list(size) if size else None, scale_factor=list(scale_factor) if scale_factor else None,
                         mode=mode, align_corners=align_corners)


OPS["saturn.interpolate.default"] = interpolate
