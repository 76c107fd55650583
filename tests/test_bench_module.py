"""`saturn bench --module FILE.py` on a small module file: checked against eager, then timed."""
from __future__ import annotations

import json
import re

import pytest

from benchmarks import cli

pytest.importorskip("torch")

MODULE = '''
import torch

class Model(torch.nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.up, self.down = torch.nn.Linear(d, h), torch.nn.Linear(h, d)

    def forward(self, x):
        return self.down(torch.relu(self.up(x))).softmax(-1)

def get_inputs():
    return [torch.randn(8, 16)]

def get_init_inputs():
    return [16, 32]
'''

FAST = ["--budget", "0.5", "--saturn-option", "max_schedules=1", "--rounds", "2", "--batch-ms", "2"]


def test_module_bench_checks_and_times(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SATURN_CACHE_DIR", str(tmp_path / "cache"))
    path, out = tmp_path / "small_mlp.py", tmp_path / "out.json"
    path.write_text(MODULE)
    rc = cli.main(["--module", str(path), "--peers", "eager", "--json", str(out), *FAST])
    assert rc == 0
    data = json.loads(out.read_text())
    [rec] = data["results"]
    assert rec["label"] == "small_mlp.py: Model"
    assert rec["check"]["status"] == "ok" and rec["check"]["max_err"] <= rec["check"]["tol"]
    assert rec["saturn"]["median_s"] > 0 and rec["peers"]["eager"]["median_s"] > 0
    assert rec["speedup_vs_eager"]["saturn"] > 0
    assert re.search(r"region\d+_1: ", data["saturn_explain"]) and "Saturn: compiled" in data["saturn_explain"]
    text = capsys.readouterr().out
    assert "small_mlp.py: Model" in text and "Saturn × eager" in text


def test_module_bench_names_what_the_file_lacks(tmp_path, capsys):
    path = tmp_path / "incomplete.py"
    path.write_text("import torch\nclass Model(torch.nn.Module):\n    pass\n")
    assert cli.main(["--module", str(path)]) == 2
    assert "does not define get_inputs, get_init_inputs" in capsys.readouterr().err


def test_module_bench_missing_file(tmp_path, capsys):
    assert cli.main(["--module", str(tmp_path / "nope.py")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_module_bench_rejects_a_wrong_result(tmp_path, monkeypatch):
    from compiler.torch_backend import registry
    monkeypatch.setenv("SATURN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setitem(registry.OPS, "aten.relu.default", lambda self: self)   # a wrong translation
    path, out = tmp_path / "small_mlp.py", tmp_path / "out.json"
    path.write_text(MODULE)
    assert cli.main(["--module", str(path), "--peers", "eager", "--json", str(out), *FAST]) == 1
    [rec] = json.loads(out.read_text())["results"]
    assert rec["check"]["status"] == "FAIL" and rec["check"]["max_err"] > rec["check"]["tol"]
    assert "median_s" not in rec["saturn"]                                  # not timed
