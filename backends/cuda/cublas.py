"""cuBLAS products on CUDA: a plan step that is a plain matrix product runs as one
cublasGemmStridedBatchedEx call (per outer batch index, when the batch axes do not merge into
one stride) through ctypes, on the executable's stream, when the schedule says gemm="cublas".

A step qualifies when it is a gemm step whose output is the product itself, or the product
through pure reshapes, float casts (the C type: the call rounds the f32 sum once) and one
multiplication by a scalar constant (alpha); both operands resolve to strided reads of buffers
of one dtype (f16, bf16 or f32; backends/cuda/resolve.py, lossless up-casts peeled) with a unit
stride in the matrix. Compute type: f32 accumulation (CUBLAS_COMPUTE_32F, no TF32 for f32
operands unless the schedule's allow_tf32).

Row-major through the transpose identity: C = A B row-major is C^T = B^T A^T column-major,
so cuBLAS is called with (m, n, k) = (N, M, K), its "A" our B and its "B" our A; each operand's
transpose flag follows from which of its strides is 1 (`gemm_args`, checked on the host by
`emulate`).

The library is looked for (`find_library`): $SATURN_CUBLAS, the nvidia-cublas wheel's copy
(site-packages/nvidia/cublas/lib or nvidia/cu13/lib), torch's bundled copy, $CUDA_HOME/lib64,
/usr/local/cuda/lib64, then the loader's search path. Not found: the schedule is not offered,
and the reason is a comment at the top of the generated source (explain()).
"""
from __future__ import annotations

import ctypes
import glob
import math
import os
import sys
from dataclasses import dataclass

from ir.dtypes import DType, HALVES
from ir.node import Node
from ir.ops import Op

OP_N, OP_T = 0, 1
CUDA_TYPE = {DType.f32: 0, DType.f16: 2, DType.bf16: 14}      # cudaDataType_t
COMPUTE_32F, COMPUTE_32F_FAST_TF32 = 68, 77                    # cublasComputeType_t
GEMM_DEFAULT = -1
INT_MAX = 2 ** 31 - 1


# --- finding and loading the library ---------------------------------------------------------

def _candidates() -> list[str]:
    out = []
    env = os.environ.get("SATURN_CUBLAS")
    if env:
        out.append(env)
    for site in sys.path:
        for sub in ("nvidia/cublas/lib", "nvidia/cu13/lib", "nvidia/cu12/lib"):
            out += sorted(glob.glob(os.path.join(site, sub, "libcublas.so*")), reverse=True)
    try:
        import importlib.util
        spec = importlib.util.find_spec("torch")
        if spec is not None and spec.submodule_search_locations:
            torch_lib = os.path.join(list(spec.submodule_search_locations)[0], "lib")
            out += sorted(glob.glob(os.path.join(torch_lib, "libcublas.so*")), reverse=True)
    except Exception:   # a broken torch install must not hide the toolkit's copy
        pass
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            out += sorted(glob.glob(os.path.join(root, "lib64", "libcublas.so*")), reverse=True)
    out.append("libcublas.so")          # the loader's own search path
    return [p for p in out if "libcublasLt" not in p]


class Library:
    """The loaded libcublas: one handle (made on first use, in the current context)."""

    def __init__(self, path: str, lib):
        self.path, self.lib, self._handle = path, lib, None
        f = lib.cublasGemmStridedBatchedEx
        f.restype = ctypes.c_int
        ll, i, p = ctypes.c_longlong, ctypes.c_int, ctypes.c_void_p
        f.argtypes = [p, i, i, i, i, i, p, p, i, i, ll, p, i, i, ll, p, p, i, i, ll, i, i, i]
        lib.cublasCreate_v2.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        lib.cublasSetStream_v2.argtypes = [p, p]

    def handle(self):
        if self._handle is None:
            h = ctypes.c_void_p()
            status = self.lib.cublasCreate_v2(ctypes.byref(h))
            if status != 0:
                raise RuntimeError(f"cublasCreate failed with status {status}")
            self._handle = h
        return self._handle


_STATE: dict = {}


def find_library() -> tuple[Library | None, str]:
    """(the library, where) or (None, why not); looked up once per process."""
    if "result" in _STATE:
        return _STATE["result"]
    tried = []
    for path in _candidates():
        try:
            d = os.path.dirname(path)
            for lt in sorted(glob.glob(os.path.join(d, "libcublasLt.so*")), reverse=True)[:1]:
                ctypes.CDLL(lt, mode=ctypes.RTLD_GLOBAL)    # its dependency, from the same place
            lib = ctypes.CDLL(path)
            _STATE["result"] = (Library(path, lib), path)
            return _STATE["result"]
        except (OSError, AttributeError) as e:
            tried.append(f"{path}: {e}")
    _STATE["result"] = (None, "libcublas not found or not loadable (tried " + "; ".join(tried[-6:]) + ")")
    return _STATE["result"]


