"""ATen operators in terms of Saturn's frontend: one small function per operator (or family);
attention and the masks it needs are in `attention.py`.

Each function takes the operator's arguments as the ATen schema names them, with every tensor
already a lazy `compiler.tensor.Tensor`, and returns a Tensor (or a tuple, for operators with
several results), registered in `registry.OPS`. An operator that is not there runs in PyTorch.
A function raises `Unsupported` for argument values it does not cover (a rounding mode,
dropout, ...); the partitioner then keeps that node in PyTorch too. This module does not import torch: dtypes
arrive as torch dtype objects, which `ir.dtypes.as_dtype` reads by name.
"""
from __future__ import annotations

from compiler.tensor import Tensor, cat
from compiler.torch_backend.registry import OPS, Unsupported, op
from ir.dtypes import DType, as_dtype


def _dims(dim, ndim: int) -> tuple[int, ...]:
    """ATen's reduction `dim`: None or [] means every axis."""
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return tuple(range(ndim))
    return tuple(dim) if isinstance(dim, (list, tuple)) else (dim,)


def _cast(x: Tensor, dtype) -> Tensor:
    return x if dtype is None else x.astype(as_dtype(dtype))


def _as_bool(x: Tensor) -> Tensor:
    """Truth value like torch's logical ops: nonzero is True."""
    return x if x.dtype == DType.bool else x != 0


# --- arithmetic ----------------------------------------------------------------------------

@op("add.Tensor", "add.Scalar")
def add(self, other, alpha=1):
    return self + (other * alpha if alpha != 1 else other)


@op("sub.Tensor", "sub.Scalar")
def sub(self, other, alpha=1):
    return self - (other * alpha if alpha != 1 else other)


@op("rsub.Scalar", "rsub.Tensor")
def rsub(self, other, alpha=1):
    return other - (self * alpha if alpha != 1 else self)


@op("mul.Tensor", "mul.Scalar")
def mul(self, other):
    return self * other


@op("div.Tensor", "div.Scalar")
def div(self, other):
    return self / other


@op("div.Tensor_mode", "div.Scalar_mode")
def div_mode(self, other, rounding_mode=None):
    if rounding_mode is not None:
        raise Unsupported(f"division with rounding_mode={rounding_mode!r} (no floor/trunc op)")
    return self / other


@op("pow.Tensor_Scalar", "pow.Tensor_Tensor")
def pow_(self, exponent):
    return self ** exponent


@op("pow.Scalar")
def pow_scalar(self, exponent):
    return exponent.__rpow__(self)   # `self` is the scalar base here


@op("remainder.Tensor", "remainder.Scalar")
def remainder(self, other):
    return self % other


@op("fmod.Tensor", "fmod.Scalar")
def fmod(self, other):
    return self.fmod(other)


@op("atan2.default")
def atan2(self, other):
    return self.atan2(other)


@op("logaddexp.default")
def logaddexp(self, other):
    return self.logaddexp(other)


@op("xlogy.Tensor", "xlogy.Scalar_Other")
def xlogy(self, other):
    return self.xlogy(other)


@op("lerp.Scalar", "lerp.Tensor")
def lerp(self, end, weight):
    return self.lerp(end, weight)


@op("hypot.default")
def hypot(self, other):
    return self.hypot(other)


@op("nan_to_num.default")
def nan_to_num(self, nan=None, posinf=None, neginf=None):
    return self.nan_to_num(0.0 if nan is None else nan, posinf, neginf)


@op("maximum.default")
def maximum(self, other):
    return self.maximum(other)


@op("minimum.default")
def minimum(self, other):
    return self.minimum(other)


@op("clamp.default", "clamp.Tensor")
def clamp(self, min=None, max=None):  # noqa: A002 - ATen's argument names
    return self.clamp(min, max)


@op("clamp_min.default", "clamp_min.Tensor")
def clamp_min(self, min):  # noqa: A002
    return self.clamp(min, None)


@op("clamp_max.default", "clamp_max.Tensor")
def clamp_max(self, max):  # noqa: A002
    return self.clamp(None, max)


@op("hardtanh.default")
def hardtanh(self, min_val=-1.0, max_val=1.0):
    return self.clamp(min_val, max_val)


def _unary(name: str, method: str):
    OPS["aten." + name] = lambda self: getattr(self, method)()


