"""Render plan steps to CUDA C++ kernels and their launch shapes.

Every kernel takes (out, in0, in1, ...): `out` is the step's output (contiguous, row-major),
`in<j>` the buffers it reads. `Schedule` picks the template parameters; `render_program`
puts all kernels of a graph in one translation unit (one nvcc call).
"""
from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass

from ir.dtypes import DType, HALVES
from ir.node import Node, is_pure_reshape
from ir.ops import Op
from ir.view import contiguous_strides
from backends.cuda.cexpr import (C_COMPUTE, C_STORAGE, Emitter, load_expr, reduce_combine, reduce_identity, round_to,
                                 store_value, unflatten)
from backends.cuda.plan import Step, _chain, flash_output_strides, is_buffer_read, reads, tree
from backends.cuda.resolve import resolve
from backends.cuda.templates import attention as attn_t
from backends.cuda.templates import attention_wgmma as attn_wg
from backends.cuda.templates import gemm_simt, gemm_tc, gemm_tma, gemm_wgmma
from backends.cuda.templates.prelude import PRELUDE

# Row kernels launch at most about two waves of threads (an H200 holds 132 x 2048 resident):
# tens of thousands of short-lived blocks (a long row split into tiles of 128) spend their time
# being scheduled; fewer blocks that loop over rows keep the loads streaming.
ROW_RESIDENT_THREADS = 1 << 19
RAW = {16: "uint4", 8: "uint2", 4: "unsigned int", 2: "unsigned short", 1: "unsigned char"}
INT_MAX = 2**31 - 1


@dataclass(frozen=True)
class Schedule:
    """Template parameters for one build; None picks the heuristic default per kernel."""
    tc: gemm_tc.TCConfig | None = None
    simt: gemm_simt.SimtConfig | None = None
    attn: attn_t.AttnConfig | attn_wg.AttnWGConfig | None = None   # attention kernel: mma.sync or wgmma
    row_threads: int | None = None      # threads per row for row kernels
    row_blocks: int = 0                 # most blocks a row kernel launches, each looping over its rows
                                        # with a grid stride (0: ROW_RESIDENT_THREADS / block threads)
    ew_block: int = 256                 # threads per block for elementwise / generic kernels
    use_tensor_cores: bool = True
    wg: gemm_wgmma.WGConfig | None = None   # Hopper wgmma GEMM tile (when the device and operands allow)
    tma: gemm_tma.TMAConfig | None = None   # the wgmma GEMM fed by TMA copies (where its tensor maps fit)
    gemm: str = "auto"                 # f16/bf16 products: "mma" (mma.sync), "wgmma", "auto" (by size), or
                                       # "prior": each product its own tile, backends/cuda/tiles.py;
                                       # "cublas": plain products (any float dtype) run by cuBLAS
                                       # (backends/cuda/cublas.py), the others as under "auto"
    allow_tf32: bool = False           # gemm="cublas": f32 products may use TF32 tensor cores
    cublas_fallback: str = "auto"      # gemm="cublas": how the products cuBLAS cannot run are made
                                       # (a view it cannot read): any other value of `gemm`
    tile_rank: int = 0                 # gemm="prior": which of the prior's ranked tiles (0: its best)
    stage_operands: bool = True        # copy unaligned / multi-view f16 operands once instead of gathering
    window: str = "runs"               # a window operand too large to copy whole (an im2col view): "runs"
                                       # reads it in 16-byte runs from a copy of its source laid out
                                       # with the reduction's innermost axis last (`_restage_window`),
                                       # where that works, if need be with the reduction reordered on
                                       # both operands (`_reduction_for_runs`: the frontend's conv2d);
                                       # "gather" element by element
    arch: str | None = None            # the device's sm_XY (set by the backend; None when only rendering)
    lowering: str = "templates"        # "templates" (backends/cuda/plan.py) or "kernel_ir" (ir/lower.py)
    name: str = "default"

    def wgmma_allowed(self) -> bool:
        import os
        return bool(self.arch) and self.arch.startswith("sm_9") and not os.environ.get("SATURN_CUDA_NO_WGMMA")


def wgmma_mn_allowed() -> bool:
    """wgmma may read an n-contiguous B in place (the descriptor's transpose bit, variant 1);
    SATURN_CUDA_NO_WGMMA_MN=1 turns it off (the on-device suite sets it when its probe fails).
    Verification checks every candidate that uses it like any other."""
    return not os.environ.get("SATURN_CUDA_NO_WGMMA_MN")


@dataclass
class Launch:
    name: str
    kind: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared: int                 # dynamic shared memory bytes
    output: Node
    inputs: list[Node]
    detail: str = ""
    library: object = None      # kind "cublas": the cublas.CublasCall run instead of a kernel
    tensor_maps: tuple = ()     # tensor_map.TensorMap of pointer arguments, passed before them


def _params(step: Step, extra: tuple[Node, ...] = ()) -> tuple[str, str, dict[Node, str]]:
    ps = [f"{C_STORAGE[step.output.dtype]}* __restrict__ out"]
    names = {}
    for j, n in enumerate(list(step.inputs) + list(extra)):
        ps.append(f"const {C_STORAGE[n.dtype]}* __restrict__ in{j}")
        names[n] = f"in{j}"
    return ", ".join(ps), ", ".join(["out"] + [f"in{j}" for j in range(len(step.inputs) + len(extra))]), names


def _vec_for(nodes_bytes: list[int], n_inner: int) -> int:
    vec = 16 // max(nodes_bytes) if nodes_bytes else 1
    vec = max(1, min(vec, 8))
    while vec > 1 and n_inner % vec:
        vec //= 2
    return vec


def _pack_store(lines: list[str], out_t: str, vec: int, vals: list[str], dst: str, indent: str) -> None:
    itemsize = {"float": 4, "__half": 2, "__nv_bfloat16": 2, "int": 4, "bool": 1}[out_t]
    raw = RAW[vec * itemsize]
    lines.append(f"{indent}{{ {raw} ro; {out_t}* po = reinterpret_cast<{out_t}*>(&ro);")
    for v, val in enumerate(vals):
        lines.append(f"{indent}  po[{v}] = {val};")
    lines.append(f"{indent}  *reinterpret_cast<{raw}*>({dst}) = ro; }}")


def _with_buffer_srcs(t: list[Node], names: dict[Node, str], roots: tuple[Node, ...] = ()) -> list[Node]:
    """Kernel nodes plus the buffers they read directly, less those any use reads at an index
    other than the kernel's own element (below a view or a gather): the candidates for vector
    loads hoisted at that element, whose hook stands for every use. `roots`: nodes computed in
    loops of their own at that element (a row kernel's row reductions), so their sources count
    as read there again."""
    out = list(t)
    seen = set(t)
    for n in t:
        for s in n.srcs:
            if s in names and s not in seen:
                seen.add(s)
                out.append(s)
    inside = seen
    remapped, reached, stack = set(), set(), [(t[0], True)] + [(r, True) for r in roots]
    while stack:
        n, here = stack.pop()
        if (n, here) in reached:
            continue
        reached.add((n, here))
        if not here:
            remapped.add(n)
        if n is not t[0] and n in names:
            continue                      # a buffer: read, not computed, here
        same_index = n.op not in (Op.VIEW, Op.GATHER) and not (n.op in (Op.SUM, Op.MAX) and n not in roots)
        for s in n.srcs:
            if s in inside:
                stack.append((s, True if n in roots else here and same_index and s.shape == n.shape))
    return [x for x in out if x not in remapped]


# --- elementwise -------------------------------------------------------------------------------

def _vector_reads(o: Node, t: list[Node], names: dict[Node, str], M: set[Node]) -> tuple[list, dict]:
    """Buffer reads of the kernel tree t (output o) whose element order equals the output's, or
    that walk the output's last axis contiguously (a broadcast row such as layernorm's weight):
    the candidates for 16-byte vector loads. -> ([(node, its access)], {row read: access})."""
    ostr = contiguous_strides(o.shape)
    cached, rows = [], {}
    for x in _with_buffer_srcs(t, names):
        if x is o and x.op != Op.VIEW and x.op != Op.CAST:
            continue
        if x.shape != o.shape or not is_buffer_read(x, M) or (x.op not in (Op.VIEW, Op.CAST) and x not in names):
            continue
        acc = resolve(x, lambda n: n in names)
        if acc is None:
            continue
        if tuple(s for s, d in zip(acc.strides, o.shape) if d != 1) != tuple(s for s, d in zip(ostr, o.shape) if d != 1):
            if len(o.shape) < 2 or o.shape[-1] == 1 or acc.strides[-1] != 1:
                continue
            rows[x] = acc
        cached.append((x, acc))
    return cached, rows


def _aligned_reads(cached: list, rows: dict, o: Node, vec: int) -> list:
    """The reads whose vectors stay aligned at every vector start (a multiple of vec), a row
    read's never crossing a row."""
    return [(x, a) for x, a in cached if a.offset % vec == 0 and
            (x not in rows or (o.shape[-1] % vec == 0 and all(st % vec == 0 for st in a.strides[:-1])))]


def _vector_loads(cached: list, rows: dict, o: Node, names: dict[Node, str], base: str,
                  vec: int) -> list[tuple[str, str, str]]:
    """Each read's vector of `vec` elements at output element `base` (a variable): (its raw
    16-byte-or-less type, its address, its elements' storage type)."""
    out = []
    for x, a in cached:
        at = base if x not in rows else " + ".join(
            [f"{i} * {stride}LL" if stride != 1 else i for i, stride, d in zip(unflatten(base, o.shape), a.strides, o.shape)
             if d != 1 and stride != 0] or ["0"])
        out.append((RAW[vec * a.dtype.itemsize], f"{names[a.buffer]} + {a.offset} + ({at})", C_STORAGE[a.dtype]))
    return out


def render_elementwise(name: str, step: Step, M: set[Node], sched: Schedule) -> tuple[str, Launch]:
    o = step.output
    params, _, names = _params(step)
    N = o.numel
    t = tree(o, M)
    it = "int" if N < INT_MAX else "long long"
    cached, rows = _vector_reads(o, t, names, M)
    # the tail (N not a multiple of vec) takes the scalar path, so N need not divide
    vec = _vec_for([o.dtype.itemsize] + [a.dtype.itemsize for _, a in cached], 8)
    cached = _aligned_reads(cached, rows, o, vec)
    lines = [f'extern "C" __global__ void __launch_bounds__({sched.ew_block}) {name}({params}) {{',
             f"  const {it} base = ((({it})blockIdx.x) * {sched.ew_block} + threadIdx.x) * {vec};",
             f"  if (base >= ({it}){N}) return;"]
    if vec > 1:
        lines.append(f"  if (base + {vec} <= ({it}){N}) {{")
        for j, (raw, at, st) in enumerate(_vector_loads(cached, rows, o, names, "base", vec)):
            lines.append(f"    const {raw} r{j} = *reinterpret_cast<const {raw}*>({at});")
            lines.append(f"    const {st}* e{j} = reinterpret_cast<const {st}*>(&r{j});")
        em = Emitter(names, indent="    ")
        vals = []
        for v in range(vec):
            for j, (x, a) in enumerate(cached):
                em.hooks[x] = (lambda idx, j=j, v=v, a=a: load_expr(f"e{j}", str(v), a.dtype))
            idx = unflatten(f"(base + {v})", o.shape)
            vals.append(store_value(em.value(o, idx), o.dtype))
        lines += em.lines
        _pack_store(lines, C_STORAGE[o.dtype], vec, vals, "out + base", "    ")
        lines.append("  } else {")
    lines.append(f"    for (int v = 0; v < {vec}; ++v) {{")
    lines.append(f"      const {it} i = base + v;")
    lines.append(f"      if (i >= ({it}){N}) break;")
    em = Emitter(names, indent="      ", prefix="s")
    val = em.value(o, unflatten("i", o.shape))
    lines += em.lines
    lines.append(f"      out[i] = {store_value(val, o.dtype)};")
    lines.append("    }")
    if vec > 1:
        lines.append("  }")
    lines.append("}")
    threads = sched.ew_block
    blocks = (N + vec * threads - 1) // (vec * threads)
    return "\n".join(lines), Launch(name, "elementwise", (max(blocks, 1), 1, 1), (threads, 1, 1), 0, o, step.inputs,
                                    f"vec={vec} cached={len(cached)}")


