"""Independent launches on concurrent streams (backends/cuda/lanes.py), on the host: every
dependency between two launches (read after write, write after read, write after write) is
ordered by the plan, whatever the program."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from backends.cuda.lanes import enqueue, plan_lanes, sequential


def happens_before(lanes, n: int) -> list[int]:
    """Bit j of entry i: launch j finished before launch i starts, under `lanes` (lane order,
    event waits, the start event on lane 0 that the other lanes wait for first)."""
    before = [0] * n
    last: dict[int, int] = {}
    for i, k in enumerate(lanes.lane):
        b = 0
        if k in last:
            b |= before[last[k]] | (1 << last[k])
        for j in lanes.waits[i]:
            b |= before[j] | (1 << j)
        before[i] = b
        last[k] = i
    return before


def conflicts(writes, reads, i, j) -> bool:
    return writes[j] in reads[i] or writes[i] in reads[j] or writes[i] == writes[j]


def check_plan(writes, reads, library=None):
    lanes = plan_lanes(writes, reads, library)
    n = len(writes)
    before = happens_before(lanes, n)
    for i in range(n):
        for j in range(i):
            if conflicts(writes, reads, i, j):
                assert (before[i] >> j) & 1, (i, j, lanes)
    # the caller's stream (lane 0) holds the whole call at its end
    tails = {}
    for i, k in enumerate(lanes.lane):
        tails[k] = i
    end = before[tails[0]] | (1 << tails[0])
    for j in lanes.joins:
        end |= before[j] | (1 << j)
    assert end == (1 << n) - 1
    if library:
        assert all(lanes.lane[i] == 0 for i in range(n) if library[i])
    assert all(0 <= k < lanes.count for k in lanes.lane)
    return lanes


def test_attention_layer_runs_its_projections_side_by_side():
    # 0 norm, 1 q, 2 rope(q), 3 k, 4 rope(k), 5 v, 6 attention, 7 o-projection + residual
    writes = list(range(8))
    reads = [["x"], [0], [1], [0], [3], [0], [2, 4, 5], [6, "x"]]
    lanes = check_plan(writes, reads)
    assert lanes.lane == (0, 0, 0, 1, 1, 2, 0, 0)
    assert lanes.waits[3] == (0,) and lanes.waits[5] == (0,) and lanes.waits[6] == (4, 5)
    assert lanes.count == 3 and lanes.joins == ()


def test_a_chain_stays_on_one_stream():
    lanes = plan_lanes([0, 1, 2, 3], [["x"], [0], [1], [2, "x"]])
    assert lanes == sequential(4)
    assert plan_lanes([0], [["x"]]) == sequential(1)


def test_library_calls_share_lane_zero_and_branches_join_at_the_end():
    # two independent products by the library and a kernel beside them, none read afterwards
    writes, reads = ["a", "b", "c"], [["x"], ["x"], ["y"]]
    lanes = check_plan(writes, reads, [True, True, False])
    assert lanes.lane == (0, 0, 1) and lanes.joins == (2,)


def test_write_after_read_is_ordered():
    # launch 2 overwrites the buffer launch 1 reads (a reused buffer)
    lanes = check_plan(["t", "u", "t"], [["x"], ["t"], ["x"]])
    before = happens_before(lanes, 3)
    assert (before[2] >> 1) & 1


@given(st.lists(st.tuples(st.integers(0, 7), st.lists(st.integers(0, 9), max_size=3), st.booleans()),
                min_size=1, max_size=14))
def test_every_dependency_is_ordered(program):
    writes = [w for w, _, _ in program]
    reads = [[f"in{r - 8}" if r >= 8 else r for r in rs] for _, rs, _ in program]
    library = [lib for _, _, lib in program]
    check_plan(writes, reads, library)
    check_plan(writes, reads)


def test_enqueue_issues_waits_before_and_records_after():
    writes = list(range(8))
    reads = [["x"], [0], [1], [0], [3], [0], [2, 4, 5], [6, "x"]]
    lanes = plan_lanes(writes, reads)
    log = []
    events = {j: f"e{j}" for j in lanes.recorded}
    enqueue(lanes, lambda i, k: log.append(("launch", i, k)), lambda e, k: log.append(("record", e, k)),
            lambda k, e: log.append(("wait", k, e)), events, "start")
    assert log[0] == ("record", "start", 0)
    assert log.index(("wait", 1, "start")) < log.index(("launch", 3, 1))
    assert log.index(("record", "e0", 0)) < log.index(("wait", 1, "e0")) < log.index(("launch", 3, 1))
    assert log.index(("record", "e4", 1)) < log.index(("wait", 0, "e4")) < log.index(("launch", 6, 0))
    assert [e for e in log if e[0] == "launch"] == [("launch", i, k) for i, k in enumerate(lanes.lane)]