for _name, _method in [("neg", "__neg__"), ("abs", "abs"), ("exp", "exp"), ("exp2", "exp2"), ("log", "log"),
                       ("log2", "log2"), ("sqrt", "sqrt"), ("rsqrt", "rsqrt"), ("sin", "sin"), ("cos", "cos"),
                       ("tanh", "tanh"), ("sigmoid", "sigmoid"), ("relu", "relu"), ("silu", "silu"),
                       ("erf", "erf"), ("reciprocal", "reciprocal"), ("isnan", "isnan"), ("isinf", "isinf"),
                       ("expm1", "expm1"), ("log1p", "log1p"), ("sign", "sign"), ("tan", "tan"),
                       ("atan", "atan"), ("sinh", "sinh"), ("cosh", "cosh"), ("asinh", "asinh"), ("atanh", "atanh"),
                       ("log10", "log10"), ("asin", "asin"), ("acos", "acos"), ("acosh", "acosh"),
                       ("lgamma", "lgamma"), ("digamma", "digamma")]:
    _unary(_name + ".default", _method)


@op("_prelu_kernel.default")
def prelu(self, weight):
    return (self > 0).where(self, weight * self)


@op("gelu.default")
def gelu(self, approximate="none"):
    return self.gelu(approximate)


# --- comparisons, logic, selection ---------------------------------------------------------

for _name, _method in [("eq", "__eq__"), ("ne", "__ne__"), ("lt", "__lt__"), ("le", "__le__"),
                       ("gt", "__gt__"), ("ge", "__ge__")]:
    OPS[f"aten.{_name}.Tensor"] = OPS[f"aten.{_name}.Scalar"] = \
        (lambda m: lambda self, other: getattr(self, m)(other))(_method)


@op("logical_not.default")
def logical_not(self):
    return _as_bool(self).logical_not()


@op("bitwise_not.default")
def bitwise_not(self):
    _bools("bitwise_not", self)
    return self.logical_not()


@op("logical_and.default")
def logical_and(self, other):
    return _as_bool(self).logical_and(_as_bool(other))


@op("logical_or.default")
def logical_or(self, other):
    return _as_bool(self).logical_or(_as_bool(other))


@op("logical_xor.default")
def logical_xor(self, other):
    return _as_bool(self).logical_xor(_as_bool(other))


def _bools(op_name: str, *xs):
    if any(isinstance(x, Tensor) and x.dtype != DType.bool for x in xs):
        raise Unsupported(f"{op_name} of integer tensors (bitwise ops exist for bool only)")


@op("bitwise_and.Tensor", "bitwise_and.Scalar")
def bitwise_and(self, other):
    _bools("bitwise_and", self, other)
    return self.logical_and(other)


@op("bitwise_or.Tensor", "bitwise_or.Scalar")
def bitwise_or(self, other):
    _bools("bitwise_or", self, other)
    return self.logical_or(other)


@op("bitwise_xor.Tensor", "bitwise_xor.Scalar")
def bitwise_xor(self, other):
    _bools("bitwise_xor", self, other)
    return self.logical_xor(other)


@op("where.self", "where.ScalarSelf", "where.ScalarOther", "where.Scalar")
def where(condition, self, other):
    return _as_bool(condition).where(self, other)


@op("masked_fill.Scalar", "masked_fill.Tensor")
def masked_fill(self, mask, value):
    return _as_bool(mask).where(value, self).astype(self.dtype)


# --- casts and copies ----------------------------------------------------------------------

@op("_to_copy.default")
def to_copy(self, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False, memory_format=None):
    return _cast(self, dtype)


@op("clone.default", "alias.default", "lift_fresh_copy.default", "detach.default")
def identity(self, memory_format=None):
    return self


@op("copy.default")
def copy(self, src, non_blocking=False):
    return src.astype(self.dtype).expand(self.shape)


# --- movement ------------------------------------------------------------------------------

@op("view.default", "_unsafe_view.default", "reshape.default")
def view(self, size):
    return self.reshape(tuple(size))


@op("t.default")
def t(self):
    return self.transpose(0, 1) if self.ndim == 2 else self


@op("transpose.int")
def transpose(self, dim0, dim1):
    return self.transpose(dim0, dim1) if self.ndim else self


@op("permute.default")
def permute(self, dims):
    return self.permute(tuple(dims))


@op("expand.default")
def expand(self, size, implicit=False):
    return self.expand(tuple(size))


@op("unsqueeze.default")
def unsqueeze(self, dim):
    return self.unsqueeze(dim)


@op("squeeze.dim", "squeeze.dims", "squeeze.default")
def squeeze(self, dim=None):
    if self.ndim == 0:
        return self
    return self.squeeze(tuple(dim) if isinstance(dim, (list, tuple)) else dim)


