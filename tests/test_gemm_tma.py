"""The TMA-fed wgmma GEMM (backends/cuda/templates/gemm_tma.py): which products it takes, the
tensor maps it asks for, that its source builds for sm_90a without spills, and (gpu) that it
matches the interpreter at odd shapes, batched, with either B layout and an epilogue, through
host arrays and through device tensors whose buffers change between calls."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from backends.cuda.render import Schedule
from backends.cuda.templates.gemm_tma import TMA_CONFIGS, TMA_EXPERIMENTAL_CONFIGS, TMAConfig, fits, tensor_maps
from backends.cuda.templates.gemm_tc import GemmShape
from backends.cuda.toolchain import compile_source, find_nvcc, parse_resources
from compiler.trace import spec, trace
from ir.interpreter import evaluate


def _programs():
    """(name, graph): products with odd sizes (K a multiple of 8, as tensor maps need 16-byte
    rows), both B layouts, a batch, and epilogues."""
    return {
        "nt_odd_f16": trace(lambda x, w: x @ w.transpose(-1, -2), spec((1000, 72), "f16"), spec((130, 72), "f16")),
        "nn_odd_bf16": trace(lambda a, b: a @ b, spec((1000, 4104), "bf16"), spec((4104, 136), "bf16")),
        "nn_thin_k_f16": trace(lambda a, b: a @ b, spec((129, 8), "f16"), spec((8, 4097 + 7), "f16")),
        "batched_bias_relu_f16": trace(lambda a, b, c: (a @ b + c).relu(), spec((3, 300, 128), "f16"),
                                       spec((3, 128, 200), "f16"), spec((200,), "f16")),
        "shared_weight_bf16": trace(lambda a, w: a @ w.transpose(-1, -2), spec((4, 130, 64), "bf16"),
                                    spec((96, 64), "bf16")),
        # more tiles than SMs: persistent blocks walk several (ping-pong: both consumers take turns)
        "many_tiles_f16": trace(lambda a, b: a @ b, spec((9, 257, 136), "f16"), spec((9, 136, 1032), "f16")),
    }


def _gpu_programs():
    """Products too big to run on the host: a decoder's down projection, k-contiguous B, 88
    k-steps (where a 64x256 ping-pong tile once computed wrong products on the GPU and right
    ones at every smaller test program)."""
    return {"nt_long_k_f16": trace(lambda x, w: x @ w.transpose(-1, -2), spec((1024, 5632), "f16"),
                                   spec((2048, 5632), "f16"))}


# the programs whose B is k-contiguous: the only ones a tile narrower than 64-column multiples
# reads (gemm_tma.refuses; test_narrow_tiles_read_only_k_contiguous_b checks this set)
K_CONTIGUOUS_B = {"nt_odd_f16", "shared_weight_bf16", "nt_long_k_f16"}


def _reads(name, cfg):
    """Whether tile `cfg` takes program `name`'s product."""
    return cfg.bn % 64 == 0 or name in K_CONTIGUOUS_B


def _any_program(name):
    return _programs()[name] if name in _programs() else _gpu_programs()[name]


def _reference(name, g, args):
    """The interpreter's value; for the GPU-only programs numpy's float64 product (the
    interpreter's broadcast multiply of 1024 x 2048 x 5632 would not fit in memory)."""
    if name in _programs():
        return evaluate(g, args)[0]
    x, w = (np.asarray(a, np.float64) for a in args)
    return x @ w.T


def _tma_launches(g, cfg):
    from backends.cuda import render
    src, launches = render(g, Schedule(tma=cfg, gemm="wgmma", arch="sm_90a"))
    return src, [l for l in launches if l.kind == "gemm_tma"]


@pytest.mark.parametrize("name", list(_programs()))
def test_products_whose_rows_are_16_byte_aligned_get_the_tma_kernel(name):
    g = _programs()[name]
    for cfg in TMA_CONFIGS:
        _, tma = _tma_launches(g, cfg)
        assert len(tma) == 1, name
        maps = tma[0].tensor_maps
        assert len(maps) == 2 or len(maps) == 3 and cfg.tma_store      # A, B (and the output's)
        assert all(len(m.dims) == len(m.box) == len(m.strides) + 1 for m in maps)
        assert all(m.box[0] * m.dtype.itemsize == 128 for m in maps)      # one swizzle span per row


