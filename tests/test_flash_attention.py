"""The flash-attention kernels (backends/cuda/templates/attention.py on mma.sync,
attention_wgmma.py on Hopper's wgmma): which programs they take, that their text compiles (where
nvcc is), the key-tile table of a causal mask, and that every attention schedule computes what
the program computes, on the host (backends/cuda/hostsim.py) and on a GPU (marked gpu): ragged query and key lengths (2, 7, 257, 333,
1000), head dims 64 and 128, f16/bf16, an additive causal mask, `is_causal` (a where() mask the
kernel computes, skipping the key tiles it removes), a bool mask input, grouped key/value
heads, queries read through a permuted view, and a key length other than the query's."""
from __future__ import annotations

import math

import numpy as np
import pytest

from compiler import nn
from compiler.trace import spec, trace
from backends.cuda import hostsim, render
from backends.cuda.plan import plan, prepare
from backends.cuda.render import Schedule
from backends.cuda.templates.attention import ATTN_CONFIGS, tile_table
from backends.cuda.templates.attention_wgmma import WG_ATTN_CONFIGS, WG_ATTN_EXPERIMENTAL
from backends.cuda.toolchain import compile_source, find_nvcc
from ir.interpreter import evaluate
from tolerances import assert_close


def _masked(q, k, v, mask):
    return ((q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1])) + mask).softmax(-1) @ v


def _heads_first(x, k, v):
    """Queries stored (b, s, h, d), read as (b, h, s, d): a strided view, not a copy."""
    b, s, h, d = x.shape
    return nn.attention(x.permute(0, 2, 1, 3), k, v)


def _grouped(q, k, v, mask):
    return nn.grouped_attention(q, k, v, mask, kv_heads=k.shape[1])


def _causal(q, k, v):
    return nn.attention_with_scores(q, k, v, is_causal=True)[0]


def _bool_mask(q, k, v, keep):
    return nn.attention_with_scores(q, k, v, attn_mask=keep)[0]


def causal(s: int, dtype) -> np.ndarray:
    return np.triu(np.full((s, s), -np.inf), 1).astype(dtype)


def banded_bias(s: int, dtype) -> np.ndarray:
    """Causal, plus a finite bias on the 100 keys before the diagonal (0 further away): key
    tiles that are all zero, tiles with finite values, tiles partly -inf."""
    i, j = np.indices((s, s))
    bias = np.where(i - j < 100, -0.01 * (i - j), 0.0)
    return np.where(j > i, -np.inf, bias).astype(dtype)


def lone_keys(s: int, dtype) -> np.ndarray:
    """-inf but for one of the first four keys per row and, on a few rows (a block's first and
    last among them), one key far off, alone in its key tile for 64-row blocks: that tile is
    found only if the scan reads that one element."""
    mask = np.full((s, s), -np.inf)
    mask[np.arange(s), np.arange(s) % 4] = 0.0
    for row, key in ((0, s - 10), (63, s - 1), (64, 64), (127, 130), (128, 127), (s - 1, 70)):
        mask[min(row, s - 1), min(key, s - 1)] = 0.0
    return mask.astype(dtype)


def sliding_window(s: int, dtype) -> np.ndarray:
    """Each row sees itself and the 90 keys before it: later blocks start past key tile 0."""
    i, j = np.indices((s, s))
    return np.where((j <= i) & (j > i - 91), 0.0, -np.inf).astype(dtype)


MASK_VALUES = {"banded_bias": banded_bias, "lone_keys": lone_keys, "lone_keys_f32": lone_keys,
               "sliding_window": sliding_window}