@op("slice.Tensor")
def slice_(self, dim=0, start=None, end=None, step=1):
    return self.slice(dim, start, end, step)


@op("select.int")
def select(self, dim, index):
    idx = [slice(None)] * self.ndim
    idx[dim] = index
    return self[tuple(idx)]


@op("cat.default")
def cat_(tensors, dim=0):
    # torch skips 1-d empty tensors in cat whatever their shape; keep every piece that has elements
    pieces = [x for x in tensors if not (x.ndim == 1 and x.shape[0] == 0)] or list(tensors)
    pieces = [x for x in pieces if x.numel > 0] or pieces[:1]
    return cat(pieces, dim) if len(pieces) > 1 else pieces[0]


@op("stack.default")
def stack(tensors, dim=0):
    axis = dim % (tensors[0].ndim + 1)
    return cat([x.unsqueeze(axis) for x in tensors], axis)


@op("split.Tensor")
def split(self, split_size, dim=0):
    n = self.shape[dim]
    return tuple(self.slice(dim, i, min(i + split_size, n)) for i in range(0, n, split_size)) or (self,)


@op("split_with_sizes.default")
def split_with_sizes(self, split_sizes, dim=0):
    out, start = [], 0
    for s in split_sizes:
        out.append(self.slice(dim, start, start + s))
        start += s
    return tuple(out)


@op("unbind.int")
def unbind(self, dim=0):
    return tuple(select(self, dim, i) for i in range(self.shape[dim]))