# --- generic: one thread per output element, reductions as loops --------------------------------

WARP_REDUCE_MIN = 32          # reduce extents from which a generic reduction takes a warp per output
WARP_REDUCE_FEW_OUTPUTS = 8192


def render_generic(name: str, step: Step, M: set[Node], sched: Schedule) -> tuple[str, Launch]:
    """One thread per output element, a reduction as a loop. A long reduction into few outputs
    (the second level of a split row: 64 rows x 1024 tile partials) takes a warp per output
    instead: lanes stride over the reduced elements, then a fixed butterfly; lane 0's value is
    stored (a fixed order, so runs are bit-identical). One thread looping over 1024 partials
    measured 45-75 us on the H200, a warp 3 us."""
    o = step.output
    params, _, names = _params(step)
    N = o.numel
    it = "int" if N < INT_MAX else "long long"
    reduce = o.op in (Op.SUM, Op.MAX)
    R = math.prod(o.srcs[0].shape[a] for a in o.arg) if reduce else 1
    # a warp per output when threads alone would not fill the GPU, or when the reduced axes end
    # at the source's last one (lanes then read consecutive elements); else a thread per output
    # (consecutive threads read consecutive outputs: [64,8,128,128] summed over axis 2 measured
    # 19 us that way, 46 us with a warp each)
    warp = (reduce and R >= WARP_REDUCE_MIN and C_COMPUTE[o.dtype] in ("float", "int")
            and (N <= WARP_REDUCE_FEW_OUTPUTS or o.arg[-1] == len(o.srcs[0].shape) - 1))
    first = f"(({it})blockIdx.x) * {sched.ew_block // 32 if warp else sched.ew_block} + " + \
        ("(threadIdx.x >> 5)" if warp else "threadIdx.x")
    lines = [f'extern "C" __global__ void __launch_bounds__({sched.ew_block}) {name}({params}) {{',
             f"  const {it} i = {first};",
             f"  if (i >= ({it}){N}) return;"]
    idx = unflatten("i", o.shape)
    em = Emitter(names, indent="  ")
    if reduce:
        src = o.srcs[0]
        red_sizes = tuple(src.shape[a] for a in o.arg)
        ct = C_COMPUTE[o.dtype]
        em.emit(f"{ct} acc = {reduce_identity(o.op, o.dtype)};")
        start, step_ = ("(long long)(threadIdx.x & 31)", 32) if warp else ("0", 1)
        em.emit(f"for (long long r = {start}; r < {R}LL; r += {step_}) {{")
        em.push("  ")
        ridx = unflatten("r", red_sizes)
        full = list(idx)
        for a, e in zip(o.arg, ridx):
            full[a] = e
        v = em.value(src, tuple(full))
        em.emit(f"acc = {reduce_combine(o.op, 'acc', v)};")
        em.pop("  ")
        em.emit("}")
        if warp:
            em.emit(f"acc = {'warp_sum' if o.op == Op.SUM else 'warp_max'}(acc);")
            em.emit("if ((threadIdx.x & 31) != 0) return;")
        val = round_to("acc", o.dtype) if o.dtype.is_float else "acc"
    else:
        val = em.value(o, idx)
    lines += em.lines
    lines.append(f"  out[i] = {store_value(val, o.dtype)};")
    lines.append("}")
    per_block = sched.ew_block // 32 if warp else sched.ew_block
    blocks = (N + per_block - 1) // per_block
    return "\n".join(lines), Launch(name, "generic", (max(blocks, 1), 1, 1), (sched.ew_block, 1, 1), 0, o, step.inputs,
                                    "warp per output" if warp else "")


# --- row: block (or warp) per row, reductions over the last axis -------------------------------

def render_row(name: str, step: Step, M: set[Node], sched: Schedule) -> tuple[str, Launch]:
    o = step.output
    params, _, names = _params(step)
    reds = step.reductions
    S = reds[0].srcs[0].shape
    P = S[:-1] + (1,)
    C = S[-1]
    rows = math.prod(S[:-1])
    t = tree(o, M)
    inside = set(t)
    row_shaped_out = o.shape == S
    # row-contiguous buffer reads: cached in registers as floats, loaded as vectors
    cached = []
    for x in _with_buffer_srcs(t, names, tuple(reds)):
        if x.shape != S or x is o or not is_buffer_read(x, M):
            continue
        acc = resolve(x, lambda n: n in names)
        if acc is None or acc.strides[-1] != 1 or not x.dtype.is_float:
            continue
        cached.append((x, acc))
    # keep only the outermost reads (a cached node's own sources need no cache)
    below = set()
    for x, _ in cached:
        below |= set(tree(x, M)) - {x}
    cached = [(x, a) for x, a in cached if x not in below]
    sizes = [a.dtype.itemsize for _, a in cached] + ([o.dtype.itemsize] if row_shaped_out else [])
    vec = _vec_for(sizes, C)
    good = []
    for x, a in cached:
        if a.offset % vec == 0 and all(s % vec == 0 for s in a.strides[:-1]):
            good.append((x, a))
    cached = good
    nv = C // vec
    if sched.row_threads:
        tpr = sched.row_threads
    else:
        tpr = 32
        while tpr < 512 and tpr * 4 < nv:
            tpr *= 2
    items = (nv + tpr - 1) // tpr
    use_cache = 0 < items <= 16     # (an empty row has nothing to cache: no zero-sized arrays)
    if not use_cache:
        cached = []
    rpb = 1 if tpr > 32 else 4
    block = tpr * rpb
    nwarps = tpr // 32
    most = sched.row_blocks or max(1, ROW_RESIDENT_THREADS // block)
    blocks = (rows + rpb - 1) // rpb
    grid_stride = blocks > most     # (a block's rows share its threads: the loop is uniform where it syncs)
    blocks = min(blocks, most)
    lines = [f'extern "C" __global__ void __launch_bounds__({block}) {name}({params}) {{',
             f"  const int t = threadIdx.x % {tpr};"]
    first_row = f"(long long)blockIdx.x * {rpb} + threadIdx.x / {tpr}"
    if grid_stride:
        lines.append(f"  for (long long row = {first_row}; row < {rows}LL; row += (long long)gridDim.x * {rpb}) {{")
    else:
        lines.append(f"  const long long row = {first_row};")
        if rpb > 1:
            lines.append(f"  if (row >= {rows}LL) return;")
    if tpr > 32:
        lines.append("  __shared__ float red_f[32];")
        lines.append("  __shared__ int red_i[32];")
    ridx = unflatten("row", S[:-1]) if len(S) > 1 else ()
    em = Emitter(names, indent="  ")
    for j, (x, a) in enumerate(cached):
        raw = RAW[vec * a.dtype.itemsize]
        st = C_STORAGE[a.dtype]
        rbase = " + ".join([str(a.offset)] + [f"(long long){i} * {s}" for i, s in zip(ridx, a.strides[:-1]) if s])
        em.emit(f"float x{j}[{items * vec}];")
        em.emit("#pragma unroll")
        em.emit(f"for (int i = 0; i < {items}; ++i) {{")
        em.emit(f"  const int q = i * {tpr} + t;")
        em.emit(f"  if (q < {nv}) {{")
        em.emit(f"    const {raw} r = *reinterpret_cast<const {raw}*>({names[a.buffer]} + {rbase} + q * {vec});")
        em.emit(f"    const {st}* e = reinterpret_cast<const {st}*>(&r);")
        em.emit("    #pragma unroll")
        em.emit(f"    for (int v = 0; v < {vec}; ++v) x{j}[i * {vec} + v] = {load_expr('e', 'v', a.dtype)};")
        em.emit("  }")
        em.emit("}")
    ctx = {"v": 0}
    for j, (x, a) in enumerate(cached):
        em.hooks[x] = (lambda idx, j=j: f"x{j}[i * {vec} + {ctx['v']}]")
    # per-row values computed once per row, as soon as the reductions they need are done
    per_row = [n for n in reversed(t) if n.shape == P and n.op not in (Op.SUM, Op.MAX, Op.CONST)
               and not is_buffer_read(n, M) and n is not o]
    deps: dict[Node, set] = {}      # the row reductions each node needs, transitively

    def needs(n: Node) -> set:
        if n not in deps:
            d = set()
            for s in n.srcs:
                if s in inside:
                    d |= needs(s) | ({s} if s.op in (Op.SUM, Op.MAX) else set())
            deps[n] = d
        return deps[n]
    for n in t:
        needs(n)
    done: set[Node] = set()
    pr_idx = ridx + ("0",)

    def emit_per_row():
        for n in per_row:
            if n in em.hooks or not deps[n] <= done:
                continue
            v = em.value(n, pr_idx)
            em.hooks[n] = (lambda idx, v=v: v)

    emit_per_row()
    for k, r in enumerate(reds):
        ct = C_COMPUTE[r.dtype]
        acc = f"acc{k}"
        em.emit(f"{ct} {acc} = {reduce_identity(r.op, r.dtype)};")
        em.emit("#pragma unroll")
        em.emit(f"for (int i = 0; i < {items}; ++i) {{")
        em.emit(f"  const int q = i * {tpr} + t;")
        em.emit(f"  if (q < {nv}) {{")
        em.push("    ")
        for v in range(vec):
            ctx["v"] = v
            val = em.value(r.srcs[0], ridx + (f"(q * {vec} + {v})",))
            em.emit(f"{acc} = {reduce_combine(r.op, acc, val)};")
        em.pop("    ")
        em.emit("  }")
        em.emit("}")
        wop = "warp_sum" if r.op == Op.SUM else "warp_max"
        em.emit(f"{acc} = {wop}({acc});")
        if tpr > 32:
            red = "red_f" if r.dtype.is_float else "red_i"
            em.emit(f"if ((threadIdx.x & 31) == 0) {red}[threadIdx.x >> 5] = {acc};")
            em.emit("__syncthreads();")
            em.emit(f"{acc} = {red}[0];")
            for w in range(1, nwarps):
                em.emit(f"{acc} = {reduce_combine(r.op, acc, f'{red}[{w}]')};")
            em.emit("__syncthreads();")
        res = em.tmp(ct, round_to(acc, r.dtype) if r.dtype.is_float else acc)
        em.hooks[r] = (lambda idx, res=res: res)
        done.add(r)
        emit_per_row()
    if row_shaped_out:
        em.emit("#pragma unroll")
        em.emit(f"for (int i = 0; i < {items}; ++i) {{")
        em.emit(f"  const int q = i * {tpr} + t;")
        em.emit(f"  if (q < {nv}) {{")
        em.push("    ")
        vals = []
        for v in range(vec):
            ctx["v"] = v
            vals.append(store_value(em.value(o, ridx + (f"(q * {vec} + {v})",)), o.dtype))
        if vec > 1:
            _pack_store(em.lines, C_STORAGE[o.dtype], vec, vals, f"out + row * {C}LL + q * {vec}", em.indent)
        else:
            em.emit(f"out[row * {C}LL + q] = {vals[0]};")
        em.pop("    ")
        em.emit("  }")
        em.emit("}")
    else:
        val = em.value(o, pr_idx)
        em.emit(f"if (t == 0) out[row] = {store_value(val, o.dtype)};")
    lines += em.lines
    if grid_stride:
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines), Launch(name, "row", (blocks, 1, 1), (block, 1, 1), 0, o, step.inputs,
                                    f"threads/row={tpr} vec={vec} items={items} cached={len(cached)}"
                                    + (" grid-stride" if grid_stride else ""))


