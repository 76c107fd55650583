"""The same compile in two fresh processes (same seed, different PYTHONHASHSEED) tries the same
candidates in the same order: exploration is bounded by counts, not by the clock or by
Python's string hashing."""
from __future__ import annotations

import json
import os
import subprocess
import sys


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Prints, as JSON on its last line, each workload's trials (program hash, description,
# schedule) in order, and its exploration summary (for the failure message).
_SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import compiler as saturn

def softmax(x):
    return x.softmax(-1)

def mlp(x, w1, w2):
    return (x @ w1).relu() @ w2

workloads = [("softmax", softmax, [saturn.spec((64, 256))]),
             ("mlp", mlp, [saturn.spec((32, 64)), saturn.spec((64, 128)), saturn.spec((128, 64))])]
out = {}
for name, fn, specs in workloads:
    # budget 6: exploration is bounded by counts; its emergency clock (60 % of the budget) must
    # not bind even on a loaded 2-core machine (at budget 2 a fresh-clone CI run hit it)
    f = saturn.compile(fn, *specs, target="cpu", budget=6.0, seed=0, quiet=True, cache=False)
    out[name] = {"trials": [[t.graph.structural_hash(), t.description, str(t.schedule)] for t in f.result.trials],
                 "exploration": f.result.exploration_text}
print(json.dumps(out))
"""


def _start(hash_seed: str, cache_dir: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONHASHSEED=hash_seed, SATURN_CACHE_DIR=cache_dir)
    return subprocess.Popen([sys.executable, "-c", _SCRIPT, REPO], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _result(proc: subprocess.Popen) -> dict:
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("the compile process did not finish within 300 s") from None
    assert proc.returncode == 0, f"the compile process failed:\n{err[-3000:]}"
    return json.loads(out.strip().splitlines()[-1])


def test_same_compile_in_fresh_processes_tries_the_same_candidates(tmp_path):
    # both at once, to halve the wall time; a load that slows them does not change what they try
    procs = [_start("1", str(tmp_path / "a")), _start("4242", str(tmp_path / "b"))]
    a, b = (_result(p) for p in procs)
    for name in ("softmax", "mlp"):
        ta, tb = a[name]["trials"], b[name]["trials"]
        assert len({h for h, _, _ in ta}) > 1, f"{name}: no rewritten candidate, nothing to compare"
        assert ta == tb, (f"{name}: the two processes tried different candidates\n"
                          f"PYTHONHASHSEED=1:\n{a[name]['exploration']}\n"
                          f"PYTHONHASHSEED=4242:\n{b[name]['exploration']}")
