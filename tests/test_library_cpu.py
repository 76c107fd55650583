"""Library products on the CPU (backends/llvm/blas.py): which kernels run as numpy.matmul under
the `blas` schedule, that they match the interpreter (every dtype, batched, transposed,
broadcast and head-merged operands, epilogues, odd sizes), that the rest stays generated, and
that the search offers, verifies and caches the schedule."""
import numpy as np
import pytest

import compiler as saturn
from backends.llvm import LLVMBackend, blas
from backends.llvm.blas import BlasLaunch
from ir.interpreter import evaluate
from ir.kernel import KernelSchedule, Schedule
from tests.tolerances import assert_close

pytestmark = pytest.mark.usefixtures("module_cache_dir")

BACKEND = LLVMBackend()
LIBRARY = Schedule(default=KernelSchedule(library="blas"), name="blas")


def _build(fn, shapes, dtype="f32", seed=0):
    specs = [saturn.spec(s, dtype) for s in shapes]
    g = saturn.trace(fn, *specs)
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal(s).astype(sp.dtype.np) for s, sp in zip(shapes, specs)]
    return g, args, BACKEND.build(g, LIBRARY)


def _library_launches(exe) -> int:
    return sum(isinstance(l, BlasLaunch) for l in exe.launches)


def check(fn, shapes, dtype="f32", calls=1, scale=4.0):
    g, args, exe = _build(fn, shapes, dtype)
    assert _library_launches(exe) == calls, exe.source[:2000]
    for got, want in zip(exe(*args), evaluate(g, args)):
        assert got.dtype == want.dtype
        assert_close(got, want, scale=scale, graph=g, args=args)
    return exe


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("m,k,n", [(7, 5, 9), (1, 7, 13), (13, 7, 1), (33, 1, 17), (64, 100, 65)])
def test_plain_product_every_dtype(dtype, m, k, n):
    check(lambda a, b: a @ b, [(m, k), (k, n)], dtype, calls=1 if k > 1 else 0)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_batched_and_broadcast(dtype):
    check(lambda a, b: a @ b, [(3, 9, 17), (3, 17, 5)], dtype)
    check(lambda a, b: a @ b, [(2, 3, 9, 17), (17, 5)], dtype)      # weights shared by the batch
    check(lambda a, b: a @ b, [(9, 17), (4, 17, 5)], dtype)


def test_transposed_operands():
    check(lambda a, b: a.transpose(-1, -2) @ b, [(17, 9), (17, 5)])
    check(lambda a, b: a @ b.transpose(-1, -2), [(9, 17), (5, 17)])
    check(lambda a, b: a.transpose(-1, -2) @ b.transpose(-1, -2), [(17, 9), (5, 17)])
    check(lambda a, b: a.transpose(0, 1) @ b, [(9, 3, 17), (3, 17, 4)])   # a batch-major view


def test_epilogue_runs_as_its_own_generated_kernel():
    exe = check(lambda x, w, b: (x @ w + b).gelu(), [(17, 33), (33, 20), (20,)], scale=8.0)
    names = [l.kernel.name for l in exe.launches]
    assert any(n.endswith("_epilogue") for n in names) and len(names) == 2
    assert "library call:" in exe.source and "numpy.matmul" in exe.source


def test_scale_and_half_output():
    check(lambda a, b: (a * 0.125) @ b, [(9, 17), (17, 5)])
    check(lambda a, b: (a @ b) * 0.5, [(9, 17), (17, 5)], "f16")
    check(lambda a, b: (a @ b).relu(), [(9, 17), (17, 5)], "bf16")


def test_head_merge_view_is_a_library_operand():
    # attention heads merged back: (h, s, d) -> (s, h*d) is a div/mod index; the view splits r
    def merged(a, w):
        return a.transpose(0, 1).reshape(6, 32) @ w
    check(merged, [(4, 6, 8), (32, 5)])


def test_transformer_block_products_run_in_the_library():
    from compiler import nn
    specs = nn.transformer_block_specs(1, 16, 32, 64, "f32")
    g = saturn.trace(lambda *xs: nn.transformer_block(*xs, heads=4), *specs)
    rng = np.random.default_rng(1)
    args = [(rng.standard_normal(s.shape) * 0.3).astype(np.float32) for s in specs]
    exe = BACKEND.build(g, LIBRARY)
    assert _library_launches(exe) >= 6
    assert_close(exe(*args)[0], evaluate(g, args)[0], scale=16.0, graph=g, args=args)


def test_not_offered_without_a_product():
    g = saturn.trace(lambda x: x.softmax(-1), saturn.spec((8, 16)))
    assert "blas" not in [s.name for s in BACKEND.schedules(g)]
    g = saturn.trace(lambda a, b: a @ b, saturn.spec((8, 16)), saturn.spec((16, 4)))
    assert "blas" in [s.name for s in BACKEND.schedules(g)][:3]


