"""The Llama- and GPT-2-style decoders of compiler.nn on a real GPU, against the independent
float64 references of tests/decoder_reference.py at main and odd sizes and 1-4 layers, and
every program the e-graph offers for a decoder built and run (none may fault). Marked gpu."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decoder_reference as ref  # noqa: E402

pytestmark = pytest.mark.gpu

# (layers, batch, seq, dim, heads, kv_heads, ffn): head dims 64/128 take the flash kernel; 24
# does not (products and a row kernel); odd sequence lengths leave ragged key and query tiles
LLAMA = [(1, 1, 64, 256, 4, 2, 512), (2, 1, 100, 192, 3, 1, 500), (4, 2, 77, 128, 2, 2, 200),
         (3, 1, 130, 96, 4, 2, 260), (2, 1, 1024, 2048, 16, 4, 5632)]
GPT2 = [(1, 1, 128, 256, 4, 1024), (2, 2, 90, 192, 3, 770), (2, 1, 1000, 1152, 18, 4100)]


@pytest.fixture(scope="module")
def backend(cuda_backend):
    return cuda_backend


def llama_case(L, b, s, d, h, kv, f):
    from compiler import nn
    from compiler.trace import trace
    specs = nn.llama_decoder_specs(L, b, s, d, h, kv, f)
    g = trace(lambda *xs: nn.llama_decoder(*xs, heads=h, kv_heads=kv), *specs)
    xs = ref.decoder_inputs(specs, np.random.default_rng(0))
    return g, xs, ref.llama(*[x.astype(np.float64) for x in xs], heads=h, kv_heads=kv)


def gpt2_case(L, b, s, d, h, f):
    from compiler import nn
    from compiler.trace import trace
    specs = nn.gpt2_decoder_specs(L, b, s, d, f)
    g = trace(lambda *xs: nn.gpt2_decoder(*xs, heads=h), *specs)
    xs = ref.decoder_inputs(specs, np.random.default_rng(0))
    return g, xs, ref.gpt2(*[x.astype(np.float64) for x in xs], heads=h)


def errors(got: np.ndarray, want: np.ndarray) -> tuple[float, float]:
    """(relative L2 error, max abs error relative to max |want|)."""
    g, w = got.astype(np.float64), want.astype(np.float64)
    return (float(np.linalg.norm(g - w) / np.linalg.norm(w)),
            float(np.max(np.abs(g - w)) / np.max(np.abs(w))))


def precompile(graphs_and_schedules) -> None:
    """nvcc for every (graph, schedule) in parallel (the builds then hit the cache)."""
    from backends.cuda import CUDABackend
    CUDABackend().precompile(graphs_and_schedules)


def check(backend, g, xs, want, flash: bool):
    from backends.cuda.render import Schedule
    # the default, the prior's tiles, and the search's first schedules (products by cuBLAS or
    # by the prior's tiles, with an attention tile)
    scheds = {s.name: s for s in [Schedule(), Schedule(gemm="prior", name="prior")] + backend.schedules(g)[:3]}
    scheds = list(scheds.values())
    precompile([(g, s) for s in scheds])
    for sched in scheds:
        exe = backend.build(g, sched)
        got = exe(*xs)[0]
        l2, mx = errors(got, want)
        text = f"{sched.name}: rel L2 {l2:.2e} max {mx:.2e}\n{exe.explain()}"
        assert np.all(np.isfinite(got)), text
        assert l2 <= 1e-2 and mx <= 5e-2, text
        kinds = [l.kind for l in exe.launches]
        assert ("attention" in kinds) == flash, text
        assert not any(l.output.dtype.value == "f32" and l.kind.startswith("gemm") for l in exe.launches), text
        exe.close()


@pytest.mark.parametrize("size", LLAMA, ids=lambda s: "L{}b{}s{}d{}h{}kv{}f{}".format(*s))
def test_llama_decoder_matches_float64_reference(backend, size):
    g, xs, want = llama_case(*size)
    check(backend, g, xs, want, flash=(size[3] // size[4]) % 16 == 0)


@pytest.mark.parametrize("size", GPT2, ids=lambda s: "L{}b{}s{}d{}h{}f{}".format(*s))
def test_gpt2_decoder_matches_float64_reference(backend, size):
    g, xs, want = gpt2_case(*size)
    check(backend, g, xs, want, flash=(size[3] // size[4]) % 16 == 0)


def run_candidates(size, max_candidates: int) -> int:
    """Child process: every candidate of the decoder search under the default and the prior
    schedule, built, run and checked against the float64 reference; one JSON line each
    (printed before the run, so a fault names its candidate). Exit 0 when all match."""
    from backends.cuda import CUDABackend
    from backends.cuda.render import Schedule
    from compiler.explore import explore
    be = CUDABackend()
    g, xs, want = llama_case(*size)
    bad = 0
    cands = explore(g, max_candidates=max_candidates).candidates
    scheds = (Schedule(), Schedule(gemm="prior", name="prior"))
    precompile([(c.graph, s) for c in cands for s in scheds])
    for i, c in enumerate(cands):
        for sched in scheds:
            print(json.dumps({"candidate": i, "description": c.description, "schedule": sched.name}), flush=True)
            exe, why = be.try_build(c.graph, sched)
            if exe is None:
                print(json.dumps({"rejected": why[:300]}), flush=True)
                continue
            got = exe(*xs)[0]
            l2, mx = errors(got, want)
            ok = bool(np.all(np.isfinite(got)) and l2 <= 1e-2 and mx <= 5e-2)
            bad += not ok
            print(json.dumps({"ok": ok, "l2": l2, "max": mx, "kernels": [l.kind for l in exe.launches]}), flush=True)
            exe.close()
    return 1 if bad else 0


@pytest.mark.parametrize("size", [(2, 1, 128, 256, 4, 2, 512), (2, 1, 1024, 2048, 16, 4, 5632)],
                         ids=["small", "main"])
def test_every_decoder_candidate_runs_without_faults(backend, size):
    """A fault poisons the CUDA context, so the candidates run in a child process; its log
    names the last candidate started."""
    here = os.path.dirname(os.path.abspath(__file__))
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "candidates", json.dumps(size)],
                       capture_output=True, text=True, cwd=os.path.dirname(here), timeout=1200)
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-4000:]
    assert '"ok": true' in p.stdout


if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[1] == "candidates":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(run_candidates(tuple(json.loads(sys.argv[2])), 8))
