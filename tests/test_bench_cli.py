"""`saturn bench` end to end on tiny shapes, with and without PyTorch, and its timing helpers."""
from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from benchmarks import cli
from benchmarks.suite import Settings, rel_error, run_case
from benchmarks.timing import Stats, alternate
from benchmarks.workloads import WORKLOADS, Case, Input, select_cases

ROOT = Path(__file__).resolve().parents[1]


def _targets():
    """reference always; cpu too where that backend exists here."""
    from backends import get_backend
    out = ["reference"]
    try:
        get_backend("cpu")
        out.append("cpu")
    except Exception:  # noqa: BLE001 - unavailable, or still being built
        pass
    return out


def _validate(data: dict, n_results: int) -> None:
    assert data["schema"] == "saturn-bench/1"
    for key in ("date", "device", "versions", "ceilings", "settings", "notes", "results"):
        assert key in data
    assert data["versions"]["numpy"] and data["versions"]["saturn"]
    assert len(data["results"]) == n_results
    for r in data["results"]:
        assert r["check"]["status"] == "ok", r["check"]
        assert r["check"]["max_err"] <= r["check"]["tol"]
        s = r["saturn"]
        assert s["compile_s"] >= 0 and s["samples"] >= 2
        assert 0 < s["p25_s"] <= s["median_s"] <= s["p75_s"]
        assert r["bytes"] > 0 and s["GBps"] > 0