# name -> (function, input specs, which inputs are masks)
CASES = {
    # (one query row is a matrix-vector product: the plan runs it as products, not flash)
    "two_rows": (nn.attention, [spec((1, 2, 2, 64), "f16"), spec((1, 2, 1000, 64), "f16"),
                               spec((1, 2, 1000, 64), "f16")], ()),
    "seven_rows": (nn.attention, [spec((1, 3, 7, 64), "bf16")] * 3, ()),
    "ragged_1000": (nn.attention, [spec((2, 2, 1000, 64), "f16")] * 3, ()),
    "d128": (nn.attention, [spec((1, 2, 300, 128), "bf16")] * 3, ()),
    "q7_keys1000": (nn.attention, [spec((1, 2, 7, 64), "f16"), spec((1, 2, 1000, 64), "f16"),
                                   spec((1, 2, 1000, 64), "f16")], ()),
    "causal": (_masked, [spec((1, 2, 1000, 64), "f16")] * 3 + [spec((1000, 1000), "f16")], (3,)),
    "banded_bias": (_masked, [spec((1, 2, 700, 64), "bf16")] * 3 + [spec((700, 700), "bf16")], (3,)),
    # a scan over 16-byte runs of half masks, and one element at a time (f32)
    "lone_keys": (_masked, [spec((1, 2, 200, 64), "f16")] * 3 + [spec((200, 200), "f16")], (3,)),
    "sliding_window": (_masked, [spec((1, 2, 450, 64), "f16")] * 3 + [spec((450, 450), "f16")], (3,)),
    "lone_keys_f32": (_masked, [spec((1, 1, 200, 128), "bf16")] * 3 + [spec((200, 200), "f32")], (3,)),
    "gqa_causal": (_grouped, [spec((1, 4, 333, 128), "bf16"), spec((1, 2, 333, 128), "bf16"),
                              spec((1, 2, 333, 128), "bf16"), spec((333, 333), "f32")], (3,)),
    "is_causal": (_causal, [spec((2, 2, 1000, 64), "f16")] * 3, ()),
    "gqa_is_causal": (_causal, [spec((1, 4, 333, 128), "bf16"), spec((1, 2, 333, 128), "bf16"),
                                spec((1, 2, 333, 128), "bf16")], ()),
    "gqa_bool_mask": (_bool_mask, [spec((2, 4, 257, 64), "f16"), spec((2, 2, 257, 64), "f16"),
                                   spec((2, 2, 257, 64), "f16"), spec((2, 1, 257, 257), "bool")], (3,)),
    "permuted_q": (_heads_first, [spec((2, 257, 3, 64), "f16"), spec((2, 3, 257, 64), "f16"),
                                  spec((2, 3, 257, 64), "f16")], ()),
}


def _graph(name):
    fn, specs, _ = CASES[name]
    return trace(fn, *specs)


def _inputs(name, g, seed=0):
    rng = np.random.default_rng(seed)
    masks = CASES[name][2]
    out = []
    for i, n in enumerate(g.inputs):
        if i in masks and n.dtype.np == np.bool_:      # a random keep-mask; row 3 of batch 0 keeps nothing
            m = rng.random(n.shape) < 0.8
            m[0, ..., 3, :] = False
            out.append(m)
        elif i in masks:
            out.append(MASK_VALUES.get(name, causal)(n.shape[-1], n.dtype.np))
        else:
            out.append(rng.standard_normal(n.shape).astype(n.dtype.np))
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_wgmma_attention_is_rendered_where_it_fits(name):
    """One attention launch per program on sm_90 under every wgmma schedule."""
    g = _graph(name)
    for c in WG_ATTN_CONFIGS + WG_ATTN_EXPERIMENTAL:
        _, launches = render(g, Schedule(attn=c, arch="sm_90a", name=c.name))
        attn = [l for l in launches if l.kind == "attention"]
        assert len(attn) == 1 and "wgmma" in attn[0].detail, [l.detail for l in launches]


def test_other_head_dims_and_devices_get_the_mma_sync_kernel():
    """A head dim of 32 (not whole 128-byte rows) or a device before sm_90: the mma.sync kernel."""
    g = trace(nn.attention, *[spec((1, 2, 64, 32), "f16")] * 3)
    _, launches = render(g, Schedule(attn=WG_ATTN_CONFIGS[0], arch="sm_90a"))
    assert "wgmma" not in launches[0].detail and "warps" in launches[0].detail
    _, launches = render(_graph("ragged_1000"), Schedule(attn=WG_ATTN_CONFIGS[0], arch="sm_80"))
    assert "wgmma" not in launches[0].detail


