"""The README's example runs as written (with a shorter search budget and its own cache
directory) and gives what the interpreter gives."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_runs(monkeypatch, tmp_path, capsys):
    from compiler import api
    from ir.interpreter import evaluate
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    monkeypatch.setenv("SATURN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(api, "DEFAULT_BUDGET_OTHER", 1.0)
    scope: dict = {}
    exec(compile(code, str(README), "exec"), scope)
    f, x, w, b, y = (scope[k] for k in ("f", "x", "w", "b", "y"))
    assert y.shape == (128, 512) and y.dtype == np.float32
    want = evaluate(f.graph, [x, w, b])[0]
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-6)
    assert "chosen" in capsys.readouterr().out          # explain() printed the search
