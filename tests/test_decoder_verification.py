"""A decoder too big for the interpreter is still checked against it: its baseline (the original
program under the default schedule, the reference at the compiled shapes) must first match the
interpreter at a smaller odd-sized variant, which the search finds although the decoder couples
its sizes (width = heads x head size, an even rotary head size); a candidate that misses the
baseline is rejected."""
from compiler import nn
import compiler as saturn
from compiler.explore import Candidate

HEADS, KV = 4, 2


def _decoder(*xs):
    return nn.llama_decoder(*xs, heads=HEADS, kv_heads=KV)


def test_decoder_too_big_for_the_interpreter_has_a_checked_baseline_and_rejects_a_wrong_candidate():
    specs = nn.llama_decoder_specs(1, 1, 64, 128, HEADS, KV, 256, "f32")
    graph = saturn.trace(_decoder, *specs)
    wrong = saturn.trace(lambda *xs: _decoder(*xs) * 1.001, *specs)
    # reference_limit: treat this decoder as too big for the interpreter at its compiled shapes
    # (budget: a cap; on a loaded 2-core machine 10 s once left the wrong candidate unverified)
    f = saturn.compile(_decoder, *specs, budget=30, quiet=True, cache=False, reference_limit=1e5, max_schedules=1,
                       candidates=[Candidate(graph, 1.0, "original program"), Candidate(wrong, 0.5, "wrong")])
    notes = "\n".join(f.result.notes)
    assert "matched the interpreter at" in notes and "itself unchecked" not in notes, notes
    first = f.result.trials[0].schedule
    trials = {t.description: t for t in f.result.trials if t.schedule == first}
    assert trials["wrong"].status == "rejected" and "mismatch" in trials["wrong"].reason
    assert f.result.winner.description == "original program"