@pytest.mark.parametrize("name", ["is_causal", "gqa_is_causal", "gqa_bool_mask"])
def test_where_masks_are_one_flash_kernel_with_a_tile_table_when_known(name):
    """where(keep, s, -inf) masks (is_causal, a bool mask, with grouped heads) run as one flash
    launch under both kernels; a causal mask known when compiling gives the kernel a table of
    key tiles per block (heaviest blocks first), a bool mask input a scan of its rows instead."""
    g = _graph(name)
    assert [s.kind for s in plan(g)] == ["attention"]
    for sched in (Schedule(arch="sm_90a"), Schedule(attn=WG_ATTN_CONFIGS[0], arch="sm_90a")):
        src, launches = render(g, sched)
        assert [l.kind for l in launches] == ["attention"]
        assert ("static __device__ const int" in src) == (name != "gqa_bool_mask") and "auto keep = " in src
        assert ("seen_tiles[" in src) == (name == "gqa_bool_mask")


@pytest.mark.parametrize("name", ["causal", "gqa_causal", "banded_bias", "ragged_1000"])
def test_a_mask_read_from_memory_is_scanned_for_the_key_tiles_to_skip(name):
    """An additive mask input (a decoder's causal mask) is scanned per block for the key tiles
    its rows can see and for those whose mask values are all zero, which read and add no mask
    (`masked_tile`); without a mask there is nothing to scan."""
    for sched in (Schedule(arch="sm_90a"), Schedule(attn=WG_ATTN_CONFIGS[0], arch="sm_90a")):
        src, _ = render(_graph(name), sched)
        assert ("seen_tiles[" in src) == (name != "ragged_1000")
        assert ("if (masked_tile) x +=" in src) == (name != "ragged_1000")


