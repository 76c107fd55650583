"""Library products on the CPU: a kernel that is a plain (batched) matrix product runs as
`numpy.matmul` (the BLAS numpy links: OpenBLAS in numpy's wheels) on views of the program's
buffers, when its schedule says `library="blas"`.

A kernel qualifies when its only Let is `sum[r](mul(A, B))` over the whole output, A and B are
loads without padding masks (optionally one of them times a constant: the scale), their indices
are strided in the loop variables (a variable may also appear split by one divisor, `v // d`
and `v % d`, as a head merge does; it becomes two axes of the view), and the store index is
strided too. The output's last axis j is read by B only; the run of axes before it read by A
only forms M; the remaining axes are batch axes (stride 0 in an operand that does not read
them). Everything else about the kernel stays as generated code:

- an epilogue (bias, activation, residual, the scale) becomes its own elementwise kernel
  (`split_epilogues`) reading the product back: in place in the output buffer when that has
  the product's dtype, else through a new temporary of the product's dtype;
- f16/bf16 operands are converted to f32 (copies), multiplied in f32 and rounded to the
  output dtype once (the IR rounds each product to the half type; the library does not, which
  is more accurate and within the verification tolerance);
- an operand whose strides numpy's BLAS dispatch cannot take (no unit stride in the matrix, a
  split variable that does not merge) is copied to a contiguous array first; an output view it
  cannot write goes through a temporary and one copy.

Threads: numpy's BLAS runs its own thread pool (OPENBLAS_NUM_THREADS, default all cores) inside
the call, on the calling thread; Saturn's pool is idle meanwhile (kernels run in order), so the
two never compete. The schedule's thread count applies to the generated kernels.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ir.dtypes import HALVES, DType
from ir.kernel import (Buffer, Compute, Const, Div, Kernel, KernelProgram, Let, Lin, Load, Mod, Reduce, Ref,
                       Schedule, Store, Value, Var, map_leaves, value_vars, walk)
from ir.ops import Op

LIBRARY = "blas"


@functools.cache
def library_name() -> str:
    """Which BLAS numpy calls (shown in explain())."""
    try:
        cfg = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return f"{cfg.get('name', 'blas')} {cfg.get('version', '')}".strip()
    except Exception:   # older numpy: no dict mode
        return "numpy's BLAS"


@dataclass(frozen=True)
class View:
    """A strided view of a flat buffer: `shape`/`strides` (elements) over `offset`, reshaped to
    `matrix` (batch..., rows, cols); `copy` when numpy's BLAS dispatch needs a contiguous copy."""
    buffer: str
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    matrix: tuple[int, ...]
    copy: bool

    def describe(self) -> str:
        return (f"{self.buffer}[{self.offset}:] shape {list(self.shape)} strides {list(self.strides)} -> "
                f"{list(self.matrix)}" + (" (copied)" if self.copy else ""))


@dataclass(frozen=True)
class BlasProduct:
    """How one kernel runs as numpy.matmul(a, b, out=out)."""
    kernel: str
    a: View
    b: View
    out: View              # `copy` here: compute into a temporary, then copy into the view
    dtypes: tuple[DType, DType, DType]   # of a's, b's and out's buffers (halves: converted)

    @property
    def buffers(self) -> list[str]:
        return sorted({self.a.buffer, self.b.buffer, self.out.buffer})

    def describe(self) -> str:
        via = "" if set(self.dtypes) == {DType.f32} else \
            f" ({'/'.join(d.value for d in self.dtypes)} converted to f32 and back, f32 accumulation)"
        return (f"{self.kernel}: numpy.matmul ({library_name()}){via}: a = {self.a.describe()}; "
                f"b = {self.b.describe()}; out = {self.out.describe()}")


# --- matching --------------------------------------------------------------------------------

def _operand(x: Value, dt: DType) -> tuple[Load, float] | None:
    """(load, scale) when x is a plain load, a half load cast to f32, or an f32 load times a
    constant."""
    if isinstance(x, Load):
        return (x, 1.0) if x.dtype == dt and not x.valid else None
    if isinstance(x, Compute) and x.op == Op.CAST and dt == DType.f32:
        src = x.srcs[0]
        if isinstance(src, Load) and src.dtype in HALVES and not src.valid:
            return src, 1.0
    if isinstance(x, Compute) and x.op == Op.MUL and x.dtype == DType.f32 == dt:
        p, q = x.srcs
        if isinstance(p, Const):
            p, q = q, p
        if isinstance(q, Const) and isinstance(p, Load) and p.dtype == dt and not p.valid:
            return p, float(q.value)
    return None


