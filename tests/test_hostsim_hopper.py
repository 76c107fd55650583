"""Hopper's products run on the host (hostsim's wgmma, TMA, mbarrier, named-barrier and
two-block cluster emulation) against the interpreter: every TMA tile, searched or
experimental, on products at odd shapes, batched, with either B layout and an epilogue; the
persistent, ping-pong and cluster walks over more tiles than SMs; split K across a cluster;
the cp.async-fed wgmma tiles. Then that the emulation is not forgiving: a wrong operand layout
gives wrong products, a barrier that never fills is a deadlock (within a block and across a
cluster), a stage freed before its products retire and a staged tile written again before its
TMA stores read it give wrong products. (The wgmma flash attention runs on the host in tests/test_flash_attention.py.)"""
from __future__ import annotations

import numpy as np
import pytest

from backends.cuda import hostsim, render
from backends.cuda.render import Schedule
from backends.cuda.templates import gemm_tma
from backends.cuda.templates.gemm_tma import TMA_CONFIGS, TMA_EXPERIMENTAL_CONFIGS
from backends.cuda.templates.gemm_wgmma import WG_CONFIGS, WG_MN_CONFIGS
from compiler.trace import spec, trace
from ir.interpreter import evaluate
from test_gemm_tma import _close, _inputs, _programs, _reads

pytestmark = pytest.mark.skipif(hostsim.available() is not None, reason=str(hostsim.available()))

ON_HOST = TMA_CONFIGS + TMA_EXPERIMENTAL_CONFIGS
FAST = ["batched_bias_relu_f16"]      # (the other test programs under -m slow)


def _run(g, cfg, args):
    sched = Schedule(tma=cfg, gemm="wgmma", name=cfg.name, arch="sm_90a")
    assert [l.kind for l in render(g, sched)[1]] == ["gemm_tma"], cfg.name
    return hostsim.run_templates(g, args, sched)[0]


@pytest.mark.parametrize("name", FAST + [pytest.param(n, marks=pytest.mark.slow) for n in _programs() if n not in FAST])
def test_every_tma_tile_runs_on_host(name):
    g = _programs()[name]
    args = _inputs(g, 0)
    want = evaluate(g, args)[0]
    for cfg in [c for c in ON_HOST if _reads(name, c)]:
        _close(_run(g, cfg, args), want, g.inputs[0].shape[-1])


def test_narrow_tiles_run_on_host():
    """The 176-wide tiles (k-contiguous B only), one tile per block, persistent with staged
    outputs, ping-pong and clustered, on a product of a partial last column tile and 8 row
    tiles, batched with an epilogue, and (the ping-pong and cluster walks) over 180 tiles:
    blocks with two, whose ping-pong warpgroups take turns, and odd row tiles a batch."""
    narrow = [c for c in ON_HOST if c.bn % 64]
    assert {c.persistent for c in narrow} == {True, False} and any(c.pingpong for c in narrow)
    assert any(c.clustered for c in narrow)
    many = trace(lambda a, w: a @ w.transpose(-1, -2), spec((20, 257, 72), "f16"), spec((520, 72), "f16"))
    for g, tiles in ((_programs()["nt_odd_f16"], narrow),
                     (trace(lambda a, w, c: (a @ w.transpose(-1, -2) + c).relu(), spec((2, 130, 72), "bf16"),
                            spec((360, 72), "bf16"), spec((360,), "bf16")), narrow),
                     (many, [c for c in narrow if c.pingpong or c.clustered])):
        args = _inputs(g, 4)
        want = evaluate(g, args)[0]
        for cfg in tiles:
            _close(_run(g, cfg, args), want, 72)


def test_persistent_walks_over_more_tiles_than_sms_run_on_host():
    """135 tiles of 64 or 128 rows: blocks walk two, the ping-pong warpgroups take turns, a
    cluster's blocks walk their pairs in step, and the ring's stage counter runs on across
    tiles."""
    g = trace(lambda a, b: a @ b, spec((9, 257, 64), "f16"), spec((9, 64, 520), "f16"))
    args = _inputs(g, 1)
    want = evaluate(g, args)[0]
    walks = [c for c in ON_HOST if (c.pingpong or c.cluster > 1 or c.persistent and c.tma_store)
             and c.whole_boxes]     # (the narrow tiles' walks: test_narrow_tiles_run_on_host)
    assert any(c.pingpong for c in walks) and any(c.tma_store for c in walks) and any(c.cluster > 1 for c in walks)
    for cfg in walks:
        _close(_run(g, cfg, args), want, 64)


@pytest.mark.parametrize("cfg", WG_CONFIGS + WG_MN_CONFIGS, ids=lambda c: f"{c.bm}x{c.bn}s{c.stages}mn{c.b_mn}e{int(c.smem_epilogue)}")
def test_cp_async_fed_wgmma_tiles_run_on_host(cfg):
    """A k-contiguous B (a weight, batch folded into m, with an epilogue) and an n-contiguous
    one (transposed first, or read through the transpose bit by the MN-major tiles)."""
    nt = trace(lambda a, w, c: (a @ w.transpose(-1, -2) + c).relu(), spec((2, 130, 72), "bf16"),
               spec((136, 72), "bf16"), spec((136,), "bf16"))
    nn = trace(lambda a, b: a @ b, spec((130, 72), "f16"), spec((72, 136), "f16"))
    for g in (nt, nn):
        args = _inputs(g, 2)
        sched = Schedule(wg=cfg, gemm="wgmma", name="wg", arch="sm_90a")
        assert "gemm_wgmma" in [l.kind for l in render(g, sched)[1]]
        _close(hostsim.run_templates(g, args, sched)[0], evaluate(g, args)[0], 72)