# --- matrix products ---------------------------------------------------------------------------

def _epilogue(name: str, step: Step, M: set[Node], params: str, names: dict[Node, str]) -> str:
    """epi_<name>(params, flat, acc): the output's compute value at `flat` given the product."""
    o, r = step.output, step.gemm.reduce
    em = Emitter(names, indent="  ")
    # every caller converts the value to the output's dtype, rounding to nearest: a rounding
    # to that dtype as the epilogue's last step (the product itself as the output, or a cast
    # between float dtypes, as an f32 product's to f16) is that conversion done twice. Left
    # out, a plain f16 product's epilogue converts once per output pair instead of five times.
    last = o.srcs[0] if o.op == Op.CAST and o.dtype.is_float and o.srcs[0].dtype.is_float else o
    if o is r:
        val = "acc"
    elif last is r:
        val = round_to("acc", r.dtype)
    else:
        t = tree(o, M, stop=frozenset({r}))
        views = [n for n in t if n.op == Op.VIEW and n.srcs[0] is r]
        for v in views:
            em.hooks[v] = (lambda idx: em.tmp("float", round_to("acc", r.dtype)))
        val = em.value(last, unflatten("flat", o.shape))
    body = "\n".join(em.lines)
    return f"DEV float epi_{name}({params}, long long flat, float acc) {{\n{body}\n  return {val};\n}}"


def _wgmma_epilogue(name: str, step: Step, M: set[Node], params: str, names: dict[Node, str],
                    epi: str) -> tuple[str, bool]:
    """A wgmma / TMA product's epilogue source (`epi`, with epi_load_/epi_run_<name> where it
    runs after staging) and whether it does (epilogue_after)."""
    after = epilogue_after(step, M)
    return (epi + _epilogue_run(name, step, M, params, names) if after else epi), after


def _epilogue_run(name: str, step: Step, M: set[Node], params: str, names: dict[Node, str]) -> str:
    """For a staged epilogue (epilogue_after), over the 16 bytes of outputs from `flat` on (a run
    of a row, `flat` a multiple of its length): epi_load_<name>(params, flat) loads, as vectors,
    the reads in the output's element order or along its rows, into an epi_in_<name>;
    epi_run_<name>(params, flat, run, in) is the epilogue given the staged product's run. Apart,
    so that a thread issues several runs' loads before their arithmetic (whose IEEE divisions
    branch, which ptxas does not hoist loads across)."""
    o, r = step.output, step.gemm.reduce
    out_t = C_STORAGE[o.dtype]
    vec = 16 // o.dtype.itemsize
    t = tree(o, M, stop=frozenset({r}))
    cached, rows = _vector_reads(o, t, names, M)
    cached = _aligned_reads([(x, a) for x, a in cached if vec * a.dtype.itemsize in RAW], rows, o, vec)
    # one vector per distinct read (a view and its cast may read the same elements)
    firsts: dict[tuple, tuple] = {}
    which = []
    for x, a in cached:
        key = (a.buffer, a.offset, tuple(a.strides), x in rows, a.dtype)
        firsts.setdefault(key, (x, a))
        which.append(list(firsts).index(key))
    loads = _vector_loads(list(firsts.values()), rows, o, names, "flat", vec)
    struct = f"struct epi_in_{name} {{ {' '.join(f'{raw} r{j};' for j, (raw, _, _) in enumerate(loads))} }};"
    load_body = "\n".join([f"  epi_in_{name} in;"] +
                          [f"  in.r{j} = *reinterpret_cast<const {raw}*>({at});" for j, (raw, at, _) in enumerate(loads)] +
                          ["  return in;"])
    views = [n for n in t if n.op == Op.VIEW and n.srcs[0] is r]
    lines = [f"  const {st}* e{j} = reinterpret_cast<const {st}*>(&in.r{j});" for j, (_, _, st) in enumerate(loads)]
    lines.append(f"  const {out_t}* p = reinterpret_cast<const {out_t}*>(&run);")
    em = Emitter(names, indent="  ")
    vals = []
    for v in range(vec):
        for (x, a), j in zip(cached, which):
            em.hooks[x] = (lambda idx, j=j, v=v, a=a: load_expr(f"e{j}", str(v), a.dtype))
        for w in views:
            em.hooks[w] = (lambda idx, v=v: em.tmp("float", load_expr("p", str(v), o.dtype)))
        vals.append(store_value(em.value(o, unflatten(f"(flat + {v})", o.shape)), o.dtype))
    lines += em.lines
    lines.append(f"  uint4 res;\n  {out_t}* q = reinterpret_cast<{out_t}*>(&res);")
    lines += [f"  q[{v}] = {val};" for v, val in enumerate(vals)]
    body = "\n".join(lines)
    return (f"\n{struct}\nDEV epi_in_{name} epi_load_{name}({params}, long long flat) {{\n{load_body}\n}}"
            f"\nDEV uint4 epi_run_{name}({params}, long long flat, uint4 run, const epi_in_{name}& in) {{\n"
            f"{body}\n  return res;\n}}")


def epilogue_after(step: Step, M: set[Node]) -> bool:
    """Whether a product's staged epilogue runs after the product is staged in shared memory
    (rounded to the output's storage type) rather than on each accumulator: where it reads
    other buffers. Run per accumulator, with the accumulators holding the registers, ptxas
    issued those loads one at a time, each waited on before the next (a SiLU gate's up
    projection, 1024x5632x2048 on the H100: 94 us against 40 us for the bare product); after
    staging they are 16-byte runs of a row, loaded together. Only where the product enters the
    epilogue rounded to the output's storage type (its own dtype, or each use a cast to it), so
    the staged value is the one the epilogue would round to."""
    o, r = step.output, step.gemm.reduce
    if o is r:
        return False
    t = tree(o, M, stop=frozenset({r}))
    return bool(reads(t, M)) and _enters_rounded(t, r, C_STORAGE[o.dtype])


def _enters_rounded(t: list[Node], r: Node, ctype: str) -> bool:
    """Whether every use of the product r in the epilogue tree t sees it rounded to `ctype`."""
    if C_STORAGE[r.dtype] == ctype:
        return True
    views = {n for n in t if n.op == Op.VIEW and n.srcs[0] is r}
    for n in t:
        for s in n.srcs:
            if s is r and n not in views:
                return False
            if s in views and not (n.op == Op.CAST and C_STORAGE[n.dtype] == ctype):
                return False
    return True


def _merge(axes: list[int], sizes, strides_a, strides_c):
    """Merge a run of trailing axes whose A and C strides are both contiguous with each other.
    -> (merged size, a stride, c stride, leftover axes)."""
    if not axes:
        return 1, 0, 0, []
    j = len(axes) - 1
    size = sizes[axes[j]]
    while j > 0:
        i, nxt = axes[j - 1], axes[j]
        if strides_a[i] == strides_a[nxt] * sizes[nxt] and strides_c[i] == strides_c[nxt] * sizes[nxt] \
                and i == nxt - 1:
            size *= sizes[i]
            j -= 1
        else:
            break
    inner = axes[-1]
    return size, strides_a[inner], strides_c[inner], axes[:j]


def _pure_half_read(side: Node, names: dict[Node, str]):
    """The half dtype of an operand that is a buffer read through views and lossless casts only
    (its values are exact in that dtype), else None."""
    from backends.cuda.plan import is_lossless_cast
    n = side
    while n not in names:
        if n.op == Op.VIEW or is_lossless_cast(n):
            n = n.srcs[0]
        else:
            return None
    return n.dtype if n.dtype in HALVES else None


def simt_only(step: Step) -> bool:
    """Whether a product runs the SIMT kernel under every schedule: an operand is not halves
    read through views and lossless casts (f32 data, a computed operand), so no tensor-core
    tile applies and only the SIMT tiles differ."""
    names = _params(step)[2]
    return _pure_half_read(step.gemm.a, names) is None or _pure_half_read(step.gemm.b, names) is None


def simt_default(step: Step) -> gemm_simt.SimtConfig:
    """The SIMT tile a product takes when the schedule names none: 128x128 where the output
    fills the device (132 SMs) with such tiles (128 threads of 16x8 outputs, 16-byte loads where
    the operands allow them), else 64x64."""
    g = step.gemm
    sizes = g.mul.shape
    outputs = math.prod(sizes[a] for a in g.m_axes + g.n_axes + g.batch_axes)
    return gemm_simt.SIMT_CONFIGS[0] if outputs >= 132 * 128 * 128 else gemm_simt.SimtConfig(64, 64, 8, 4, 4)


def _cp_async_ready(acc, unit_axis: int, sizes) -> bool:
    """A strided read cp.async can copy in 16-byte chunks: unit stride along `unit_axis`, whose
    size is a multiple of 8, and every other stride and the offset 8-element aligned."""
    return _vector_ready(acc, unit_axis, sizes, 8)


def _vector_ready(acc, unit_axis: int, sizes, elems: int) -> bool:
    """A strided read of `elems`-element vectors (16 bytes) along `unit_axis`: unit stride
    there, that size a multiple of `elems`, every other stride and the offset aligned to it
    (buffers themselves are 256-byte aligned: misaligned device inputs are copied first)."""
    if acc is None or acc.strides[unit_axis] != 1 or sizes[unit_axis] % elems:
        return False
    return acc.offset % elems == 0 and all(st % elems == 0 for i, st in enumerate(acc.strides) if i != unit_axis)


def _read_tracker(side: Node, names: dict[Node, str]):
    """(one ShapeTracker from `side`'s index to its buffer, the buffer's node) for an operand
    read through views (zero fill) and lossless casts only, else None."""
    from ir.view import ShapeTracker
    from backends.cuda.plan import is_lossless_cast
    trackers, n = [], side
    while n not in names:
        if n.op == Op.VIEW:
            trackers.append(n.arg)
            n = n.srcs[0]
        elif is_lossless_cast(n):
            n = n.srcs[0]
        else:
            return None
    fills = {t.fill for t in trackers if t.has_mask}
    if len(fills) > 1 or fills - {0.0}:
        return None
    views = []
    for t in reversed(trackers):
        views.extend(t.views)
    return (ShapeTracker(tuple(views), fill=0.0) if views else ShapeTracker.from_shape(n.shape)), n


def _columns_adjacent(side: Node, names: dict[Node, str], n_axis: int, k_axis: int) -> bool:
    """Whether neighbouring columns (n) of a gathered operand lie side by side in memory more
    often than neighbouring k do, over a corner of its index space (a convolution's windows:
    along n always but at row ends, along k only within a 3-wide filter row). The corner's
    offsets come from the operand's views as index expressions, evaluated on a grid."""
    import numpy as np
    from ir.kernel import Lin, Var, as_lin, lin_values
    from ir.lower import view_index
    read = _read_tracker(side, names)
    if read is None:
        return False
    st = read[0]
    vn, vk = Var("n", min(side.shape[n_axis], 64)), Var("k", min(side.shape[k_axis], 64))
    cur = tuple(as_lin(vn) if ax == n_axis else as_lin(vk) if ax == k_axis else Lin() for ax in range(len(side.shape)))
    got = view_index(st, cur)
    if got is None:
        return False
    grid = {vk: np.arange(vk.extent)[:, None], vn: np.arange(vn.extent)[None, :]}

    def ev(e: Lin) -> np.ndarray:
        return np.broadcast_to(lin_values(e, grid.__getitem__), (vk.extent, vn.extent))
    where = ev(got[0])
    read_here = np.ones(where.shape, bool)
    for b in got[1]:
        x = ev(b.expr)
        read_here &= (x >= b.lo) & (x < b.hi)

    def unit_steps(axis: int) -> float:    # neighbours both read from memory, one element apart
        step = np.diff(where, axis=axis)
        both = np.take(read_here, range(where.shape[axis] - 1), axis=axis) & \
            np.take(read_here, range(1, where.shape[axis]), axis=axis)
        return float(np.mean(step[both] == 1)) if both.any() else 0.0
    return unit_steps(1) > unit_steps(0)


