"""Run simple rendered CUDA kernels on the CPU, for tests on machines without a GPU.

Kernels that use no shared memory, barriers or warp instructions (the kernel-IR renderer's
without row threads, the elementwise template, the generic one with a thread per output) are plain C++ once `__global__` is defined away:
they are compiled with the host compiler against CUDA's half-precision headers and run
thread by thread, one block after another. Not a timing tool; a semantics check.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile

import numpy as np

from backends.cuda.templates.prelude import FLOAT_TO_INT

HOST_PRELUDE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cmath>
#include <cstdint>
#include <cstring>
struct saturn_dim3 { unsigned x, y, z; };
static saturn_dim3 blockIdx, threadIdx;
#define __global__
#define __launch_bounds__(...)
#define DEV static inline
static inline float __int_as_float(int x) { float f; std::memcpy(&f, &x, 4); return f; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
// the device's round-toward-zero conversions as the H200 gives them: saturating; NaN is 0 from
// f32 to i32, the most negative integer otherwise (the prelude's to_i32 / to_i64 test for NaN)
static inline long long saturn_sat(double x, double lo, double hi) {
    return x <= lo ? (long long)lo : x >= hi ? (long long)hi : (long long)std::trunc(x); }
static inline int __float2int_rz(float x) { return x != x ? 0 : (int)saturn_sat(x, -2147483648.0, 2147483647.0); }
static inline int __double2int_rz(double x) { return x != x ? INT32_MIN : (int)saturn_sat(x, -2147483648.0, 2147483647.0); }
static inline long long saturn_sat64(double x) {
    return x != x ? INT64_MIN : x >= 9223372036854775807.0 ? INT64_MAX : x <= -9223372036854775808.0 ? INT64_MIN : (long long)x; }
static inline long long __float2ll_rz(float x) { return saturn_sat64(x); }
static inline long long __double2ll_rz(double x) { return saturn_sat64(x); }
DEV float max_nan(float a, float b) { return (a != a) ? a : ((b != b || b > a) ? b : a); }
DEV int max_nan(int a, int b) { return a > b ? a : b; }
""" + FLOAT_TO_INT


def cuda_include() -> str | None:
    for d in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"):
        if d and os.path.exists(os.path.join(d, "include", "cuda_fp16.h")):
            return os.path.join(d, "include")
    return None


def available() -> str | None:
    """None when kernels can be run on the host here, else what is missing."""
    if shutil.which("g++") is None:
        return "no g++"
    if cuda_include() is None:
        return "no CUDA headers (cuda_fp16.h)"
    return None


def _strip_prelude(src: str) -> str:
    # the device prelude (inline PTX) is not needed by these kernels; cut it out
    start = src.find("#include <cuda_fp16.h>")
    if start < 0:
        return src
    # (up to the first step: a step's own helpers, e.g. a product's epilogue, come before its kernel)
    end = src.find("\n// step ", start)
    end = src.find("extern \"C\"", start) if end < 0 else end
    return src[:start] + src[end:] if end > 0 else src


def build(source: str, kernels: list[tuple[str, int, int, int]]):
    """Compile `source` (kernels as rendered) for the host. kernels: (name, n_params, grid, block).
    Returns a function run(name, pointers) that runs one launch."""
    body = _strip_prelude(source)
    wrappers, seen = [], {}
    for name, nparams, grid, block in kernels:
        if name in seen:    # one kernel launched again (a generic kernel reused): one wrapper
            if seen[name] != (nparams, grid, block):
                raise ValueError(f"kernel {name} launched with two shapes: {seen[name]}, {(nparams, grid, block)}")
            continue
        seen[name] = (nparams, grid, block)
        sig = ", ".join(["void*"] * nparams)
        args = ", ".join(f"a[{i}]" for i in range(nparams))
        wrappers.append(
            f'extern "C" void saturn_run_{name}(void** a) {{\n'
            f"  for (unsigned b = 0; b < {grid}u; ++b) for (unsigned t = 0; t < {block}u; ++t) {{\n"
            f"    blockIdx.x = b; threadIdx.x = t;\n"
            f"    ((void (*)({sig})){name})({args});\n  }}\n}}\n")
    text = HOST_PRELUDE + body + "\n" + "\n".join(wrappers)
    key = hashlib.sha256(text.encode()).hexdigest()[:24]
    tmp = tempfile.mkdtemp(prefix="saturn_host_")
    so = os.path.join(tmp, f"k{key}.so")
    cpp = os.path.join(tmp, "k.cpp")
    with open(cpp, "w") as f:
        f.write(text)
    proc = subprocess.run(["g++", "-O1", "-shared", "-fPIC", "-w", f"-I{cuda_include()}", cpp, "-o", so],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"host compile failed:\n{proc.stderr[:3000]}")
    lib = ctypes.CDLL(so)

    def run(name: str, arrays: list[np.ndarray]) -> None:
        ptrs = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
        getattr(lib, f"saturn_run_{name}")(ptrs)
    return run


