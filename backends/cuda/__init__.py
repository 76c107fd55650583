"""The CUDA target: primitive graphs -> CUDA C++ kernels (templates for matrix products,
attention, row reductions and elementwise work; a generic kernel for the rest), compiled with
nvcc for the device's own architecture, loaded and launched with pycuda.

`import backends.cuda` needs neither pycuda nor a GPU; `CUDABackend.unavailable_reason()`
says what is missing. `render(graph)` works anywhere (it is what CPU-only tests check).
"""
from __future__ import annotations

from ir.graph import Graph
from backends.cuda.render import Schedule


def render(graph: Graph, schedule: Schedule | None = None, prefix: str = "", prelude: bool = True):
    """(CUDA C++ source, launches) for `graph`; needs no GPU, no pycuda and no nvcc.
    `prefix` names the kernels apart when several graphs share one translation unit."""
    from backends.cuda.plan import plan
    from backends.cuda.render import render_program
    steps = plan(graph)
    M = {s.output for s in steps}
    return render_program(steps, M, schedule or Schedule(), prefix, prelude)


def _window_reads(steps) -> set[str]:
    """How the default schedule reads the products' operands that are window views too large to
    copy whole (render.EXPANDED_COPY): "gathered" element by element, "runs" in 16-byte runs of
    a copy of their source (render._restage_window)."""
    from backends.cuda.render import render_gemm
    M = {s.output for s in steps}
    found = set()
    for i, s in enumerate(steps):
        if s.kind == "gemm":
            try:
                _, launches = render_gemm(f"probe{i}", s, M, Schedule())
            except Exception:    # a product that does not render is the build's to report
                continue
            for l in launches if isinstance(launches, list) else [launches]:
                found |= {"gathered"} if "gathered" in l.detail else set()
                found |= {"runs"} if "16-byte runs" in l.detail else set()
    return found