def _stage(side: Node, names: dict[Node, str], drop_axes, last_axis: int, k_axis: int):
    """A contiguous copy of a half-precision operand that cp.async can read: its broadcast axes
    dropped to size 1, `last_axis` made innermost, and the innermost and k axes zero-padded to
    multiples of 8. -> (copy node, its buffer, Access over the product's axes) or None."""
    from ir import node as N
    from backends.cuda.resolve import Access
    read = _read_tracker(side, names)
    if read is None:
        return None
    st, n = read
    rank = len(side.shape)
    st = st.shrink(tuple((0, 1) if ax in drop_axes else (0, sz) for ax, sz in enumerate(side.shape)))
    order = [ax for ax in range(rank) if ax != last_axis] + [last_axis]
    st = st.permute(tuple(order))
    pads = [(0, 0)] * rank
    for ax in {last_axis, k_axis}:
        pos = order.index(ax)
        size = st.shape[pos]
        pads[pos] = (0, (-size) % 8)
    if any(p != (0, 0) for p in pads):
        st = st.pad(tuple(pads), 0.0)
    copy = N.contiguous(N.view(n, st))
    cs = contiguous_strides(copy.shape)
    strides = tuple(cs[order.index(ax)] if ax not in drop_axes else 0 for ax in range(rank))
    return copy, n, Access(copy, strides, 0)


def _restage_window(side: Node, names: dict[Node, str], k_axis: int):
    """A window operand read from a copy of the layout under its window: the copy (one pass
    over the source, not the window's K-fold) puts the source axis that the reduction's
    innermost step walks along last (a convolution's channels: channels-last), so that every 8
    consecutive reduction indices from a multiple of 8 read 8 consecutive, 16-byte aligned
    elements at any output column; cp.async then copies the window in 16-byte runs. Where that
    axis is not a multiple of 8 long, the copy's is zero-padded to one, for a window whose
    reduction pads its innermost digit alike (`_reduction_for_runs`): the window's own zeros
    are then the copy's (`_widened_window`).
    -> (copy node, its source buffer, the operand as a view of the copy) or None where the view
    does not read that way (checked on its index expression: `_reads_in_runs`)."""
    from ir import node as N
    from ir.view import ShapeTracker, View
    read = _read_tracker(side, names)
    if read is None:
        return None
    st, x = read
    if len(st.views) < 2 or any(0 in v.shape for v in st.views):
        return None
    v0 = st.views[0]
    rank0 = len(v0.shape)
    cs0 = contiguous_strides(v0.shape)
    walked = _walked_axis(ShapeTracker(st.views[1:]), side.shape, k_axis, cs0, v0.shape)
    if walked is None:
        return None
    zeros = (-v0.shape[walked]) % 8
    if not zeros and any(v.mask is not None for v in st.views[1:]):
        return None
    order = tuple([j for j in range(rank0) if j != walked] + [walked])
    layout = ShapeTracker((v0,), fill=st.fill).permute(order)
    if zeros:
        layout = layout.pad(((0, 0),) * (rank0 - 1) + ((0, zeros),), 0.0)
    copy = N.contiguous(N.view(x, layout))
    cs = contiguous_strides(copy.shape)
    under = View(v0.shape, tuple(cs[order.index(j)] for j in range(rank0)), 0, None)
    window = ShapeTracker((under,) + st.views[1:], fill=0.0)
    if zeros:
        window = _widened_window(window, _index_digits(side, names), k_axis, v0.shape[walked], zeros)
        if window is None:
            return None
    operand = N.view(copy, window)
    if not _reads_in_runs(operand.arg, k_axis):
        return None
    return copy, x, operand


def _widened_window(window, digits, k_axis: int, size: int, zeros: int):
    """A window over a channels-last copy whose channels (`size` of them) are followed by
    `zeros` zeros, for an operand whose reduction's innermost digit is those channels padded
    alike, masked past `size` (`_reflatten`): as it is, its views are sized for `size`
    channels and mask the padded positions, so its index expression is not one of runs.
    Over every index split into `digits` (per axis, outer to inner) it is one strided view of
    the copy where its expression is affine in the digits (a convolution's window: batch,
    taps, channels, output rows and columns); with the channel digit at stride 1 and every
    other stride a multiple of the padded channel count, that view run on past `size` reads
    the copy's zeros, the same values as the mask. -> the widened view reshaped to the
    operand's shape, or None where the window is not such a view."""
    from ir.kernel import Lin, Var, as_lin
    from ir.lower import view_index
    from ir.view import ShapeTracker, View
    split = tuple(d for ds in digits for d in ds)
    inner = sum(len(ds) for ds in digits[:k_axis + 1]) - 1
    padded = size + zeros
    if split[inner] != padded:
        return None
    flat_split = window.reshape(split)
    axes = tuple(Var(f"d{i}", size if i == inner else s) for i, s in enumerate(split))
    cur = tuple(as_lin(v) if v.extent > 1 else Lin() for v in axes)
    got = view_index(flat_split, cur)
    if got is None or got[1] or any(not isinstance(a, Var) for a, _ in got[0].terms):
        return None
    flat = got[0]
    strides = tuple(flat.coeff(v) for v in axes)
    if strides[inner] != 1 or flat.const % padded or any(st % padded for i, st in enumerate(strides) if i != inner):
        return None
    for c in range(size, padded):          # the padding is the operand's fill there, nothing it reads
        if view_index(flat_split, cur[:inner] + (Lin(const=c),) + cur[inner + 1:]) is not None:
            return None
    return ShapeTracker((View(split, strides, flat.const),)).reshape(window.shape)


def _walked_axis(top, shape, k_axis: int, cs0, shape0) -> int | None:
    """The axis of the layout under a window (row-major strides cs0) that one step of the
    window's reduction index moves along, from k = 0 to 1 with every other index 0."""
    from ir.kernel import Lin
    from ir.lower import view_index
    if shape[k_axis] < 2:
        return None
    at = []
    for kv in (0, 1):
        got = view_index(top, tuple(Lin(const=kv) if ax == k_axis else Lin() for ax in range(len(shape))))
        if got is None or not got[0].is_const:
            return None
        at.append(got[0].const)
    step = at[1] - at[0]
    hits = [j for j, (c, n) in enumerate(zip(cs0, shape0)) if c == step and n > 1]
    return hits[0] if len(hits) == 1 else None