@op("constant_pad_nd.default")
def constant_pad_nd(self, pad, value=0):
    # torch's pad list starts at the last axis: (last_before, last_after, second_last_before, ...)
    pairs = [(0, 0)] * self.ndim
    for i in range(len(pad) // 2):
        pairs[self.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    crop = [slice(-b if b < 0 else 0, (self.shape[k] + a) if a < 0 else None) for k, (b, a) in enumerate(pairs)]
    x = self[tuple(crop)]
    return x.pad([(max(b, 0), max(a, 0)) for b, a in pairs], value)


@op("slice_scatter.default")
def slice_scatter(self, src, dim=0, start=None, end=None, step=1):
    """`self` with self[start:end] along `dim` replaced by `src` (how circular padding arrives)."""
    if step != 1:
        raise Unsupported(f"slice_scatter with step {step}")
    n = self.shape[dim]
    lo = 0 if start is None else min(max(start + n if start < 0 else start, 0), n)
    hi = n if end is None else min(max(end + n if end < 0 else end, lo), n)
    pieces = [self.slice(dim, 0, lo), src.astype(self.dtype), self.slice(dim, hi, n)]
    return cat_([p for p in pieces if p.shape[dim]] or [src.astype(self.dtype)], dim)


@op("repeat.default")
def repeat(self, repeats):
    repeats = tuple(repeats)
    x = self.reshape((1,) * (len(repeats) - self.ndim) + self.shape)
    # (r0, s0, r1, s1, ...) broadcast, then merged pairwise
    inter = tuple(v for s in x.shape for v in (1, s))
    big = tuple(v for r, s in zip(repeats, x.shape) for v in (r, s))
    return x.reshape(inter).expand(big).reshape(tuple(r * s for r, s in zip(repeats, x.shape)))


# --- constants -----------------------------------------------------------------------------

def _fill_dtype(fill_value, dtype):
    if dtype is not None:
        return as_dtype(dtype)
    if isinstance(fill_value, bool):
        return DType.bool
    if isinstance(fill_value, float):
        return DType.f32
    raise Unsupported("an integer fill without a dtype is int64 in torch")


@op("full.default")
def full(size, fill_value, dtype=None, layout=None, device=None, pin_memory=None):
    return Tensor.full(tuple(size), fill_value, _fill_dtype(fill_value, dtype))


@op("scalar_tensor.default")
def scalar_tensor(s, dtype=None, layout=None, device=None, pin_memory=None):
    return Tensor.full((), s, as_dtype(dtype) if dtype is not None else DType.f32)


@op("zeros.default")
def zeros(size, dtype=None, layout=None, device=None, pin_memory=None):
    return Tensor.full(tuple(size), 0, as_dtype(dtype) if dtype is not None else DType.f32)


@op("ones.default")
def ones(size, dtype=None, layout=None, device=None, pin_memory=None):
    return Tensor.full(tuple(size), 1, as_dtype(dtype) if dtype is not None else DType.f32)


@op("new_empty.default")
def new_empty(self, size, dtype=None, layout=None, device=None, pin_memory=None):
    """Uninitialized in PyTorch (every element is written before it is read): zeros here."""
    return new_full(self, size, 0, dtype)


@op("full_like.default")
def full_like(self, fill_value, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return Tensor.full(self.shape, fill_value, as_dtype(dtype) if dtype is not None else self.dtype)


@op("new_full.default")
def new_full(self, size, fill_value, dtype=None, layout=None, device=None, pin_memory=None):
    return Tensor.full(tuple(size), fill_value, as_dtype(dtype) if dtype is not None else self.dtype)


@op("new_zeros.default")
def new_zeros(self, size, dtype=None, layout=None, device=None, pin_memory=None):
    return new_full(self, size, 0, dtype)


@op("new_ones.default")
def new_ones(self, size, dtype=None, layout=None, device=None, pin_memory=None):
    return new_full(self, size, 1, dtype)


@op("zeros_like.default")
def zeros_like(self, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return full_like(self, 0, dtype)


@op("ones_like.default")
def ones_like(self, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return full_like(self, 1, dtype)


# --- reductions ----------------------------------------------------------------------------

@op("sum.dim_IntList", "sum.default")
def sum_(self, dim=None, keepdim=False, dtype=None):
    return _cast(self, dtype).sum(_dims(dim, self.ndim), keepdim)


@op("mean.dim", "mean.default")
def mean(self, dim=None, keepdim=False, dtype=None):
    return _cast(self, dtype).mean(_dims(dim, self.ndim), keepdim)


@op("amax.default", "max.default")
def amax(self, dim=None, keepdim=False):
    return self.max(_dims(dim, self.ndim), keepdim)


@op("amin.default", "min.default")
def amin(self, dim=None, keepdim=False):
    return self.min(_dims(dim, self.ndim), keepdim)


@op("any.default", "any.dim", "any.dims")
def any_(self, dim=None, keepdim=False):
    return _as_bool(self).max(_dims(dim, self.ndim), keepdim)


@op("all.default", "all.dim", "all.dims")
def all_(self, dim=None, keepdim=False):
    return _as_bool(self).min(_dims(dim, self.ndim), keepdim)


def _correction(correction, unbiased=True) -> int:
    return (1 if unbiased else 0) if correction is None else correction


@op("var.correction")
def var(self, dim=None, correction=None, keepdim=False):
    return self.var(_dims(dim, self.ndim), keepdim, _correction(correction))


@op("var_mean.correction")
def var_mean(self, dim=None, correction=None, keepdim=False):
    axes = _dims(dim, self.ndim)
    return self.var(axes, keepdim, _correction(correction)), self.mean(axes, keepdim)


@op("logsumexp.default")
def logsumexp(self, dim, keepdim=False):
    axes = _dims(dim, self.ndim)
    x = self._float()
    m = x.max(axes, keepdim=True)
    m = m.isinf().where(0.0, m)     # all -inf (or an inf) rows: no shift, like torch
    out = (x - m).exp().sum(axes, keepdim=True).log() + m
    return out if keepdim else out.squeeze(axes)


@op("_softmax.default")
def softmax(self, dim, half_to_float=False):
    out = self.softmax(dim)
    return out.astype(DType.f32) if half_to_float else out


@op("_log_softmax.default")
def log_softmax(self, dim, half_to_float=False):
    out = self.log_softmax(dim)
    return out.astype(DType.f32) if half_to_float else out


@op("native_layer_norm.default")
def native_layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):  # noqa: A002
    shape = tuple(normalized_shape)
    out = input.layer_norm(shape, weight, bias, eps)
    axes = tuple(range(input.ndim - len(shape), input.ndim))
    x = input._float()
    mean_ = x.mean(axes, keepdim=True)
    rstd = (x.var(axes, keepdim=True, correction=0) + eps).rsqrt()
    return out, mean_, rstd


@op("rms_norm.default")
def rms_norm(input, normalized_shape, weight=None, eps=None):  # noqa: A002
    if eps is None:
        eps = {DType.f16: 2.0 ** -10, DType.bf16: 2.0 ** -7}.get(input.dtype, 2.0 ** -23)  # finfo(dtype).eps
    return input.rms_norm(tuple(normalized_shape), weight, eps)


@op("_fused_rms_norm.default")
def fused_rms_norm(input, normalized_shape, weight=None, eps=None):  # noqa: A002
    out = rms_norm(input, normalized_shape, weight, eps)
    axes = tuple(range(input.ndim - len(normalized_shape), input.ndim))
    eps = 2.0 ** -23 if eps is None else eps
    x = input._float()
    return out, ((x * x).mean(axes, keepdim=True) + eps).rsqrt()


# --- products ------------------------------------------------------------------------------

@op("mm.default", "bmm.default", "matmul.default", "mv.default")
def mm(self, mat2):
    return self @ mat2


@op("dot.default")
def dot(self, tensor):
    return (self * tensor).sum()


def _scaled_sum(bias, product, beta, alpha):
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        return product
    return product + (bias * beta if beta != 1 else bias)


@op("addmm.default", "baddbmm.default", "addmv.default")
def addmm(self, mat1, mat2, beta=1, alpha=1):
    return _scaled_sum(self, mat1 @ mat2, beta, alpha)


# --- positions and indexing (int64 values stay in PyTorch: Saturn has no 64-bit integers) ----

@op("arange.default", "arange.start", "arange.start_step")
def arange(start, end=None, step=1, dtype=None, layout=None, device=None, pin_memory=None):
    from compiler.creation import arange as saturn_arange
    return saturn_arange(start, end, step, dtype)


@op("argmax.default")
def argmax(self, dim=None, keepdim=False):
    return self.argmax(dim, keepdim)


@op("argmin.default")
def argmin(self, dim=None, keepdim=False):
    return self.argmin(dim, keepdim)


@op("searchsorted.Tensor")
def searchsorted(sorted_sequence, self, out_int32=False, right=False, side=None, sorter=None):
    if sorter is not None:
        raise Unsupported("searchsorted with a sorter")
    return sorted_sequence.searchsorted(self, right, side)


@op("bucketize.Tensor")
def bucketize(self, boundaries, out_int32=False, right=False):
    return self.bucketize(boundaries, right)


# sort, argsort and topk are O(n^2) compositions in Saturn (tensor_index.py): past this length
# of the sorted axis PyTorch sorts (a 50257-token vocabulary would be 2.5e9 comparisons a row)
SORT_MAX = 1024


def _sortable(x, dim, op_name: str) -> None:
    n = x.shape[dim] if x.ndim else 1
    if n > SORT_MAX:
        raise Unsupported(f"{op_name} of {n} elements along dim {dim} (Saturn's sort is O(n^2); "
                          f"it takes at most {SORT_MAX})")


@op("sort.default")
def sort(self, dim=-1, descending=False):
    _sortable(self, dim, "sort")
    return self.sort(dim, descending)


@op("sort.stable")
def sort_stable(self, *, stable=None, dim=-1, descending=False):
    _sortable(self, dim, "sort")
    return self.sort(dim, descending)


@op("argsort.default", "argsort.stable")
def argsort(self, dim=-1, descending=False, stable=False):
    _sortable(self, dim, "argsort")
    return self.argsort(dim, descending)


@op("topk.default")
def topk(self, k, dim=-1, largest=True, sorted=True):  # noqa: A002 - ATen's argument name
    _sortable(self, dim, "topk")
    return self.topk(k, dim, largest, sorted)


@op("cumsum.default")
def cumsum(self, dim, dtype=None):
    return self.cumsum(dim, dtype)


@op("logcumsumexp.default")
def logcumsumexp(self, dim):
    return self.logcumsumexp(dim)


@op("kthvalue.default")
def kthvalue(self, k, dim=-1, keepdim=False):
    return self.kthvalue(k, dim, keepdim)


@op("median.default")
def median_all(self):
    return self.median()


@op("median.dim")
def median_dim(self, dim, keepdim=False):
    return self.median(dim, keepdim)


@op("gather.default")
def gather(self, dim, index, sparse_grad=False):
    return self.gather(dim, index)


@op("scatter.src")
def scatter_src(self, dim, index, src):
    return self.scatter(dim, index, src)


@op("scatter.value")
def scatter_value(self, dim, index, value):
    return self.scatter(dim, index, value=value)


@op("scatter_add.default")
def scatter_add(self, dim, index, src):
    return self.scatter_add(dim, index, src)


@op("index_select.default")
def index_select(self, dim, index):
    return self.index_select(dim, index)


@op("embedding.default")
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    from compiler.functional import embedding as saturn_embedding
    return saturn_embedding(indices, weight)


@op("index.Tensor")
def index(self, indices):
    return self[tuple(slice(None) if i is None else i for i in indices)]