class CUDABackend:
    name = "cuda"

    def unavailable_reason(self) -> str | None:
        try:
            import pycuda.driver as drv  # noqa: F401
        except Exception as e:  # ImportError, or a pycuda built against a missing libcuda
            return f"pycuda is not importable ({type(e).__name__}: {e}); install it with pip install 'saturn-tensor[cuda]'"
        from backends.cuda.toolchain import find_nvcc
        if find_nvcc() is None:
            return "nvcc (the CUDA toolkit's compiler) was not found; set SATURN_NVCC or put it on PATH"
        try:
            drv.init()
            if drv.Device.count() == 0:
                return "no CUDA device is visible"
        except Exception as e:
            return f"the CUDA driver did not initialize ({e})"
        return None

    def schedules(self, graph: Graph) -> list[Schedule]:
        """Candidate schedules, the first tried first (the default heuristic, or for a program
        with products and attention the decoders' measured best)."""
        from backends.cuda.plan import needs_kernel_ir, plan
        from backends.cuda.templates.attention import ATTN_CONFIGS
        from backends.cuda.templates.gemm_tc import TC_CONFIGS
        if needs_kernel_ir(graph):
            return [Schedule(lowering="kernel_ir", name="kernel_ir")]
        steps = plan(graph)
        kinds = {s.kind for s in steps}
        windows = _window_reads(steps) if "gemm" in kinds else set()
        out = [Schedule()]
        from backends.cuda.render import simt_default, simt_only
        defaults = {simt_default(s) for s in steps if s.kind == "gemm" and simt_only(s)}
        if defaults:
            # (f32 products) the same SIMT kernel under every tensor-core schedule: its own tiles,
            # but for one that renders what the default does
            from backends.cuda.templates.gemm_simt import SIMT_CONFIGS
            out += [Schedule(simt=c, name=c.name) for c in SIMT_CONFIGS if defaults != {c}]
        if "gemm" in kinds:
            # each product its own tile (backends/cuda/tiles.py): the prior's best, then second
            out += [Schedule(gemm="prior", name="prior"), Schedule(gemm="prior", tile_rank=1, name="prior#2")]
            out += [Schedule(tc=c, gemm="mma", name=f"tc{c.bm}x{c.bn}x{c.bk}w{c.warps_m}x{c.warps_n}s{c.stages}")
                    for c in TC_CONFIGS]
            if self._has_wgmma():
                from backends.cuda.render import wgmma_mn_allowed
                from backends.cuda.templates.gemm_wgmma import WG_CONFIGS, WG_MN_CONFIGS
                configs = list(WG_CONFIGS) + (list(WG_MN_CONFIGS) if wgmma_mn_allowed() else [])
                out += [Schedule(wg=c, gemm="wgmma", name=f"wgmma{c.bm}x{c.bn}s{c.stages}" + (f"mn{c.b_mn}" if c.b_mn else "")
                                 + ("e" if c.smem_epilogue else "")) for c in configs]
                from backends.cuda.templates.gemm_tma import TMA_CONFIGS
                out += [Schedule(tma=c, gemm="wgmma", name=c.name) for c in TMA_CONFIGS]
        if "gemm" in kinds and self._cublas_reason() is None:
            # plain products by cuBLAS (cublas.py); first where the default gathers a window
            # operand (a convolution's im2col view) element by element: on the H100 the 3x3
            # ResNet layers ran 0.197 / 0.106 ms under cuBLAS (window staged) against 0.391 /
            # 0.172 gathered (results/h100-bench-2026-12-06-session23-6af4cfd.*), and a cold
            # search at budget 10 may time only its first schedule
            out.insert(0 if "gathered" in windows else 1, Schedule(gemm="cublas", name="cublas"))
        if "runs" in windows and "gathered" not in windows:
            # windows read in 16-byte runs: the prior's tiles first; on the H100 the three 3x3
            # ResNet layers ran 0.101 / 0.057 / 0.051 ms under it, 0.099 / 0.073 / 0.067 under
            # the default and 0.193 / 0.104 / 0.088 under cuBLAS (window staged) (results/raw/
            # h100-conv-runs-2026-12-06-session24-d72a6ed.txt)
            prior = next((x for x in out if x.name == "prior"), None)
            if prior is not None:
                out.remove(prior)
                out.insert(0, prior)
        if "runs" in windows:     # the window gathered element by element instead of read in runs
            out.insert(3, Schedule(window="gather", name="gather"))
        wg_first = None
        if "attention" in kinds:
            out += [Schedule(attn=c, name=c.name) for c in ATTN_CONFIGS]
            if self._has_wgmma():
                from backends.cuda.render import wgmma_mn_allowed
                from backends.cuda.templates.attention_wgmma import WG_ATTN_CONFIGS, AttnWGConfig, fits_dims
                if wgmma_mn_allowed():
                    # first where the head dims fit: on the H100 the wgmma kernels beat the
                    # mma.sync ones on all 11 cases of benchmarks/attention_kernels.py, 64 keys per
                    # tile at head dim 64, 128 at 128 (results/h100-attention-kernels-2026-12-06-*)
                    dims = [st.attention.head_dims for st in steps if st.kind == "attention"]
                    if all(fits_dims(*d) for d in dims):
                        wg_first = AttnWGConfig(2, 64 if max(max(d) for d in dims) <= 64 else 128)
                        out.insert(0, Schedule(attn=wg_first, name=wg_first.name))
                    out += [Schedule(attn=c, name=c.name) for c in WG_ATTN_CONFIGS if c != wg_first]
            if "gemm" in kinds:   # a decoder: its products' tiles and its attention's together
                pairs = [Schedule(gemm="prior", attn=c, name=f"prior+{c.name}")
                         for c in ATTN_CONFIGS[1:3]]
                # first, before the default: on the H200 decoders (Llama and GPT-2, main and odd
                # sizes) prior tiles with 4 warps x 1 m-tile attention were within 3% of the best
                # of 7 schedules on all four, the default 1-36% slower (results/
                # h200-2026-12-01-decoder.md); a decoder's search at budget 10 on the H100 built
                # and timed only its first schedule
                out.insert(0, pairs[1])
                out += [pairs[0]]
                if self._cublas_reason() is None:
                    # first of all: products by cuBLAS with their epilogues in place, attention
                    # as above; on the H100 the fastest of 8 schedules on 5 of 6 decoders and
                    # blocks, 0.60 ms against 0.85 for the Llama decoder (results/raw/
                    # h100-decoder-bench-2026-12-05-session19-ccb0414.log); with the wgmma
                    # attention where it fits (a decoder's search at budget 10 times only its
                    # first schedule)
                    for c in ([ATTN_CONFIGS[2]] + ([wg_first] if wg_first else [])):
                        out.insert(0, Schedule(gemm="cublas", cublas_fallback="prior", attn=c,
                                               name=f"cublas+{c.name}"))
        if "row" in kinds:
            out += [Schedule(row_threads=t, name=f"row{t}") for t in (128, 256, 512)]
        out.append(Schedule(lowering="kernel_ir", name="kernel_ir"))   # the shared kernel IR, rendered generically
        return out

    @staticmethod
    def _cublas_reason() -> str | None:
        from backends.cuda import cublas
        return cublas.unavailable_reason()

    @staticmethod
    def _has_wgmma() -> bool:
        """Warpgroup MMA needs compute capability 9.x; SATURN_CUDA_NO_WGMMA=1 turns it off."""
        import os
        if os.environ.get("SATURN_CUDA_NO_WGMMA"):
            return False
        try:
            from backends.cuda.runtime import get_runtime
            return get_runtime().info.arch.startswith("sm_9")
        except Exception:
            return False

    @property
    def device_name(self) -> str:
        try:
            from backends.cuda.runtime import get_runtime
            info = get_runtime().info
            return f"{info.name} {info.arch}"
        except Exception:
            return "cuda"

    def build(self, graph: Graph, schedule: Schedule | None = None):
        """Compile and load `graph`. Raises runtime.CUDAFailure (with .stage/.reason/.log) when
        the candidate cannot run: a compile error, too many registers or too much shared memory."""
        from backends.cuda import toolchain
        from backends.cuda.executable import CUDAExecutable
        from backends.cuda.runtime import CUDAFailure, get_runtime
        import dataclasses
        rt = get_runtime()
        schedule = schedule or Schedule()
        if schedule.arch is None:
            schedule = dataclasses.replace(schedule, arch=rt.info.arch)
        from backends.cuda.plan import needs_kernel_ir
        if schedule.lowering == "kernel_ir" or needs_kernel_ir(graph):
            return self._build_kernel_ir(graph, rt)
        source, launches = self._source(graph, schedule)
        res = toolchain.compile_source(source, rt.info.arch)
        if res.error:
            raise CUDAFailure("compile", res.error, res.log)
        module = rt.load(res.binary)
        # the launches name the plan's nodes: the graph as the plan prepared it
        from backends.cuda.plan import prepare
        return CUDAExecutable(prepare(graph)[0], launches, source, module, rt, res.log)

    def _source(self, graph: Graph, schedule: Schedule):
        """The CUDA C++ that `build` compiles for `graph` under `schedule` (its arch set), and
        the launches."""
        source, launches = render(graph, schedule)
        if any(l.kind.startswith("gemm") for l in launches) and self._cublas_reason() is not None:
            source = f"// cuBLAS candidate not offered: {self._cublas_reason()}\n" + source
        return source, launches

    def precompile(self, jobs) -> None:
        """nvcc on every (graph, schedule) of `jobs` at once, on all cores: the builds that
        follow hit the compiler's cache, so a test or a table of many kernels waits for its
        slowest compile rather than for their sum. (Kernel-IR lowerings are left to their
        build; a source that fails to compile fails again there, with its reason.)"""
        import dataclasses
        import os
        from concurrent.futures import ThreadPoolExecutor
        from backends.cuda import toolchain
        from backends.cuda.plan import needs_kernel_ir
        from backends.cuda.runtime import get_runtime
        arch = get_runtime().info.arch
        sources = {self._source(g, dataclasses.replace(s or Schedule(), arch=arch))[0] for g, s in jobs
                   if (s is None or s.lowering != "kernel_ir") and not needs_kernel_ir(g)}
        with ThreadPoolExecutor(max(2, os.cpu_count() or 2)) as ex:
            list(ex.map(lambda src: toolchain.compile_source(src, arch), sources))

    @staticmethod
    def _build_kernel_ir(graph: Graph, rt):
        """ir.lower's kernel IR, each kernel rendered by backends/cuda/kir.py."""
        from ir.lower import lower
        from backends.cuda import toolchain
        from backends.cuda.kir import KIRExecutable, render_kir_program
        from backends.cuda.runtime import CUDAFailure
        try:
            program = lower(graph)
        except Exception as e:
            raise CUDAFailure("lower", f"{type(e).__name__}: {e}") from None
        source, launches = render_kir_program(program)
        res = toolchain.compile_source(source, rt.info.arch)
        if res.error:
            raise CUDAFailure("compile", res.error, res.log)
        return KIRExecutable(graph, program, launches, source, rt.load(res.binary), rt, res.log)

    def features(self, graph: Graph) -> tuple[float, ...]:
        """What the default plan runs for `graph`, counted for the cost model (plan_cost.py)."""
        from backends.cuda.plan_cost import plan_features
        return plan_features(graph)

    def try_build(self, graph: Graph, schedule: Schedule | None = None):
        """(executable, None) or (None, reason): failures as data."""
        from backends.cuda.runtime import CUDAFailure
        try:
            return self.build(graph, schedule), None
        except CUDAFailure as e:
            return None, str(e)
