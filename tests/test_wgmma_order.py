"""The machine code of every wgmma kernel uses its accumulators only after the wait that retires
them (backends/cuda/sass.py): ptxas once scheduled a ping-pong tile's epilogue conversions above
its last wait, and the tile lost its last k-step on the GPU while the host runner and
compute-sanitizer saw right products. Needs nvcc and nvdisasm, no GPU."""
from __future__ import annotations

import os
import subprocess
import tempfile

import pytest

from backends.cuda import render
from backends.cuda.render import Schedule
from backends.cuda.sass import disassemble, early_accumulator_uses, find_nvdisasm
from backends.cuda.templates.attention_wgmma import WG_ATTN_CONFIGS, WG_ATTN_EXPERIMENTAL
from backends.cuda.templates.gemm_tma import TMA_CONFIGS, TMA_EXPERIMENTAL_CONFIGS, TMAConfig
from backends.cuda.templates.gemm_wgmma import WG_CONFIGS, WG_MN_CONFIGS
from backends.cuda.toolchain import compile_source, find_nvcc
from compiler import nn
from compiler.trace import spec, trace

pytestmark = pytest.mark.skipif(find_nvcc() is None or find_nvdisasm() is None, reason="needs nvcc and nvdisasm")


def _nt(m, n, k):
    return trace(lambda x, w: x @ w.transpose(-1, -2), spec((m, k), "f16"), spec((n, k), "f16"))


def _nn(m, n, k):
    return trace(lambda a, b: a @ b, spec((m, k), "bf16"), spec((k, n), "bf16"))


def _uses(g, sched):
    src, _ = render(g, sched)
    res = compile_source(src, "sm_90a")
    assert res.error is None, res.error
    return early_accumulator_uses(disassemble(res.binary))


# the ping-pong tiles whose staged epilogue was scheduled above the last wait (1024x2048x5632:
# 88 k-steps, 1024x5632x2048: 32, a main loop the front end unrolls twice)
PINGPONG = ["tma64x256s3ppe", "tma64x176s5ppe", "tma64x176s6pp"]


def _tiles(every: bool) -> list[str]:
    """The TMA tiles the prior offers, every ping-pong and cluster tile, and with `every` the rest
    of the experimental ones (compile_source runs the same check on whatever a GPU build compiles)."""
    from backends.cuda.tiles import TMA
    listed = TMA_CONFIGS + TMA_EXPERIMENTAL_CONFIGS
    chosen = [c for c, _, _ in TMA] + [c for c in listed if every or c.pingpong or c.clustered]
    return list(dict.fromkeys(c.name for c in chosen)) + PINGPONG


@pytest.mark.parametrize("mnk,every", [((1024, 2048, 5632), False), pytest.param((1024, 2048, 5632), True, marks=pytest.mark.slow),
                                       pytest.param((1024, 5632, 2048), True, marks=pytest.mark.slow),
                                       pytest.param((16384, 4096, 1024), True, marks=pytest.mark.slow)])
def test_tma_tiles_use_their_accumulators_only_after_the_last_wait(mnk, every):
    g = _nt(*mnk)
    names = _tiles(every)
    bad = {n: u[:3] for n in dict.fromkeys(names)
           if (u := _uses(g, Schedule(tma=TMAConfig.from_name(n), gemm="wgmma", arch="sm_90a")))}
    assert not bad, bad


def test_cp_async_wgmma_tiles_use_their_accumulators_only_after_the_last_wait():
    bad = {}
    for g, cfgs in ((_nt(1000, 1000, 2048), WG_CONFIGS), (_nn(1000, 1000, 2048), WG_MN_CONFIGS)):
        for cfg in cfgs:
            if u := _uses(g, Schedule(wg=cfg, gemm="wgmma", arch="sm_90a")):
                bad[str(cfg)] = u[:3]
    assert not bad, bad


