"""Timing: per-run samples, summary statistics, and alternating rounds across contenders.

Every contender exposes `time(n) -> list[float]` (seconds per run). The runner warms each one
up, sizes a batch so it lasts about `batch_s`, then runs rounds in which every contender
times one batch, in an order that rotates each round, so slow drift (thermal, other load)
hits all of them alike.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable, Protocol


class Timed(Protocol):
    name: str

    def time(self, n: int) -> list[float]: ...


@dataclass(frozen=True)
class Stats:
    """Summary of per-run times in seconds."""
    median: float
    p25: float
    p75: float
    min: float
    max: float
    n: int

    @staticmethod
    def of(samples: list[float]) -> "Stats":
        s = sorted(samples)
        if len(s) >= 4:
            q = statistics.quantiles(s, n=4, method="inclusive")
            p25, p75 = q[0], q[2]
        else:
            p25, p75 = s[0], s[-1]
        return Stats(statistics.median(s), p25, p75, s[0], s[-1], len(s))

    def to_json(self) -> dict:
        return {"median_s": self.median, "p25_s": self.p25, "p75_s": self.p75,
                "min_s": self.min, "max_s": self.max, "samples": self.n}


def wall_clock(fn: Callable[[], object], n: int) -> list[float]:
    """Time `n` calls of `fn` one by one with perf_counter (CPU work, or work that synchronizes)."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


# Pause before each batch: a CPU contender's worker threads spin for about 0.1 s after its
# batch (PyTorch's pool, numpy's BLAS), and on a 2-core machine they slowed the next
# contender's batch: Saturn's library-call schedule of the same transformer block timed 6.6 ms
# in one run and 8.5 ms in another, right after PyTorch's batches.
SETTLE_S = 0.15
# ... and after the rest, each contender runs untimed for REWARM_S first: a rest left the next
# batch slow throughout on this 2-core VM (Saturn's f16 RMSNorm 0.68 ms per call against 0.40
# back to back, the whole batch of 100; 0.03-0.1 s of calls first brought it back to 0.39-0.42).
REWARM_S = 0.1


def alternate(contenders: list[Timed], *, rounds: int, batch_s: float, warmup: int = 2,
              max_batch: int = 100, settle_s: float = SETTLE_S,
              rewarm_s: float = REWARM_S) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Warm up each contender, then run `rounds` rounds of one batch each, rotating the order,
    with `settle_s` seconds of rest and `rewarm_s` seconds of untimed runs before each batch.

    Returns (name -> all per-run samples, name -> error message). A contender that raises
    is dropped from later rounds; its samples are discarded.
    """
    batch: dict[str, int] = {}
    rewarm: dict[str, int] = {}
    samples: dict[str, list[float]] = {}
    errors: dict[str, str] = {}
    for c in contenders:
        try:
            warm = c.time(warmup)
            per_run = max(min(warm), 1e-7)
            batch[c.name] = max(1, min(max_batch, int(batch_s / per_run)))
            rewarm[c.name] = min(max_batch, int(rewarm_s / per_run))
            samples[c.name] = []
        except Exception as e:  # noqa: BLE001 - one contender failing must not stop the others
            errors[c.name] = f"{type(e).__name__}: {e}"
    live = [c for c in contenders if c.name in batch]
    for r in range(rounds):
        k = r % len(live) if live else 0
        for c in live[k:] + live[:k]:
            if c.name in errors:
                continue
            time.sleep(settle_s)
            try:
                if rewarm[c.name]:
                    c.time(rewarm[c.name])
                samples[c.name].extend(c.time(batch[c.name]))
            except Exception as e:  # noqa: BLE001
                errors[c.name] = f"{type(e).__name__}: {e}"
    return {name: s for name, s in samples.items() if name not in errors and s}, errors