def test_what_the_tensor_maps_cannot_read_is_refused():
    s = GemmShape(64, 64, 70, (), 0, 70, 0, "nk", 1, 70, 64, 1)          # rows of 140 bytes
    assert "16-byte" in fits(s, "f16")
    assert fits(GemmShape(64, 64, 64, (), 0, 64, 0, "nk", 1, 64, 64, 1), "f32") == "operands are not f16/bf16"
    two = ((2, 4096, 4096, 4096), (3, 8192, 8192, 8192))
    assert fits(GemmShape(64, 64, 64, two, 0, 64, 0, "nk", 1, 64, 64, 1), "f16") == "more than one batch axis"


def test_tensor_maps_follow_the_layouts():
    nk = GemmShape(1024, 5632, 2048, (), 0, 2048, 0, "nk", 1, 2048, 5632, 1)
    (_, ad, ast, abox, _), (_, bd, bst, bbox, _) = tensor_maps(nk, TMAConfig(128, 256, 4))
    assert (ad, ast, abox, bd, bst, bbox) == ([2048, 1024], [2048], [64, 128], [2048, 5632], [2048], [64, 256])
    kn = GemmShape(300, 200, 128, ((3, 38400, 0, 60000),), 8, 128, 16, "kn", 200, 1, 200, 1)
    (_, ad, ast, abox, aoff), (_, bd, bst, bbox, boff) = tensor_maps(kn, TMAConfig(64, 256, 6))
    assert (ad, ast, abox, aoff) == ([128, 300, 3], [128, 38400], [64, 64, 1], 8)
    assert (bd, bst, bbox, boff) == ([200, 128], [200], [64, 64], 16)    # a shared B: no batch dim


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")
def test_tma_kernels_compile_for_sm_90a_without_spills():
    for name, g in _programs().items():
        for cfg in TMA_CONFIGS[:2]:
            src, _ = _tma_launches(g, cfg)
            res = compile_source(src, "sm_90a")
            assert res.error is None, res.log[-2000:]
            for kernel, r in parse_resources(res.log).items():
                assert r.get("spill_stores", 0) == 0, (name, kernel, r)


def _inputs(g, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(n.shape).astype(n.dtype.np) for n in g.inputs]


def _close(got, want, k):
    want = np.asarray(want, np.float64)
    scale = max(float(np.abs(want).max()), 1.0)
    err = float(np.abs(np.asarray(got, np.float64) - want).max()) / scale
    # (f32 accumulation: the error is the output's rounding and grows slowly with k; a bound
    # growing as sqrt(k / 64) let an error of 0.11 pass at k = 5632)
    assert err < 1e-2 * max(1.0, (k / 64) ** 0.25), err


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(_programs()) + list(_gpu_programs()))
def test_gpu_tma_products_match_the_interpreter(cuda_backend, name):
    g = _any_program(name)
    args = _inputs(g, 0)
    want = _reference(name, g, args)
    k = g.inputs[0].shape[-1]
    for cfg in TMA_CONFIGS:
        _check_tile(cuda_backend, g, cfg, args, want, k)


def _check_tile(backend, g, cfg, args, want, k):
    exe, why = backend.try_build(g, Schedule(tma=cfg, gemm="wgmma", name=cfg.name))
    assert exe is not None, why
    assert any(l.kind == "gemm_tma" for l in exe.launches), exe.explain()
    _close(exe(*args)[0], want, k)
    exe.close()


@pytest.mark.gpu
def test_gpu_tma_product_on_device_tensors_follows_each_calls_buffers(cuda_backend):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    from backends.cuda.device_run import DeviceCalls
    g = _programs()["batched_bias_relu_f16"]
    exe, why = cuda_backend.try_build(g, Schedule(tma=TMA_CONFIGS[0], gemm="wgmma", name="tma"))
    assert exe is not None, why
    stream = torch.cuda.current_stream()
    for graphs in (False, True):
        calls = DeviceCalls(exe, graphs=graphs)
        for seed in (1, 2, 1):        # new buffers each call; a graph replays or records anew
            host = _inputs(g, seed)
            ins = [torch.from_numpy(a).cuda() for a in host]
            out = torch.empty(tuple(g.outputs[0].shape), dtype=torch.float16, device="cuda")
            calls.run([t.data_ptr() for t in ins], [out.data_ptr()], [out.numel() * 2], stream.cuda_stream)
            stream.synchronize()
            _close(out.cpu().numpy(), evaluate(g, host)[0], 128)
    exe.close()


