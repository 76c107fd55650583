"""explain() and `saturn explain` show the search: candidates with status and times, the chosen
program and the generated code."""
from __future__ import annotations

import pytest

import compiler as saturn
from backends.base import BackendUnavailable
from backends.reference import ReferenceBackend
from compiler.cli import main


def test_explain_lists_candidates_choice_and_code():
    f = saturn.compile(lambda x: x.softmax(-1), saturn.spec((4, 50)), target="refsearch",
                       backend=ReferenceBackend(), budget=1.0, quiet=True)
    text = f.explain()
    for part in ("target: refsearch", "program (", "search:", "candidates:", "status", "chosen: trial",
                 "generated code:"):
        assert part in text, part
    assert "chosen" in [t.status for t in f.result.trials]
    # every trial appears with its status (skipped ones are counted in one line)
    for t in f.result.trials:
        assert (f"{t.id:>3} " in text) if t.status != "skipped" else ("skipped:" in text)


def test_saturn_explain_cli(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SATURN_CACHE_DIR", str(tmp_path))
    try:
        rc = main(["explain", "softmax", "--target", "cpu", "--budget", "1", "--quiet"])
    except BackendUnavailable as e:
        pytest.skip(str(e))
    out = capsys.readouterr().out
    assert rc == 0
    assert "softmax (f32[256, 1024]) on cpu" in out and "candidates:" in out and "generated code:" in out