def test_wgmma_attention_uses_scores_and_outputs_only_after_their_waits():
    g = trace(lambda q, k, v: nn.attention_with_scores(q, k, v, is_causal=True)[0], *[spec((1, 4, 1000, 128), "bf16")] * 3)
    bad = {c.name: u[:3] for c in WG_ATTN_CONFIGS + WG_ATTN_EXPERIMENTAL if (u := _uses(g, Schedule(attn=c, arch="sm_90a")))}
    assert not bad, bad


def test_the_check_finds_a_read_before_the_wait():
    """The listing of a kernel whose conversion ptxas placed above the last wait (shortened)."""
    sass = ["/*0fb0*/ HGMMA.64x176x16.F32 R24, gdesc[UR8], R24, gsb0", "/*0fc0*/ WARPGROUP.DEPBAR.LE gsb0, 0x1",
            "/*0fd0*/ SYNCS.ARRIVE.TRANS64.A1T0 RZ, [R112+URZ+0x25808], RZ", "/*1010*/ F2FP.F16.F32.PACK_AB R16, R111, R110",
            "/*1340*/ WARPGROUP.DEPBAR.LE gsb0, 0x0", "/*1350*/ F2FP.F16.F32.PACK_AB R21, R25, R24"]
    assert early_accumulator_uses(sass) == ["/*1010*/ F2FP.F16.F32.PACK_AB R16, R111, R110"]


def _unrolled_pingpong() -> str:
    """The ping-pong tile's source with its main loop unrolled again, as it was when ptxas moved
    the staged epilogue above the last wait; skips where this ptxas keeps the order."""
    g = _nt(1024, 2048, 5632)
    src, _ = render(g, Schedule(tma=TMAConfig.from_name("tma64x256s3ppe"), gemm="wgmma", arch="sm_90a"))
    assert "#pragma unroll 1\n" in src
    unrolled = src.replace("#pragma unroll 1\n", "") + "\n// unrolled main loop (test)\n"
    d = tempfile.mkdtemp()
    with open(os.path.join(d, "k.cu"), "w") as f:
        f.write(unrolled)
    subprocess.run([find_nvcc(), "-arch=sm_90a", "-cubin", "-o", os.path.join(d, "k.cubin"), os.path.join(d, "k.cu")],
                   check=True, capture_output=True)
    with open(os.path.join(d, "k.cubin"), "rb") as f:
        if not early_accumulator_uses(disassemble(f.read())):
            pytest.skip("this ptxas keeps the unrolled loop's conversions after the wait")
    return unrolled


def test_a_kernel_with_accumulators_used_before_their_wait_is_refused_at_compile_time():
    """compile_source refuses the unrolled ping-pong tile's cubin (and does not cache it), so no
    search can time it."""
    unrolled = _unrolled_pingpong()
    for _ in range(2):          # refused both times: a refused cubin is not cached
        res = compile_source(unrolled, "sm_90a")
        assert res.binary is None and not res.cached and "wgmma accumulators before the wait" in res.error, res.error


def test_a_cubin_cached_unchecked_is_checked_once_nvdisasm_is_found(monkeypatch, tmp_path):
    """Compiled where no nvdisasm was found, the cubin is cached unchecked; once nvdisasm is
    found, the cached copy is not served: the source is compiled again, checked and refused."""
    from backends.cuda import sass
    unrolled = _unrolled_pingpong()
    monkeypatch.setenv("SATURN_CACHE_DIR", str(tmp_path))
    found = sass.find_nvdisasm
    monkeypatch.setattr(sass, "find_nvdisasm", lambda: None)
    assert compile_source(unrolled, "sm_90a").binary is not None
    assert compile_source(unrolled, "sm_90a").cached
    monkeypatch.setattr(sass, "find_nvdisasm", found)
    res = compile_source(unrolled, "sm_90a")
    assert res.binary is None and "wgmma accumulators before the wait" in res.error, res.error
