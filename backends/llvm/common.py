"""What the CPU kernel renderers share: LLVM types, IR-building helpers (loops, vector splats
and lane sums, constants) and the rule for the parallel loop."""
from __future__ import annotations

from contextlib import contextmanager

from llvmlite import ir

from ir.dtypes import DType
from ir.kernel import Kernel, KernelSchedule

F32, F64, F16, I1, I8, I16, I32, I64 = (ir.FloatType(), ir.DoubleType(), ir.HalfType(), ir.IntType(1),
                                        ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64))
PTR = ir.PointerType()
STORAGE = {DType.f32: F32, DType.f16: F16, DType.bf16: I16, DType.f64: F64, DType.i32: I32, DType.i64: I64,
           DType.i8: I8, DType.u8: I8, DType.bool: I8}
COMPUTE = {DType.f32: F32, DType.f16: F32, DType.bf16: F32, DType.f64: F64, DType.i32: I32, DType.i64: I64,
           DType.i8: I8, DType.u8: I8, DType.bool: I1}
FLOAT_TYPES = (F32, F64)
FAST = ("reassoc", "nsz", "contract")


def _i64(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def splat_vector(b: ir.IRBuilder, x: ir.Value, width: int) -> ir.Value:
    """<width x float> with every lane x."""
    undef = ir.Constant(ir.VectorType(F32, width), None)
    zeros = ir.Constant(ir.VectorType(ir.IntType(32), width), None)
    return b.shuffle_vector(b.insert_element(undef, x, ir.Constant(ir.IntType(32), 0)), undef, zeros)


def lane_sums(b: ir.IRBuilder, vectors: list, width: int) -> ir.Value:
    """One vector whose lane u is the sum of vectors[u]'s lanes (len(vectors) a power of two
    <= width; the other lanes are unspecified): pairs are merged by adding their halves, so
    n vectors cost n - 1 + log2(width / n) shuffle pairs and adds instead of n horizontal sums."""
    i32 = ir.IntType(32)

    def shuffle(x, y, idx):
        idx = idx + [0] * (width - len(idx))
        return b.shuffle_vector(x, y, ir.Constant(ir.VectorType(i32, width), idx))

    vs, size = list(vectors), width        # each vector: width // size blocks of `size` lanes
    while len(vs) > 1:
        half, blocks = size // 2, width // size
        lo = [k * size + j for k in range(blocks) for j in range(half)]
        lo += [width + i for i in lo]
        hi = [i + half for i in lo]
        vs = [b.fadd(shuffle(x, y, lo), shuffle(x, y, hi), flags=FAST) for x, y in zip(vs[0::2], vs[1::2])]
        size = half
    v, rows = vs[0], len(vectors)          # rows blocks of `size` lanes, in order
    while size > 1:
        half = size // 2
        lo = [k * size + j for k in range(rows) for j in range(half)]
        v = b.fadd(shuffle(v, v, lo), shuffle(v, v, [i + half for i in lo]), flags=FAST)
        size = half
    return v


@contextmanager
def for_range(b: ir.IRBuilder, start, stop, name: str = "i", step: int = 1):
    """for (i = start; i < stop; i += step) { body }: yields i (an i64)."""
    pre = b.block
    head = b.append_basic_block(f"{name}.head")
    body = b.append_basic_block(f"{name}.body")
    done = b.append_basic_block(f"{name}.done")
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64, name)
    i.add_incoming(start, pre)
    b.cbranch(b.icmp_signed("<", i, stop), body, done)
    b.position_at_end(body)
    yield i
    nxt = b.add(i, _i64(step), name=f"{name}.next", flags=("nsw",))
    i.add_incoming(nxt, b.block)
    b.branch(head)
    b.position_at_end(done)


def parallel_depth(k: Kernel, ks: KernelSchedule | None = None) -> int:
    """How many leading axes form the chunked parallel loop: never past a Let's depth (so no
    row reduction is recomputed per element), never the innermost (vector) axis unless it is
    the only one, and at most the schedule's `parallel` when that is set (> 0)."""
    if not k.axes:
        return 0
    depth = len(k.axes) - 1 if len(k.axes) > 1 else 1
    for let in k.lets:
        if let.depth >= 1:
            depth = min(depth, let.depth)
    if ks is not None and ks.parallel > 0:
        depth = min(depth, ks.parallel)
    return max(depth, 1)


def const(value, dt: DType) -> ir.Constant:
    ty = COMPUTE[dt]
    if ty == F32:
        v = float(value)
        if dt in (DType.f16, DType.bf16):   # constants are rounded to the storage type too
            import numpy as np
            v = float(np.asarray(v, dtype=dt.np).astype(np.float32))
        return ir.Constant(F32, v)
    if ty == F64:
        return ir.Constant(F64, float(value))
    if ty == I1:
        return ir.Constant(I1, int(bool(value)))
    return ir.Constant(ty, (DType.i8 if dt == DType.u8 else dt).wrap(value))   # u8 255: the bits of i8 -1
