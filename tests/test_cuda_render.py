"""The CUDA target without a GPU: planning (which template each program gets), operand
resolution, rendering every case, and (where nvcc exists) compiling the rendered text."""
from __future__ import annotations

import pytest

import compiler
from compiler import nn
from compiler.trace import spec, trace
from backends.cuda import CUDABackend, render
from cuda_cases import CASES, graph_of
from backends.cuda.plan import plan, prepare
from backends.cuda.resolve import resolve
from backends.cuda.toolchain import compile_source, find_nvcc, parse_resources


def kinds(fn, *specs):
    return [s.kind for s in plan(compiler.trace(fn, *specs))]


def test_import_without_pycuda_explains():
    reason = CUDABackend().unavailable_reason()
    assert reason is None or isinstance(reason, str) and len(reason) > 10


def test_templates_are_chosen():
    assert kinds(lambda a, b: a @ b, spec((64, 64), "f16"), spec((64, 64), "f16")) == ["gemm"]
    assert kinds(lambda x: x.softmax(-1), spec((8, 16))) == ["row"]
    assert kinds(lambda x, w, b: x.layer_norm((16,), w, b), spec((8, 16)), spec((16,)), spec((16,))) == ["row"]
    assert kinds(lambda x: (x * 1.7 + 0.3).gelu(), spec((8, 16))) == ["elementwise"]
    # attention: the traced program's online-contraction term is one flash kernel, at any
    # key length (no tile has to divide it) and inside a program with other products
    for shape in ((2, 4, 32, 64), (2, 3, 50, 64), (1, 2, 2047, 64), (1, 1, 7, 16)):
        assert kinds(nn.attention, *[spec(shape, "f16")] * 3) == ["attention"], shape
    block = compiler.trace(lambda *xs: nn.transformer_block(*xs, heads=2),
                           *nn.transformer_block_specs(1, 64, 64, 128, "f16"))
    assert [s.kind for s in plan(block)].count("attention") == 1
    # the same program without the term: products and a fused softmax row
    from ir.terms import expand_terms
    g = compiler.trace(nn.attention, *[spec((2, 4, 32, 64), "f16")] * 3)
    assert [s.kind for s in plan(expand_terms(g))] == ["gemm", "row", "gemm"]
    # f32 attention has no tensor-core path: the term runs as its definition (product, fused
    # softmax row, product); so does a head dim the kernel does not take
    assert kinds(nn.attention, *[spec((2, 4, 32, 64))] * 3) == ["gemm", "row", "gemm"]
    assert kinds(nn.attention, *[spec((2, 4, 32, 24), "f16")] * 3) == ["gemm", "row", "gemm"]
    # the MLP's bias + GELU ride in the first product's epilogue
    assert kinds(nn.mlp, spec((64, 32), "f16"), spec((32, 128), "f16"), spec((128,), "f16"),
                 spec((128, 32), "f16"), spec((32,), "f16")) == ["gemm", "gemm"]
    # a reduction over axis 0 has its own kernel, which writes the (reshaped) output's buffer
    assert kinds(lambda x: x.sum(0), spec((8, 16))) == ["generic"]
    assert kinds(lambda x: x.sum(0) + 1, spec((8, 16))) == ["generic", "elementwise"]


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_only_the_attend_term_reaches_the_flash_kernel(dtype):
    """The flash kernel is the attend term's renderer and nothing else's: the traced program
    (with its term) and the e-graph's candidates that keep a term plan as one attention kernel;
    no candidate without one does (no matcher reads the rules' tiled online-softmax form: it
    lowers to its products, row and generic kernels)."""
    from compiler.explore import explore
    g = compiler.trace(nn.attention, *[spec((2, 2, 256, 64), dtype)] * 3)
    cands = explore(g, max_candidates=16).candidates
    plans = {c.description: [s.kind for s in plan(c.graph)] for c in cands}
    assert plans["original program"] == ["attention"]
    assert any("two-level" in c.description and "(0 two-level" not in c.description for c in cands)
    for c in cands:
        if "attend" not in c.graph.op_counts():
            assert "attention" not in plans[c.description], c.description
    from backends.cuda import render as render_graph
    assert "mma" in render_graph(g)[0]


def test_resolve_composes_views_and_casts():
    g = compiler.trace(lambda q, k: q @ k.transpose(-1, -2), spec((2, 4, 16, 8), "f16"), spec((2, 4, 16, 8), "f16"))
    product = [n for n in g.nodes if n.op.value == "contract"][0]
    ins = set(g.inputs)
    a, b = (resolve(s, lambda n: n in ins) for s in product.srcs)
    assert a.strides == (512, 128, 8, 1, 0) and b.strides == (512, 128, 0, 1, 8)
    # permute then merge axes is not one strided view
    g = compiler.trace(lambda x: x.permute(0, 2, 1, 3).reshape(2, 16, 32) + 0, spec((2, 4, 16, 8)))
    view = [n for n in g.nodes if n.op.value == "view"][0]
    assert resolve(view, lambda n: n in set(g.inputs)) is None


@pytest.mark.parametrize("name", list(CASES))
def test_every_case_renders(name):
    g = graph_of(name)
    src, launches = render(g)
    # every output that is not an input is written by a kernel (the launches name the nodes
    # of the graph as the plan prepared it)
    outputs = prepare(g)[0].outputs
    assert {l.output for l in launches} >= {o for o in outputs if o.op.value != "input"}
    for l in launches:
        assert l.name in src and l.block[0] > 0 and min(l.grid) >= 1