def unavailable_reason() -> str | None:
    lib, why = find_library()
    return None if lib is not None else why


# --- the call's arguments --------------------------------------------------------------------

@dataclass(frozen=True)
class GemmArgs:
    """One column-major cublasGemm call computing row-major C (M x N) = A (M x K) B (K x N)."""
    transa: int
    transb: int
    m: int
    n: int
    k: int
    lda: int          # of cuBLAS's A: our B
    ldb: int          # of cuBLAS's B: our A
    ldc: int


def gemm_args(M: int, N: int, K: int, a: tuple[int, int], b: tuple[int, int], c: tuple[int, int]) -> GemmArgs | None:
    """The call for element strides a = (A along m, A along k), b = (B along k, B along n),
    c = (C along m, C along n); None when no orientation has a unit stride. A stride along an
    axis of size 1 is free (set to what makes the call valid)."""
    # C^T is N x M column-major: its n stride must be 1, its leading dimension C's m stride
    if c[1] != 1 and N > 1:
        return None
    ldc = c[0] if M > 1 else max(N, 1)
    if ldc < max(1, N):
        return None
    # cuBLAS's A is B^T (N x K): column-major as is (n stride 1, ld = k stride), or B itself
    # column-major (k stride 1, ld = n stride) transposed
    if (b[1] == 1 or N == 1) and (b[0] >= max(1, N) or K == 1):
        transa, lda = OP_N, b[0] if K > 1 else max(N, 1)
    elif (b[0] == 1 or K == 1) and (b[1] >= max(1, K) or N == 1):
        transa, lda = OP_T, b[1] if N > 1 else max(K, 1)
    else:
        return None
    # cuBLAS's B is A^T (K x M): column-major as is (k stride 1, ld = m stride), or A itself
    # column-major (m stride 1, ld = k stride) transposed
    if (a[1] == 1 or K == 1) and (a[0] >= max(1, K) or M == 1):
        transb, ldb = OP_N, a[0] if M > 1 else max(K, 1)
    elif (a[0] == 1 or M == 1) and (a[1] >= max(1, M) or K == 1):
        transb, ldb = OP_T, a[1] if K > 1 else max(M, 1)
    else:
        return None
    if max(M, N, K, lda, ldb, ldc) > INT_MAX:
        return None
    return GemmArgs(transa, transb, N, M, K, lda, ldb, ldc)


def emulate(g: GemmArgs, A, B, alpha: float = 1.0, C=None):
    """What cuBLAS computes (column-major; A, B, C flat numpy arrays), for host tests of
    gemm_args: C[i + j*ldc] = alpha * sum_l op(A)[i, l] op(B)[l, j], i < m, j < n."""
    import numpy as np

    def col_major(x, rows, cols, ld):   # element (r, c) at r + c * ld
        return np.lib.stride_tricks.as_strided(x, (rows, cols), (x.itemsize, ld * x.itemsize))

    opa = col_major(A, g.m, g.k, g.lda) if g.transa == OP_N else col_major(A, g.k, g.m, g.lda).T
    opb = col_major(B, g.k, g.n, g.ldb) if g.transb == OP_N else col_major(B, g.n, g.k, g.ldb).T
    out = np.zeros(g.ldc * (g.n - 1) + g.m, np.float64) if C is None else C
    col_major(out, g.m, g.n, g.ldc)[...] = alpha * (opa.astype(np.float64) @ opb.astype(np.float64))
    return out


# --- matching a plan step --------------------------------------------------------------------

def _scalar(n: Node) -> float | None:
    while n.op == Op.VIEW:
        n = n.srcs[0]
    return float(n.arg) if n.op == Op.CONST and n.dtype.is_float else None


def _chain(output: Node, reduce: Node) -> float | None:
    """alpha when output is the product through pure reshapes, float casts and at most one
    multiplication by a constant; None otherwise."""
    from backends.cuda.match import is_pure_reshape
    alpha, n, scaled = 1.0, output, False
    while n is not reduce:
        if n.op == Op.VIEW and is_pure_reshape(n):
            n = n.srcs[0]
        elif n.op == Op.CAST and n.dtype.is_float:
            n = n.srcs[0]
        elif n.op == Op.MUL and not scaled and n.shape == n.srcs[0].shape == n.srcs[1].shape:
            x, y = n.srcs
            c = _scalar(y)
            if c is None:
                x, c = y, _scalar(x)
            if c is None:
                return None
            alpha, n, scaled = c, x, True
        else:
            return None
    return alpha