@pytest.mark.parametrize("target", _targets())
def test_bench_tiny_without_torch(target, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now fails, as on a bare install
    out = tmp_path / "out.json"
    workloads = "elementwise,softmax" if target == "reference" else "softmax"  # cpu: a real search, keep it short
    rc = cli.main(["--target", target, "--tiny", "--workloads", workloads, "--json", str(out),
                   "--cold", "--budget", "1"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "PyTorch is not installed" in text and "Saturn ms" in text
    data = json.loads(out.read_text())
    _validate(data, len(workloads.split(",")))
    for r in data["results"]:
        assert r["peers"] == {} and r["speedup_vs_eager"] == {}
        assert "interpreter" in r["check"]["reference"]
        if target == "cpu":      # the search's own stages, to see where a compile spent its budget
            parts = r["saturn"]["search_parts_s"]
            assert {"explore", "build+verify", "timing", "total"} <= set(parts) and parts["total"] > 0
            # and each trial's outcome, to see which schedules the budget reached
            trials = r["saturn"]["trials"]
            assert sum(t["status"] == "chosen" for t in trials) == 1
            chosen = next(t for t in trials if t["status"] == "chosen")
            assert chosen["schedule"] == r["saturn"]["schedule"] or r["saturn"]["schedule"] in chosen["schedule"]
            assert chosen["median_s"] > 0 and chosen["build_s"] >= 0
    assert data["ceilings"]["copy_GBps"] > 0  # numpy measures the ceilings without torch


def test_bench_tiny_with_torch(tmp_path, capsys):
    pytest.importorskip("torch")
    out, md = tmp_path / "out.json", tmp_path / "out.md"
    rc = cli.main(["--target", "reference", "--tiny", "--workloads", "softmax", "matmul_f16", "--peers", "eager",
                   "--json", str(out), "--md", str(md)])
    assert rc == 0
    data = json.loads(out.read_text())
    _validate(data, 2)
    for r in data["results"]:
        assert r["peers"]["eager"]["median_s"] > 0
        assert r["speedup_vs_eager"]["saturn"] > 0
        assert "PyTorch" in r["check"]["reference"]
    assert "matmul f16 9x17x13" in md.read_text()
    assert "× eager" in capsys.readouterr().out


def test_plot_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    out, png = tmp_path / "out.json", tmp_path / "out.png"
    assert cli.main(["--target", "reference", "--tiny", "--workloads", "softmax", "--peers", "eager",
                     "--json", str(out), "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_mismatch_is_reported_as_fail_and_not_timed():
    torch = pytest.importorskip("torch")
    from benchmarks.contenders import TorchEnv
    wrong = Case("wrong", "tiny", "wrong softmax", (Input((4, 9), "f32", "x"),),
                 lambda x: x.softmax(-1) * 1.01, lambda x: torch.softmax(x, -1), (4, 9), "f32", None)
    s = Settings(target="reference", family="cpu", suite="tiny", rounds=1, batch_s=0.001, peers=["eager"])
    rec = run_case(wrong, 0, s, TorchEnv(torch, "cpu", 1), {}, lambda m: None)
    assert rec["check"]["status"] == "FAIL"
    assert "median_s" not in rec["saturn"] and "saturn" not in rec["speedup_vs_eager"]
    assert rec["peers"]["eager"]["median_s"] > 0


def test_cuda_graphs_peer_only_for_model_workloads_on_cuda(tmp_path):
    """compile-graphs (torch.compile with CUDA graphs) is a CUDA peer of the model workloads:
    asked for on the CPU, or for a single-kernel workload, it is simply absent."""
    pytest.importorskip("torch")
    out = tmp_path / "r.json"
    assert cli.main(["--target", "reference", "--tiny", "--workloads", "softmax", "block",
                     "--peers", "eager,compile-graphs", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    for r in data["results"]:
        assert set(r["peers"]) == {"eager"}
    assert [c.many_kernels for c in select_cases("cuda", "tiny", ["softmax", "block", "decoder", "gpt2"])] \
        == [False, True, True, True]


def test_unavailable_target_and_unknown_workload_give_messages(capsys):
    from backends import get_backend
    try:
        get_backend("cuda")
        pytest.skip("a CUDA target is available here")
    except Exception:  # noqa: BLE001 - unavailable, or still being built
        pass
    assert cli.main(["--target", "cuda", "--tiny"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("saturn bench: target 'cuda'") and "Traceback" not in err
    assert cli.main(["--target", "reference", "--tiny", "--workloads", "nope"]) == 2
    assert "unknown workload" in capsys.readouterr().err


def test_runs_as_python_module(tmp_path):
    out = tmp_path / "m.json"
    p = subprocess.run([sys.executable, "-m", "benchmarks.cli", "--target", "reference", "--tiny",
                        "--workloads", "layernorm", "--peers", "eager", "--json", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    _validate(json.loads(out.read_text()), 1)


def test_every_workload_has_all_sizes_and_traces():
    import compiler
    for family in ("cpu", "cuda"):
        for suite in ("full", "quick", "tiny"):
            cases = select_cases(family, suite)
            # full runs main and odd sizes of every workload (an entry may list several shapes)
            subs = ("full", "odd") if suite == "full" else (suite,)
            assert len(cases) == sum(len(w.cases(family, sub)) for w in WORKLOADS for sub in subs)
            assert all(w.cases(family, sub) for w in WORKLOADS for sub in subs)
    for case in select_cases("cpu", "tiny") + select_cases("cuda", "tiny"):
        g = compiler.trace(case.saturn_fn, *[compiler.spec(i.shape, i.dtype) for i in case.inputs])
        assert g.outputs[0].shape == case.out_shape
        assert g.outputs[0].dtype.value == case.out_dtype


def test_stats_and_errors():
    s = Stats.of([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (s.median, s.min, s.max, s.n) == (3.0, 1.0, 5.0, 5)
    assert s.p25 == 2.0 and s.p75 == 4.0
    a = np.ones((3, 3), np.float32)
    assert rel_error(a, a) == 0.0
    assert rel_error(a * 1.5, a) == pytest.approx(0.5)
    assert rel_error(np.full((3, 3), np.nan, np.float32), a) == math.inf
    assert rel_error(a[:2], a) == math.inf


class _Fake:
    def __init__(self, name, fail_after=None):
        self.name, self.calls, self.fail_after = name, [], fail_after

    def time(self, n):
        self.calls.append(n)
        if self.fail_after is not None and len(self.calls) > self.fail_after:
            raise RuntimeError("boom")
        return [1e-3] * n


def test_alternate_rotates_and_isolates_failures():
    a, b = _Fake("a"), _Fake("b", fail_after=2)
    samples, errors = alternate([a, b], rounds=3, batch_s=0.01, warmup=1, rewarm_s=0)
    assert a.calls == [1, 10, 10, 10]
    assert "a" in samples and len(samples["a"]) == 30
    assert "b" not in samples and "boom" in errors["b"]


def test_alternate_rests_before_each_batch():
    """Each batch starts settle_s after the previous one ended (spinning worker threads of the
    contender before must not slow the next one)."""
    spans = []

    class Clocked(_Fake):
        def time(self, n):
            t0 = time.perf_counter()
            out = super().time(n)
            spans.append((t0, time.perf_counter()))
            return out
    alternate([Clocked("a"), Clocked("b")], rounds=2, batch_s=0.01, warmup=1, settle_s=0.05, rewarm_s=0)
    batches = spans[2:]                       # after the two warmups
    assert len(batches) == 4
    assert all(b[0] - a[1] >= 0.05 for a, b in zip(batches, batches[1:]))


def test_alternate_runs_each_contender_untimed_after_the_rest():
    """After the rest, rewarm_s of untimed runs come before the timed batch (a rested 2-core VM
    ran the whole next batch slow); their times are not among the samples."""
    a = _Fake("a")
    samples, _ = alternate([a], rounds=2, batch_s=0.01, warmup=1, settle_s=0.0, rewarm_s=0.005)
    assert a.calls == [1, 5, 10, 5, 10] and len(samples["a"]) == 20


def test_readme_section_is_replaced_between_markers():
    from benchmarks import readme
    text = "# Saturn\n\nintro\n"
    once = readme.updated(text)
    assert once.startswith(text.rstrip("\n")) and "## Benchmarks" in once
    assert readme.START in once and readme.END in once
    assert readme.updated(once) == once  # idempotent: only the marked block is rewritten


def test_report_merges_runs(tmp_path):
    from benchmarks import report
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for path, name in [(a, "softmax"), (b, "layernorm")]:
        assert cli.main(["--target", "reference", "--tiny", "--workloads", name, "--peers", "eager",
                         "--json", str(path)]) == 0
    out, md = tmp_path / "m.json", tmp_path / "m.md"
    assert report.main([str(a), str(b), "--out", str(out), "--md", str(md)]) == 0
    merged = json.loads(out.read_text())
    assert [r["workload"] for r in merged["results"]] == ["softmax", "layernorm"]
    assert "layernorm f32 8x33" in md.read_text()


def test_readme_section_shows_newest_results_with_links(tmp_path, monkeypatch):
    from benchmarks import readme
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    assert cli.main(["--target", "reference", "--tiny", "--workloads", "softmax", "--peers", "eager",
                     "--json", str(results / "old.json")]) == 0
    data = json.loads((results / "old.json").read_text())
    data["target"] = "cpu"
    (results / "old.json").write_text(json.dumps(data))
    data["date"] = "2099-01-01 00:00 UTC"
    (results / "new.json").write_text(json.dumps(data))
    (results / "other-tool.json").write_text(json.dumps({"results": [{"workload": "x"}]}))  # ignored
    module_run = dict(data, date="2099-02-01 00:00 UTC", suite="module")    # one user file: not the table
    (results / "module.json").write_text(json.dumps(module_run))
    monkeypatch.setattr(readme, "ROOT", tmp_path)
    monkeypatch.setattr(readme, "RESULTS", results)
    text = readme.section()
    assert "](benchmarks/results/new.json)" in text and "old.json" not in text
    assert "softmax f32 4x37" in text and "other-tool" not in text and "module.json" not in text


def test_other_load_is_measured_on_linux():
    from benchmarks.machine import OtherLoad
    probe = OtherLoad()
    sum(i * i for i in range(200_000))  # our own work is not counted as others'
    cores = probe.cores()
    if Path("/proc/stat").exists():
        assert cores is not None and cores >= 0.0


@pytest.mark.gpu
def test_bench_cuda_tiny(tmp_path):
    """On a GPU machine: the CUDA path end to end (events, L2 rotation, torch on the device)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from backends import get_backend
    try:
        get_backend("cuda")
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"target cuda unavailable: {e}")
    out = tmp_path / "cuda.json"
    assert cli.main(["--target", "cuda", "--tiny", "--workloads", "softmax", "attention", "--peers", "eager,sdpa",
                     "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    _validate(data, 2)
    assert data["ceilings"]["copy_GBps"] > 100  # a GPU copies at hundreds of GB/s or more
    for r in data["results"]:
        assert r["saturn"]["timing"] == "executable.benchmark"
        assert r["peers"]["eager"]["median_s"] > 0


@pytest.mark.gpu
def test_bench_cuda_graphs_peer(tmp_path):
    """On a GPU machine: torch.compile with CUDA graphs is checked and timed for a model workload."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    out = tmp_path / "graphs.json"
    assert cli.main(["--target", "cuda", "--tiny", "--workloads", "decoder", "--peers", "eager,compile-graphs,saturn-graphs",
                     "--json", str(out)]) == 0
    (r,) = json.loads(out.read_text())["results"]
    for peer in ("compile-graphs", "saturn-graphs"):
        assert r["peers"][peer]["median_s"] > 0
        assert r["peers"][peer]["max_err"] <= 2 * max(r["peers"]["eager"]["max_err"], r["check"]["tol"])


def test_saturn_on_device_tensors_calls_with_one_binding():
    """The saturn-graphs contender calls Saturn's function on a copy of its own of the first
    input set, the same tensors on every call (its CUDA graph is recorded per binding of
    addresses, so rotating through input copies would capture again and again), three times
    before it is timed (the binding is recorded on its second sighting and replayed on the
    third), and times through the environment's CUDA-event timer, as the PyTorch peers are."""
    from benchmarks.contenders import SaturnDeviceContender

    class Tensor:
        def __init__(self, v):
            self.v = v

        def clone(self):
            return Tensor(self.v)

    calls = []

    class Fn:
        def __call__(self, *ts):
            calls.append(ts)
            return (np.full(2, sum(t.v for t in ts), np.float32), None)

    class Env:
        def sync(self):
            calls.append("sync")

        def numpy(self, x):
            return np.asarray(x, np.float64)

        def time(self, fn, n):
            for _ in range(n):
                fn()
            return [1e-3] * n

    class Saturn:
        fn = Fn()

    sets = [[Tensor(1.0), Tensor(2.0)], [Tensor(1.0), Tensor(2.0)]]
    c = SaturnDeviceContender(Saturn(), Env(), sets)
    assert c.prepare() == 0.0
    assert len(calls) == 4 and calls[-1] == "sync"
    assert all(a is b for ts in calls[:3] for a, b in zip(ts, c.tensors))
    assert not any(a is b for a, b in zip(c.tensors, sets[0]))     # its own copies
    np.testing.assert_array_equal(c.output(), [3.0, 3.0])
    calls.clear()
    assert c.time(5) == [1e-3] * 5
    assert len(calls) == 5 and all(all(a is b for a, b in zip(ts, c.tensors)) for ts in calls)