COMPILE_SET = ["matmul_aligned_f16", "matmul_bt_f16", "attention_f16", "softmax_f32", "layernorm_f16",
               "sum0_f32", "movement_f16", "mlp_f16", "matmul_f32", "int_ops", "bf16_attention"]


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")
def test_rendered_text_compiles_with_nvcc():
    parts = []
    for i, name in enumerate(COMPILE_SET):
        src, _ = render(graph_of(name), prefix=f"c{i}_", prelude=(i == 0))
        parts.append(src)
    res = compile_source("\n".join(parts), "sm_90", kind="ptx")
    assert res.error is None, res.log[-3000:]
    assert b"mma.sync.aligned.m16n8k16" in res.binary and b"ldmatrix" in res.binary and b"cp.async" in res.binary
    # no kernel spills registers to local memory
    res = compile_source("\n".join(parts), "sm_90")
    assert res.error is None
    for kernel, r in parse_resources(res.log).items():
        assert r.get("spill_stores", 0) == 0, (kernel, r)


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")
def test_compile_error_is_returned_not_raised():
    res = compile_source("__global__ void broken( {", "sm_90")
    assert res.binary is None and "nvcc failed" in res.error


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")
def test_precompile_fills_the_cache_build_reads(monkeypatch, tmp_path):
    """`precompile` compiles the very sources `build` will (cuBLAS note included), so each
    build that follows is a cache hit; kernel-IR lowerings are left to their build."""
    import dataclasses
    import types
    from backends.cuda import CUDABackend, runtime, toolchain
    from backends.cuda.render import Schedule
    monkeypatch.setenv("SATURN_CACHE_DIR", str(tmp_path))
    fake = types.SimpleNamespace(info=types.SimpleNamespace(arch="sm_80"))
    monkeypatch.setattr(runtime, "get_runtime", lambda: fake)
    be = CUDABackend()
    jobs = [(graph_of("softmax_f32"), None), (graph_of("matmul_f16"), Schedule(name="x")),
            (graph_of("matmul_f16"), Schedule(lowering="kernel_ir"))]
    be.precompile(jobs)
    for g, s in jobs[:2]:
        src = be._source(g, dataclasses.replace(s or Schedule(), arch="sm_80"))[0]
        assert toolchain.compile_source(src, "sm_80").cached
    assert len(list(tmp_path.rglob("*.cubin"))) == 2


def host_inputs(graph, seed: int):
    """Random inputs for a host-simulated run: small integers for i32, normals otherwise."""
    import numpy as np
    from ir.dtypes import DType
    rng = np.random.default_rng(seed)
    return [rng.integers(-9, 10, n.shape).astype(np.int32) if n.dtype == DType.i32
            else rng.standard_normal(n.shape).astype(n.dtype.np) for n in graph.inputs]


HOST_CASES = ["softmax_f32", "gelu_f16", "matmul_f16", "sum0_f32", "movement_f16", "int_ops"]


@pytest.mark.parametrize("name", HOST_CASES)
def test_kernel_ir_rendering_runs_on_host(name):
    """The kernel-IR renderer's CUDA text, compiled for the host and run thread by thread,
    computes what the interpreter computes (no GPU needed)."""
    from backends.cuda import hostsim
    check_on_host(hostsim.run_kernel_ir, graph_of(name), 1, 1e-5)


TEMPLATE_HOST_CASES = ["movement_f16", "gelu_f32", "sum0_f32", "int_ops", "compare_where_f16", "permute_expand_f32"]


def check_on_host(run, graph, seed: int, tol: float) -> None:
    """`run` (a hostsim runner) on the graph's host inputs matches the interpreter."""
    import numpy as np
    from backends.cuda import hostsim
    from ir.interpreter import evaluate
    reason = hostsim.available()
    if reason:
        pytest.skip(reason)
    args = host_inputs(graph, seed)
    for got, want in zip(run(graph, args), evaluate(graph, args)):
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("name", TEMPLATE_HOST_CASES)
def test_elementwise_and_generic_templates_run_on_host(name):
    """The template path's elementwise / generic kernels (views, masks, casts, reductions as
    loops), compiled for the host and run thread by thread, match the interpreter."""
    from backends.cuda import hostsim
    check_on_host(hostsim.run_templates, graph_of(name), 2, 1e-6)


@pytest.mark.parametrize("rows,cols,dtype,sliced,vectors", [(7, 12, "f32", False, 3), (5, 10, "f32", False, 1),
                                                            (3, 24, "f16", False, 3), (6, 16, "f32", True, 2)])
def test_broadcast_rows_load_as_vectors_on_host(rows, cols, dtype, sliced, vectors):
    """x * w + b, w and b broadcast over rows: the elementwise template loads such a row as
    16-byte vectors when its length and offset allow (12, 24; not 10 or an offset slice), and
    the text computes what the interpreter does."""
    from backends.cuda import hostsim, render
    from compiler.trace import spec, trace

    def fn(x, w, b):
        return x * (w[1:] if sliced else w) + b

    g = trace(fn, spec((rows, cols), dtype), spec((cols + sliced,), dtype), spec((cols,), dtype))
    src, _ = render(g, prelude=False)
    assert src.count("reinterpret_cast<const uint") == vectors, src
    check_on_host(hostsim.run_templates, g, 3, 1e-3 if dtype == "f16" else 1e-6)


@pytest.mark.parametrize("name", ["softmax", "layernorm", "attention"])
def test_every_egraph_candidate_renders(name):
    """Every candidate the e-graph extracts for these workloads has a CUDA plan that renders
    (single-pass layernorm once failed: a per-row value was computed before the row sum it
    needed, because a node's needs were gathered in a non-topological order)."""
    from compiler.explain_cli import workload
    from compiler.explore import explore
    from backends.cuda import render as render_graph
    fn, specs = workload(name, "small", "f16" if name == "attention" else "f32")
    g = compiler.trace(fn, *specs)
    for c in explore(g, max_candidates=12).candidates:
        src, launches = render_graph(c.graph)
        assert launches and "__global__" in src, c.description