def _reads_in_runs(st, k_axis: int) -> bool:
    """Whether the view, at k = 8q + j (0 <= j < 8) and any other indices, reads offset F + j
    with F a multiple of 8 and nothing masked: its index expression has j only as a plain term
    and every other coefficient a multiple of 8."""
    from ir.kernel import Lin, Var, as_lin, atom_vars
    from ir.lower import view_index
    shape = st.shape
    K = shape[k_axis]
    if K % 8:
        return False
    j = Var("j", 8)
    cur = tuple(as_lin(Var("q", K // 8)) * 8 + as_lin(j) if ax == k_axis else
                (as_lin(Var(f"i{ax}", s)) if s > 1 else Lin()) for ax, s in enumerate(shape))
    got = view_index(st, cur)
    if got is None or got[1]:
        return False
    flat = got[0]
    with_j = [(a, c) for a, c in flat.terms if j in atom_vars(a)]
    if with_j != [(j, 1)]:
        return False
    return flat.const % 8 == 0 and all(c % 8 == 0 for a, c in flat.terms if a != j)


def _reduction_for_runs(step: Step, names: dict[Node, str]) -> Step:
    """The product with its reduction index flattened again in another order on both operands,
    where B is a window that `_restage_window` cannot read in 16-byte runs as it is but can in
    that order: the frontend's convolution reduces over (channels, taps); over (taps, channels)
    its window reads a channels-last copy in runs, and the weight (A, then read out of order)
    is staged in that order like any operand cp.async cannot read. Both operands take the same
    order, so the sum has the same terms, added in another order. Where no order reads in runs
    as it is, the innermost digit (channels not a multiple of 8) is also zero-padded to a
    multiple of 8 on both operands, where that adds few terms (`_run_zeros`): k grows, and the
    added terms are products with zero. The step as it is where nothing helps."""
    from ir import node as N
    g = step.gemm
    k = g.k_axis
    if _pure_half_read(g.a, names) is None or _pure_half_read(g.b, names) is None:
        return step                                # no tensor-core product: nothing is staged
    if not _is_window(g, names) or _restage_window(g.b, names, k) is not None:
        return step
    digits = _k_digits(g.b, names, k)
    if digits is None:
        return step
    last = len(digits) - 1
    tries = [(inner, 0) for inner in range(last)]          # one of the outer digits moved innermost
    padded = [(inner, _run_zeros(size)) for inner, size in enumerate(digits)]
    tries += [(inner, zeros) for inner, zeros in padded if zeros]      # ... or any, zero-padded
    for inner, zeros in tries:
        order = [d for d in range(len(digits)) if d != inner] + [inner]
        a, b = _reflatten(g.a, k, digits, order, zeros), _reflatten(g.b, k, digits, order, zeros)
        if _read_tracker(a, names) is not None and _restage_window(b, names, k) is not None:
            mul = N.binary(Op.MUL, *((a, b) if g.mul.srcs[0] is g.a else (b, a)))
            return dataclasses.replace(step, gemm=dataclasses.replace(g, a=a, b=b, mul=mul))
    return step


def _run_zeros(size: int) -> int:
    """The zeros that pad a reduction digit of `size` (a convolution's channels) to a multiple
    of 8 for `_reduction_for_runs`, where that pays: more than 8 channels, and zeros adding at
    most a third to the reduction (63 channels take 1, 12 take 4, 18 take 6); else 0 (1-11, 17
    channels). Each zero costs a multiply-add and a copied element, as a channel does. On the
    H100 (batch 31, 55x55, 65 outputs, 3x3, f16, the default tile) 63 channels ran 0.107 ms
    padded against 0.264 gathered (cuDNN 0.108), 12 ran 0.067 against 0.078; 9 (k from 81 to
    144) 0.075 against 0.067, and 6 0.065 against 0.059: a short product gains less from runs
    than its two copy kernels cost
    (results/raw/h100-conv-padded-channels-2026-12-06-session26.txt)."""
    zeros = (-size) % 8
    return zeros if size > 8 and 3 * zeros <= size else 0


def _is_window(g, names: dict[Node, str]) -> bool:
    """Whether B is a view too large to copy whole (an im2col window): its staged copy would be
    more than EXPANDED_COPY times its buffer (as `stage_operands` decides)."""
    if not g.n_axes:
        return False
    staged = _stage(g.b, names, set(g.m_axes), g.n_axes[-1], g.k_axis)
    return staged is not None and _expanded(*staged[:2])


def _expanded(copy: Node, base: Node) -> bool:
    """Whether a staged copy would be too large to make: more than EXPANDED_COPY times its buffer."""
    return copy.numel > EXPANDED_COPY * base.numel


def _k_digits(side: Node, names: dict[Node, str], k_axis: int) -> tuple[int, ...] | None:
    """The sizes of the axes that `side`'s reduction index flattens, outer to inner: followed
    down its views while it walks one axis of the layout below, until it walks several (a
    convolution's window: (channels, kh, kw)); None where it never does. Only a guess at
    orders worth trying: any factorization of k, flattened again on both operands alike,
    leaves the product's value as it is."""
    read = _read_tracker(side, names)
    if read is None:
        return None
    views = read[0].views
    axis = k_axis
    for upper, lower in zip(reversed(views[1:]), reversed(views[:-1])):
        walked = _walked_axes(lower.shape, upper.strides[axis], upper.shape[axis])
        if walked is None:
            return None
        if len(walked) > 1:
            return tuple(lower.shape[j] for j in walked)
        axis = walked[0]
    return None


def _index_digits(side: Node, names: dict[Node, str]) -> tuple[tuple[int, ...], ...]:
    """Per axis of `side`, the sizes of the axes its index flattens (`_k_digits`), or the axis
    itself where it walks one axis of each layout below."""
    return tuple(_k_digits(side, names, ax) or (s,) for ax, s in enumerate(side.shape))


def _walked_axes(shape, stride: int, size: int) -> list[int] | None:
    """The axes of the row-major layout of `shape` that an index of `size` steps of `stride`
    walks through, outer to inner (size-1 axes left out), or None where it does not cover
    whole axes."""
    cs = contiguous_strides(shape)
    axes, covered = [], 1
    for j in reversed(range(len(shape))):
        if shape[j] == 1 or (not axes and cs[j] != stride):
            continue
        axes.insert(0, j)
        covered *= shape[j]
        if covered >= size:
            break
    return axes if axes and covered == size else None


def _reflatten(x: Node, k_axis: int, digits: tuple[int, ...], order: list[int], zeros: int = 0) -> Node:
    """x with its axis `k_axis`, read as the flattening of `digits` (outer to inner), flattened
    again with the digits in `order`, the new innermost one first padded with `zeros` zeros
    (k grows by a factor (digit + zeros) / digit)."""
    from ir.node import move
    split = x.shape[:k_axis] + tuple(digits) + x.shape[k_axis + 1:]
    perm = tuple(range(k_axis)) + tuple(k_axis + d for d in order) + tuple(range(k_axis + len(digits), len(split)))
    if not zeros:
        return move(x, lambda st: st.reshape(split).permute(perm).reshape(x.shape))
    pads = tuple((0, zeros) if ax == k_axis + len(digits) - 1 else (0, 0) for ax in range(len(split)))
    K = x.shape[k_axis] // digits[order[-1]] * (digits[order[-1]] + zeros)
    shape = x.shape[:k_axis] + (K,) + x.shape[k_axis + 1:]
    return move(x, lambda st: st.reshape(split).permute(perm).pad(pads, 0.0).reshape(shape), fill=0.0)


def _kn_strided(acc, g) -> bool:
    """B is one strided 2-D read with n contiguous (any alignment): the wgmma path transposes it."""
    return acc is not None and bool(g.n_axes) and acc.strides[g.n_axes[-1]] == 1 and \
        not any(acc.strides[ax] for ax in g.batch_axes)


def tc_plan(step: Step, names: dict[Node, str], staged: dict | None = None, relax_kn: bool = False):
    """The tensor-core GEMM's index maps and operand modes for this step, or (None, reason).
    `staged` maps "a"/"b" to the Access of a staged copy (see `_stage`). An operand that is
    neither cp.async-ready nor staged is gathered element by element, as long as its values
    are exact in the half type."""
    g = step.gemm
    x = g.mul
    staged = staged or {}
    ta, tb = _pure_half_read(g.a, names), _pure_half_read(g.b, names)
    if ta is None or tb is None or ta != tb:
        return None, "operands are not one half type (tensor cores take f16/bf16 pairs)"
    acc_a = staged.get("a") or resolve(g.a, lambda n: n in names)
    acc_b = staged.get("b") or resolve(g.b, lambda n: n in names)
    k = g.k_axis
    cR = contiguous_strides(g.reduce.shape)
    sizes = x.shape
    K = sizes[k]
    sa = acc_a.strides if acc_a is not None else cR
    sb = acc_b.strides if acc_b is not None else cR
    m, a_sm, c_sm, left_m = _merge(list(g.m_axes), x.shape, sa, cR)
    n, b_sn, c_sn, left_n = _merge(list(g.n_axes), x.shape, sb, cR)
    if m < 16 or n < 16:
        return None, "too small for tensor-core tiles"
    a_gather = not ("a" in staged or _cp_async_ready(acc_a, k, sizes))
    if "b" in staged:
        layout = "nk" if acc_b.strides[k] == 1 else "kn"
        b_gather = False
    elif _cp_async_ready(acc_b, k, sizes):
        layout, b_gather = "nk", False
    elif g.n_axes and (_cp_async_ready(acc_b, g.n_axes[-1], x.shape) or (relax_kn and _kn_strided(acc_b, g))):
        layout, b_gather = "kn", False
    else:
        layout, b_gather = "nk", True
    batch_axes = list(g.batch_axes) + left_m + left_n
    batch = tuple((x.shape[ax], sa[ax] if acc_a is not None else 0, sb[ax] if acc_b is not None else 0, cR[ax])
                  for ax in batch_axes)
    b_sk = acc_b.strides[k] if acc_b is not None else 0
    if b_gather:
        shape = gemm_tc.GemmShape(m, n, K, batch, acc_a.offset if acc_a is not None else 0, a_sm, 0, "nk", 0, 0,
                                  c_sm, c_sn)
    else:
        shape = gemm_tc.GemmShape(m, n, K, batch, acc_a.offset if acc_a is not None else 0, a_sm,
                                  acc_b.offset, layout, b_sk, b_sn, c_sm, c_sn)
    groups = (batch_axes, list(g.m_axes)[len(left_m):], list(g.n_axes)[len(left_n):])
    return (shape, acc_a, acc_b, a_gather, b_gather, ta, groups), ""


EXPANDED_COPY = 2   # a staged operand more than this many times its buffer is gathered instead


def stage_operands(name: str, step: Step, names: dict[Node, str], M: set[Node], sched: "Schedule",
                   keep_kn_b: bool = False):
    """Copy kernels for the operands cp.async cannot read directly (unaligned rows, several
    views): one memory-bound pass each, after which the product runs at full speed.
    -> (staged accesses by side, extra buffer nodes, sources, launches)."""
    g = step.gemm
    if _pure_half_read(g.a, names) is None or _pure_half_read(g.b, names) is None:
        return {}, (), [], []
    k = g.k_axis
    sizes = g.mul.shape
    acc_a = resolve(g.a, lambda n: n in names)
    acc_b = resolve(g.b, lambda n: n in names)
    plans = []
    if not _cp_async_ready(acc_a, k, sizes):
        plans.append(("a", g.a, set(g.n_axes), k))
    b_ok = _cp_async_ready(acc_b, k, sizes) or (g.n_axes and _cp_async_ready(acc_b, g.n_axes[-1], sizes)) or \
        (keep_kn_b and _kn_strided(acc_b, g))
    if not b_ok and g.n_axes:
        # keep B's source order: n innermost unless k is the contiguous one
        last = k if acc_b is not None and abs(acc_b.strides[k]) == 1 else g.n_axes[-1]
        plans.append(("b", g.b, set(g.m_axes), last))
    staged, extra, srcs, launches = {}, [], [], []
    for side, node, drop, last in plans:
        r = _stage(node, names, drop, last, k)
        if r is None:
            continue
        copy, base, acc = r
        if _expanded(copy, base):
            # a window view (im2col): not copied whole; read in 16-byte runs from a copy of
            # its source where the reduction allows, else gathered in the product
            w = _restage_window(node, names, k) if side == "b" and sched.window == "runs" else None
            if w is None:
                continue
            copy, base, acc = w
            side = "b_runs"
        src, launch = _stage_kernel(name, side, copy, base, M, sched)
        staged[side] = acc
        extra.append(copy)
        srcs.append(src)
        launches.append(launch)
    return staged, tuple(extra), srcs, launches


def _stage_kernel(name: str, side: str, copy: Node, base: Node, M: set[Node], sched: "Schedule"):
    """(source, launch) of the copy kernel that fills a staged operand (`_stage`)."""
    src, launch = render_elementwise(f"{name}_stage_{side}", Step("elementwise", copy, [base]), M | {base}, sched)
    launch.kind, launch.detail = "stage", f"{side.upper()} -> {list(copy.shape)} " + launch.detail
    return src, launch


def _loaders(name: str, step: Step, names: dict[Node, str], params: str, groups) -> str:
    """lda_/ldb_/cflat_<name>: operand elements and output offsets from (batch, m, n, k) indices,
    rendered from the operands' own views (any layout)."""
    from backends.cuda.cexpr import flat_offset
    g = step.gemm
    out = []
    for fn, side, args in ((f"lda_{name}", g.a, "long long bz, int m, int k"),
                           (f"ldb_{name}", g.b, "long long bz, int k, int n")):
        em = Emitter(names, indent="  ")
        idx = _gemm_index(step, groups, "bz", "m" if side is g.a else "0", "n" if side is g.b else "0", "k")
        v = em.value(side, idx)
        out.append(f"DEV float {fn}({params}, {args}) {{\n" + "\n".join(em.lines) + f"\n  return (float)({v});\n}}")
    cflat = flat_offset(_gemm_index(step, groups, "bz", "row", "col", "0"), contiguous_strides(g.reduce.shape), 0,
                        g.reduce.numel)
    out.append(f"DEV long long cflat_{name}(long long bz, int row, int col) {{ return {cflat}; }}")
    return "\n".join(out)


def _gemm_index(step: Step, groups, bz: str, mm: str, nn: str, kk: str) -> tuple[str, ...]:
    """C index expressions over the product's axes from the batch, m, n and k indices: each
    group of axes (`groups`: batch, m, n) unflattened from its flat index ("0": all zero)."""
    sizes = step.gemm.mul.shape
    idx = ["0"] * len(sizes)
    for axes, e in zip(groups, (bz, mm, nn)):
        if e != "0":
            for a, v in zip(axes, unflatten(e, tuple(sizes[a] for a in axes))):
                idx[a] = v
    idx[step.gemm.k_axis] = kk
    return tuple(idx)


def _runs_offset(name: str, step: Step, operand: Node, groups) -> str:
    """ldb_runs_<name>(bz, k, n): the offset of B[k, n] in its staged source, read through
    `operand` (a view of that copy, `_restage_window`); at k a multiple of 8 the start of 8
    consecutive elements."""
    from backends.cuda.cexpr import c_index, tracker_offset
    got = tracker_offset(operand.arg, _gemm_index(step, groups, "bz", "0", "n", "k"))
    assert got is not None and not got[1], "a staged window reads no masked element"
    return f"DEV long long ldb_runs_{name}(long long bz, int k, int n) {{ return {c_index(got[0])}; }}"


def _want_wgmma(step: Step, sched: Schedule) -> bool:
    if sched.gemm == "mma" or not sched.wgmma_allowed():
        return False
    if sched.gemm == "wgmma":
        return True
    # auto, from H200 measurements: wgmma wins on long products (4096^3: 0.29 ms against 0.42 for
    # the best mma.sync tile); with k = 1024 (the MLP's and the block's products) mma.sync 128x128
    # with 8 warps was as fast or faster (MLP 0.260 ms against 0.266-0.299)
    g = step.gemm
    m = math.prod(g.mul.shape[a] for a in g.m_axes)
    n = math.prod(g.mul.shape[a] for a in g.n_axes)
    return m * n >= 4096 * 4096 and g.mul.shape[g.k_axis] >= 2048


def _tma_rows(step: Step) -> bool:
    """Whether the TMA kernel's tensor maps read this product's operands as they are (before
    any staging copy, which gives contiguous rows that it reads too)."""
    _, _, names = _params(step)
    tc, _ = tc_plan(step, names, relax_kn=True)
    return tc is not None and not tc[3] and not tc[4] and gemm_tma.fits(tc[0], tc[5].value) is None


def prior_choice(step: Step, sched: Schedule, tma: bool | None = None):
    """The tiles.rank_tiles choice of rank sched.tile_rank for this product (None for f32);
    `tma`: `_tma_rows(step)` where the caller has it."""
    from backends.cuda import tiles
    g = step.gemm
    if g.a.dtype not in HALVES and g.a.dtype != DType.f32:
        return None
    sizes = g.mul.shape
    m, n = math.prod(sizes[a] for a in g.m_axes), math.prod(sizes[a] for a in g.n_axes)
    k, batch = sizes[g.k_axis], math.prod(sizes[a] for a in g.batch_axes)
    inputs = set(step.inputs)
    acc_b = resolve(g.b, lambda x: x in inputs)
    b_kn = acc_b is not None and bool(g.n_axes) and acc_b.strides[g.n_axes[-1]] == 1
    ranked = tiles.rank_tiles(m, n, k, batch, b_kn, sched.wgmma_allowed(), wgmma_mn_allowed(),
                              tma=_tma_rows(step) if tma is None else tma)
    return ranked[min(sched.tile_rank, len(ranked) - 1)]


EPILOGUE_THREADS = 256


def _cublas_then_epilogue(name: str, step: Step, M: set[Node], sched: Schedule, unaligned: bool = False):
    """A product with an epilogue (bias, activation, residual) as eager runs it: cuBLAS writes
    the product into the output buffer, then a kernel of its own applies the epilogue there in
    place, element by element (the fused generated kernels of an f16 MLP took 0.262 ms on the
    H200, cuBLAS and a GELU pass 0.192). Only where the epilogue reads the product through pure
    reshapes, rounded to the output's dtype first (`_read_rounded`); else None."""
    from backends.cuda import cublas
    o, r = step.output, step.gemm.reduce
    if o is r or o.numel != r.numel or not o.dtype.is_float or not _read_rounded(o, r, M):
        return None
    call = cublas.plan_call(step, sched.allow_tf32, product_only=True)
    if call is None or not (unaligned or _aligned_enough(call)):
        return None
    src, launch = _epilogue_kernel(name, step, M, (), lambda names: load_expr("out", "flat", o.dtype),
                                   "the product's epilogue, in place after cuBLAS")
    return src, [Launch(name, "cublas", (1, 1, 1), (1, 1, 1), 0, o, list(step.inputs), call.describe(), call), launch]


def _epilogue_kernel(name: str, step: Step, M: set[Node], extra: tuple[Node, ...], product, detail: str):
    """(source, launch) of `<name>_epilogue`: one thread per output element applies the step's
    epilogue to the product (`product(names)`: its C expression at `flat`, given the kernel's
    buffer names; `extra`: buffers it reads beyond the step's inputs)."""
    o = step.output
    params, args, names = _params(step, extra)
    value = f"epi_{name}({args}, flat, {product(names)})"
    src = _epilogue(name, step, M, params, names) + f"""
extern "C" __global__ void __launch_bounds__({EPILOGUE_THREADS}) {name}_epilogue({params}) {{
  const long long flat = (long long)blockIdx.x * {EPILOGUE_THREADS} + threadIdx.x;
  if (flat >= {o.numel}LL) return;
  out[flat] = {store_value(value, o.dtype)};
}}"""
    return src, Launch(f"{name}_epilogue", "elementwise", (-(-o.numel // EPILOGUE_THREADS), 1, 1),
                       (EPILOGUE_THREADS, 1, 1), 0, o, list(step.inputs) + list(extra), detail)


def _read_rounded(o: Node, r: Node, M: set[Node], any_dtype: bool = False) -> bool:
    """Whether the epilogue from product `r` to output `o` reads `r` only through pure reshapes
    and, unless `r` has `o`'s dtype (or `any_dtype`), a cast to it first: then the product
    rounded to `o`'s dtype, stored in `o`'s buffer in `r`'s element order, is all the epilogue
    needs."""
    from backends.cuda.match import is_pure_reshape
    t = tree(o, M, stop=frozenset({r}))
    readers: dict[Node, list[Node]] = {}
    for n in t:
        for s in n.srcs:
            readers.setdefault(s, []).append(n)

    def ok(n: Node) -> bool:      # n carries r's values unchanged
        for u in readers.get(n, []):
            if u.op == Op.VIEW:
                if not (is_pure_reshape(u) and ok(u)):
                    return False
            elif not (any_dtype or r.dtype == o.dtype or u.op == Op.CAST and u.dtype == o.dtype):
                return False
        return True
    return ok(r)


def _read_in_order(o: Node, r: Node, M: set[Node]) -> bool:
    """Whether the epilogue from product `r` to output `o` reads `r` only through pure reshapes
    (then `o`'s element `flat` needs the product's element `flat`)."""
    return o.numel == r.numel and _read_rounded(o, r, M, any_dtype=True)


def _aligned_enough(call) -> bool:
    """f32 calls as they are; half-precision ones with every dimension cuBLAS reads in
    vectors aligned (cublas.aligned), else the staged form is tried first."""
    from backends.cuda import cublas
    return call.types[0] not in HALVES or cublas.aligned(call)


def _cublas_staged(name: str, step: Step, M: set[Node], sched: Schedule):
    """A half-precision product cuBLAS cannot read as it is (a permuted view) or would read
    unaligned (an odd leading dimension or size: `cublas.aligned`), as PyTorch's compiler runs
    odd sizes: the operands that need it copied into contiguous zero-padded buffers (`_stage`: the
    contiguous dimension and k rounded up to multiples of 8; zeros add nothing to the sums),
    cuBLAS writes the product, padded along n, into a buffer of its own, and a kernel applies the
    epilogue from there, dropping the padding. None when the step is not such a product."""
    from backends.cuda import cublas
    g = step.gemm
    o, r = step.output, g.reduce
    names = _params(step)[2]
    dt = _pure_half_read(g.a, names)
    if dt is None or _pure_half_read(g.b, names) != dt or r.dtype not in (dt, DType.f32) or not g.n_axes \
            or not o.numel or not o.dtype.is_float or not _read_in_order(o, r, M):
        return None
    sizes = g.mul.shape
    k, n = g.k_axis, g.n_axes[-1]
    # n axes outside the innermost are batch axes of the call, A read with stride 0 along them (a
    # convolution's images: its weights are the same for each)
    call_axes = dataclasses.replace(g, n_axes=(n,), batch_axes=tuple(sorted(g.batch_axes + g.n_axes[:-1])))
    pad_k, pad_n = sizes[k] % 8 != 0, sizes[n] % 8 != 0
    padded = tuple(sz + (-sz) % 8 if ax in (k, n) else sz for ax, sz in enumerate(sizes))
    inputs = list(step.inputs)
    direct = {"a": resolve(g.a, lambda x: x in inputs), "b": resolve(g.b, lambda x: x in inputs)}
    must = {"a"} if pad_k else set()
    must |= {"b"} if pad_k or pad_n else set()
    for stage in ([], ["a"], ["b"], ["a", "b"]):
        if not must <= set(stage) or any(direct[side] is None for side in ("a", "b") if side not in stage):
            continue
        accs, copies = {}, []
        for side in ("a", "b"):
            if side in stage:
                drop, last = (set(g.n_axes), k) if side == "a" else (set(g.m_axes), n)
                st = _stage(g.a if side == "a" else g.b, names, drop, last, k)
                if st is None:
                    break
                copy, base, acc = st
                copies.append((side, copy, base))
                accs[side] = acc
            else:
                accs[side] = direct[side]
        else:
            # the product rounded to the half type by cuBLAS where the program rounds it so
            # before any other use (half the bytes of an f32 product)
            kept = dt if r.dtype == dt or (o.dtype == dt and _read_rounded(o, r, M)) else r.dtype
            value_shape = tuple(1 if ax == k else sz for ax, sz in enumerate(padded))
            product = _padded_product(g, accs, padded, kept)
            buffers = list(dict.fromkeys([accs["a"].buffer, accs["b"].buffer]))
            c_strides = cublas.contiguous_c(g, padded)
            call = cublas.call_for(call_axes, padded, accs["a"].strides, accs["b"].strides, c_strides,
                                   (1 + buffers.index(accs["a"].buffer), 1 + buffers.index(accs["b"].buffer)),
                                   (accs["a"].offset, accs["b"].offset, 0), (dt, kept), 1.0, False)
            if call is None or not cublas.aligned(call) or c_strides[n] != 1:
                continue
            assert product.shape == value_shape
            srcs, launches = [], []
            for side, copy, base in copies:
                src, launch = _stage_kernel(name, side, copy, base, M, sched)
                srcs.append(src)
                launches.append(launch)
            at = "flat" if padded[n] == sizes[n] else f"(flat / {sizes[n]}LL) * {padded[n]}LL + flat % {sizes[n]}LL"
            src, epilogue = _epilogue_kernel(name, step, M, (product,), lambda names: load_expr(names[product], at, kept),
                                             "the product's epilogue, from cuBLAS's padded product")
            srcs.append(src)
            launches += [Launch(name, "cublas", (1, 1, 1), (1, 1, 1), 0, product, buffers, call.describe(), call), epilogue]
            return "\n".join(srcs), launches
    return None


def _padded_product(g, accs, padded, dtype: DType) -> Node:
    """The value cuBLAS writes in `_cublas_staged`, as a term: the contraction over the padded
    sizes of the two operands read as the call reads them (n padded in the product's shape), in
    `dtype`."""
    from ir import node as N
    from ir.view import ShapeTracker, View
    sides = []
    for acc in (accs["a"], accs["b"]):
        st = ShapeTracker((View(tuple(padded), tuple(acc.strides), acc.offset),), fill=0.0)
        sides.append(N.view(acc.buffer, st))
    if g.reduce.dtype != sides[0].dtype:
        sides = [N.cast(x, g.reduce.dtype) for x in sides]
    value = N.contract(sides[0], sides[1], (g.k_axis,))
    return N.contiguous(value if value.dtype == dtype else N.cast(value, dtype))


def render_gemm(name: str, step: Step, M: set[Node], sched: Schedule) -> tuple[str, Launch]:
    o = step.output
    if sched.gemm == "cublas":
        # the product as it is, or with its epilogue after it, where cuBLAS reads it aligned;
        # else staged into aligned buffers; else unaligned; else the generated kernels
        from backends.cuda import cublas
        call = cublas.plan_call(step, sched.allow_tf32)
        if call is not None and _aligned_enough(call):
            return "", Launch(name, "cublas", (1, 1, 1), (1, 1, 1), 0, o, list(step.inputs), call.describe(), call)
        for form in (lambda: _cublas_then_epilogue(name, step, M, sched), lambda: _cublas_staged(name, step, M, sched)):
            split = form()
            if split is not None:
                return split
        if call is not None:
            return "", Launch(name, "cublas", (1, 1, 1), (1, 1, 1), 0, o, list(step.inputs), call.describe(), call)
        split = _cublas_then_epilogue(name, step, M, sched, unaligned=True)
        if split is not None:
            return split
        sched = dataclasses.replace(sched, gemm=sched.cublas_fallback)
    tma_rows = None
    if sched.gemm == "auto" and sched.tc is None and sched.wg is None and sched.tma is None \
            and sched.wgmma_allowed():
        tma_rows = _tma_rows(step)
        if tma_rows:
            # operands the TMA kernel reads as they are: the prior's tile (on the H100 the fixed
            # mma.sync tile ran 16384x4096x1024 at 0.41x cuBLAS, the prior's TMA tile at 0.88x)
            sched = dataclasses.replace(sched, gemm="prior", tile_rank=0)
    if sched.gemm == "prior":
        choice = prior_choice(step, sched, tma_rows)
        if choice is not None and choice.kind == "tma":
            sched = dataclasses.replace(sched, gemm="wgmma", tma=choice.config, wg=None, tc=None)
        elif choice is not None and choice.kind == "wgmma":
            sched = dataclasses.replace(sched, gemm="wgmma", wg=choice.config, tc=None)
        else:
            sched = dataclasses.replace(sched, gemm="mma", tc=choice.config if choice is not None else None)
    as_planned = step
    if sched.use_tensor_cores and sched.stage_operands and sched.window == "runs":
        step = _reduction_for_runs(step, _params(step)[2])
    if sched.use_tensor_cores and _want_wgmma(step, sched):
        params, call, names = _params(step)
        staged, extra, pre_src, pre = stage_operands(name, step, names, M, sched, keep_kn_b=True) \
            if sched.stage_operands else ({}, (), [], [])
        if extra:
            params, call, names = _params(step, extra)
        tc, _ = tc_plan(step, names, staged, relax_kn=True)
        runs = staged.get("b_runs")
        if tc is not None and not tc[3] and (not tc[4] or runs is not None):
            epi = _epilogue(name, step, M, params, names)
            wg = _render_wgmma(name, step, M, sched, tc, extra, params, call, names, epi, runs)
            if wg is not None:
                return "\n".join(pre_src + [wg[0]]), pre + wg[1]
    params, call, names = _params(step)
    staged, extra, pre_src, pre = ({}, (), [], [])
    if sched.use_tensor_cores and sched.stage_operands:
        staged, extra, pre_src, pre = stage_operands(name, step, names, M, sched)
    if extra:
        params, call, names = _params(step, extra)
    epi = _epilogue(name, step, M, params, names)
    out_t = C_STORAGE[o.dtype]
    tc, why = tc_plan(step, names, staged) if sched.use_tensor_cores else (None, "tensor cores off")
    if tc is None and extra:           # staging did not make a tensor-core product: plain path
        return render_gemm(name, as_planned, M, dataclasses.replace(sched, stage_operands=False))
    if tc is not None:
        shape, acc_a, acc_b, a_gather, b_gather, dt, groups = tc
        cfg = sched.tc or default_tc(shape)
        pair = _pair_store(shape, o.dtype)
        loaders = _loaders(name, step, names, params, groups) if (a_gather or b_gather) else ""
        g = step.gemm
        runs = staged.get("b_runs") if b_gather else None
        b_name = names[acc_b.buffer] if acc_b is not None else "in0"
        if runs is not None:     # B in 16-byte runs of its staged source (`_restage_window`)
            loaders += "\n" + _runs_offset(name, step, runs, groups)
            b_name, b_gather = names[runs.srcs[0]], False
        b_n_fast = b_gather and bool(g.n_axes) and _columns_adjacent(g.b, names, g.n_axes[-1], g.k_axis)
        src = gemm_tc.render(name, dt.value, shape, cfg, params, call, epi, out_t, pair,
                             names[acc_a.buffer] if acc_a is not None else "in0", b_name,
                             a_gather, b_gather, loaders, b_n_fast, b_runs=runs is not None)
        mode = ("A gathered " if a_gather else "") + ("B gathered " if b_gather else "") + \
            ("by columns " if b_n_fast else "") + ("B in 16-byte runs " if runs is not None else "") + \
            "".join(f"{x.upper()} staged " for x in staged if x != "b_runs")
        return "\n".join(pre_src + [src]), pre + [Launch(name, "gemm_tc", gemm_tc.grid(shape, cfg), (cfg.threads, 1, 1),
                           cfg.smem_bytes(shape.b_layout), o, list(step.inputs) + list(extra),
                           f"M={shape.m} N={shape.n} K={shape.k} batch={shape.batch_count} B={shape.b_layout} {mode}"
                           f"tile={cfg.bm}x{cfg.bn}x{cfg.bk} warps={cfg.warps_m}x{cfg.warps_n} stages={cfg.stages}")]
    return _render_simt(name, step, M, sched, params, call, names, epi, why)


def _render_wgmma(name: str, step: Step, M: set[Node], sched: Schedule, tc, extra, params, call, names, epi,
                  runs: Node | None = None):
    """The wgmma GEMM (plus a transpose of an n-contiguous B into k-contiguous rows, padded to
    a multiple of 8), or None when the operands do not fit it. `runs`: B is a window read in
    16-byte runs of its staged source (`_restage_window`)."""
    from ir import node as N
    from ir.view import ShapeTracker, View
    shape, acc_a, acc_b, _, _, dt, _ = tc
    tma = sched.tma if sched.tma is not None else (default_tma() if sched.gemm == "auto" and sched.wg is None else None)
    if tma is not None and runs is None:
        got = _render_tma(name, step, M, tma, tc, extra, params, call, names, epi)
        if got is not None:
            return got
    cfg = sched.wg or default_wg()
    o = step.output
    launches = []
    src_parts = []
    b_node = acc_b.buffer if runs is None else runs.srcs[0]
    if runs is not None:     # (a gathered B's plan is "nk", k-contiguous)
        src_parts.append(_runs_offset(name, step, runs, tc[6]))
    if shape.b_layout == "kn" and cfg.b_mn and gemm_wgmma.aligned(shape, b_mn=True) \
            and not any(b[2] for b in shape.batch) and wgmma_mn_allowed():
        pass                                 # read n-contiguous B as is (transpose bit)
    elif shape.b_layout == "kn":
        cfg = dataclasses.replace(cfg, b_mn=0)
        if any(b[2] for b in shape.batch):
            return None                      # a batched n-contiguous B: no transpose path yet
        kp = shape.k + (-shape.k) % 8
        view = View((shape.n, kp), (1, shape.b_sk), shape.b_off, ((0, shape.n), (0, shape.k)))
        bt = N.contiguous(N.view(acc_b.buffer, ShapeTracker((view,))))
        tname = f"{name}_bt"
        ctype = C_STORAGE[dt]
        src_parts.append(gemm_wgmma.render_transpose(tname, ctype, shape.n, shape.k, shape.b_off, shape.b_sk, kp))
        launches.append(Launch(tname, "transpose", ((shape.n + 63) // 64, (kp + 63) // 64, 1), (256, 1, 1), 0,
                               bt, [acc_b.buffer], f"B {shape.k}x{shape.n} -> k-contiguous"))
        extra = tuple(extra) + (bt,)
        params, call, names = _params(step, extra)
        epi = _epilogue(name, step, M, params, names)
        shape = gemm_tc.GemmShape(shape.m, shape.n, shape.k, shape.batch, shape.a_off, shape.a_sm, 0, "nk",
                                  1, kp, shape.c_sm, shape.c_sn)
        b_node = bt
    if shape.b_layout == "nk":
        cfg = dataclasses.replace(cfg, b_mn=0)
    if not gemm_wgmma.aligned(shape, b_mn=shape.b_layout == "kn"):
        return None
    if shape.b_layout == "kn" and not cfg.b_mn:
        return None
    pair = _pair_store(shape, o.dtype)
    b_name = names[b_node]
    epi, after = _wgmma_epilogue(name, step, M, params, names, epi)
    src_parts.append(gemm_wgmma.render(name, dt.value, shape, cfg, params, call, epi, C_STORAGE[o.dtype], pair,
                                       names[acc_a.buffer], b_name, b_runs=runs is not None, epi_after=after))
    launches.append(Launch(name, "gemm_wgmma", gemm_wgmma.grid(shape, cfg), (cfg.threads, 1, 1), cfg.smem_bytes, o,
                           list(step.inputs) + list(extra),
                           f"M={shape.m} N={shape.n} K={shape.k} batch={shape.batch_count} "
                           f"tile={cfg.bm}x{cfg.bn}x64 stages={cfg.stages}" + (f" B n-major (desc {cfg.b_mn})" if cfg.b_mn else "")
                           + (" B in 16-byte runs" if runs is not None else "")))
    return "\n".join(src_parts), launches


def _pair_store(shape: gemm_tc.GemmShape, out: DType) -> bool:
    """Whether a product's epilogue may store two neighbouring outputs as one pair: unit column
    stride, even rows and batch strides, a 2- or 4-byte float output."""
    return shape.c_sn == 1 and shape.c_sm % 2 == 0 and all(c % 2 == 0 for *_, c in shape.batch) \
        and out in (DType.f16, DType.bf16, DType.f32)


def _render_tma(name: str, step: Step, M: set[Node], cfg: gemm_tma.TMAConfig, tc, extra, params, call, names, epi):
    """The TMA-fed wgmma GEMM (backends/cuda/templates/gemm_tma.py), or None where its tensor
    maps do not fit the operands (the cp.async kernel takes those)."""
    from backends.cuda.tensor_map import TensorMap
    shape, acc_a, acc_b, _, _, dt, _ = tc
    if gemm_tma.fits(shape, dt.value) or gemm_tma.refuses(shape, cfg) \
            or (shape.b_layout == "kn" and not wgmma_mn_allowed()):
        return None
    o = step.output
    pair = _pair_store(shape, o.dtype)
    inputs = list(step.inputs) + list(extra)
    args = {"a": 1 + inputs.index(acc_a.buffer), "b": 1 + inputs.index(acc_b.buffer), "c": 0}   # `out` first
    types = {"a": dt, "b": dt, "c": o.dtype}
    maps = tuple(TensorMap(args[which], types[which], tuple(dims), tuple(strides), tuple(box), off)
                 for which, dims, strides, box, off in gemm_tma.tensor_maps(shape, cfg, o.dtype.itemsize))
    epi, after = _wgmma_epilogue(name, step, M, params, names, epi)
    src = gemm_tma.render(name, dt.value, shape, cfg, params, call, epi, C_STORAGE[o.dtype], pair, epi_after=after)
    launch = Launch(name, "gemm_tma", gemm_tma.grid(shape, cfg), (cfg.threads, 1, 1), cfg.smem_bytes, o,
                    inputs, f"M={shape.m} N={shape.n} K={shape.k} batch={shape.batch_count} "
                    f"tile={cfg.bm}x{cfg.bn}x64 stages={cfg.stages} TMA B {shape.b_layout}", tensor_maps=maps)
    return src, [launch]


def default_tma() -> gemm_tma.TMAConfig:
    """The TMA kernel's 128x256 tile, 3 stages, persistent, outputs staged in a shared tile of
    their own: the default for long products (m*n >= 4096^2, k >= 2048, `_want_wgmma`) whose
    tensor maps need a staging copy first. On the H100 0.93x cuBLAS at 4096^3 f16 (0.67x for
    the cp.async kernel, default_wg), 0.91x at 8192x1024x4096, 1.06x at 2048x11008x4096
    (results/h100-product-kernels-tma-2026-12-06-session25-788f819.txt)."""
    return gemm_tma.TMAConfig(128, 256, 3, True, True)


def default_wg() -> gemm_wgmma.WGConfig:
    """128x256 tiles, 4 stages, n-contiguous B transposed first, output staged through shared
    memory: the fastest verified variant for 4096^3 f16 on an H200 (0.287 ms against 0.295 for
    reading B n-major in place and 0.306 without the staged epilogue; h200-cuda.md)."""
    return gemm_wgmma.WGConfig(128, 256, 4, 0, True)


def default_tc(shape: gemm_tc.GemmShape) -> gemm_tc.TCConfig:
    tiles = ((shape.m + 127) // 128) * ((shape.n + 127) // 128) * shape.batch_count
    if tiles >= 66 and shape.m <= 64:   # (a convolution's output channels) half a 128-row tile would be idle
        return gemm_tc.TCConfig(64, 128, 32, 2, 2, 4)
    if tiles >= 66:      # measured best across the H200 workloads (benchmarks/results/h200-cuda.md)
        return gemm_tc.TCConfig(128, 128, 32, 2, 4, 4)
    return gemm_tc.TCConfig(64, 64, 32, 2, 2, 4)


def _render_simt(name, step, M, sched, params, call, names, epi, why) -> tuple[str, Launch]:
    g = step.gemm
    x = g.mul
    o = step.output
    sizes = x.shape
    m_sizes = tuple(sizes[a] for a in g.m_axes)
    n_sizes = tuple(sizes[a] for a in g.n_axes)
    b_sizes = tuple(sizes[a] for a in g.batch_axes)
    m, n, k = math.prod(m_sizes), math.prod(n_sizes), sizes[g.k_axis]
    nb = math.prod(b_sizes)

    loaders = [_loaders(name, step, names, params, (list(g.batch_axes), list(g.m_axes), list(g.n_axes)))]
    acc_a = resolve(g.a, lambda q: q in names)
    acc_b = resolve(g.b, lambda q: q in names)
    a_k = acc_a is not None and acc_a.strides[g.k_axis] == 1
    b_n = acc_b is not None and len(g.n_axes) > 0 and acc_b.strides[g.n_axes[-1]] == 1
    cfg = sched.simt or simt_default(step)
    conv = {DType.f16: "__float2half_rn", DType.bf16: "__float2bfloat16_rn"}.get(o.dtype, "")
    sources, offsets, vectors = None, [None, None], (None, None)
    if cfg.async_copy or cfg.vector_loads:
        # oa(bz, i=m, j=k), ob(bz, i=k, j=n): the f32 operands' offsets, for the async copies
        # and for 16-byte register loads where the read allows them
        groups = (list(g.batch_axes), list(g.m_axes), list(g.n_axes))
        offsets = [_f32_offsets(f"oa_{name}", g.a, _gemm_index(step, groups, "bz", "i", "0", "j"), names),
                   _f32_offsets(f"ob_{name}", g.b, _gemm_index(step, groups, "bz", "0", "j", "i"), names)]
    if cfg.vector_loads:
        vectors = (offsets[0][1] if offsets[0] and a_k and _vector_ready(acc_a, g.k_axis, sizes, 4) else None,
                   offsets[1][1] if offsets[1] and b_n and len(g.n_axes) == 1
                   and _vector_ready(acc_b, g.n_axes[0], sizes, 4) else None)
    if cfg.async_copy and all(offsets):
        sources = tuple(buf for _, buf in offsets)
    loaders += [text for text, _ in filter(None, offsets) if sources or any(vectors)]
    src = gemm_simt.render(name, m, n, k, cfg, params, call, "\n".join(loaders), epi, conv, a_k, b_n, nb, sources,
                           vectors)
    return src, Launch(name, "gemm_simt", gemm_simt.grid(m, n, nb, cfg), (cfg.threads, 1, 1), 0, o, step.inputs,
                       f"M={m} N={n} K={k} batch={nb} tile={cfg.bm}x{cfg.bn} ({why})")


def _f32_offsets(fn: str, side: Node, idx: tuple[str, ...], names: dict[Node, str]):
    """(`fn(bz, i, j)`: the offset of an f32 operand's element at index `idx` (C expressions
    over bz, i, j) in its buffer, -1 where its view reads the zero fill; that buffer's parameter
    name) for the SIMT product's async copies, or None where the operand is not an f32 buffer
    read through views alone."""
    from backends.cuda.cexpr import c_index, tracker_offset
    read = _read_tracker(side, names)
    if read is None or side.dtype != DType.f32 or read[1].dtype != DType.f32:
        return None
    st, x = read
    got = tracker_offset(st, idx)
    if got is None:
        return None
    off, tests = got
    body = f"({' && '.join(tests)}) ? (long long)({c_index(off)}) : -1LL" if tests else f"(long long)({c_index(off)})"
    return f"DEV long long {fn}(long long bz, int i, int j) {{ return {body}; }}", names[x]


def render_attention(name: str, step: Step, M: set[Node], sched: Schedule) -> tuple[str, Launch]:
    from backends.cuda.plan import flash_access, mask_access
    fm = step.attention
    o = step.output
    params, call, names = _params(step)
    q, k, v = flash_access(fm)
    r1 = fm.qk.reduce
    nd = len(r1.shape)
    sq, skv, (d, dv) = r1.shape[nd - 3], r1.shape[nd - 1], fm.head_dims
    batch_shape = r1.shape[:nd - 3]
    assert o.numel == math.prod(batch_shape) * sq * dv
    # the output's layout: row-major (.., q, d), or the order of a layout view the plan stores
    # it through (a decoder's heads back beside each other, as the next product reads them)
    term = o
    while term.op != Op.ATTEND:
        term = term.srcs[0]
    cO = contiguous_strides(batch_shape + (sq, dv))
    if any(n.op == Op.VIEW and not is_pure_reshape(n) for n in _chain(term, o)):
        st = flash_output_strides(term, o)           # over the term's axes (.., q, 1, d)
        cO = st[:nd - 2] + st[nd - 1:]
    batch = tuple((batch_shape[a], q.strides[a], k.strides[a], v.strides[a], cO[a]) for a in range(nd - 3))
    shape = attn_t.AttnShape(sq=sq, skv=skv, d=d, dv=dv,
                             batch=batch, q_off=q.offset, k_off=k.offset, v_off=v.offset,
                             q_ss=q.strides[nd - 3], k_ss=k.strides[nd - 1], v_ss=v.strides[nd - 2],
                             o_ss=cO[nd - 3], o_sd=cO[nd - 2], scale_log2=fm.scale_log2)
    ma = mask_access(fm)
    if ma is not None:        # over the scores' axes (.., q, key)
        shape = dataclasses.replace(shape, mask=attn_t.AttnMask(
            C_STORAGE[ma.dtype], ma.offset, ma.strides[nd - 3], ma.strides[nd - 2], tuple(ma.strides[:nd - 3]),
            fm.mask_log2))
    args = (params, names[q.buffer], names[k.buffer], names[v.buffer], C_STORAGE[o.dtype],
            names[ma.buffer] if ma is not None else "", _keep(fm, names, batch_shape))
    about = f"sq={shape.sq} skv={shape.skv} d={shape.d} batch={shape.batch_count} " + "{}" \
        + (" +mask" if ma is not None else "") + (f" kv-heads shared x{_shared_kv(shape)}" if _shared_kv(shape) > 1 else "")
    cfg = sched.attn
    if isinstance(cfg, attn_wg.AttnWGConfig):
        if attn_wg.fits(shape) and sched.wgmma_allowed() and wgmma_mn_allowed():
            src = attn_wg.render(name, q.dtype.value, shape, cfg, *args)
            return src, Launch(name, "attention", attn_wg.grid(shape, cfg), (cfg.threads, 1, 1),
                               attn_wg.smem_bytes(shape, cfg), o, step.inputs,
                               about.format(f"rows/block={cfg.bq} ({cfg.wgs} warpgroups, wgmma) keys/tile={cfg.bkv}"))
        cfg = None              # head dims or a device the wgmma kernel does not take: the default below
    # two m-tiles per warp share K/V fragments; at head dims past 64 their registers spill
    cfg = cfg or attn_t.AttnConfig(4, 64, 2 if max(d, dv) <= 64 else 1)
    src = attn_t.render(name, q.dtype.value, shape, cfg, *args)
    return src, Launch(name, "attention", attn_t.grid(shape, cfg), (cfg.threads, 1, 1), attn_t.smem_bytes(shape, cfg),
                       o, step.inputs, about.format(f"rows/block={cfg.bq} ({cfg.warps} warps x {cfg.mtiles} m-tiles) "
                                                    f"keys/tile={cfg.bkv}"))


def _keep(fm, names: dict, batch_shape: tuple[int, ...]) -> "attn_t.Keep | None":
    """The flash kernel's kept-score predicate keep(row, key) as a C++ lambda over the batch
    entry `bz` and the kernel's inputs, and its (sq, skv) plane where it reads no input and is
    the same for every batch entry (the kernel then skips key tiles it removes)."""
    if fm.keep is None:
        return None
    from backends.cuda.match import _const_axes
    import numpy as np
    from ir.graph import toposort
    from ir.interpreter import evaluate_nodes
    from ir.node import move
    keep = fm.keep
    em = Emitter(names, indent="    ", prefix="kp")
    idx, inner = [], 1
    for size in reversed(batch_shape):
        idx.insert(0, f"((int)((bz / {inner}) % {size}))" if size > 1 else "0")
        inner *= size
    val = em.value(keep, tuple(idx) + ("row", "key"))
    code = ("auto keep = [&](int row, int key) -> bool {\n" + em.code() + "\n"
            f"    return {'!' if fm.keep_negated else ''}{val};\n  }};")
    plane = None
    nb = len(batch_shape)
    if not any(n.op == Op.INPUT for n in toposort([keep])) and set(range(nb)) <= _const_axes(keep):
        # batch entry 0's plane (a view of keep, so that a broadcast keep is evaluated once)
        first = move(keep, lambda st: st.shrink(tuple((0, 1) for _ in range(nb)) + ((0, keep.shape[-2]), (0, keep.shape[-1])))
                     .reshape(keep.shape[-2:]))
        if sum(n.numel for n in toposort([first])) <= 1 << 27:      # else: no table, every tile tested
            plane = np.asarray(evaluate_nodes([first], {})[0], bool)
            plane = ~plane if fm.keep_negated else plane
    return attn_t.Keep(code, plane)


def _shared_kv(shape) -> int:
    """Query heads per key/value head (batch axes where K and V do not move: GQA)."""
    out = 1
    for size, sq, sk, sv, _ in shape.batch:
        if sk == 0 and sv == 0 and sq != 0:
            out *= size
    return out


RENDERERS = {"elementwise": render_elementwise, "generic": render_generic, "row": render_row,
             "gemm": render_gemm, "attention": render_attention}


def render_program(steps: list[Step], M: set[Node], sched: Schedule, prefix: str = "",
                   prelude: bool = True) -> tuple[str, list[Launch]]:
    """One translation unit with every step's kernel, and the launches in order. A step whose
    code is another's but for its name (the same kernel on other buffers) launches that one's
    kernels, compiled once: a 2-layer decoder's 26 launches run 19 kernels (layers built on
    stacked weights differ in their offsets)."""
    parts, launches = ([PRELUDE] if prelude else []), []
    seen: dict[str, str] = {}      # code with the step's name blanked -> the first such step's name
    for i, st in enumerate(steps):
        if st.output.numel == 0:    # writes no element: no kernel (its readers read nothing of it)
            continue
        name = f"{prefix}k{i}_{st.kind}"
        src, launch = RENDERERS[st.kind](name, st, M, sched)
        group = launch if isinstance(launch, list) else [launch]
        same = seen.setdefault(src.replace(name, "\0"), name) if src else name
        if same != name:
            group = [dataclasses.replace(l, name=l.name.replace(name, same), detail=f"{l.detail} (the code of {same})")
                     if l.library is None else l for l in group]
            launches.extend(l for l in group if l.output.numel > 0 and min(l.grid) > 0)
            continue
        parts.append(f"// step {i}: {st.describe()}  [{'; '.join(l.detail for l in group)}]\n" + src)
        # (CUDA rejects a grid of zero blocks; such a launch has nothing to do)
        launches.extend(l for l in group if l.output.numel > 0 and min(l.grid) > 0)
    # a value stored as an output's reshape (plan._store_reshaped_outputs) lives in that output's buffer
    stored = {st.output: st.store for st in steps if st.store is not None}
    if stored:
        launches = [dataclasses.replace(l, output=stored.get(l.output, l.output),
                                        inputs=[stored.get(n, n) for n in l.inputs]) for l in launches]
    return "\n\n".join(parts), launches
