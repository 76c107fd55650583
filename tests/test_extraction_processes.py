"""Exploration gives the same candidates in every process: fresh processes with different
PYTHONHASHSEED values (so different string hashing and object addresses) extract the same
programs, in the same order, for softmax and a small attention in f16 and f32. Each process
collects its garbage before every saturation phase: that frees the earlier phases' egglog
objects, so an address (and anything named after one) is reused as early as it can be."""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

import pytest

import compiler
from rewrites import bridge, registry

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Prints, as JSON on its last line, per workload: the phases (iterations, e-nodes) and the
# candidates (structural hash, description) in order.
_SCRIPT = r"""
import gc, json, sys
sys.path.insert(0, sys.argv[1])
import compiler
from compiler import nn
from compiler.explore import explore
from rewrites import bridge

run_phase = bridge.EGraphSession.run_phase
def collecting_run_phase(self, *args, **kwargs):
    gc.collect()
    return run_phase(self, *args, **kwargs)
bridge.EGraphSession.run_phase = collecting_run_phase

workloads = [("softmax", lambda x: x.softmax(-1), [compiler.spec((64, 256))]),
             ("attention-f16", nn.attention, [compiler.spec((1, 2, 128, 32), "f16")] * 3),
             ("attention-f32", nn.attention, [compiler.spec((1, 2, 128, 32), "f32")] * 3)]
out = {}
for name, fn, specs in workloads:
    exp = explore(compiler.trace(fn, *specs), max_candidates=12)
    out[name] = {"phases": [[p.name, p.iterations, p.enodes] for p in exp.phases],
                 "candidates": [[c.graph.structural_hash(), c.description] for c in exp.candidates]}
print(json.dumps(out))
"""


def _explore_in_processes(hash_seeds: list[str], at_once: int = 2) -> dict[str, dict]:
    results = {}
    for i in range(0, len(hash_seeds), at_once):
        procs = {s: subprocess.Popen([sys.executable, "-c", _SCRIPT, REPO], cwd=REPO, text=True,
                                     env=dict(os.environ, PYTHONHASHSEED=s),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for s in hash_seeds[i:i + at_once]}
        for s, p in procs.items():
            try:
                out, err = p.communicate(timeout=300)
            except subprocess.TimeoutExpired:
                p.kill()
                raise AssertionError(f"PYTHONHASHSEED={s}: exploration did not finish within 300 s") from None
            assert p.returncode == 0, f"PYTHONHASHSEED={s}: exploration failed:\n{err[-3000:]}"
            results[s] = json.loads(out.strip().splitlines()[-1])
    return results


def _assert_same(results: dict[str, dict]) -> None:
    (s0, first), *rest = results.items()
    for name, got in first.items():
        assert len({h for h, _ in got["candidates"]}) > 2, f"{name}: too few candidates to compare"
    for s, other in rest:
        for name in first:
            a, b = first[name], other[name]
            assert a == b, (f"{name}: PYTHONHASHSEED={s0} and {s} explored differently\n"
                            f"{s0}: {json.dumps(a, indent=1)}\n{s}: {json.dumps(b, indent=1)}")


def test_fresh_processes_extract_the_same_candidates():
    _assert_same(_explore_in_processes(["0", "1", "2", "3"]))


@pytest.mark.slow
def test_fresh_processes_extract_the_same_candidates_over_many_seeds():
    _assert_same(_explore_in_processes([str(s) for s in range(40)]))


def test_a_phase_runs_its_own_rules_after_an_earlier_phases_rulesets_are_collected():
    """egglog names an unnamed combination of rulesets after its object's address, and an
    e-graph registers a ruleset once per name: a phase whose combination took a collected
    one's address ran the earlier phase's rules. Combinations are named by their parts."""
    fam = {f: bridge.cached_ruleset(f, registry.family_rules(f)) for f in ("algebra", "reduction", "online_softmax")}
    g = compiler.trace(lambda x: x.softmax(-1), compiler.spec((64, 256)))
    session = bridge.EGraphSession(g, (16,))
    kw = dict(max_iterations=30, node_limit=30000, deadline=float("inf"))
    session.run_phase("reduction", [fam["reduction"], fam["algebra"]], **kw)
    before = session.size()
    gc.collect()
    rep = session.run_phase("online_softmax", [fam["online_softmax"], fam["reduction"], fam["algebra"]], **kw)
    assert rep.enodes > before, "the online-softmax rules did not run"
    a = bridge.combined_ruleset([fam["reduction"], fam["algebra"]])
    assert a is bridge.combined_ruleset([fam["reduction"], fam["algebra"]])
    b = bridge.combined_ruleset([fam["online_softmax"], fam["reduction"], fam["algebra"]])
    assert str(a.__egg_ident__) != str(b.__egg_ident__)
    assert str(id(a)) not in str(a.__egg_ident__)