@pytest.mark.parametrize("dtype,tiles", [("f32", (3, 16, 5)), ("f16", (64, 64, 64)), ("f16", (200, 64, 136))])
def test_products_of_more_than_65535_batches_fit_the_grid(dtype, tiles):
    """gridDim.y and gridDim.z hold at most 65535 blocks: a batched product past that (the
    rules' attention forms give P @ V as 131072 products of 64 x 32) puts the extra batches
    on y, every block finds its batch and row tile, and blocks past the last batch leave."""
    from backends.cuda.render import Schedule
    from backends.cuda.templates import MAX_GRID_YZ, batched_grid
    m, k, n = tiles
    batch = 70001 if m * n < 4096 else 65537
    g = trace(lambda a, b: a @ b, spec((batch, m, k), dtype), spec((batch, k, n), dtype))
    src, launches = render(g, Schedule(arch="sm_90"))
    gemms = [l for l in launches if l.kind.startswith("gemm")]
    assert gemms
    for l in gemms:
        if l.kind == "gemm_tma" and "t += gridDim.x" in src:    # a persistent walk over (batch, tile)
            from backends.cuda.templates.gemm_tma import SMS
            assert l.grid[0] <= SMS and l.grid[1:] == (1, 1), l.grid
            continue
        assert max(l.grid[1:]) <= MAX_GRID_YZ and l.grid[1] * l.grid[2] >= batch, (l.kind, l.grid)
        assert "blockIdx.z *" in src and "return;" in src
    assert batched_grid(1, 1, 131072) == ((1, 3, 43691), 3)
    assert batched_grid(4, 7, 100) == ((4, 7, 100), 1)
    if find_nvcc() is not None:
        res = compile_source(src, "sm_90", kind="ptx")
        assert res.error is None, res.log[-3000:]


def test_decoders_plan_flash_with_mask_and_fused_epilogues():
    """The Llama decoder's attention (additive causal mask, GQA: 4 query heads per key/value
    head) is one flash kernel; RoPE's halves are not materialized; no product writes its f32
    sum (the half cast, the residual add and the SiLU-gate multiply are epilogues)."""
    from compiler import nn
    from backends.cuda.plan import expand_contractions, plan
    from ir.dtypes import DType
    specs = nn.llama_decoder_specs(2, 1, 128, 512, 8, 2, 1024, "f16")
    g = compiler.trace(lambda *xs: nn.llama_decoder(*xs, heads=8, kv_heads=2), *specs)
    steps = plan(g)
    per_layer = ["row", "gemm", "elementwise", "gemm", "elementwise", "gemm", "attention", "gemm", "row",
                 "gemm", "gemm", "gemm"]
    assert [s.kind for s in steps] == per_layer * 2
    att = [s for s in steps if s.kind == "attention"]
    assert all(s.attention.mask is not None and s.attention.mask.srcs[0].op.name == "INPUT" for s in att)
    assert all(s.output.dtype == DType.f16 for s in steps if s.kind == "gemm")
    src, launches = render(g)
    assert sum("+mask kv-heads shared x4" in l.detail for l in launches) == 2
    gspecs = nn.gpt2_decoder_specs(1, 1, 64, 256, 512, "f16")
    g2 = compiler.trace(lambda *xs: nn.gpt2_decoder(*xs, heads=4), *gspecs)
    assert [s.kind for s in plan(g2)] == ["row", "gemm", "attention", "gemm", "row", "gemm", "gemm"]


def test_tile_prior_ranks_by_waves():
    """The prior gives a 1024x512 product smaller tiles than 128x256 (32 such tiles idle most
    of the GPU) and every schedule it names renders."""
    from backends.cuda.render import Schedule
    from backends.cuda.tiles import rank_tiles
    ranked = rank_tiles(1024, 512, 2048, 1, True, True, False)
    assert ranked[0].config.bm * ranked[0].config.bn <= 128 * 128
    assert [c.estimate_s for c in ranked] == sorted(c.estimate_s for c in ranked)
    g = compiler.trace(lambda a, b: a @ b, spec((1024, 2048), "f16"), spec((2048, 512), "f16"))
    for r in range(3):
        src, launches = render(g, Schedule(gemm="prior", tile_rank=r, arch="sm_90a"))
        assert launches[-1].kind.startswith("gemm")


def test_tile_prior_offers_176_wide_tiles_only_to_k_contiguous_b():
    """1024x5632 (a Llama MLP's up projection) makes 256 tiles of 128x176, two even rounds on
    132 SMs: the prior offers that tile first, in clusters of two blocks sharing B, for a
    k-contiguous B (a weight used as x @ w.T) and never for an n-contiguous one, which the TMA
    kernel reads in 64-column boxes; the tile it names renders as the clustered TMA kernel."""
    from backends.cuda.render import Schedule
    from backends.cuda.tiles import rank_tiles
    nk = [c.name for c in rank_tiles(1024, 5632, 2048, 1, False, True, True, True)]
    assert nk[0] == "tma128x176s4pec2" and "tma128x176s4p" in nk, nk[:4]
    assert not any(c.config.bn % 64 for c in rank_tiles(1024, 5632, 2048, 1, True, True, True, True) if c.kind == "tma")
    g = compiler.trace(lambda x, w: x @ w.transpose(-1, -2), spec((1024, 2048), "f16"), spec((5632, 2048), "f16"))
    src, launches = render(g, Schedule(gemm="prior", tile_rank=0, arch="sm_90a"))
    assert launches[-1].kind == "gemm_tma" and "tile=128x176x64" in launches[-1].detail, launches[-1]
    assert "__cluster_dims__(2, 1, 1)" in src


def test_tile_prior_offers_the_ping_pong_tile_where_blocks_have_several_tiles():
    """1024x5632x2048 (352 tiles of 128x128, about three per block): the ping-pong tile, whose
    epilogues run under the other warpgroup's main loop, second (after the clustered 128x176
    tile); 1024x2048x5632 (128 tiles, one per block: one warpgroup would work alone) not among
    the first three; the 128x176 one first at 2048x11008x4096 (1008 tiles) and not at
    1024x5632x2048 (256: two per block)."""
    from backends.cuda.render import Schedule
    from backends.cuda.tiles import rank_tiles
    first3 = lambda m, n, k: [c.name for c in rank_tiles(m, n, k, 1, False, True, True, True)[:3]]
    assert first3(1024, 5632, 2048)[1] == "tma128x128s5ppe" and "tma128x176s4ppe" not in first3(1024, 5632, 2048)
    assert "tma128x128s5ppe" not in first3(1024, 2048, 5632)
    assert first3(2048, 11008, 4096)[0] == "tma128x176s4ppe"
    g = compiler.trace(lambda x, w: x @ w.transpose(-1, -2), spec((1024, 2048), "f16"), spec((5632, 2048), "f16"))
    src, launches = render(g, Schedule(gemm="prior", tile_rank=1, arch="sm_90a"))
    assert launches[-1].kind == "gemm_tma" and "named_arrive(3 - cw" in src, launches[-1]


