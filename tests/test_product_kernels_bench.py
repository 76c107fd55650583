"""benchmarks/product_kernels.py without a GPU: its cases trace to one product each, its
schedules leave out the library ones, and its summary pairs each case with cuBLAS; the rows'
report it shares with benchmarks/attention_kernels.py (benchmarks/schedule_tables.py)."""
import numpy as np
import pytest

from backends.cuda import CUDABackend
from backends.cuda.plan import plan
from benchmarks import product_kernels as pk


@pytest.mark.parametrize("case", [c for c in pk.CASES if c[3] == 1][:3] + [c for c in pk.CASES if c[3] > 1][:1])
def test_cases_are_single_products_with_generated_schedules(case, monkeypatch):
    monkeypatch.setattr(CUDABackend, "_cublas_reason", staticmethod(lambda: None))
    g = pk._program(*case)
    assert [s.kind for s in plan(g)] == ["gemm"]
    m, n, k, batch, layout, dtype = case
    assert tuple(g.outputs[0].shape) == ((batch,) if batch > 1 else ()) + (m, n)
    be = CUDABackend()
    names = [s.name for s in be.schedules(g)]
    gen = [s.name for s in pk.generated_schedules(be, g)]
    assert "cublas" in names and "cublas" not in gen and "kernel_ir" not in gen
    assert gen[0] == "default" and len(gen) >= 5


def test_issue_shapes_are_covered():
    assert len(pk.SHAPES) >= 8 and (4096, 4096, 4096, 1, "nn") in pk.SHAPES
    assert {c[-1] for c in pk.CASES} == {"f16", "bf16", "f32"}


def test_summary_pairs_each_case_with_cublas():
    rows = [{"case": "c", "kernel": "torch.matmul (cuBLAS)", "ms": 1.0},
            {"case": "c", "kernel": "a", "ms": 2.0}, {"case": "c", "kernel": "b", "ms": 1.25},
            {"case": "c", "kernel": "x", "error": "too many registers"}]
    lines = pk.summary(rows)
    assert lines[-1] == "| c | 1.0000 | 1.2500 (b) | 0.80x |"


def test_report_adds_rates_and_prints_failures():
    from benchmarks import schedule_tables
    rows = [{"case": "c", "kernel": "lib", "ms": 2.0}, {"case": "c", "kernel": "a", "ms": 1.0},
            {"case": "c", "kernel": "b", "error": "too much shared memory"}]
    lines = []
    schedule_tables.report(rows, "c", 4e9, 2.0, "cuBLAS", lines.append, 8)
    assert rows[1]["tflops"] == 4.0 and rows[1]["x_cublas"] == 2.0 and rows[0]["x_cublas"] == 1.0
    assert lines[1].endswith("2.00x cuBLAS") and lines[2].endswith("failed: too much shared memory")


def test_only_and_experimental_pick_the_schedules_timed(monkeypatch):
    monkeypatch.setattr(CUDABackend, "_has_wgmma", staticmethod(lambda: True))
    be = CUDABackend()
    g = pk._program(4096, 4096, 4096, 1, "nn", "f16")
    monkeypatch.setattr(pk, "ONLY", ("tma",))
    plain = [s.name for s in pk.generated_schedules(be, g)]
    from backends.cuda.templates.gemm_tma import TMA_CONFIGS, TMA_EXPERIMENTAL_CONFIGS
    assert plain == [c.name for c in TMA_CONFIGS]
    monkeypatch.setattr(pk, "EXPERIMENTAL", True)
    more = [s.name for s in pk.generated_schedules(be, g) if s.name not in plain]
    assert more == [c.name for c in TMA_EXPERIMENTAL_CONFIGS]


def test_only_and_experimental_are_options_of_the_command_line(monkeypatch):
    import argparse
    ap = argparse.ArgumentParser()
    apply = pk._options(ap)
    monkeypatch.setattr(pk, "ONLY", ())
    monkeypatch.setattr(pk, "EXPERIMENTAL", False)
    apply(ap.parse_args(["--only", "tma,default", "--experimental"]))
    assert pk.ONLY == ("tma", "default") and pk.EXPERIMENTAL is True
    apply(ap.parse_args([]))
    assert pk.ONLY == () and pk.EXPERIMENTAL is False