def run_kernel_ir(graph, args) -> list[np.ndarray]:
    """Lower `graph` with ir.lower, render it with the CUDA kernel-IR renderer, run it here."""
    from ir.lower import lower
    from backends.cuda.kir import render_kir_program
    program = lower(graph)
    src, launches = render_kir_program(program, row_threads=0)   # no barriers here
    run = build(src, [(l.name, len(l.buffers), l.grid[0], l.block[0]) for l in launches])
    bufs = {}
    for b in program.buffers:
        bufs[b.name] = np.zeros(max(b.size, 1), dtype=b.dtype.np)
    for name, a in zip(program.inputs, args):
        bufs[name][: np.size(a)] = np.ascontiguousarray(a, dtype=program.buffer(name).dtype.np).reshape(-1)
    for l in launches:
        run(l.name, [bufs[b] for b in l.buffers])
    return [bufs[name][: int(np.prod(shape))].reshape(shape).copy()
            for name, shape in zip(program.outputs, program.output_shapes)]


EMULATED_KINDS = ("elementwise", "generic", "stage")   # stage: an elementwise copy


def run_templates(graph, args, schedule=None) -> list[np.ndarray]:
    """Render `graph` with the template planner (under `schedule`) and run it here; every step
    must be an elementwise or generic kernel (no shared memory, barriers or warp instructions),
    or a cuBLAS call: one into the step's output is stood in for by the interpreter's value (the
    product where an epilogue kernel finishes the step, else the step's value), one into a
    buffer of its own is emulated from its arguments (`cublas.emulate_call`)."""
    from backends.cuda import render
    from backends.cuda.plan import plan, prepare
    from ir.interpreter import evaluate_nodes
    src, launches = render(graph, schedule)
    products = {s.store or s.output: s.gemm.reduce for s in plan(graph) if s.gemm is not None}
    graph = prepare(graph)[0]       # (the launches name its nodes)
    kinds = {l.kind for l in launches}
    if not kinds <= set(EMULATED_KINDS) | {"cublas"}:
        raise ValueError(f"kernels of kinds {sorted(kinds - set(EMULATED_KINDS))} need a GPU")
    warps = [l.name for l in launches if l.detail == "warp per output"]
    if warps:
        raise ValueError(f"kernels {warps} reduce with warp shuffles: they need a GPU")
    kernels = [l for l in launches if l.library is None]
    finished = {l.output for l in launches if l.name.endswith("_epilogue")}
    run = build(src, [(l.name, 1 + len(l.inputs), l.grid[0], l.block[0]) for l in kernels])
    bufs = {}
    for node, a in zip(graph.inputs, args):
        bufs[node] = np.ascontiguousarray(a, dtype=node.dtype.np).reshape(-1).copy()
    for l in launches:
        if l.output not in bufs:
            bufs[l.output] = np.zeros(max(l.output.numel, 1), dtype=l.output.dtype.np)
        if l.library is not None and l.output in products:
            # the interpreter's value into the output: the product where an epilogue kernel
            # finishes the step in place, else the step's own value (a scale, a cast)
            env = {n: bufs[n][: n.numel].reshape(n.shape) for n in graph.inputs}
            value = products[l.output] if l.output in finished else l.output
            bufs[l.output][: l.output.numel] = evaluate_nodes([value], env)[0].reshape(-1)
        elif l.library is not None:    # into a buffer of its own: the call itself, emulated
            from backends.cuda.cublas import emulate_call
            emulate_call(l.library, [bufs[l.output]] + [bufs[n] for n in l.inputs])
        else:
            run(l.name, [bufs[l.output]] + [bufs[n] for n in l.inputs])
    return [bufs[o][: o.numel].reshape(o.shape).copy() for o in graph.outputs]