def test_tile_prior_stores_by_tma_where_the_stores_outweigh_the_math():
    """Short products (k 128 in 64 batches; k 1024 over many tiles) get the TMA-store tile first,
    long ones (k 2048 and more) a tile that stores from registers or shared memory, and so do
    products of one wave (1024x1024x1024: 64 tiles), whose blocks have no next tile to
    multiply while their stores drain."""
    from backends.cuda.tiles import rank_tiles
    for m, n, k, batch, stores in [(4096, 4096, 128, 64, True), (16384, 4096, 1024, 1, True),
                                   (4096, 4096, 4096, 1, False), (1024, 5632, 2048, 1, False),
                                   (1024, 1024, 1024, 1, False), (1024, 3072, 1024, 1, False)]:
        best = rank_tiles(m, n, k, batch, False, True, True, True)[0]
        assert best.kind == "tma" and best.config.tma_store == stores, (m, n, k, batch, best.name)


def test_a_product_is_rounded_once_and_a_product_cast_up_keeps_its_rounding():
    """A plain f16 product's epilogue hands the f32 accumulator to the store, whose conversion is
    the one rounding (the epilogue rounded first and the store again: 5 conversions per output
    pair); a product cast up to f32 afterwards still holds f16 values, on the host runner."""
    import numpy as np
    from backends.cuda import hostsim
    from backends.cuda.render import Schedule
    plain = compiler.trace(lambda a, b: a @ b, spec((70, 96), "f16"), spec((96, 40), "f16"))
    src, _ = render(plain, Schedule(arch="sm_90a"))
    epi = src[src.index("DEV float epi_"):]
    assert "__float2half_rn" not in epi[:epi.index("\n}")], epi[:300]
    if hostsim.available() is not None:
        pytest.skip(hostsim.available())
    up = compiler.trace(lambda a, b: (a @ b).astype("f32"), spec((70, 96), "f16"), spec((96, 40), "f16"))
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((70, 96)).astype(np.float16), rng.standard_normal((96, 40)).astype(np.float16)]
    for g in (plain, up):
        got = np.asarray(hostsim.run_templates(g, args)[0])
        assert np.array_equal(got.astype(np.float16).astype(got.dtype), got)
        want = args[0].astype(np.float64) @ args[1].astype(np.float64)
        assert np.abs(got.astype(np.float64) - want).max() < 2e-2 * np.abs(want).max()
    assert got.dtype == np.float32


def test_views_of_layouts_past_2_31_index_in_64_bits():
    """A view composed through a broadcast layout of 2^32 elements (as a rewritten decoder's
    split products read their operands) forms its offsets in 64 bits: in 32 bits they wrapped
    negative (illegal addresses on the H200; wrong values here)."""
    import numpy as np
    from backends.cuda import hostsim
    if hostsim.available() is not None:
        pytest.skip(hostsim.available())

    def f(x):
        return x.reshape(1, 65536).expand(65536, 65536).reshape(65536 * 65536)[2**31 - 4:2**31 + 4] + 1.0
    g = compiler.trace(f, spec((65536,), "f32"))
    x = np.arange(65536, dtype=np.float32)
    want = x[(np.arange(2**31 - 4, 2**31 + 4)) % 65536] + 1
    np.testing.assert_array_equal(hostsim.run_templates(g, [x])[0], want)


def test_a_program_with_products_and_attention_tries_prior_tiles_with_attention_first(monkeypatch):
    """The decoders' measured best (where cuBLAS loads, its products with 4 warps x 1 m-tile
    attention; the prior's tiles with that attention next) come first, the default after them:
    a decoder's search whose budget builds one schedule times it."""
    from compiler import nn
    specs = nn.llama_decoder_specs(1, 1, 64, 256, 4, 2, 512, "f16")
    g = compiler.trace(lambda *xs: nn.llama_decoder(*xs, heads=4, kv_heads=2), *specs)
    for cublas in ("cuBLAS missing", None):
        monkeypatch.setattr(CUDABackend, "_cublas_reason", staticmethod(lambda: cublas))
        names = [s.name for s in CUDABackend().schedules(g)]
        first = (["cublas+attn_w4_m1_kv64"] if cublas is None else []) + ["prior+attn_w4_m1_kv64", "default"]
        assert names[:len(first)] == first and "prior+attn_w8_m1_kv64" in names
    names = [s.name for s in CUDABackend().schedules(compiler.trace(lambda a, b: a @ b, spec((64, 64), "f16"),
                                                                     spec((64, 64), "f16")))]
    assert not any(n.startswith("prior+attn") for n in names)


def test_nvcc_splits_compilation_only_where_it_can():
    """-split-compile (all cores) from nvcc 11.8 on; older ones would reject the flag."""
    from backends.cuda import toolchain
    for line, want in [("Build cuda_13.0.r13.0/compiler.36260728_0", True), ("Cuda compilation tools, release 11.8, V11.8.89", True),
                       ("Cuda compilation tools, release 11.7, V11.7.64", False), ("unknown", False)]:
        toolchain._VERSION["/fake/nvcc"] = line
        assert toolchain._splits("/fake/nvcc") is want, line
    del toolchain._VERSION["/fake/nvcc"]


@pytest.mark.parametrize("shape,dtype", [((5, 5), "f32"), ((64, 64), "f32"), ((7, 12), "f32"), ((6, 16), "f16")])
@pytest.mark.parametrize("form", ["transpose", "plus_transpose", "transpose_times_row"])
def test_buffers_read_through_a_view_are_not_loaded_at_the_output_element(shape, dtype, form):
    """A buffer read through a transposing view (also when the same buffer is read directly)
    is read at the view's index: the vector path once loaded it at the output's own element,
    and a transpose came back untransposed (found by the H200 fuzz, seed 310302)."""
    from backends.cuda import hostsim, render
    from compiler.trace import spec, trace
    r, c = shape
    fns = {"transpose": (lambda x: x.transpose(1, 0), [spec((r, c), dtype)]),
           "plus_transpose": (lambda x: x + x.transpose(1, 0), [spec((r, r), dtype)]),
           "transpose_times_row": (lambda x, w: x.transpose(1, 0) * w, [spec((r, c), dtype), spec((r,), dtype)])}
    fn, specs = fns[form]
    g = trace(fn, *specs)
    src, _ = render(g, prelude=False)
    check_on_host(hostsim.run_templates, g, 4, 1e-3 if dtype == "f16" else 1e-6)