def test_cases_picks_the_cases_whose_names_contain_one_of_the_parts(monkeypatch, capsys):
    from benchmarks import schedule_tables
    ran = []
    monkeypatch.setattr(CUDABackend, "unavailable_reason", lambda self: None)
    assert schedule_tables.main(pk.__doc__, pk.CASES, lambda be, c, r: ran.append(c) or [], lambda be, cs: None,
                                ["--cases", "2048x5632 nt f16,b64 nn bf16"], label=pk.label) == 0
    assert [pk.label(c) for c in ran] == ["1024x2048x5632 nt f16", "4096x4096x128 b64 nn bf16"]
    assert schedule_tables.main(pk.__doc__, pk.CASES, None, None, ["--cases", "7x7x7"], label=pk.label) == 1
    assert "no case name contains any of ['7x7x7']" in capsys.readouterr().out


def test_tiles_times_tma_tiles_by_name_listed_or_not(monkeypatch):
    import argparse
    from backends.cuda.templates.gemm_tma import TMA_CONFIGS, TMAConfig
    monkeypatch.setattr(CUDABackend, "_has_wgmma", staticmethod(lambda: True))
    ap = argparse.ArgumentParser()
    apply = pk._options(ap)
    monkeypatch.setattr(pk, "TILES", ())
    apply(ap.parse_args(["--only", "default", "--tiles", f"tma64x256s3ppe,{TMA_CONFIGS[1].name}"]))
    assert pk.TILES == (TMAConfig(64, 256, 3, True, True, True), TMA_CONFIGS[1])
    g = pk._program(4096, 4096, 4096, 1, "nn", "f16")
    names = [s.name for s in pk.generated_schedules(CUDABackend(), g)]
    assert names == ["default", "tma64x256s3ppe", TMA_CONFIGS[1].name]
    with pytest.raises(SystemExit):
        apply(ap.parse_args(["--tiles", "tma128x256s9"]))       # 9 stages: no such tile
    apply(ap.parse_args([]))
    assert pk.TILES == ()


def test_product_profile_reads_cases_and_names_schedules():
    from benchmarks import product_profile as pp
    assert pp.parse_case("1024x5632x2048 nt f16") == (1024, 5632, 2048, 1, "nt", "f16")
    assert pp.parse_case("4096x4096x128 b64 nn bf16") == (4096, 4096, 128, 64, "nn", "bf16")
    with pytest.raises(ValueError, match="not a product case"):
        pp.parse_case("1024x5632 nt f16")
    g, be = pk._program(64, 64, 64, 1, "nt", "f16"), CUDABackend()
    assert pp.schedule_for(be, g, None).name == be.schedules(g)[0].name
    assert pp.schedule_for(be, g, "tma64x256s3ppe").tma.bn == 256      # any TMA tile by name
    with pytest.raises(ValueError, match="no schedule 'nope'"):
        pp.schedule_for(be, g, "nope")


def test_wrong_tiles_names_the_tiles_and_what_they_hold():
    """`product_profile.wrong_tiles` on a product with one tile missing its third k-step and
    another holding a third tile's values: both found, by walk index and index in their block,
    the first's missing k-step named, and a right product reports no tile."""
    from backends.cuda.templates.gemm_tma import TMAConfig
    from benchmarks import product_profile as pp
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((256, 256)), rng.standard_normal((352, 256))
    want = a @ b.T
    cfg = TMAConfig(64, 176, 5, True, pingpong=True)         # 4 x 2 tiles
    assert pp.wrong_tiles(want, want, a, b, cfg)[0].startswith("0 of 8 tiles wrong")
    got = want.copy()
    got[64:128, 0:176] -= a[64:128, 128:192] @ b[0:176, 128:192].T       # walk index 1: k-step 2 missing
    got[0:64, 176:352] = want[128:192, 176:352]                            # walk index 4 holds tile 6's
    lines = pp.wrong_tiles(got, want, a, b, cfg)
    assert lines[0].startswith("2 of 8 tiles wrong"), lines
    assert "tile 1 at (64, 0): block 1, index 0" in lines[1] and "tile 4 at (0, 176): block 4" in lines[2], lines
    assert any("-(k-step 2's partial product)" in l for l in lines), lines
    got = want.copy()
    got[0:64, 176:352] = want[128:192, 176:352]
    assert any("tile 4 holds tile 6's values" in l for l in pp.wrong_tiles(got, want, a, b, cfg)), lines


def test_shapes_name_products_as_the_cases_are_labelled():
    for case in pk.CASES:
        assert pk.parse_case(pk.label(case)) == case
    assert pk.parse_case("1024x512x2048 nt f16") == (1024, 512, 2048, 1, "nt", "f16")
    with pytest.raises(ValueError, match="not a product case"):
        pk.parse_case("1024x512 nt f16")
    with pytest.raises(SystemExit):
        pk.main(["--shapes", "1024x512x2048 nt f8"])