def test_the_tile_table_of_a_causal_mask():
    """Block i (query rows 128i..) reads key tiles 0..(128(i+1)-1)//64 and needs no test on the
    tiles below its diagonal; the last block (the most tiles) is launched first."""
    plane = np.tril(np.ones((1000, 1000), bool))
    table = tile_table(plane, 128, 64)
    assert [r[0] for r in table] == list(range(7, -1, -1))
    for q, lo, hi, flo, fhi in table:
        assert (lo, hi) == (0, min(-(-min(128 * (q + 1), 1000) // 64), 16)) and (flo, fhi) == (0, 2 * q)
    nothing = tile_table(np.zeros((10, 10), bool), 64, 64)
    assert nothing == [(0, 0, 0, 0, 0)]


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")
@pytest.mark.parametrize("name", ["ragged_1000", "gqa_causal", "is_causal", "gqa_bool_mask"])
def test_flash_kernels_compile_without_spills(name):
    for c in WG_ATTN_CONFIGS + WG_ATTN_EXPERIMENTAL + ATTN_CONFIGS[1:3]:
        src, _ = render(_graph(name), Schedule(attn=c, arch="sm_90a"))
        res = compile_source(src, "sm_90a")
        assert res.error is None, res.error
        assert " 0 bytes spill stores" in res.log, res.log


# on the host by default: a few rows (bf16), grouped heads with a computed causal mask (d 128),
# 7 queries against 1000 keys, masks whose key tiles hang on one element, a sliding window; the others under -m slow
ON_HOST = ("seven_rows", "gqa_is_causal", "q7_keys1000", "lone_keys", "lone_keys_f32", "sliding_window")


@pytest.mark.skipif(hostsim.available() is not None, reason=str(hostsim.available()))
@pytest.mark.parametrize("name", [n if n in ON_HOST else pytest.param(n, marks=pytest.mark.slow) for n in CASES])
def test_flash_kernels_run_on_host(name):
    """Every attention schedule, mma.sync and wgmma (with P as register A fragments), run on
    the host as one launch."""
    g = _graph(name)
    args = _inputs(name, g)
    want = evaluate(g, args)[0]
    wgmma = WG_ATTN_CONFIGS + WG_ATTN_EXPERIMENTAL
    for cfg in wgmma + ATTN_CONFIGS:
        sched = Schedule(attn=cfg, arch="sm_90a", name=cfg.name)
        src, launches = render(g, sched)
        assert [l.kind for l in launches] == ["attention"] and ("wgmma_ra_" in src) == (cfg in wgmma)
        assert_close(hostsim.run_templates(g, args, sched)[0], want, err_msg=f"{name} {cfg.name}", graph=g, args=args)


@pytest.mark.skipif(hostsim.available() is not None, reason=str(hostsim.available()))
def test_p_in_the_wrong_register_fragments_is_wrong_on_host(monkeypatch):
    """The wgmma kernel packs P's rows r and r + 8 into fragments 0 and 1: swapped, the host's
    register-A wgmma reads them as the layout says, and the output is wrong."""
    from backends.cuda.templates import attention_wgmma
    g = _graph("gqa_causal")
    args = _inputs("gqa_causal", g)
    want = evaluate(g, args)[0]
    sched = Schedule(attn=WG_ATTN_CONFIGS[0], arch="sm_90a")
    rows_r, rows_r8 = "pa[j >> 1][(j & 1) * 2] = ", "pa[j >> 1][(j & 1) * 2 + 1] = "
    original = attention_wgmma.render

    def swapped(*a, **kw):
        src = original(*a, **kw)
        assert rows_r in src and rows_r8 in src
        return src.replace(rows_r, "@").replace(rows_r8, rows_r).replace("@", rows_r8)
    monkeypatch.setattr(attention_wgmma, "render", swapped)
    with pytest.raises(AssertionError):
        assert_close(hostsim.run_templates(g, args, sched)[0], want, graph=g, args=args)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(CASES))
def test_gpu_flash_kernels_match_the_interpreter(cuda_backend, module_cache_dir, name):
    """Every attention schedule the backend offers (mma.sync tiles; wgmma tiles on sm_90)
    computes what the program computes, as one launch."""
    be = cuda_backend
    g = _graph(name)
    args = _inputs(name, g)
    want = evaluate(g, args)[0]
    scheds = [s for s in be.schedules(g) if s.attn is not None]
    assert scheds
    for sched in scheds:
        exe, why = be.try_build(g, sched)
        assert exe is not None, why
        assert [l.kind for l in exe.launches] == ["attention"], exe.explain()
        assert (sched.attn in WG_ATTN_CONFIGS) == any("wgmma" in l.detail for l in exe.launches), exe.explain()
        got = exe(*args)[0]
        assert_close(got, want, err_msg=f"{name} {sched.name}\n{exe.explain()}", graph=g, args=args)
        exe.close()


@pytest.mark.parametrize("name", ["is_causal", "gqa_is_causal", "gqa_bool_mask"])
def test_the_emitted_keep_predicate_computes_the_mask(name, tmp_path):
    """The flash kernels' keep(row, key) as emitted (compiled for the host with the CUDA
    headers) equals the program's mask for every batch entry, row and key; the compile-time
    plane, where there is one, equals it too."""
    import ctypes
    import subprocess
    from backends.cuda import hostsim
    from backends.cuda.cexpr import C_STORAGE
    from backends.cuda.render import _keep
    from ir.interpreter import evaluate_nodes
    if hostsim.available():
        pytest.skip(hostsim.available())
    step = [s for s in plan(_graph(name)) if s.kind == "attention"][0]
    g = prepare(_graph(name))[0]                  # (the plan's nodes)
    fm = step.attention
    names = {n: f"in{j}" for j, n in enumerate(step.inputs)}
    sq, skv = fm.keep.shape[-2:]
    batch = fm.keep.shape[:-2]
    keep = _keep(fm, names, batch)
    decls = "\n".join(f"  const {C_STORAGE[n.dtype]}* in{j} = (const {C_STORAGE[n.dtype]}*)ins[{j}];"
                      for j, n in enumerate(step.inputs))
    src = (hostsim.HOST_PRELUDE + 'extern "C" void run(void** ins, long long bz, unsigned char* out) {\n'
           + decls + "\n  " + keep.code + f"\n  for (int row = 0; row < {sq}; ++row)\n"
           f"    for (int key = 0; key < {skv}; ++key) out[row * {skv} + key] = keep(row, key);\n}}\n")
    (tmp_path / "k.cpp").write_text(src)
    subprocess.run(["g++", "-O1", "-shared", "-fPIC", "-w", f"-I{hostsim.cuda_include()}", str(tmp_path / "k.cpp"),
                    "-o", str(tmp_path / "k.so")], check=True)
    run = ctypes.CDLL(str(tmp_path / "k.so")).run
    args = _inputs(name, g)
    env = dict(zip(g.inputs, args))
    want = np.asarray(evaluate_nodes([fm.keep], env)[0], bool)
    want = ~want if fm.keep_negated else want
    keep_args = [np.ascontiguousarray(env[n]) for n in step.inputs]
    ptrs = (ctypes.c_void_p * len(keep_args))(*[a.ctypes.data for a in keep_args])
    for bz in range(int(np.prod(batch))):
        got = np.zeros((sq, skv), np.uint8)
        run(ptrs, ctypes.c_longlong(bz), got.ctypes.data_as(ctypes.c_void_p))
        np.testing.assert_array_equal(got.astype(bool), want.reshape(-1, sq, skv)[bz], err_msg=f"batch entry {bz}")
    if keep.plane is not None:
        np.testing.assert_array_equal(keep.plane, want.reshape(-1, sq, skv)[0])


def test_a_decoder_attention_stores_its_heads_where_the_next_product_reads_them():
    """The attention output (b, heads, s, d) moved back to (b, s, heads * d) for the output
    projection: the flash kernel stores it in that order (no staging copy before the product),
    and the strides it stores with are the layout view's."""
    from benchmarks import workloads as W
    from backends.cuda.plan import flash_output_strides, is_layout_view
    from backends.cuda.templates.attention import ATTN_CONFIGS
    from compiler.trace import Spec
    from ir.ops import Op
    case = [c for c in W.select_cases("cuda", "quick", ["decoder"])][0]
    g = trace(case.saturn_fn, *[Spec(i.shape, i.dtype, i.name) for i in case.inputs])
    steps = plan(g)
    attn = [s for s in steps if s.kind == "attention"]
    assert attn and all(s.output.op == Op.VIEW and is_layout_view(s.output) for s in attn)
    b, s, d = case.inputs[0].shape
    assert all(s_.output.shape == (b, s, d) for s_ in attn)
    _, launches = render(g, Schedule(gemm="cublas", cublas_fallback="prior", attn=ATTN_CONFIGS[2], arch="sm_90a"))
    assert not any(l.kind == "stage" for l in launches), [l.name for l in launches]
    term = attn[0].output
    while term.op != Op.ATTEND:
        term = term.srcs[0]
    heads, hd = term.shape[1] * term.shape[2], term.shape[-1]
    st = flash_output_strides(term, attn[0].output)     # (b, kv, group, s, 1, d) in (b, s, heads * d)
    assert st[2:] == (hd, heads * hd, 0, 1) and st[1] == term.shape[2] * hd


def test_layout_views_place_every_element_once():
    from backends.cuda.plan import is_layout_view
    x = trace(lambda t: t.permute(0, 2, 1, 3).reshape(2, 5, 12), spec((2, 3, 5, 4)))
    assert is_layout_view(x.outputs[0])
    for fn in (lambda t: t[:, :2], lambda t: t.expand(2, 2, 3, 5, 4).reshape(4, 3, 5, 4), lambda t: t.flip(1)):
        y = trace(fn, spec((2, 3, 5, 4)))
        assert not is_layout_view(y.outputs[0]), y