def test_maps_are_encoded_again_only_when_their_buffers_change(monkeypatch):
    from backends.cuda import tensor_map
    from ir.dtypes import DType
    seen = []
    monkeypatch.setattr(tensor_map, "encode", lambda m, p: seen.append((m.arg, p)) or bytes([m.arg]) * 128)
    maps = (tensor_map.TensorMap(1, DType.f16, (64, 64), (64,), (64, 64)),
            tensor_map.TensorMap(2, DType.f16, (64, 64), (64,), (64, 64)))
    args = tensor_map.MapArgs(maps)
    assert args.for_pointers([10, 20, 30]) == [b"\x01" * 128, b"\x02" * 128]
    args.for_pointers([11, 20, 30])           # only `out` moved: the maps do not name it
    assert seen == [(1, 20), (2, 30)]
    args.for_pointers([10, 21, 30])
    assert seen[2:] == [(1, 21), (2, 30)]
    # back to the first buffers: still encoded; KEEP sets cycled through are encoded once, and
    # one more set drops the one used longest ago
    assert args.for_pointers([10, 20, 30]) == [b"\x01" * 128, b"\x02" * 128] and len(seen) == 4
    keep = tensor_map.MapArgs.KEEP
    for _ in range(3):
        for p in range(100, 100 + keep):
            args.for_pointers([0, p, 30])
    assert len(seen) == 4 + 2 * keep
    args.for_pointers([0, 99, 30])
    args.for_pointers([0, 101, 30])
    assert len(seen) == 6 + 2 * keep
    args.for_pointers([0, 100, 30])           # dropped for 99: encoded again
    assert seen[-2:] == [(1, 100), (2, 30)]


def test_long_products_take_the_tma_kernel_by_default_and_staged_operands_are_its_arguments():
    from backends.cuda import render
    big = trace(lambda a, b: a @ b, spec((4096, 4096), "f16"), spec((4096, 4096), "f16"))
    _, launches = render(big, Schedule(arch="sm_90a"))
    assert [l.kind for l in launches] == ["gemm_tma"] and "tile=128x256x64 stages=3" in launches[0].detail
    _, launches = render(big, Schedule(arch="sm_90a", gemm="mma"))
    assert [l.kind for l in launches] == ["gemm_tc"]
    for name, g in _programs().items():
        for cfg in TMA_CONFIGS:
            _, launches = render(g, Schedule(tma=cfg, gemm="wgmma", arch="sm_90a"))
            for l in launches:
                for m in l.tensor_maps:      # every map names one of the launch's pointer arguments
                    assert 0 <= m.arg <= len(l.inputs), (name, l)


def test_narrow_tiles_read_only_k_contiguous_b():
    """A tile whose width is no multiple of 64 (176: 5632 = 32 x 176 columns) takes a product
    whose B is k-contiguous and leaves one whose B is n-contiguous (read in 64-column boxes) to
    the cp.async kernel."""
    narrow = [c for c in TMA_EXPERIMENTAL_CONFIGS if c.bn % 64]
    assert narrow
    for name, g in list(_programs().items()) + list(_gpu_programs().items()):
        for cfg in narrow:
            src, launches = _tma_launches(g, cfg)
            assert bool(launches) == (name in K_CONTIGUOUS_B), (name, cfg.name)
    with pytest.raises(AssertionError):
        TMAConfig(128, 176, 3, True, True, tma_store=True)     # TMA stores write 64-column boxes


def test_a_tma_tile_is_found_again_by_its_name():
    for cfg in TMA_CONFIGS + TMA_EXPERIMENTAL_CONFIGS + [TMAConfig(64, 256, 3, True, True, True)]:
        assert TMAConfig.from_name(cfg.name) == cfg
    for bad in ("tma7x256s3", "tma128x256s3q", "tma128x256s9", "tma128x256s3ppek2", "gemm"):
        with pytest.raises(ValueError):
            TMAConfig.from_name(bad)


