"""A Hopper product whose epilogue reads other buffers (a residual, a gate, a bias row) stages
the product, rounded to the output's type, in shared memory and runs the epilogue on 16-byte
runs of each row, its reads loaded as vectors (render.epilogue_after; a SiLU gate's epilogue
run per accumulator cost 54 us of 94 on the H100). Checked here: which epilogues take it, that
the kernels call it, and on the host (hostsim) that every TMA tile and the cp.async-fed wgmma
tiles give the values the per-accumulator epilogue gives, bit for bit, at odd shapes."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

from backends.cuda import hostsim, render
from backends.cuda.render import Schedule
from backends.cuda.templates.gemm_tma import TMA_CONFIGS, TMA_EXPERIMENTAL_CONFIGS
from backends.cuda.templates.gemm_wgmma import WG_CONFIGS
from compiler.trace import spec, trace
from ir.interpreter import evaluate

R = importlib.import_module("backends.cuda.render")     # (the package's `render` is the function)


def _gated(m, n, k, dt="f16"):
    return trace(lambda x, wg, wu: (x @ wg).silu() * (x @ wu), spec((m, k), dt), spec((k, n), dt), spec((k, n), dt))


def _residual(m, n, k, dt="bf16"):
    return trace(lambda x, w, r: x @ w.transpose(-1, -2) + r, spec((m, k), dt), spec((n, k), dt), spec((m, n), dt))


def _bias(m, n, k, dt="f16"):
    return trace(lambda x, w, b: (x @ w + b).relu(), spec((2, m, k), dt), spec((k, n), dt), spec((n,), dt))


def _f32_residual(m, n, k):
    """An f32 output (the staged tile f32, the product's own rounding to f16 left in the epilogue)."""
    return trace(lambda x, w, r: (x @ w).astype("f32") + r, spec((m, k), "f16"), spec((k, n), "f16"), spec((m, n), "f32"))


def test_epilogues_that_read_buffers_run_after_staging():
    for g in (_gated(136, 264, 72), _residual(136, 264, 72), _bias(136, 264, 72)):
        src = render(g, Schedule(gemm="wgmma", tma=TMA_CONFIGS[0], name="t", arch="sm_90a"))[0]
        assert "DEV uint4 epi_run_" in src and "= epi_run_" in src
    staged_f32 = [c for c in TMA_CONFIGS if c.smem_epilogue and not c.persistent][0]   # (f32 tiles: not the own-tile forms)
    assert "= epi_run_" in render(_f32_residual(136, 264, 72), Schedule(gemm="wgmma", tma=staged_f32, name="t", arch="sm_90a"))[0]
    plain = trace(lambda a, b: a @ b, spec((136, 72), "f16"), spec((72, 264), "f16"))
    cast_only = trace(lambda a, b: (a @ b).relu(), spec((136, 72), "f16"), spec((72, 264), "f16"))
    for g in (plain, cast_only):
        assert "epi_run_" not in render(g, Schedule(gemm="wgmma", tma=TMA_CONFIGS[0], name="t", arch="sm_90a"))[0]


def test_the_gate_is_read_as_vectors():
    src = render(_gated(136, 264, 72), Schedule(gemm="wgmma", tma=TMA_CONFIGS[0], name="t", arch="sm_90a"))[0]
    load = src[src.index("epi_load_"):]
    assert "in.r0 = *reinterpret_cast<const uint4*>" in load[:load.index("\n}\n")]
    run = src[src.index("DEV uint4 epi_run_"):]
    assert "[((flat" not in run[:run.index("\n}\n")]      # no per-element loads of the gate left


_ORIG = R.epilogue_after


def _run(g, args, sched, after: bool, monkeypatch):
    monkeypatch.setattr(R, "epilogue_after", _ORIG if after else (lambda step, M: False))
    return hostsim.run_templates(g, args, sched)[0]


@pytest.mark.skipif(hostsim.available() is not None, reason=str(hostsim.available()))
@pytest.mark.parametrize("make,shape", [(_gated, (130, 264, 72)), (_residual, (200, 136, 64)), (_bias, (130, 200, 64)),
                                        (_f32_residual, (130, 136, 64))],
                         ids=["gated", "residual", "bias_row", "f32_out"])
def test_staged_epilogues_match_the_per_accumulator_ones_on_host(make, shape, monkeypatch):
    g = make(*shape)
    rng = np.random.default_rng(3)
    args = [(rng.standard_normal(n.shape) * (4 if i == 0 else 1)).astype(n.dtype.np) for i, n in enumerate(g.inputs)]
    want = np.asarray(evaluate(g, args)[0], np.float64)
    k_contiguous_b = make is _residual        # the ping-pong, cluster and 176-wide tiles too
    scheds = [Schedule(gemm="wgmma", tma=c, name=c.name, arch="sm_90a")
              for c in TMA_CONFIGS + (TMA_EXPERIMENTAL_CONFIGS if k_contiguous_b else [])] + \
             [Schedule(gemm="wgmma", wg=c, name="wg", arch="sm_90a") for c in WG_CONFIGS if c.smem_epilogue][:1]
    assert scheds
    for sched in scheds:
        got = _run(g, args, sched, True, monkeypatch)
        ref = _run(g, args, sched, False, monkeypatch)
        bits = np.uint16 if got.dtype.itemsize == 2 else np.uint32
        assert np.array_equal(np.asarray(got).view(bits), np.asarray(ref).view(bits)), sched.name
        err = float(np.abs(np.asarray(got, np.float64) - want).max()) / max(float(np.abs(want).max()), 1.0)
        assert err < 1e-2, (sched.name, err)


@pytest.mark.gpu
@pytest.mark.parametrize("make,shape", [(_gated, (1024, 5632, 2048)), (_gated, (130, 264, 72)),
                                        (_residual, (1000, 2048, 1024)), (_bias, (130, 200, 64))],
                         ids=["gated_decoder", "gated_odd", "residual", "bias_row"])
def test_gpu_staged_epilogues_match_the_interpreter(cuda_backend, make, shape):
    g = make(*shape)
    rng = np.random.default_rng(5)
    args = [rng.standard_normal(n.shape).astype(n.dtype.np) for n in g.inputs]
    want = np.asarray(evaluate(g, args)[0], np.float64)
    k_contiguous_b = make is _residual
    scheds = [Schedule(gemm="wgmma", tma=cfg, name=cfg.name)
              for cfg in TMA_CONFIGS + (TMA_EXPERIMENTAL_CONFIGS if k_contiguous_b else [])]
    cuda_backend.precompile([(g, s) for s in scheds])     # nvcc on all of them at once
    for sched in scheds:
        exe, why = cuda_backend.try_build(g, sched)
        assert exe is not None, why
        got = np.asarray(exe(*args)[0], np.float64)
        exe.close()
        err = float(np.abs(got - want).max()) / max(float(np.abs(want).max()), 1.0)
        assert err < 1e-2 * max(1.0, (shape[2] / 64) ** 0.25), (sched.name, err)



def test_the_gate_product_stores_its_silu_and_the_up_epilogue_only_multiplies():
    """SiLU(x @ wg) * (x @ wu): the gate's epilogue takes the whole SiLU (a region that reads
    the gate twice and joins again, in f32 between casts), so the up projection's epilogue
    reads the finished gate and multiplies; no exp2 or division is left in it."""
    from backends.cuda.plan import plan, tree
    from ir.ops import Op
    steps = plan(_gated(136, 264, 72))
    gemms = [s for s in steps if s.kind == "gemm"]
    assert len(steps) == 2 and len(gemms) == 2
    gate, up = gemms
    assert gate.output.op == Op.CAST and gate.output.srcs[0].op == Op.MUL
    gate_ops = {n.op for n in tree(gate.output, set(), stop=frozenset({gate.gemm.reduce}))}
    assert {Op.EXP2, Op.RECIP} <= gate_ops
    up_ops = {n.op for n in tree(up.output, {gate.output}, stop=frozenset({up.gemm.reduce}))}
    assert not {Op.EXP2, Op.RECIP} & up_ops and gate.output in up.inputs


@pytest.mark.skipif(hostsim.available() is not None, reason=str(hostsim.available()))
def test_the_silu_moved_into_the_gate_gives_the_same_bits_on_host(monkeypatch):
    """Against the split before (the gate stored as the product's f16 value, the SiLU computed
    in the up projection's epilogue): the same ops on the same f16 value, the same bits."""
    from backends.cuda import plan as P
    g = _gated(130, 264, 72)
    rng = np.random.default_rng(4)
    args = [(rng.standard_normal(n.shape) * (4 if i == 0 else 1)).astype(n.dtype.np) for i, n in enumerate(g.inputs)]
    want = np.asarray(evaluate(g, args)[0], np.float64)
    scheds = [Schedule(gemm="wgmma", tma=TMA_CONFIGS[0], name="t", arch="sm_90a"), Schedule()]
    new = [hostsim.run_templates(g, args, s)[0] for s in scheds]
    # the product's own f16 value (its reshape's cast) as the gate's end, as before
    monkeypatch.setattr(P, "_epilogue_end", lambda r, consumers, outputs, M, order: consumers[consumers[r][0]][0])
    up = [s for s in P.plan(g) if s.kind == "gemm"][1]
    assert any(n.op.name == "EXP2" for n in P.tree(up.output, {s.output for s in P.plan(g)}))   # the old split
    old = [hostsim.run_templates(g, args, s)[0] for s in scheds]
    for s, a, b in zip(scheds, new, old):
        assert np.array_equal(np.asarray(a).view(np.uint16), np.asarray(b).view(np.uint16)), s.name
        err = float(np.abs(np.asarray(a, np.float64) - want).max()) / max(float(np.abs(want).max()), 1.0)
        assert err < 1e-2, (s.name, err)