def test_a_row_kernel_reads_a_transposed_input_through_its_view():
    """layer_norm of x.T: the row kernel may cache only reads at its own (row, column)
    element; x itself is read at the transposed index (seed 310269; row kernels use warp
    instructions, so this checks the text: nothing is cached and x is indexed by the view)."""
    from backends.cuda import render
    from compiler.trace import spec, trace
    g = trace(lambda x: x.transpose(1, 0).layer_norm((4,)), spec((4, 4), "f32"))
    src, _ = render(g, prelude=False)
    assert "cached=0" in src and "reinterpret_cast<const uint4*>(in0" not in src, src
    g = trace(lambda x: x.layer_norm((64,)), spec((8, 64), "f32"))
    assert "cached=1" in render(g, prelude=False)[0]           # a plain row read still is


def test_a_product_read_by_another_product_is_written_as_itself():
    # fuzz seed 320439 (H200): x @ w1 @ w2 with one output column. The first product's only
    # consumer chain is the second product's multiply, which was taken as its epilogue: the
    # first product was never written and the second read it as an unmaterialized sum
    mm = lambda x, w1, w2: x @ w1 @ w2
    specs = (spec((8, 8, 4)), spec((4, 3)), spec((3, 1)))
    g = compiler.trace(mm, *specs)
    steps = plan(g)
    assert [s.kind for s in steps] == ["gemm", "gemm"]
    assert steps[0].output.op.value == "sum" and steps[1].inputs[0] is steps[0].output
    render(g)
    # a product feeding the next one through an activation keeps that activation as its epilogue
    chain = compiler.trace(lambda x, w1, w2: (x @ w1).relu() @ w2, *specs)
    assert [s.output.op.value for s in plan(chain)] == ["where", "view"]     # relu is where(x > 0, x, 0)


def test_float_adds_and_multiplies_are_never_contracted_into_fmas():
    # H200, 1fbd04b: softmax of bf16 near its max chose a kernel computing exp2(x * c - max * c);
    # nvcc fused it into fma(x, c, -(max * c)), which at the max is max * c's rounding error
    # (+-1e31) instead of 0, and exp2 of it inf or 0: NaN rows. Every float add and multiply of
    # a program renders as the non-contracting intrinsic, in the templates and the kernel IR.
    import re
    from ir.lower import lower
    from backends.cuda.kir import render_kir_program
    from compiler.explore import Limits, explore
    fn = lambda x, w, b: x.softmax(-1) * w + b          # noqa: E731
    g = compiler.trace(fn, spec((4, 256), "bf16"), spec((256,)), spec((256,)))
    plain = re.compile(r"\((v\d+|x\d+\[[^]]*\]|acc\d+) [*+] ")
    candidates = explore(g, limits=Limits.for_budget(1.0)).candidates
    kir = [render_kir_program(lower(c.graph))[0] for c in candidates]
    for src in [render(c.graph)[0] for c in candidates] + kir:
        body = src[src.find('extern "C"'):]
        assert "__fmul_rn(" in body and "__fadd_rn(" in body
        assert not plain.search(body), plain.search(body).group(0)
    if find_nvcc() is not None:     # and nvcc emits no fma for them (it did for every candidate)
        for src in kir:
            res = compile_source(src, "sm_90", kind="ptx")
            assert res.error is None and b"fma.rn.f32" not in res.binary


EMPTY_ROWS = {
    "std_of_an_empty_vector": (lambda x: x.std(-1, keepdim=True), (0,)),     # fuzz seed 349293
    "sum_of_empty_rows": (lambda x: x.sum(-1), (5, 0)),
    "two_sums_of_empty_rows": (lambda x: (x * 2).sum(-1) + x.sum(-1), (3, 0)),
    "mean_of_empty_rows": (lambda x: x.mean(-1, keepdim=True) + 1, (4, 0)),
}


@pytest.mark.parametrize("name", list(EMPTY_ROWS))
def test_reductions_over_empty_rows_declare_no_zero_sized_arrays(name):
    """A row kernel over rows of 0 elements cached them in `float x0[0]`, which nvcc rejects
    ("zero-sized variable is not allowed in device code"): every schedule failed to build."""
    import re
    from backends.cuda.render import Schedule
    fn, shape = EMPTY_ROWS[name]
    g = trace(fn, spec(shape, "f32"))
    for sched in [Schedule()] + [Schedule(row_threads=t) for t in (128, 256, 512)]:
        src, _ = render(g, sched)
        assert not re.search(r"^\s*[\w<>: ]+\s\w+\[0\];", src, re.M), sched     # a declaration
        if find_nvcc() is not None:
            res = compile_source(src, "sm_90", kind="ptx")
            assert res.error is None, res.error


