"""How busy the machine was with other work while the bench ran (Linux /proc; None elsewhere).

The load average counts the bench itself, so it cannot tell a quiet machine from a busy one.
Instead: total busy CPU time (/proc/stat) minus this process's and its children's CPU time,
over the wall-clock time, = the average number of cores other processes used.
"""
from __future__ import annotations

import os
import time


def _busy_seconds() -> float | None:
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal ...: everything but idle and iowait
    busy = sum(fields) - fields[3] - (fields[4] if len(fields) > 4 else 0)
    return busy / os.sysconf("SC_CLK_TCK")


def _live_children_seconds() -> float:
    """CPU time of child processes still running (not yet in os.times()' children totals)."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0.0
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return 0.0
    pids = set()
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                pids.update(f.read().split())
        except OSError:
            continue
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
            total += (int(rest[11]) + int(rest[12])) / tick  # utime, stime
        except (OSError, ValueError, IndexError):
            continue
    return total


def _own_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system + _live_children_seconds()


class OtherLoad:
    """Start it before the work; `cores()` afterwards gives the average cores other processes used."""

    def __init__(self):
        self.busy0, self.own0, self.wall0 = _busy_seconds(), _own_seconds(), time.perf_counter()

    def cores(self) -> float | None:
        busy = _busy_seconds()
        if busy is None or self.busy0 is None:
            return None
        wall = time.perf_counter() - self.wall0
        others = (busy - self.busy0) - (_own_seconds() - self.own0)
        return max(others, 0.0) / wall if wall > 0 else None
