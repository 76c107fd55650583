"""Every program the e-graph offers for a (tiny) Llama decoder, as the CUDA backend plans and
renders it, compiled for the host and run there (backends/cuda/hostsim.py) against the
interpreter: the rules' programs on the CUDA path, where no GPU is (on a GPU,
tests/test_decoder_gpu.py runs the decoder search's candidates on the device)."""
from __future__ import annotations

import numpy as np
import pytest

import compiler
from backends.cuda import hostsim
from backends.cuda.plan import needs_kernel_ir
from benchmarks.suite import make_inputs
from benchmarks.workloads import select_cases
from compiler.explore import explore
from ir.interpreter import evaluate


@pytest.mark.skipif(hostsim.available() is not None, reason=str(hostsim.available()))
def test_every_decoder_candidate_runs_on_host_and_matches_the_interpreter():
    (case,) = select_cases("cuda", "tiny", ["decoder"])
    g = compiler.trace(case.saturn_fn, *[compiler.spec(i.shape, i.dtype, i.name) for i in case.inputs])
    cands = explore(g, max_candidates=8).candidates
    assert len(cands) >= 4 and any(c.graph is not g for c in cands)
    args = make_inputs(case, 0)
    want = np.asarray(evaluate(g, args)[0], np.float64)
    scale = max(float(np.abs(want).max()), 1.0)
    for c in cands:
        run = hostsim.run_kernel_ir if needs_kernel_ir(c.graph) else hostsim.run_templates
        got = np.asarray(run(c.graph, args)[0], np.float64)
        err = float(np.abs(got - want).max()) / scale
        assert err < 1e-2, (c.description, err)      # f16 outputs of a two-layer program