def _merge(axes, sizes, strides) -> tuple[int, list[int]] | None:
    """(size, stride per operand) of the axes merged into one, or None when some operand's
    strides do not nest (axes of size 1 are skipped)."""
    axes = [a for a in axes if sizes[a] > 1]
    if not axes:
        return 1, [0] * len(strides)
    for i, nxt in zip(axes, axes[1:]):
        if any(s[i] != s[nxt] * sizes[nxt] for s in strides):
            return None
    return math.prod(sizes[a] for a in axes), [s[axes[-1]] for s in strides]


@dataclass(frozen=True)
class CublasCall:
    """A step run by cuBLAS: the launch's argument list is [out, inputs...] (device pointers)."""
    args: GemmArgs
    a_arg: int              # index of A's buffer in the launch's argument list
    b_arg: int
    offsets: tuple[int, int, int]                # element offsets of A, B, C
    batch: int
    batch_strides: tuple[int, int, int]          # elements, of A, B, C (0: broadcast)
    outer: tuple[tuple[int, int, int], ...]      # element offsets of each call (unmerged batch axes)
    types: tuple[DType, DType]                   # operands', output's
    alpha: float
    tf32: bool

    def describe(self) -> str:
        g = self.args
        return (f"cublasGemmStridedBatchedEx {self.types[0].value}->{self.types[1].value} "
                f"m={g.m} n={g.n} k={g.k} op={'NT'[g.transa]}{'NT'[g.transb]} lda={g.lda} ldb={g.ldb} "
                f"ldc={g.ldc} batch={self.batch}x{len(self.outer)} alpha={self.alpha:g}"
                + (" TF32" if self.tf32 else ""))

    def run(self, ptrs, stream=None) -> None:
        lib, why = find_library()
        if lib is None:
            raise RuntimeError(why)
        h = lib.handle()
        lib.lib.cublasSetStream_v2(h, ctypes.c_void_p(int(stream.handle) if stream is not None else 0))
        alpha, beta = ctypes.c_float(self.alpha), ctypes.c_float(0.0)
        g, (ta, tc) = self.args, self.types
        ia, ic = ta.itemsize, tc.itemsize
        a0, b0, c0 = (int(ptrs[self.a_arg]) + self.offsets[0] * ia, int(ptrs[self.b_arg]) + self.offsets[1] * ia,
                      int(ptrs[0]) + self.offsets[2] * ic)
        sa, sb, sc = self.batch_strides
        compute = COMPUTE_32F_FAST_TF32 if self.tf32 else COMPUTE_32F
        for oa, ob, oc in self.outer:
            # cuBLAS's A is our B, its B our A (the transpose identity)
            status = lib.lib.cublasGemmStridedBatchedEx(
                h, g.transa, g.transb, g.m, g.n, g.k, ctypes.byref(alpha),
                ctypes.c_void_p(b0 + ob * ia), CUDA_TYPE[ta], g.lda, sb,
                ctypes.c_void_p(a0 + oa * ia), CUDA_TYPE[ta], g.ldb, sa, ctypes.byref(beta),
                ctypes.c_void_p(c0 + oc * ic), CUDA_TYPE[tc], g.ldc, sc, self.batch, compute, GEMM_DEFAULT)
            if status != 0:
                raise RuntimeError(f"cublasGemmStridedBatchedEx failed with status {status} ({self.describe()})")


def emulate_call(call: CublasCall, arrays) -> None:
    """What `call.run` computes, on flat numpy arrays [output, inputs...] in the launch's
    argument order (host tests; every read and write checked against the arrays' lengths)."""
    g = call.args
    sa, sb, sc = call.batch_strides

    def part(x, start: int, rows: int, cols: int, ld: int):
        end = start + ld * (cols - 1) + rows
        if start < 0 or end > len(x):
            raise IndexError(f"cuBLAS call {call.describe()} reads or writes [{start}, {end}) of {len(x)} elements")
        return x[start:end]

    out, a, b = arrays[0], arrays[call.a_arg], arrays[call.b_arg]
    opa = (g.m, g.k) if g.transa == OP_N else (g.k, g.m)      # cuBLAS's A: our B
    opb = (g.k, g.n) if g.transb == OP_N else (g.n, g.k)      # cuBLAS's B: our A
    for oa, ob, oc in call.outer:
        for i in range(call.batch):
            cb = part(b, call.offsets[1] + ob + i * sb, *opa, g.lda)
            ca = part(a, call.offsets[0] + oa + i * sa, *opb, g.ldb)
            cc = part(out, call.offsets[2] + oc + i * sc, g.m, g.n, g.ldc)
            emulate(g, cb, ca, call.alpha, C=cc)