def _digits(index: Lin, variables) -> dict[Var, list[tuple[int, int]]] | None:
    """Each variable's (extent, stride) digits in a strided index: [(extent, coeff)], or two
    digits (extent // d, .), (d, .) when it appears as v // d and v % d; None if not strided."""
    plain: dict[Var, int] = {}
    split: dict[Var, dict] = {}
    for atom, c in index.terms:
        if isinstance(atom, Var):
            plain[atom] = plain.get(atom, 0) + c
            continue
        arg = atom.arg
        if not (len(arg.terms) == 1 and arg.const == 0 and isinstance(arg.terms[0][0], Var) and arg.terms[0][1] == 1):
            return None
        v = arg.terms[0][0]
        s = split.setdefault(v, {"d": atom.divisor, "div": 0, "mod": 0})
        if s["d"] != atom.divisor or v.extent % atom.divisor:
            return None
        s["div" if isinstance(atom, Div) else "mod"] += c
    out = {}
    for v in variables:
        c0 = plain.get(v, 0)
        if v in split:
            s = split[v]
            d = s["d"]
            out[v] = [(v.extent // d, c0 * d + s["div"]), (d, c0 + s["mod"])]
        else:
            out[v] = [(v.extent, c0)]
    if set(plain) - set(variables) or set(split) - set(variables):
        return None
    if any(st < 0 for ds in out.values() for _, st in ds):
        return None
    return out


def _blasable(rows: int, cols: int, s0: int, s1: int, c_only: bool) -> bool:
    """numpy's test for handing a matrix to BLAS: a unit stride, C order (or Fortran order for
    an operand)."""
    return (s1 == 1 and s0 >= cols) or (not c_only and s0 == 1 and s1 >= rows)


def _view(buffer: Buffer, load_index: Lin, groups: list[list[Var]], c_only: bool = False) -> View | None:
    """The view of `buffer` through `load_index`, one matrix axis per group of variables."""
    order = [v for g in groups for v in g]
    digits = _digits(load_index, order)
    if digits is None:
        return None
    shape, strides = [], []
    for v in order:
        for n, s in digits[v]:
            shape.append(n)
            strides.append(s if n > 1 else 0)
    lo = load_index.const
    hi = lo + sum(s * (n - 1) for n, s in zip(shape, strides) if n > 0)
    if lo < 0 or (math.prod(shape) and hi >= buffer.size):
        return None
    matrix = tuple(math.prod(v.extent for v in g) for g in groups)
    probe = np.lib.stride_tricks.as_strided(np.empty(1, np.float32), tuple(shape), tuple(4 * s for s in strides))
    try:
        m = np.reshape(probe, matrix, copy=False)
    except ValueError:   # the digits do not merge into the matrix axes without a copy
        return View(buffer.name, lo, tuple(shape), tuple(strides), matrix, True)
    rows, cols = matrix[-2], matrix[-1]
    s0, s1 = (m.strides[-2] // 4 if rows > 1 else cols), (m.strides[-1] // 4 if cols > 1 else 1)
    return View(buffer.name, lo, tuple(shape), tuple(strides), matrix, not _blasable(rows, cols, s0, s1, c_only))


@dataclass(frozen=True)
class _Operands:
    a: View
    b: View
    groups: list            # the output's matrix axes: batch axes..., M axes, [j]
    scale: float            # the constant the operands were multiplied by


def _operands(kernel: Kernel, program: KernelProgram) -> _Operands | None:
    """The operand views of a product kernel (its epilogue not looked at), else None."""
    if not kernel.axes or len(kernel.lets) != 1 or len(kernel.stores) != 1:
        return None
    let, store = kernel.lets[0], kernel.stores[0]
    red = let.value if isinstance(let, Let) else None
    if not (isinstance(red, Reduce) and red.contraction and len(red.vars) == 1 and let.depth == len(kernel.axes)):
        return None
    dt = red.dtype
    if dt not in (DType.f32, DType.f16, DType.bf16) or any(isinstance(x, Reduce) for x in walk(store.value)):
        return None
    body = red.body
    if not (isinstance(body, Compute) and body.op == Op.MUL and body.dtype == dt):
        return None
    ops = [_operand(s, dt) for s in body.srcs]
    if None in ops:
        return None
    (x, sx), (y, sy) = ops
    r, j = red.vars[0], kernel.axes[-1]
    xv, yv = value_vars(x), value_vars(y)
    if j in xv and j not in yv:
        x, y, xv, yv = y, x, yv, xv
    if j not in yv or j in xv or r not in xv or r not in yv:
        return None
    m_axes = []
    for v in reversed(kernel.axes[:-1]):
        if v in xv and v not in yv:
            m_axes.insert(0, v)
        else:
            break
    bgroups = [[v] for v in kernel.axes[:len(kernel.axes) - 1 - len(m_axes)]]
    a = _view(program.buffer(x.buffer), x.index, bgroups + [m_axes, [r]])
    b = _view(program.buffer(y.buffer), y.index, bgroups + [[r], [j]])
    if a is None or b is None:
        return None
    return _Operands(a, b, bgroups + [m_axes, [j]], sx * sy)


def library_call(kernel: Kernel, program: KernelProgram) -> BlasProduct | None:
    """The library call that is the whole kernel: a product stored bare (no epilogue, no
    scale) in a buffer of its dtype; else None (split_epilogues makes such kernels)."""
    ops = _operands(kernel, program)
    if ops is None or ops.scale != 1.0:
        return None
    let, store = kernel.lets[0], kernel.stores[0]
    dt = let.value.dtype
    buf = program.buffer(store.buffer)
    acc = Ref(let.name, dt)
    rounded = Compute(Op.CAST, buf.dtype, (acc,))    # an f32 product rounded once to a half output
    if not ((store.value == acc and buf.dtype == dt) or (dt == DType.f32 and buf.dtype in HALVES
                                                         and store.value == rounded)):
        return None
    out = _view(buf, store.index, ops.groups, c_only=True)
    dtypes = (program.buffer(ops.a.buffer).dtype, program.buffer(ops.b.buffer).dtype, buf.dtype)
    return None if out is None else BlasProduct(kernel.name, ops.a, ops.b, out, dtypes)


# --- the program under a library schedule ------------------------------------------------------

def split_epilogues(program: KernelProgram, schedule: Schedule) -> tuple[KernelProgram, dict[str, BlasProduct]]:
    """The program with every library-scheduled product kernel storing its bare product (its
    epilogue and scale moved into a new elementwise kernel right after it), and the library
    call of each such kernel. Idempotent: a split program splits no further."""
    kernels, buffers, calls = [], list(program.buffers), {}
    for k in program.kernels:
        if schedule.for_kernel(k.name).library != LIBRARY or any(v.extent == 0 for v in k.axes):
            kernels.append(k)
            continue
        call = library_call(k, program)
        if call is not None:
            kernels.append(k)
            calls[k.name] = call
            continue
        ops = _operands(k, program)
        if ops is None:
            kernels.append(k)
            continue
        let, store = k.lets[0], k.stores[0]
        red = let.value
        acc = Ref(let.name, red.dtype)
        bare = Reduce(Op.SUM, red.dtype, red.vars,
                      Compute(Op.MUL, red.dtype, tuple(_unscaled(s) for s in red.body.srcs)), red.contraction)
        target, index, extra = store.buffer, store.index, []
        if program.buffer(store.buffer).dtype != red.dtype:   # a temporary of the product's dtype
            target = f"{k.name}_product"
            extra = [Buffer(target, red.dtype, k.numel, "temp")]
            index, stride = Lin(), 1
            for v in reversed(k.axes):
                index, stride = index + Lin(((v, stride),)), stride * v.extent
        head = Kernel(k.name, k.axes, (Let(let.name, let.depth, bare),), (Store(target, index, acc),))
        trial = KernelProgram(tuple(buffers + extra), (), program.inputs, program.outputs, program.output_shapes)
        call = library_call(head, trial)
        if call is None:            # the output view is not strided: keep the generated kernel
            kernels.append(k)
            continue
        read = Load(target, red.dtype, index)
        if ops.scale != 1.0:
            read = Compute(Op.MUL, red.dtype, (read, Const(ops.scale, red.dtype)))
        epilogue = map_leaves(store.value, lambda e: read if e == acc else e)
        buffers += extra
        kernels += [head, Kernel(f"{k.name}_epilogue", k.axes, (), (Store(store.buffer, store.index, epilogue),))]
        calls[k.name] = call
    out = KernelProgram(tuple(buffers), tuple(kernels), program.inputs, program.outputs, program.output_shapes)
    return out, calls


def _unscaled(x: Value) -> Value:
    if isinstance(x, Compute) and x.op == Op.MUL:    # load * const (what _operand accepts): the load
        return next(s for s in x.srcs if isinstance(s, Load))
    return x


# --- running ---------------------------------------------------------------------------------

def _strided(arr: np.ndarray, v: View) -> np.ndarray:
    """The view of flat array `arr` described by v (before the matrix reshape)."""
    base = arr if arr.dtype in (np.float32, np.float16) else arr.view(np.uint16)   # bf16: no buffer export
    size = base.itemsize
    out = np.ndarray(v.shape, base.dtype, buffer=base, offset=v.offset * size,
                     strides=tuple(s * size for s in v.strides))
    return out if base is arr else out.view(arr.dtype)


class BlasLaunch:
    """A product kernel run by numpy.matmul on the calling thread (the library threads itself)."""

    def __init__(self, kernel: Kernel, call: BlasProduct):
        self.kernel, self.call = kernel, call
        self.buffers = call.buffers
        self.half_out = call.dtypes[2] != DType.f32

    @staticmethod
    def _operand(env, v: View) -> np.ndarray:
        x = _strided(env[v.buffer], v).reshape(v.matrix)
        if x.dtype != np.float32:
            return x.astype(np.float32)
        return np.ascontiguousarray(x) if v.copy else x

    def run(self, env) -> None:
        c = self.call
        a, b = self._operand(env, c.a), self._operand(env, c.b)
        target = _strided(env[c.out.buffer], c.out)
        if self.half_out or c.out.copy:    # (assignment rounds to nearest even, as a cast does)
            target[...] = np.matmul(a, b).reshape(c.out.shape)
        else:
            np.matmul(a, b, out=np.reshape(target, c.out.matrix, copy=False))