def test_every_tma_tile_fits_the_shared_memory_of_a_hopper_block():
    assert all(c.smem_bytes <= 227 * 1024 for c in TMA_CONFIGS + TMA_EXPERIMENTAL_CONFIGS)


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found")
@pytest.mark.parametrize("mt,nt,batch", [(1, 1, 1), (32, 16, 1), (13, 7, 3), (8, 1, 2), (9, 22, 1)])
def test_a_persistent_block_walk_covers_every_tile_once(mt, nt, batch, tmp_path):
    """The rendered tile walk (run on the host) maps t = 0..tiles-1 onto every (batch, m-tile,
    n-tile) exactly once, GROUP_M m-tiles at a time, as `tile_corner` computes it in Python."""
    import subprocess
    from backends.cuda.templates.gemm_tma import GROUP_M, tile_coords, tile_corner
    src = tmp_path / "walk.cpp"
    src.write_text("#include <cstdio>\n#include <algorithm>\nusing std::min;\nint main() {\n"
                   f"  for (int t = 0; t < {mt * nt * batch}; ++t) {{\n      {tile_coords(mt, nt, 128, 256)}\n"
                   '      std::printf("%lld %d %d\\n", bz, m0, n0);\n  }\n}\n')
    exe = tmp_path / "walk"
    subprocess.run(["g++", "-O1", str(src), "-o", str(exe)], check=True)
    got = [tuple(map(int, line.split())) for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                                      check=True).stdout.splitlines()]
    assert sorted(got) == [(b, i * 128, j * 256) for b in range(batch) for i in range(mt) for j in range(nt)]
    assert got == [(t // (mt * nt), *tile_corner(t % (mt * nt), mt, nt, 128, 256)) for t in range(mt * nt * batch)]
    assert all(got[t][1] // 128 // GROUP_M == got[t + 1][1] // 128 // GROUP_M or got[t + 1][2] == 0
               for t in range(len(got) - 1) if got[t][0] == got[t + 1][0])


@pytest.mark.parametrize("m,n,batch,whole,halves", [(1024, 2048, 1, 0, 64), (1024, 5632, 1, 132, 44), (128, 256, 1, 0, 1),
                                                     (1024, 12800, 1, 396, 4), (1024, 11000, 1, 344, 0),
                                                     (128, 17152, 1, 66, 1), (128, 256, 300, 264, 36)])
def test_split_k_splits_the_last_wave_where_it_fills_at_most_half_the_sms(m, n, batch, whole, halves):
    """128x256 tiles on 132 SMs: 64 tiles all split (128 blocks); 176 as 132 whole and 44 split;
    a last wave of 80 (more than half the SMs) whole; 67 tiles whole but one, as the blocks of
    a cluster take two."""
    from backends.cuda.templates.gemm_tc import GemmShape
    from backends.cuda.templates.gemm_tma import TMAConfig, grid, split_tiles
    cfg = TMAConfig(128, 256, 3, split_k=2)
    shape = GemmShape(m, n, 64, ((batch, m * 64, 0, m * n),) if batch > 1 else (), 0, 64, 0, "nk", 1, 64, n, 1)
    assert split_tiles(shape, cfg) == (whole, halves)
    assert grid(shape, cfg) == (whole + 2 * halves, 1, 1)


# the experimental tiles compiled on three programs (k-contiguous B; batched n-contiguous B with a
# 3-d map and an epilogue; more tiles than SMs), on all under -m slow
COMPILED = ["nt_odd_f16", "batched_bias_relu_f16", "many_tiles_f16"]


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")
@pytest.mark.parametrize("names", [COMPILED, pytest.param([n for n in _programs() if n not in COMPILED], marks=pytest.mark.slow)],
                         ids=["some", "others"])
def test_experimental_tma_kernels_compile_without_spills_and_persistent_ones_launch_one_block_per_sm_at_most(names):
    from backends.cuda.templates.gemm_tma import SMS, TMA_EXPERIMENTAL_CONFIGS
    for name, g in [(n, _programs()[n]) for n in names]:
        for cfg in [c for c in TMA_EXPERIMENTAL_CONFIGS if _reads(name, c)]:
            src, launches = _tma_launches(g, cfg)
            assert not cfg.persistent or (launches[0].grid[0] <= SMS and launches[0].grid[1:] == (1, 1))
            res = compile_source(src, "sm_90a")
            assert res.error is None, res.log[-2000:]
            assert all(r.get("spill_stores", 0) == 0 for r in parse_resources(res.log).values())


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(_programs()) + list(_gpu_programs()))
def test_gpu_experimental_tma_tiles_match_the_interpreter(cuda_backend, name):
    """The tiles not searched (experimental); last in this file, so that a kernel that never
    finishes costs only this test's time."""
    g = _any_program(name)
    args = _inputs(g, 0)
    want = _reference(name, g, args)
    for cfg in [c for c in TMA_EXPERIMENTAL_CONFIGS if _reads(name, c)]:
        _check_tile(cuda_backend, g, cfg, args, want, g.inputs[0].shape[-1])