def _patched(monkeypatch, old: str, new: str):
    render_tma = gemm_tma.render

    def patched(*a, **kw):
        src = render_tma(*a, **kw)
        assert old in src
        return src.replace(old, new)
    monkeypatch.setattr(gemm_tma, "render", patched)


def test_a_wrong_operand_layout_gives_wrong_products_on_host(monkeypatch):
    """B's k-groups read 2048 bytes apart instead of 1024: the emulated wgmma follows the
    descriptor, so the product is wrong."""
    g = _programs()["batched_bias_relu_f16"]
    args = _inputs(g, 0)
    want = evaluate(g, args)[0]
    _patched(monkeypatch, "wg_desc2(sb + kk * 2048, 8192, 1024)", "wg_desc2(sb + kk * 2048, 8192, 2048)")
    with pytest.raises(AssertionError):
        _close(_run(g, TMA_CONFIGS[0], args), want, 128)


def test_a_named_barrier_that_never_fills_is_a_deadlock_on_host(monkeypatch):
    g = trace(lambda a, b: a @ b, spec((9, 257, 136), "f16"), spec((9, 136, 520), "f16"))
    cfg = next(c for c in ON_HOST if c.pingpong)
    _patched(monkeypatch, "named_sync(2 + cw, 256)", "named_sync(2 + cw, 384)")
    with pytest.raises(RuntimeError, match="never reach"):
        _run(g, cfg, _inputs(g, 0))


def test_a_stage_one_arrival_short_across_a_cluster_is_a_deadlock_on_host(monkeypatch):
    """The empty barriers of a cluster's blocks count both blocks' consumer warps (16): asking
    for one more never completes, so the producers wait for ever."""
    g = _programs()["batched_bias_relu_f16"]
    cfg = next(c for c in ON_HOST if c.cluster == 2)
    _patched(monkeypatch, "mbar_init(bars + 16 * s + 8, 16)", "mbar_init(bars + 16 * s + 8, 17)")
    with pytest.raises(RuntimeError, match="never reach"):
        _run(g, cfg, _inputs(g, 0))


def test_a_split_k_tile_that_drops_the_second_blocks_sums_is_wrong_on_host(monkeypatch):
    """Each block of a split-K cluster multiplies half the k-steps (128: one step of 64 each);
    block 0 adding nothing of block 1's partial sums gives the wrong product."""
    g = _programs()["batched_bias_relu_f16"]
    args = _inputs(g, 0)
    cfg = next(c for c in ON_HOST if c.split_k == 2)
    _patched(monkeypatch, "acc[4 * q] += v[0];", "acc[4 * q] += 0.f * v[0];")
    with pytest.raises(AssertionError):
        _close(_run(g, cfg, args), evaluate(g, args)[0], 128)


@pytest.mark.parametrize("walk", ["cooperative", "pingpong"])
def test_a_stage_released_before_its_products_retire_gives_wrong_products_on_host(monkeypatch, walk):
    """wgmma reads its stage until a wait retires its group: waiting with two groups in flight
    instead of one frees a stage still being read, which the producer refills at once. The
    emulation runs each wgmma at the wait that retires it and lets the producer run when a
    release completes a phase, so the product is wrong here as it would be on the GPU."""
    g = trace(lambda a, b: a @ b, spec((130, 512), "f16"), spec((512, 264), "f16"))
    args = _inputs(g, 0)
    want = evaluate(g, args)[0]
    cfg = next(c for c in ON_HOST if c.pingpong == (walk == "pingpong") and c.persistent and not c.clustered)
    assert 512 // 64 > cfg.stages       # (the ring wraps: a stage is refilled)
    _close(_run(g, cfg, args), want, 512)
    _patched(monkeypatch, "wg_wait<1>();", "wg_wait<2>();")
    with pytest.raises(AssertionError):
        _close(_run(g, cfg, args), want, 512)


def test_a_tma_store_region_written_again_before_its_stores_read_it_is_wrong_on_host(monkeypatch):
    """180 tiles of 128x128 on 132 blocks: a block's second tile is staged where its first one
    was. A TMA store reads the region until a bulk wait; leaving that wait out lets the second
    tile's values reach the first one's place (the emulated stores read at the wait)."""
    g = trace(lambda a, b: a @ b, spec((20, 257, 64), "f16"), spec((20, 64, 264), "f16"))
    args = _inputs(g, 0)
    want = evaluate(g, args)[0]
    cfg = next(c for c in ON_HOST if c.tma_store and c.bn == 128 and not c.pingpong)
    _close(_run(g, cfg, args), want, 64)
    _patched(monkeypatch, "if (leader) bulk_wait_read();", "if (leader) (void)0;")
    with pytest.raises(AssertionError):
        _close(_run(g, cfg, args), want, 64)