def test_steps_with_the_same_code_launch_one_kernel():
    """The second of two equal steps (here: the same product of two other inputs) launches the
    first's kernel; its code is in the source once."""
    import re
    a, b = spec((64, 96), "f16"), spec((96, 80), "f16")
    g = trace(lambda w, x, y, z: (w @ x).softmax(-1) + (y @ z).softmax(-1), a, b, a, b)
    steps = plan(g)
    src, launches = render(g)
    defined = re.findall(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(', src)
    assert len(set(defined)) == len(defined)
    assert {l.name for l in launches} <= set(defined)
    shared = [l for l in launches if "(the code of" in l.detail]
    assert shared and all(l.name in defined for l in shared)
    assert len(defined) < len(steps)
    # a decoder's layers: fewer kernels than launches
    specs = nn.llama_decoder_specs(2, 1, 64, 256, 4, 2, 512, "f16")
    g = compiler.trace(lambda *xs: nn.llama_decoder(*xs, heads=4, kv_heads=2), *specs)
    src, launches = render(g)
    assert len(set(l.name for l in launches)) < len(launches)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_a_product_with_an_epilogue_runs_as_cublas_then_its_epilogue_in_place(dtype):
    """Under the cuBLAS schedule, x @ w + b then GELU is cuBLAS's product into the output and
    one kernel applying the bias and GELU there (as eager runs it); the epilogue kernel, run
    here on the interpreter's product, gives the interpreter's result. An epilogue that uses
    the f32 product before rounding it is not split (`_read_rounded`)."""
    import numpy as np
    from backends.cuda import hostsim
    from backends.cuda.plan import plan
    from backends.cuda.render import Schedule, _read_rounded
    from ir.graph import toposort
    from ir.node import Node
    from ir.ops import Op
    from ir.interpreter import evaluate
    x, w, b = spec((33, 72), dtype), spec((72, 48), dtype), spec((48,), dtype)   # aligned (else staged)
    g = trace(lambda x, w, b: (x @ w + b).gelu(), x, w, b)
    src, launches = render(g, Schedule(gemm="cublas"))
    assert [l.kind for l in launches] == ["cublas", "elementwise"] and launches[1].name.endswith("_epilogue")
    assert launches[0].output is launches[1].output
    if hostsim.available() is None:
        rng = np.random.default_rng(0)
        args = [(rng.standard_normal(s.shape) / 4).astype(s.dtype.np) for s in (x, w, b)]
        got = hostsim.run_templates(g, args, Schedule(gemm="cublas"))[0].astype(np.float64)
        want = np.asarray(evaluate(g, args)[0]).astype(np.float64)
        assert np.array_equal(got, want)
    if find_nvcc() is not None:
        assert compile_source(src, "sm_90", kind="ptx").error is None
    # an epilogue that adds to the f32 product before rounding it: storing the rounded product
    # first would round twice, so such a step keeps a generated kernel
    step = plan(g)[0]
    r, o = step.gemm.reduce, step.output
    assert _read_rounded(o, r, {r, o})
    flat = next(n for n in toposort([o]) if n.op == Op.VIEW and n.srcs[0] is r)
    early = Node(Op.CAST, o.dtype, flat.shape, (Node(Op.ADD, r.dtype, flat.shape, (flat, flat)),))
    assert not _read_rounded(early, r, {r, early})


STAGED_CASES = {
    "odd product": (lambda a, b: a @ b, [(7, 13), (13, 5)]),
    "odd product, f32 epilogue": (lambda x, w, b: (x.astype("f32") @ w.astype("f32") + b.astype("f32")).relu(),
                                   [(5, 12), (12, 7), (7,)]),
    "bias and GELU, odd": (lambda x, w, b: (x @ w + b).gelu(), [(9, 11), (11, 21), (21,)]),
    "permuted operand, aligned": (lambda x, w: x.permute(1, 0, 2).reshape(16, 32) @ w, [(2, 16, 16), (32, 8)]),
    "batched, odd": (lambda a, b: a @ b, [(3, 5, 9), (3, 9, 7)]),
    "shared weight, odd": (lambda a, b, r: a @ b + r, [(3, 5, 9), (9, 7), (3, 5, 7)]),
    "transposed weight, odd": (lambda a, b: a @ b.T, [(6, 10), (3, 10)]),
    "3x3 convolution": (lambda x, w: _conv2d(x, w, padding=1), [(2, 3, 5, 6), (4, 3, 3, 3)]),
    "1x1 convolution": (lambda x, w: _conv2d(x, w), [(2, 16, 4, 4), (8, 16, 1, 1)]),
}


def _conv2d(*args, **kw):
    from compiler import conv
    return conv.conv2d(*args, **kw)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("case", sorted(STAGED_CASES))
def test_products_cublas_would_read_unaligned_run_staged_into_padded_buffers(case, dtype):
    """Under the cuBLAS schedule a half product with an odd size, a permuted operand or an
    image axis (a convolution's batch, its weights shared) runs as copies into zero-padded
    buffers where needed, one aligned cuBLAS call into a padded product, and its epilogue
    dropping the padding; run here with the call emulated from its own arguments
    (strides, leading dimensions, offsets; reads bounds-checked), it gives the interpreter's
    result."""
    import numpy as np
    from backends.cuda import cublas, hostsim
    from backends.cuda.render import Schedule
    from ir.interpreter import evaluate
    fn, shapes = STAGED_CASES[case]
    g = trace(fn, *[spec(s, dtype) for s in shapes])
    src, launches = render(g, Schedule(gemm="cublas"))
    calls = [l for l in launches if l.kind == "cublas"]
    assert calls and all(cublas.aligned(l.library) for l in calls), [l.detail for l in launches]
    assert any(l.name.endswith("_epilogue") and "padded product" in l.detail for l in launches)
    if hostsim.available() is None:
        rng = np.random.default_rng(1)
        args = [rng.standard_normal(s).astype(n.dtype.np) for s, n in zip(shapes, g.inputs)]
        got = hostsim.run_templates(g, args, Schedule(gemm="cublas"))[0].astype(np.float64)
        want = np.asarray(evaluate(g, args)[0]).astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=1e-2 if dtype == "bf16" else 2e-3, atol=1e-2)
    if find_nvcc() is not None:
        assert compile_source(src, "sm_90", kind="ptx").error is None


def test_emulated_cublas_calls_check_their_bounds():
    """The host's stand-in for a cuBLAS call refuses to read past a buffer (a wrong leading
    dimension must fail the test above, not read neighbouring memory)."""
    import dataclasses
    import numpy as np
    from backends.cuda import cublas
    from backends.cuda.render import Schedule
    g = trace(lambda a, b: a @ b, spec((7, 13), "f16"), spec((13, 5), "f16"))
    call = next(l for l in render(g, Schedule(gemm="cublas"))[1] if l.kind == "cublas").library
    arrays = [np.zeros(7 * 8, np.float16), np.zeros(7 * 16, np.float16), np.zeros(16 * 8, np.float16)]
    cublas.emulate_call(call, arrays)
    bad = dataclasses.replace(call, args=dataclasses.replace(call.args, ldb=call.args.ldb + 8))
    with pytest.raises(IndexError):
        cublas.emulate_call(bad, arrays)


def test_a_reshape_that_merges_contiguous_axes_resolves_to_a_strided_read():
    """An image's h and w merged into one axis (a 1x1 convolution's input as a matrix) is one
    strided read of the buffer; merging axes a permutation made non-adjacent is not."""
    from ir.interpreter import evaluate
    g = trace(lambda x: x.reshape(2, 3, 20).permute(0, 2, 1).astype("f32") * 1.0, spec((2, 3, 4, 5), "f16"))
    x = g.inputs[0]
    views = [n for n in g.nodes if n.op.name == "VIEW"]
    acc = resolve(views[-1], lambda n: n is x)
    assert acc is not None and acc.buffer is x and acc.strides == (60, 1, 20)
    g2 = trace(lambda x: x.permute(0, 2, 1, 3).reshape(2, 4, 15), spec((2, 3, 4, 5), "f16"))
    assert resolve(g2.outputs[0], lambda n: n is g2.inputs[0]) is None


def _product_program(draw):
    """A random half product with what real programs put around it: odd or aligned sizes,
    a transposed or permuted operand, batch axes (shared weights), an epilogue."""
    from hypothesis import strategies as st
    size = st.sampled_from([1, 3, 7, 8, 16, 13, 24])
    m, k, n = draw(size), draw(size), draw(size)
    batch = draw(st.sampled_from([(), (2,), (2, 3)]))
    shared = draw(st.booleans())
    a_t, b_t = draw(st.booleans()), draw(st.booleans())
    epilogue = draw(st.sampled_from(["none", "bias", "gelu", "residual", "scale"]))
    a_shape = batch + ((k, m) if a_t else (m, k))
    b_shape = (() if shared else batch) + ((n, k) if b_t else (k, n))
    shapes = [a_shape, b_shape] + ([(n,)] if epilogue in ("bias", "gelu") else []) + \
        ([batch + (m, n)] if epilogue == "residual" else [])

    def fn(a, b, *rest):
        y = (a.transpose(-1, -2) if a_t else a) @ (b.transpose(-1, -2) if b_t else b)
        if epilogue == "bias":
            return y + rest[0]
        if epilogue == "gelu":
            return (y + rest[0]).gelu()
        if epilogue == "residual":
            return rest[0] + y
        return y * 0.5 if epilogue == "scale" else y
    return fn, shapes


def test_random_half_products_under_the_cublas_schedule_match_the_interpreter():
    """Every form the cuBLAS schedule takes (the product as it is, cuBLAS then an in-place
    epilogue, staged into padded buffers, unaligned, generated) computes the program on random
    products: run here with cuBLAS emulated from each call's own arguments."""
    import numpy as np
    from hypothesis import given, strategies as st
    from backends.cuda import hostsim
    from backends.cuda.render import Schedule
    from ir.interpreter import evaluate
    if hostsim.available() is not None:
        pytest.skip(hostsim.available())

    @given(st.data(), st.sampled_from(["f16", "bf16"]))
    def check(data, dtype):
        fn, shapes = _product_program(data.draw)
        g = trace(fn, *[spec(s, dtype) for s in shapes])
        rng = np.random.default_rng(0)
        args = [rng.standard_normal(s).astype(x.dtype.np) for s, x in zip(shapes, g.inputs)]
        got = hostsim.run_templates(g, args, Schedule(gemm="cublas"))[0].astype(np.float64)
        want = np.asarray(evaluate(g, args)[0]).astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)

    check()