def plan_call(step, allow_tf32: bool = False, product_only: bool = False) -> CublasCall | None:
    """The cuBLAS call that is the whole step, or None (not a plain product, or operands
    cuBLAS cannot read as they are). `product_only`: the call that writes the step's product
    alone into its output buffer, rounded to the output's dtype, for an epilogue applied after
    it (`render._cublas_then_epilogue`, which checks the program rounds it so too)."""
    from backends.cuda.resolve import resolve
    g = step.gemm
    if step.kind != "gemm" or g is None:
        return None
    alpha = 1.0 if product_only else _chain(step.output, g.reduce)
    if alpha is None or step.output.dtype not in CUDA_TYPE:
        return None
    inputs = list(step.inputs)
    acc = [resolve(side, lambda x: x in inputs) for side in (g.a, g.b)]
    if None in acc or acc[0].dtype != acc[1].dtype or acc[0].dtype not in CUDA_TYPE:
        return None
    ta, tc = acc[0].dtype, step.output.dtype
    if ta == DType.f32 and tc in HALVES or ta in HALVES and tc not in (ta, DType.f32):
        return None                       # combinations cublasGemmEx does not take
    sizes = g.mul.shape
    return call_for(g, sizes, acc[0].strides, acc[1].strides, contiguous_c(g, sizes),
                    (1 + inputs.index(acc[0].buffer), 1 + inputs.index(acc[1].buffer)),
                    (acc[0].offset, acc[1].offset, 0), (ta, tc), alpha, allow_tf32 and ta == DType.f32)


def contiguous_c(g, sizes) -> tuple[int, ...]:
    """Element strides of a contiguous product of `sizes` (k kept with size 1) per product axis."""
    c_strides, st = [0] * len(sizes), 1
    for ax in reversed(range(len(sizes))):
        if ax != g.k_axis:
            c_strides[ax], st = st, st * sizes[ax]
    return tuple(c_strides)


def call_for(g, sizes, a_strides, b_strides, c_strides, args_at: tuple[int, int], offsets, types, alpha: float,
             tf32: bool) -> CublasCall | None:
    """The call for the product of `g`'s axes over `sizes` whose A, B and C are read and written
    with these element strides (per product axis) and offsets; None when cuBLAS cannot."""
    strides = [tuple(a_strides), tuple(b_strides), tuple(c_strides)]
    m = _merge(g.m_axes, sizes, strides)
    n = _merge(g.n_axes, sizes, strides)
    if m is None or n is None:
        return None
    M, (sam, _, scm) = m
    N, (_, sbn, scn) = n
    K, sak, sbk = sizes[g.k_axis], a_strides[g.k_axis], b_strides[g.k_axis]
    args = gemm_args(M, N, K, (sam, sak), (sbk, sbn), (scm, scn))
    if args is None:
        return None
    # batch: the longest trailing run of batch axes that merges into one stride; the rest are
    # separate calls
    batch_axes = [a for a in g.batch_axes if sizes[a] > 1]
    split = 0
    while _merge(batch_axes[split:], sizes, strides) is None:
        split += 1
    count, (sa, sb, sc) = _merge(batch_axes[split:], sizes, strides)
    outer = [(0, 0, 0)]
    for ax in batch_axes[:split]:
        outer = [(oa + i * strides[0][ax], ob + i * strides[1][ax], oc + i * strides[2][ax])
                 for oa, ob, oc in outer for i in range(sizes[ax])]
    if len(outer) > 4096:
        return None
    return CublasCall(args, args_at[0], args_at[1], tuple(offsets), count, (sa, sb, sc), tuple(outer), tuple(types),
                      alpha, tf32)


def aligned(call: CublasCall, elements: int = 8) -> bool:
    """Every leading dimension, offset and batch stride of the call, and the extents of the
    operands' contiguous dimensions, multiples of `elements` (16 bytes of a half type): what
    cuBLAS's tensor-core kernels read in full vectors (an odd f16 4095x4097x4099 product took
    PyTorch's eager 0.95 ms, the aligned 4096 cube 0.20 ms; H100)."""
    g = call.args
    dims = [g.lda, g.ldb, g.ldc, g.m, g.k, *call.offsets, *call.batch_strides]
    if g.transb == OP_T:                  # its B (our A) then runs along its n
        dims.append(g.n)
    dims += [x for o in call.outer for x in o]
    return all(d % elements == 0 for d in dims)
