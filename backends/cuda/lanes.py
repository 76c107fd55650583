"""Independent launches of a program on concurrent streams ("lanes"); no driver calls here.

A program's launches run in order on one stream, so a product that fills a quarter of the GPU
(a GQA layer's k or v projection: 32 tiles on 132 SMs) leaves the rest idle though the next
launch does not need its result. `plan_lanes` reads which buffers each launch writes and reads,
and places each launch on a lane: lane 0 is the caller's stream, the others are the
executable's own streams. A launch waits (an event) for each launch it depends on that ran on
another lane and that its own lane has not already passed: read after write, write after read
and write after write of a buffer. Every lane other than 0 first waits for the call's start on
lane 0 (so it sees the caller's inputs), and lane 0 waits at the end for each lane's last
launch (so the caller's stream holds the whole call; a CUDA graph capture needs that join too).
Library calls (cuBLAS) all run on lane 0: one library handle's workspace is not safe under two
concurrent calls.

`enqueue` issues a plan through three callables (launch on a lane, record an event, wait for
one): the host-array path (backends/cuda/executable.py) and the device-array path, plain or
captured as a CUDA graph (backends/cuda/device_run.py), share it.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Hashable, Sequence

MAX_LANES = 4


@dataclass(frozen=True)
class Lanes:
    lane: tuple[int, ...]                  # each launch's lane
    waits: tuple[tuple[int, ...], ...]     # launches each launch waits for (on other lanes)
    joins: tuple[int, ...]                 # the last launch of each lane other than 0 that lane 0 waits for
    count: int                             # lanes used

    @cached_property
    def recorded(self) -> frozenset[int]:
        """Launches whose completion is waited for (an event is recorded after each)."""
        return frozenset(j for w in self.waits for j in w) | frozenset(self.joins)


def new_events(lanes: Lanes, new_event: Callable[[], object]) -> dict:
    """The events `enqueue` needs: one per launch another lane waits for, and the call's start
    (key -1); none for one lane."""
    return {j: new_event() for j in lanes.recorded | {-1}} if lanes.count > 1 else {}


def sequential(n: int) -> Lanes:
    return Lanes((0,) * n, ((),) * n, (), 1)


def plan_lanes(writes: Sequence[Hashable], reads: Sequence[Sequence[Hashable]],
               library: Sequence[bool] | None = None, max_lanes: int = MAX_LANES) -> Lanes:
    """Lanes for launches that each write one buffer (`writes[i]`) and read `reads[i]`."""
    n = len(writes)
    library = library or [False] * n
    if n < 2 or max_lanes < 2:
        return sequential(n)
    last_write: dict = {}
    readers: dict = {}
    reach: list[int] = []                  # bit j set: launch j must finish before this one
    deps: list[list[int]] = []
    for i in range(n):
        d = {last_write[b] for b in reads[i] if b in last_write}
        w = writes[i]
        d |= set(readers.get(w, ())) - {i}
        if w in last_write:
            d.add(last_write[w])
        r = 0
        for j in d:
            r |= reach[j] | (1 << j)
        # only the direct dependencies: one reached through another needs no wait of its own
        direct = [j for j in sorted(d) if not any((reach[k] >> j) & 1 for k in d if k != j)]
        reach.append(r)
        deps.append(direct)
        for b in reads[i]:
            readers.setdefault(b, []).append(i)
        readers[w] = []
        last_write[w] = i

    lane: list[int] = []
    tails: list[int] = []                  # each lane's last launch so far (-1: none yet)
    waits: list[tuple[int, ...]] = []
    for i in range(n):
        if library[i] or i == 0:
            k = 0
        else:
            # continue the lane of a direct dependency that lane ends with (lane 0 first);
            # else a new lane; else (all lanes open) the lane whose last launch is oldest
            ends = [lane[j] for j in deps[i] if tails[lane[j]] == j]
            if ends:
                k = min(ends)
            elif len(tails) < max_lanes:
                k = len(tails)
            else:
                k = min(range(len(tails)), key=lambda x: tails[x])
        if k == len(tails):
            tails.append(-1)
        prev = tails[k]
        passed = reach[prev] | (1 << prev) if prev >= 0 else 0
        waits.append(tuple(j for j in deps[i] if lane[j] != k and not (passed >> j) & 1))
        lane.append(k)
        tails[k] = i
    if len(tails) == 1:
        return sequential(n)
    end0 = reach[tails[0]] | (1 << tails[0])
    joins = tuple(t for k, t in enumerate(tails) if k and not (end0 >> t) & 1)
    return Lanes(tuple(lane), tuple(waits), joins, len(tails))


def enqueue(lanes: Lanes, launch: Callable[[int, int], None], record: Callable[[object, int], None],
            wait: Callable[[int, object], None], events: Sequence, start_event) -> None:
    """Issue every launch of `lanes`: `launch(i, lane)`, `record(event, lane)` after a launch
    another lane waits for (`events[i]`), `wait(lane, event)` before a launch that needs one.
    `start_event` is recorded on lane 0 first, and each other lane waits for it before its
    first launch."""
    started = [False] * lanes.count
    if lanes.count > 1:
        record(start_event, 0)
    started[0] = True
    recorded = lanes.recorded
    for i, k in enumerate(lanes.lane):
        if not started[k]:
            wait(k, start_event)
            started[k] = True
        for j in lanes.waits[i]:
            wait(k, events[j])
        launch(i, k)
        if i in recorded:
            record(events[i], k)
    for j in lanes.joins:
        wait(0, events[j])