def test_the_host_stand_in_for_a_plain_cublas_call_gives_the_steps_value():
    """A product cuBLAS runs as the whole step (here scaled by alpha, at an odd size it runs
    unaligned) is stood in for on the host by the step's value, not the bare product (found
    by a seeded run of the random-products test above)."""
    import numpy as np
    from backends.cuda import hostsim
    from backends.cuda.render import Schedule
    from ir.interpreter import evaluate
    g = trace(lambda a, b: (a @ b) * 0.5, spec((1, 3), "f16"), spec((3, 3), "f16"))
    src, launches = render(g, Schedule(gemm="cublas"))
    assert [l.kind for l in launches] == ["cublas"] and launches[0].library.alpha == 0.5
    if hostsim.available() is None:
        rng = np.random.default_rng(0)
        args = [rng.standard_normal(s).astype(np.float16) for s in [(1, 3), (3, 3)]]
        np.testing.assert_array_equal(hostsim.run_templates(g, args, Schedule(gemm="cublas"))[0], evaluate(g, args)[0])


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_an_output_that_reshapes_a_kernels_value_is_written_by_that_kernel(dtype):
    """A convolution's (n, o, h*w) product returned as (n, o, h, w), or a reduction over axis
    0 returned reshaped: the kernel that computes the value writes the output's buffer (the
    bytes are the same), with no copy kernel after it; the host run matches the interpreter."""
    from backends.cuda import hostsim
    from backends.cuda.render import Schedule
    from compiler import conv
    g = trace(lambda x, w: conv.conv2d(x, w, padding=1), spec((2, 8, 6, 6), dtype), spec((5, 8, 3, 3), dtype))
    steps = plan(g)
    assert [s.kind for s in steps] == ["gemm"] and steps[0].store is prepare(g)[0].outputs[0]
    for sched in (Schedule(), Schedule(gemm="cublas", name="cublas")):
        _, launches = render(g, sched)
        assert launches[-1].output is prepare(g)[0].outputs[0], [l.name for l in launches]
        assert not any(l.kind == "elementwise" and l.inputs == [steps[0].output] for l in launches)
    check_on_host(lambda gr, a: hostsim.run_templates(gr, a, Schedule(gemm="cublas", name="cublas")), g, 5, 3e-2)
    g = trace(lambda x: x.sum(0).reshape(4, 4), spec((8, 16)))
    assert [s.kind for s in plan(g)] == ["generic"]
    check_on_host(hostsim.run_templates, g, 6, 1e-5)