def test_masked_operand_stays_generated():
    # a padded operand reads through a mask: not a plain strided view
    g, args, exe = _build(lambda a, b: a.pad(((0, 0), (0, 3))) @ b, [(9, 14), (17, 5)])
    assert _library_launches(exe) == 0
    assert_close(exe(*args)[0], evaluate(g, args)[0], scale=4.0)


def test_split_is_idempotent_and_deterministic():
    g, args, exe = _build(lambda x, w, b: x @ w + b, [(17, 33), (33, 20), (20,)])
    program, calls = blas.split_epilogues(exe.program, LIBRARY)
    assert program == exe.program and set(calls) == {l.kernel.name for l in exe.launches if isinstance(l, BlasLaunch)}
    first = exe(*args)[0]
    for _ in range(3):
        np.testing.assert_array_equal(exe(*args)[0], first)


def test_search_verifies_the_library_schedule_and_caches_it(tmp_path):
    from compiler.explore import Candidate
    specs = (saturn.spec((64, 48)), saturn.spec((48, 40)))
    only = [Candidate(saturn.trace(lambda a, b: a @ b, *specs), 0.0, "original program")]
    f = saturn.compile(lambda a, b: a @ b, *specs, budget=4, quiet=True, cache=str(tmp_path), candidates=only)
    tried = {t.schedule_text: t.status for t in f.result.trials}
    assert tried.get("blas") in ("verified", "timed", "chosen", "pruned", "duplicate"), tried
    g = saturn.compile(lambda a, b: a @ b, *specs, budget=4, quiet=True, cache=str(tmp_path), candidates=only)
    assert g.cache == "hit"
    a, b = np.ones((64, 48), np.float32), np.ones((48, 40), np.float32)
    np.testing.assert_array_equal(g(a, b), np.full((64, 40), 48, np.float32))


def test_offered_from_the_contraction_terms_without_lowering(monkeypatch):
    """The search asks every candidate for its schedules before building any: they are read
    from the graph's contraction terms (a 12-layer model's lowering takes seconds). A row's sum
    of squares or scaled sum is a contraction term but no product."""
    from ir.ops import Op
    from rewrites.apply import kernel_terms
    monkeypatch.setattr(type(BACKEND), "lower", lambda self, graph: pytest.fail("schedules() lowered the graph"))
    for fn in (lambda x: x.rms_norm((16,)), lambda x: x.layer_norm((16,)), lambda x: x.var(-1)):
        g = kernel_terms(saturn.trace(fn, saturn.spec((8, 16))))
        assert any(n.op == Op.CONTRACT for n in g.nodes)
        assert "blas" not in [s.name for s in BACKEND.schedules(g)]
    g = kernel_terms(saturn.trace(lambda a, b: (a @ b).relu(), saturn.spec((8, 16)), saturn.spec((16, 4))))
    assert "blas" in [s.name for s in BACKEND.schedules(g)][:3]


def test_generated_code_is_timed_only_once_the_library_threads_are_quiet(tmp_path, monkeypatch):
    """numpy's BLAS threads spin after a call and slow whatever is timed next (2x on 2 cores): a
    worker that ran a library call notes when its threads go quiet (a host-wide clock file), and
    a worker times generated code only after that; an executable that calls the library does
    not wait (its own calls leave the threads spinning, as in the user's process)."""
    import time

    from backends.llvm.runtime import LIBRARY_SETTLE_S
    from compiler import workers
    monkeypatch.setattr(workers, "QUIET_FILE", str(tmp_path / "quiet"))
    _, _, exe = _build(lambda a, b: a @ b, [(64, 64), (64, 64)])
    generated = BACKEND.build(saturn.trace(lambda a, b: a @ b, saturn.spec((64, 64)), saturn.spec((64, 64))))
    assert exe.settle_s == LIBRARY_SETTLE_S > 0 and generated.settle_s == 0.0
    t0 = time.perf_counter()
    workers._wait_library_quiet(generated)          # nothing ran: no wait
    workers._library_ran(generated)                 # generated code leaves nothing spinning
    workers._wait_library_quiet(generated)
    assert time.perf_counter() - t0 < LIBRARY_SETTLE_S / 2
    workers._library_ran(exe)                       # answers at once ...
    assert time.perf_counter() - t0 < LIBRARY_SETTLE_S / 2
    workers._wait_library_quiet(exe)                # ... the library's own timing does not wait ...
    assert time.perf_counter() - t0 < LIBRARY_SETTLE_S / 2
    workers._wait_library_quiet(generated)          # ... generated code's does
    assert time.perf_counter() - t0 >= LIBRARY_SETTLE_S
    t1 = time.perf_counter()
    workers._wait_library_quiet(generated)          # and only once
    assert time.perf_counter() - t1 < LIBRARY_SETTLE_S / 2