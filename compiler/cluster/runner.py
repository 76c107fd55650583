"""The search's runner on a cluster: build + verify on any build worker, timing spread over the
devices whose identity matches the device that runs the result, the winner re-timed there.

A worker that dies while serving a candidate (its process crashed, or it was lost with its
host) costs that candidate one reassignment to another worker; dying again rejects it as
crashing. Every loss is written to the search's notes, so explain() shows it.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from compiler.cluster.hosts import open_cluster
from compiler.search import TrialRecord, _Runner
from compiler.timing import format_seconds, median
from compiler.workers import WorkerFailure


@dataclass
class ClusterLog:
    """Where the search ran: the cluster, each device's identity, which devices timed, the
    timing requests each served, the workers lost."""
    name: str
    identities: dict = field(default_factory=dict)   # device label -> DeviceIdentity (None: did not answer)
    home: str = ""                                   # the device that runs the result
    timing: list = field(default_factory=list)       # labels of the devices used for timing
    timed_on: dict = field(default_factory=dict)     # trial id -> device labels, one per timing request
    lost: list = field(default_factory=list)         # one sentence per lost worker


class ClusterRunner(_Runner):
    def __init__(self, options, backend, backend_spec, result):
        self.options = options
        self.data_requests: list = []
        self.tmpdir = None
        self.local = None
        self.cluster = open_cluster(options.cluster, backend)
        self.pool = self.cluster.builders
        self.notes = result.notes
        self.log = result.cluster = ClusterLog(self.cluster.name)
        self.reassigned: set[tuple[str, int]] = set()   # (stage, trial id) given a second worker
        pools = [self.pool, self.cluster.devices] + ([] if self.cluster.home_is_device0 else [self.cluster.home])
        for pool in pools:
            for i in range(pool.size):
                try:
                    pool.get(i).post(("prepare", backend_spec))
                except WorkerFailure:
                    pass  # replaced when first used
        self.home_label = "device 0" if self.cluster.home_is_device0 else "this host"
        self.backend_spec = backend_spec
        self._timing: list[int] | None = None   # asked on first use: the workers start meanwhile

    def start_references(self, job):
        """None: the verification data is made here (a cluster's builders may be on other
        hosts, without this search's directory)."""
        return None

    @property
    def timing(self) -> list[int]:
        """The devices that time (see _choose_timing_devices)."""
        if self._timing is None:
            self._timing = self._choose_timing_devices(self.backend_spec)
        return self._timing

    # --- devices ------------------------------------------------------------------------

    def _identities(self, workers, backend_spec) -> list:
        """Each (pool, index)'s DeviceIdentity (None where it did not answer), asked of all at once."""
        started = []
        for pool, i in workers:
            try:
                pool.get(i).start(("identity", backend_spec))
                started.append(True)
            except WorkerFailure as e:
                started.append(e)
        out = []
        for (pool, i), ok in zip(workers, started):
            try:
                if ok is not True:
                    raise ok
                out.append(pool.workers[i].finish(self.options.timeout)[0])
            except WorkerFailure as e:
                self.notes.append(f"{self.cluster.describe(pool, i)} did not say which device it is ({e.reason}); "
                                  "not used for timing")
                out.append(None)
        return out

    def _choose_timing_devices(self, backend_spec) -> list[int]:
        """The devices whose identity equals the home device's: only their timings are compared."""
        c = self.cluster
        asked = ([] if c.home_is_device0 else [(c.home, 0)]) + [(c.devices, i) for i in range(c.devices.size)]
        found = self._identities(asked, backend_spec)
        home = found[0]
        self.log.home = f"{'device 0' if c.home_is_device0 else 'this host'}: {home}"
        timing = []
        for i, identity in enumerate(found[0 if c.home_is_device0 else 1:]):
            label = c.label(c.devices, i)
            self.log.identities[label] = identity
            if identity is None:
                continue
            if identity == home:
                timing.append(i)
            else:
                self.notes.append(f"{label} is {identity}, not the device that runs the result ({home}): "
                                  "not used for timing")
        self.log.timing = [c.label(c.devices, i) for i in timing]
        self.notes.append(f"cluster {c.name}; timing on {len(timing)} device(s) of identity {home}"
                          + ("" if timing else "; none matches: timing on this host only"))
        return timing

    def _device_worker(self, i: int):
        pool = self.cluster.devices
        w = pool.get(i)
        for req in self.data_requests:
            w = pool.ensure_data(i, req, self.options.timeout)
        return w

    # --- reassigning what a lost worker held ---------------------------------------------

    def retry(self, t: TrialRecord, e: WorkerFailure, i: int, stage: str = "verifying") -> bool:
        """Whether `t` goes to another worker after worker `i` (a build worker, or a device
        when timing) died serving it (once per stage)."""
        if not e.crashed:
            return False
        where = self.cluster.describe(self.pool if stage == "verifying" else self.cluster.devices, i)
        again = (stage, t.id) in self.reassigned
        self.reassigned.add((stage, t.id))
        self.notes.append(f"lost {where} while {stage} trial {t.id}: {e.reason}; "
                          + ("it died again on a second worker: rejected" if again else "reassigned to another worker"))
        self.log.lost.append(self.notes[-1])
        return not again

    # --- timing -------------------------------------------------------------------------

    def _allowance(self, t: TrialRecord, warmup: int, repeat: int) -> float:
        return max(self.options.timeout, 20 * (warmup + repeat) * max(t.run_s, 1e-4))

    def prepare_timing(self, trials) -> None:
        """Nothing to start: the devices that time are the cluster's, already up."""

    def time(self, t: TrialRecord, backend_spec, warmup: int, repeat: int) -> list[float]:
        (got,) = self.time_each([t], backend_spec, warmup, repeat)
        if isinstance(got, WorkerFailure):
            raise got
        return got

    def time_each(self, trials, backend_spec, warmup: int, repeat: int) -> list:
        """Each trial's run times (or the WorkerFailure that ended it), every free device taking
        the next trial; without a matching device, on the home worker."""
        if not self.timing:
            return [self._time_home(t, backend_spec, warmup, repeat) for t in trials]
        pool = self.cluster.devices
        out: dict[int, object] = {}
        queue = deque(trials)
        running: dict[int, tuple[TrialRecord, float, float]] = {}   # device -> (trial, start, allowance)

        def failed(t, e, d):
            if self.retry(t, e, d, "timing"):
                queue.appendleft(t)
            else:
                out[t.id] = e

        while queue or running:
            for d in self.timing:
                if d in running or not queue:
                    continue
                t = self._next_for(d, queue)
                try:
                    self._device_worker(d).start(("time", self._msg(t, backend_spec), warmup, repeat))
                    running[d] = (t, time.perf_counter(), self._allowance(t, warmup, repeat))
                except WorkerFailure as e:
                    failed(t, e, d)
            if not running:
                continue
            wait = min(start + allow for _, start, allow in running.values()) - time.perf_counter()
            done = pool.wait(list(running), wait)
            now = time.perf_counter()
            done += [d for d, (_, start, allow) in running.items() if d not in done and now >= start + allow]
            for d in done:
                t, start, allow = running.pop(d)
                try:
                    out[t.id] = pool.workers[d].finish(start + allow - time.perf_counter(), allow)
                    self.log.timed_on.setdefault(t.id, []).append(self.cluster.label(pool, d))
                except WorkerFailure as e:
                    failed(t, e, d)
        return [out[t.id] for t in trials]

    def _next_for(self, d: int, queue: deque) -> TrialRecord:
        """The first queued trial last timed on device `d` (which holds its build), else the first."""
        label = self.cluster.label(self.cluster.devices, d)
        for t in queue:
            if self.log.timed_on.get(t.id, [None])[-1] == label:
                queue.remove(t)
                return t
        return queue.popleft()

    def _time_home(self, t: TrialRecord, backend_spec, warmup: int, repeat: int):
        pool = self.cluster.home
        try:
            w = pool.get(0)
            for req in self.data_requests:
                w = pool.ensure_data(0, req, self.options.timeout)
            times = w.call(("time", self._msg(t, backend_spec), warmup, repeat), self._allowance(t, warmup, repeat))
        except WorkerFailure as e:
            return e
        self.log.timed_on.setdefault(t.id, []).append(self.home_label)
        return times

    def retime(self, t: TrialRecord, backend_spec) -> None:
        """Time the winner again on the device that runs it, unless all its timing was there."""
        where = list(self.log.timed_on.get(t.id, []))
        if not where or all(w == self.home_label for w in where):
            return
        before = t.median
        n = max(self.options.min_repeat, min(t.rounds[-1][0] if t.rounds else 20, 20))
        got = self._time_home(t, backend_spec, 1, n)
        if isinstance(got, WorkerFailure):
            self.notes.append(f"trial {t.id} could not be re-timed on the device that runs it: {got.reason}")
            return
        t.rounds.append((n, median(got)))
        self.notes.append(f"trial {t.id} re-timed on the device that runs it ({self.log.home}): "
                          f"{format_seconds(t.median)} over {n} runs ({format_seconds(before)} in its last round, "
                          f"on {where[-1]})")

    def close(self):
        counts: dict[str, int] = {}
        for labels in self.log.timed_on.values():
            for label in labels:
                counts[label] = counts.get(label, 0) + 1
        if counts:
            self.notes.append("timing requests per device: " + ", ".join(f"{k}: {v}" for k, v in counts.items()))
        self.cluster.builders.reset()
        self.cluster.devices.reset()
        if not self.cluster.home_is_device0:
            self.cluster.home.reset()
        self.pool = None   # the base close() resets the default pool; this cluster's are reset above
        super().close()