def test_a_value_that_is_itself_an_output_keeps_its_own_buffer():
    """Two outputs, a value and its reshape (or one output twice): each is an array of its own
    for the caller, so one of them stays a copy."""
    from backends.cuda import hostsim
    from ir.graph import Graph
    x = trace(lambda x: x.sum(0), spec((8, 16)))
    s = x.outputs[0].srcs[0]                     # the reduction's own value, (1, 16)
    g = Graph(x.inputs, (s, x.outputs[0]))
    assert [st.kind for st in plan(g)] == ["generic", "elementwise"] and all(st.store is None for st in plan(g))
    check_on_host(hostsim.run_templates, g, 7, 1e-5)
    g = trace(lambda x: (x.sum(0), x.sum(0).reshape(4, 4)), spec((8, 16)))   # two reshapes: one stored
    _, launches = render(g)
    assert {l.output for l in launches} == set(prepare(g)[0].outputs)
    check_on_host(hostsim.run_templates, g, 7, 1e-5)
    g = Graph(x.inputs, (x.outputs[0], x.outputs[0]))                        # one output twice
    assert all(st.store is None for st in plan(g))
    check_on_host(hostsim.run_templates, g, 8, 1e-5)


def test_wgmma_attention_comes_first_where_the_head_dims_fit(monkeypatch):
    """On a device with wgmma: the wgmma attention kernel (64 keys per tile at head dim 64, 128
    at 128) is the first schedule of an attention program and, with cuBLAS products, of a
    decoder; head dims it does not take keep the mma.sync kernel first."""
    from compiler import nn
    monkeypatch.setattr(CUDABackend, "_has_wgmma", staticmethod(lambda: True))
    monkeypatch.setattr(CUDABackend, "_cublas_reason", staticmethod(lambda: None))
    first = {}
    for d in (64, 128, 96):
        g = compiler.trace(nn.attention, *[spec((1, 2, 64, d), "f16")] * 3)
        first[d] = CUDABackend().schedules(g)[0].name
    assert first == {64: "attn_wg2_kv64", 128: "attn_wg2_kv128", 96: "default"}
    specs = nn.llama_decoder_specs(1, 1, 64, 256, 4, 2, 512, "f16")
    g = compiler.trace(lambda *xs: nn.llama_decoder(*xs, heads=4, kv_heads=2), *specs)
    names = [s.name for s in CUDABackend().schedules(g)]
    assert names[:2] == ["cublas+attn_wg2_kv64", "cublas+attn_w4_m1_kv64"]


def test_cublas_comes_first_where_the_default_gathers_a_window(monkeypatch):
    """A convolution whose product gathers an im2col window element by element has cuBLAS
    (its window staged) as its first schedule, then the default; where the default reads the
    window in runs of a channels-last copy (channels a multiple of 8, the frontend's conv2d with
    its reduction reordered by the backend, or one written over (taps, channels)), the prior's
    tiles come first, then the default, cuBLAS, and the window gathered, as where the channels
    are zero-padded to a multiple of 8 to be read so (12 to 16); a plain product and a 1x1
    convolution (no window) keep the default first."""
    from compiler import conv
    monkeypatch.setattr(CUDABackend, "_cublas_reason", staticmethod(lambda: None))
    monkeypatch.setattr(CUDABackend, "_has_wgmma", staticmethod(lambda: False))

    def first(fn, *specs):
        return CUDABackend().schedules(compiler.trace(fn, *specs))[:2]

    from tests.window_programs import taps_channels_conv2d
    s3 = CUDABackend().schedules(compiler.trace(lambda x, w: conv.conv2d(x, w, padding=1), spec((2, 9, 12, 12), "f16"),
                                                 spec((24, 9, 3, 3), "f16")))
    assert [s.name for s in s3[:3]] == ["cublas", "default", "prior"]       # the window gathered
    for fn in (lambda x, w: conv.conv2d(x, w, padding=1), lambda x, w: taps_channels_conv2d(x, w, padding=1)):
        for c in (16, 12):
            runs = CUDABackend().schedules(compiler.trace(fn, spec((2, c, 12, 12), "f16"), spec((24, c, 3, 3), "f16")))
            assert [s.name for s in runs[:4]] == ["prior", "default", "cublas", "gather"] and runs[3].window == "gather"
    s1 = first(lambda x, w: conv.conv2d(x, w), spec((2, 16, 12, 12), "f16"), spec((24, 16, 1, 1), "f16"))
    assert s1[0].name == "default"
    mm = first(lambda a, b: a @ b, spec((64, 32), "f16"), spec((32, 48), "f16"))
    assert [s.name for s in mm] == ["default", "cublas"]


def test_the_code_identity_of_an_f32_product_is_the_same_under_tensor_core_schedules():
    """Every tensor-core schedule of a program whose products are f32 renders the default
    SIMT kernel: the executables' identities are equal (the search times one), and a SIMT
    tile of its own makes another."""
    from backends.cuda.executable import CUDAExecutable
    from backends.cuda.render import Schedule
    from backends.cuda.templates.gemm_simt import SIMT_CONFIGS
    from backends.cuda.templates.gemm_tma import TMA_CONFIGS

    class Runtime:
        def function(self, *a):
            return None

        def alloc(self, n):
            return 1

        def fill_unwritten(self, buf, n):
            pass

    g = trace(lambda a, b: (a @ b).relu(), spec((300, 200), "f32"), spec((200, 130), "f32"))

    def identity(schedule):
        src, launches = render(g, schedule)
        return CUDAExecutable(prepare(g)[0], launches, src, None, Runtime()).code_identity

    default = identity(Schedule(arch="sm_90a"))
    assert identity(Schedule(tma=TMA_CONFIGS[0], gemm="wgmma", arch="sm_90a", name=TMA_CONFIGS[0].name)) == default
    assert identity(Schedule(gemm="mma", arch="sm_90a", name="tc")) == default
    other = next(c for c in SIMT_CONFIGS if identity(Schedule(simt=c, arch="sm_90a")) != default)
    assert other is not None
