"""Measured-runtime search: choose the fastest candidate that matches the reference.

    explore (e-graph candidates, ranked by the static cost model)
      x backend schedules                     -> trials, in static-rank order
      build + verify in isolated workers      -> crashes, hangs, NaN, mismatches rejected
      successive halving on the survivors     -> short timing of all, longer of the best few
      fastest survivor                        -> built in this process and returned

The budget (seconds of wall clock) bounds the whole search; the seed fixes the verification
inputs and every ordering, so two searches of one program try the same trials in the same
order (which one wins can still differ when two are within timing noise).
"""
from __future__ import annotations

import math
import os
import shutil
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from compiler import cost_model, verify
from compiler.explore import Candidate, Limits, Phase, explore
from compiler.progress import Progress
from compiler.timing import format_seconds, median
from compiler.workers import Trial, WorkerFailure, _WorkerState, handle, load_arrays, shared_pool, store_arrays
from ir import bounds, numerics
from ir.graph import Graph


_ONE_SEARCH_AT_A_TIME = threading.Lock()
_SEARCHES = 0       # searches run in this process (names each one's data in the shared workers)
INTERLEAVE = 4      # slices each timing round is cut into, taken in turn by the trials
REQUEST_S = 0.05    # first guess of a timing request's cost beyond its runs (warmup, round trip)
PRUNE_FLOOR = 1e-3  # a verification run shorter than this is too short to prune on
FIRST_ROUND_FACTOR = 3.0   # rewritten programs predicted slower than this x the original wait (see _search)
VERIFY_SHARE = 0.6  # of the budget left after exploration, after which no new trial starts verification
GRACE_SHARE = 0.15  # of that budget, how much longer trials already being verified may then take
HARD_FACTOR, HARD_SLACK = 1.1, 1.0   # the budget's hard end: budget x 1.1 or budget + 1 s, the later


class SearchError(RuntimeError):
    """No candidate survived verification; the message lists why each was rejected."""


@dataclass
class SearchOptions:
    """Knobs of the search. `budget` is seconds of wall clock for the whole search."""
    budget: float = 5.0
    seed: int = 0
    max_candidates: int = 8        # programs asked from the e-graph
    max_schedules: int = 8         # schedules tried per program
    max_trials: int = 32           # (program, schedule) pairs verified at most
    timeout: float = 60.0          # seconds for one build + verify (or one timing) before it counts as a hang
    workers: int = 0               # 0: one per core, at most 4
    isolate: bool = True           # run candidates in worker processes (off only for debugging)
    quiet: bool = False
    odd_shapes: bool = True        # also verify finalists at odd shapes where the program can be retraced there
    reference_limit: float = verify.REFERENCE_LIMIT  # interpreter work per input set; above: see _baseline_reference
    prune_factor: float = 20.0     # a survivor whose verification run was this many times slower than the
                                   # fastest one's is not timed
    min_repeat: int = 3
    max_repeat: int = 200
    cluster: object = None         # None: this process's worker pool; else a compiler.cluster spec (Local, Ray)
    cost_model_dir: str | None = None   # where the cost model is kept: None the cache root, "" not kept
    regions: bool | None = None    # search region by region (compiler/regions.py); None: big programs on the cpu


@dataclass
class TrialRecord:
    """One candidate program under one schedule, and what happened to it."""
    id: int
    candidate: int
    description: str
    cost: float
    graph: Graph
    schedule: object
    status: str = "pending"        # pending | verified | rejected | skipped | duplicate | pruned | timed | chosen
    reason: str = ""
    build_s: float = 0.0
    run_s: float = 0.0             # fastest verification run but the first (hint for pruning and repeats)
    max_error: float = 0.0         # of the chosen trial, measured when it is built here
    rounds: list = field(default_factory=list)   # (repeat, median seconds) per timing round
    worker: int = -1
    variant_graph: Graph | None = None           # this program at odd shapes, when known
    note: str = ""
    source_hash: str = ""
    whole_code: bool = False                     # source_hash covers the launches too (verify.CheckResult)
    predicted: float = math.inf                  # the cost model's seconds for this trial (inf: unknown)
    features: tuple | None = None                # what the backend would run, counted (compiler/cost_model.py)
    spread: list = field(default_factory=list)   # (25th, 75th percentile seconds) per timing round

    @property
    def median(self) -> float:
        return self.rounds[-1][1] if self.rounds else float("inf")

    @property
    def schedule_text(self) -> str:
        return describe_schedule(self.schedule)


def describe_schedule(schedule) -> str:
    if schedule is None:
        return "default"
    text = getattr(schedule, "name", None) or str(schedule)
    return text if len(text) <= 48 else text[:45] + "..."


@dataclass
class ShapeVariant:
    """The user's program traced again at odd shapes (no size a multiple of a tile)."""
    graph: Graph


@dataclass
class SearchResult:
    """The outcome of one search: every trial, the winner and its executable, the timeline."""
    target: str
    device: str
    options: SearchOptions
    trials: list[TrialRecord]
    winner: TrialRecord | None = None
    executable: object = None
    phases: list[Phase] = field(default_factory=list)
    exploration_text: str = ""
    notes: list[str] = field(default_factory=list)
    seconds: dict = field(default_factory=dict)      # stage -> seconds
    cache: str = "off"                               # off | miss | hit | stored
    cache_path: str = ""
    original: Graph | None = None
    cluster: object = None                           # where it ran (compiler.cluster.runner.ClusterLog), on a cluster
    cost_model: dict = field(default_factory=dict)   # source, rank correlations with measured times

    @property
    def chosen_graph(self) -> Graph | None:
        return self.winner.graph if self.winner else None

    def baseline(self) -> TrialRecord | None:
        """The original program under the backend's default schedule (trial 0, if searched)."""
        if self.trials and self.original is not None and self.trials[0].graph == self.original:
            return self.trials[0]
        return None

    def __str__(self) -> str:
        return format_report(self)


# --- the search ----------------------------------------------------------------------------

def explore_candidates(graph: Graph, options: SearchOptions, notes: list[str], progress: Progress | None = None):
    """Candidates from the e-graph, or just the original program if exploration fails."""
    original = [Candidate(graph, 0.0, "original program")]
    try:
        exp = explore(graph, max_candidates=options.max_candidates, limits=Limits.for_budget(options.budget),
                      progress=progress.phase if progress is not None else None)
    except Exception as e:  # an exploration bug must not take compile() down
        notes.append(f"e-graph exploration failed ({type(e).__name__}: {e}); searching the original program")
        return original, [], ""
    return list(exp.candidates) or original, list(exp.phases), str(exp)


def _schedules(backend, graph: Graph, limit: int, notes: list[str]) -> list:
    fn = getattr(backend, "schedules", None)
    if not callable(fn):
        return [None]
    try:
        scheds = list(fn(graph))
    except Exception as e:
        notes.append(f"backend.schedules failed ({type(e).__name__}: {e}); using the default schedule")
        return [None]
    return scheds[:limit] or [None]


def same_interface(a: Graph, b: Graph) -> str | None:
    """None when `b` takes the same input nodes as `a` and returns outputs of the same shapes
    and dtypes (what every candidate of `a` must do), else what differs."""
    if len(a.outputs) != len(b.outputs):
        return f"{len(b.outputs)} outputs, expected {len(a.outputs)}"
    for i, (x, y) in enumerate(zip(a.outputs, b.outputs)):
        if x.shape != y.shape or x.dtype != y.dtype:
            return f"output {i} is {y.dtype.value}{list(y.shape)}, expected {x.dtype.value}{list(x.shape)}"
    if tuple(b.inputs) != tuple(a.inputs):
        return "inputs differ from the original program"
    return None


def make_trials(graph: Graph, candidates, backend, options: SearchOptions, notes: list[str]) -> list[TrialRecord]:
    """(program, schedule) pairs: the original program under each schedule, then the other
    programs (distinct ones, in static-rank order) round-robin over their schedules."""
    seen, progs = set(), []
    for c in candidates:
        h = c.graph.structural_hash()
        if h not in seen:
            seen.add(h)
            progs.append(c)
    # the original program goes first, under every schedule (the default one first: the safe
    # choice, and the baseline the others are compared with); then the rewritten programs,
    # round-robin: each one's default schedule, then each one's second schedule, ...
    progs.sort(key=lambda c: c.graph.structural_hash() != graph.structural_hash())
    per_prog = [_schedules(backend, c.graph, options.max_schedules, notes) for c in progs]
    order = []
    if progs[0].graph.structural_hash() == graph.structural_hash():
        order += [(0, s) for s in range(len(per_prog[0]))]
    rest = range(1 if order else 0, len(progs))
    order += [(ci, s) for s in range(max(len(p) for p in per_prog)) for ci in rest if s < len(per_prog[ci])]
    trials: list[TrialRecord] = []
    for ci, s in order:
        c = progs[ci]
        trials.append(TrialRecord(len(trials), ci, str(getattr(c, "description", "")),
                                  float(getattr(c, "cost", 0.0)), c.graph, per_prog[ci][s]))
    return trials


class _Runner:
    """Sends verify/time requests to isolated workers (or runs them in-process)."""

    def __init__(self, options: SearchOptions, backend_spec=None):
        self.options = options
        self.data_requests: list = []   # ("data", key, ...) requests every worker gets before work
        self.tmpdir: str | None = None
        n = options.workers or min(os.cpu_count() or 1, 4)
        self.pool = shared_pool(n) if options.isolate else None
        self.local = None if options.isolate else _WorkerState()
        for i in range(self.size if self.pool else 0):
            w = self.pool.get(i)
            if backend_spec is not None:
                try:
                    w.post(("prepare", backend_spec))
                except WorkerFailure:
                    pass  # replaced when first used

    def prebuild(self, graph: Graph, schedules, backend_spec, variant: Graph | None = None) -> None:
        """Start compiling `graph` under its first schedule, its odd-shaped `variant` under the
        same (the reference's check at odd shapes) and `graph` under its second schedule (the
        first verification round takes both), one per worker, while the e-graph is explored;
        each answer is read before that worker's next request. What they compile lands in the
        backend's disk cache, so the reference run and the verifications after exploration load
        it instead of compiling (a 2-layer decoder's nvcc build takes seconds; without this its
        search at budget 10 built one schedule). The last worker is left to the references
        (`start_references`) where there are more than two."""
        if self.pool is None or not schedules:
            return
        builds = [(graph, schedules[0])] + ([(variant, schedules[0])] if variant is not None else []) + \
            [(graph, s) for s in schedules[1:2]]
        # (one core stays with the exploration: on 2 cores, only the reference's own build)
        spare = max(1, (os.cpu_count() or 1) - 1)
        for i, (g, schedule) in enumerate(builds[:min(spare, self.size - 1 if self.size > 2 else self.size)]):
            try:
                # (a build gets the trial timeout, as it would inside a verification)
                self.pool.get(i).post(("build", Trial(-10 - i, backend_spec, g, schedule, "")), self.options.timeout)
            except WorkerFailure:
                pass   # replaced when first used

    def start_references(self, job):
        """Post `prepare_references(*job)` to a worker, which writes big sets to this search's
        directory; None where there is no pool (the caller computes them itself)."""
        if self.pool is None:
            return None
        if self.tmpdir is None:
            self.tmpdir = tempfile.mkdtemp(prefix="saturn-search-")
        # the last worker: the first ones take the builds posted during exploration
        i, key = self.size - 1, f"ref{_SEARCHES}"
        try:
            self.pool.get(i).post_kept(("references", job, self.tmpdir, key))
        except WorkerFailure:
            return None
        return i, key

    def references(self, ahead, compute) -> "References":
        """The worker's answer to `start_references` (`ahead`), else `compute()` here (no pool,
        or the worker failed: the error, a SearchError included, is then raised here)."""
        if ahead is not None:
            i, key = ahead
            end = time.perf_counter() + self.options.timeout
            w = self.pool.workers[i]
            try:
                while w is not None:   # (until its answer, or no kept answer is left: WorkerFailure)
                    got = w.collect(max(end - time.perf_counter(), 0.0))
                    if getattr(got, "key", None) == key:
                        return got
            except WorkerFailure:
                pass
        return compute()

    def add_data(self, key: str, input_sets, expected_sets, out_dtypes) -> None:
        """Data every worker loads before its next request (big arrays go through files)."""
        if self.pool is not None and self.tmpdir is None:
            self.tmpdir = tempfile.mkdtemp(prefix="saturn-search-")
        if self.tmpdir is not None:
            input_sets = store_arrays(input_sets, self.tmpdir, f"{key}-in")
            expected_sets = store_arrays(expected_sets, self.tmpdir, f"{key}-out")
        self.data_requests.append(("data", key, input_sets, expected_sets, out_dtypes))

    def _worker(self, i: int, until: float | None = None):
        """Worker i with this search's data loaded. `until` (perf_counter seconds): a fresh
        worker's start-up and data load are waited for only until then (the budget's hard end),
        not for a trial's whole timeout; past it the worker is killed (WorkerFailure)."""
        w = self.pool.get(i)
        for req in self.data_requests:
            timeout = self.options.timeout if until is None else \
                max(0.05, min(self.options.timeout, until - time.perf_counter()))
            w = self.pool.ensure_data(i, req, timeout)
        return w

    def _local(self):
        for req in self.data_requests:
            if req[1] not in self.local.data:
                handle(self.local, req)
        return self.local

    @property
    def size(self) -> int:
        return self.pool.size if self.pool else 1

    def close(self):
        if self.pool:
            self.pool.reset()
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None

    grace = 0.0
    end = float("inf")    # the budget's hard end (perf_counter seconds)
    baseline_id = -1      # the trial waited for past `end` while nothing has passed

    def verify_all(self, trials, backend_spec, deadline, on_done, everything=None, hard_deadline=None):
        """Build and verify `trials` on all workers at once; call on_done(trial) after each.
        After `deadline`, nothing new starts once any of `everything` (default: `trials`) passed;
        what is still running is abandoned a grace period after `hard_deadline` (default:
        `deadline`), so a phase that ends early lets its builds finish."""
        hard_deadline = deadline if hard_deadline is None else hard_deadline
        queue = deque(trials)
        everything = trials if everything is None else everything
        if self.local is not None:
            while queue:
                if time.perf_counter() > self.end and queue[0].id != self.baseline_id:
                    break
                t = queue.popleft()
                self._record_check(t, handle(self._local(), ("verify", self._msg(t, backend_spec))))
                on_done(t)
            for t in queue:
                t.status, t.reason = "skipped", "budget spent before it was verified"
            return
        running: dict[int, tuple[TrialRecord, float]] = {}
        while queue or running:
            for i in range(self.size):
                if i in running or not queue:
                    continue
                now = time.perf_counter()
                passed = any(x.status == "verified" for x in everything)
                if (now > deadline and passed) or (now > self.end and queue[0].id != self.baseline_id):
                    break
                t = queue.popleft()
                try:
                    # (only the baseline, while nothing has passed, may wait past the hard end)
                    w = self._worker(i, None if t.id == self.baseline_id else self.end)
                    w.start(("verify", self._msg(t, backend_spec)))
                    running[i] = (t, time.perf_counter())
                except WorkerFailure as e:
                    if self.retry(t, e, i):
                        queue.appendleft(t)
                        continue
                    if t.id != self.baseline_id and time.perf_counter() >= self.end:
                        # the wait for its worker was cut at the budget's hard end: not the candidate's fault
                        t.status, t.reason = "skipped", f"budget spent while its worker started ({e.reason})"
                    else:
                        t.status, t.reason = "rejected", f"worker failed before the candidate ran: {e.reason}"
                    on_done(t)
            if not running:
                break
            now = time.perf_counter()
            # once the budget is spent and something passed, what is still running gets a short
            # grace period (killing a worker costs its restart), then is abandoned
            passed = any(x.status == "verified" for x in everything)
            stop = hard_deadline + self.grace if passed else float("inf")
            # the budget's hard end: past it only the baseline may still run, and only while
            # nothing has passed (without it there is no result; its own timeout bounds it)
            if passed or not any(t.id == self.baseline_id for t, _ in running.values()):
                stop = min(stop, self.end)
            wait = min(min(start + self.options.timeout for _, start in running.values()), stop) - now
            done = self.pool.wait(list(running), wait)
            now = time.perf_counter()
            if not done and now >= stop:
                for i, (t, _) in running.items():  # (the baseline too, once something passed)
                    self.pool.workers[i].kill()
                    t.status, t.reason = "skipped", "budget spent while it was being built or verified"
                if passed:                         # replacements start now, side by side, for the timing
                    for i in running:
                        try:
                            self.pool.get(i).post(("prepare", backend_spec))
                        except WorkerFailure:
                            pass
                running.clear()
                break
            done += [i for i, (_, start) in running.items() if i not in done and now >= start + self.options.timeout]
            for i in done:
                t, start = running.pop(i)
                w = self.pool.workers[i]
                try:
                    self._record_check(t, w.finish(start + self.options.timeout - time.perf_counter(), self.options.timeout))
                    t.worker = i
                except WorkerFailure as e:
                    if self.retry(t, e, i):
                        queue.appendleft(t)
                        continue
                    t.status, t.reason = "rejected", e.reason
                on_done(t)
        for t in queue:
            t.status, t.reason = "skipped", "budget spent before it was verified"

    main_key, odd_key = "", ""

    def _msg(self, t: TrialRecord, backend_spec, variant: bool = False) -> Trial:
        return Trial(t.id, backend_spec, t.graph, t.schedule, self.main_key,
                     t.variant_graph if variant else None, self.odd_key if variant else "")

    def call(self, request, worker: int = 0):
        """One request on one worker (or in-process), with the per-request timeout."""
        if self.local is not None:
            return handle(self._local(), request)
        return self._worker(worker).call(request, self.options.timeout)

    def call_together(self, requests) -> list:
        """Each request on its own worker at once (in turn where there is one worker or none):
        the first on worker 0, the others from the last worker down (the first ones take the
        builds posted during exploration); per request its answer, or the WorkerFailure that
        ended it."""
        out: list = [None] * len(requests)
        if self.local is not None or self.size < len(requests):
            for k, req in enumerate(requests):
                try:
                    out[k] = self.call(req, 0)
                except WorkerFailure as e:
                    out[k] = e
            return out
        where = [0] + [self.size - k for k in range(1, len(requests))]
        started = []
        for k, req in enumerate(requests):
            try:
                self._worker(where[k]).start(req)
                started.append(k)
            except WorkerFailure as e:
                out[k] = e
        end = time.perf_counter() + self.options.timeout
        for k in started:
            try:
                out[k] = self.pool.workers[where[k]].finish(end - time.perf_counter(), self.options.timeout)
            except WorkerFailure as e:
                out[k] = e
        return out

    def check_variant(self, t: TrialRecord, backend_spec) -> None:
        """Verify `t` at odd shapes (done for finalists only: it costs another build)."""
        req = ("verify_variant", self._msg(t, backend_spec, variant=True))
        try:
            res = handle(self._local(), req) if self.local is not None else \
                self._worker(max(t.worker, 0)).call(req, self.options.timeout)
        except WorkerFailure as e:
            res = verify.CheckResult(False, f"at odd shapes: {e.reason}")
        if res.ok:
            t.note = res.note
        else:
            t.status, t.reason = "rejected", res.reason

    @staticmethod
    def _record_check(t: TrialRecord, res: verify.CheckResult):
        t.build_s, t.run_s = res.build_s, res.run_s
        t.note = res.note or t.note
        t.source_hash, t.whole_code = res.source_hash, res.whole_code
        t.status, t.reason = ("verified", "") if res.ok else ("rejected", res.reason)

    def retry(self, t: TrialRecord, e: WorkerFailure, worker: int) -> bool:
        """Whether `t` is verified again elsewhere after `worker` failed on it (on a cluster)."""
        return False

    def time_each(self, trials, backend_spec, warmup: int, repeat: int) -> list:
        """Each trial's run times, or the WorkerFailure that ended its timing."""
        out = []
        for t in trials:
            try:
                out.append(self.time(t, backend_spec, warmup, repeat))
            except WorkerFailure as e:
                out.append(e)
        return out

    def retime(self, t: TrialRecord, backend_spec) -> None:
        """Time the winner on the device that runs it (here it was timed nowhere else)."""

    def time(self, t: TrialRecord, backend_spec, warmup: int, repeat: int) -> list[float]:
        req = ("time", self._msg(t, backend_spec), warmup, repeat)
        if self.local is not None:
            return handle(self._local(), req)
        i = self._timing_worker(t)
        w = self._worker(i)
        budget = max(self.options.timeout, 20 * (warmup + repeat) * max(t.run_s, 1e-4))
        return w.call(req, budget)

    def prepare_timing(self, trials) -> None:
        """Have the workers that will time `trials` up and loaded before a round is sized
        (a replacement's start is then spent before the round counts what is left)."""
        if self.local is not None or self.pool is None:
            return
        used = sorted({self._timing_worker(t) for t in trials})
        for i in used:
            try:
                self._worker(i, until=self.end)
            except WorkerFailure:
                pass            # the timing request then fails and says why
        # the others idle: a replacement still starting (the `prepare` posted when verification
        # ended) shares the cores with the runs being timed; on 2 cores the trials timed first
        # in a round ran 2x slow beside one and lost the round (the original product at
        # 1000x1023x1025: 21 ms, 11 ms alone)
        for i, w in enumerate(self.pool.workers):
            if i in used or w is None:
                continue
            try:
                while w.unanswered:
                    w.read_posted(max(0.05, min(w.drain_s, self.end - time.perf_counter())))
            except WorkerFailure:
                pass            # killed: it starts again when a later search needs it

    def _timing_worker(self, t: TrialRecord) -> int:
        """t's own worker (it holds t's executable) when it is up; else one that is up with
        the data loaded, which builds t again from the backend's disk cache, rather than waiting
        for a replacement's start (~1.4 s on 2 cores: the worker that verified the original
        program is often the one killed when the verification phase ends)."""
        ws = self.pool.workers

        def ready(j: int) -> bool:
            w = ws[j] if 0 <= j < len(ws) else None
            return w is not None and w.alive() and not w.unanswered and \
                all(r[1] in w.data_keys for r in self.data_requests)

        i = t.worker if t.worker >= 0 else 0
        if not ready(i):
            for j in range(len(ws)):
                if ready(j):
                    t.worker = i = j
                    break
        return i


def search(graph: Graph, backend, *, target: str, backend_spec=None, device: str = "",
           candidates=None, options: SearchOptions | None = None, progress: Progress | None = None,
           variant: ShapeVariant | None = None, written: Graph | None = None) -> SearchResult:
    """Search candidates of `graph` on `backend`; return the verified fastest, built here.

    `candidates` (objects with .graph, .cost, .description) replace the e-graph's;
    `backend_spec` is what workers use to get the backend (the target name, or a picklable
    backend object); it defaults to `target`. `variant`: the program at odd shapes; every
    candidate that has a counterpart there is verified at those shapes too. `written`: the
    program as the user wrote it (`graph` before its kernel terms, same inputs and outputs):
    the reference whose float64 value and error bound every candidate must meet (a kernel term
    skips roundings the user's program makes, e.g. of a half-typed softmax, so its own bound is
    tighter than the user's); default `graph`.
    """
    options = options or SearchOptions()
    backend_spec = target if backend_spec is None else backend_spec
    progress = progress or Progress(f"compiling for {target}", quiet=options.quiet)
    t_start = time.perf_counter()
    deadline = t_start + options.budget
    notes: list[str] = []
    result = SearchResult(target, device, options, [], notes=notes, original=graph)
    global _SEARCHES
    _SEARCHES += 1
    main_key, odd_key = f"main-{_SEARCHES}", f"odd-{_SEARCHES}"

    with _ONE_SEARCH_AT_A_TIME:  # the workers are shared, and timings must not overlap
        # workers start and load the backend while the e-graph is explored
        if options.cluster is None:
            runner = _Runner(options, backend_spec)
        else:
            from compiler.cluster.runner import ClusterRunner
            runner = ClusterRunner(options, backend, backend_spec, result)
        try:
            reference = written if written is not None and same_interface(graph, written) is None else graph
            return _search(graph, backend, target, backend_spec, candidates, options, progress, variant,
                           result, runner, t_start, deadline, main_key, odd_key, reference)
        except BaseException:
            if progress.shown:  # end the progress line: the error must not start in the middle of it
                progress.close()
            raise
        finally:
            runner.close()


def _search(graph, backend, target, backend_spec, candidates, options, progress, variant, result, runner,
            t_start, deadline, main_key, odd_key, reference: Graph) -> SearchResult:
    notes = result.notes
    progress.phase("saturating")
    explored = candidates is None
    # the float64 reference with its sums of products as matrix products; where forming them
    # elementwise (special values, overflow) costs too much, families that need it are dropped
    bounded = verify.reference_work(reference, matmul=True) <= options.reference_limit
    elementwise = verify.reference_work(reference) <= options.reference_limit
    if explored and not elementwise:
        # too big for the interpreter: its reference is the original program built and run
        # first, alone (or a reference that takes a while): compile the original (and its next
        # schedules) while the e-graph is explored
        runner.prebuild(graph, _schedules(backend, graph, options.max_schedules, []), backend_spec,
                        variant.graph if variant is not None else None)
    # the verification inputs and their bounded references are made in a worker while the
    # e-graph is explored (they depend on the program and the seed only): a decoder layer's
    # took 1.5 s of its region's search after exploration, with the workers idle; for a
    # program too big to bound, the input sets and the odd shapes' references (2.5 s for an
    # f16 MLP's GELU at 257x65x257 on 2 cores)
    job = (reference, graph, options.seed, elementwise, options.reference_limit,
           variant.graph if variant is not None else None, bounded)
    ahead = runner.start_references(job)
    if explored:
        candidates, result.phases, result.exploration_text = explore_candidates(graph, options, notes, progress)
    t_explore = time.perf_counter()
    result.seconds["explore"] = t_explore - t_start
    # an exploration that overran its share must not starve measurement: verification and
    # timing always get at least half the budget
    hard_end = t_start + max(HARD_FACTOR * options.budget, options.budget + HARD_SLACK)
    rest = max(min(max(deadline - t_explore, 0.5 * options.budget), hard_end - t_explore), 0.0)
    deadline = t_explore + rest
    runner.end = hard_end

    trials = make_trials(graph, candidates, backend, options, notes)
    result.trials = trials
    model = cost_model.load(target, result.device or target, options.cost_model_dir)
    # (the window starts now: exploration has usually spent more than this share already)
    _predict(trials, backend, model, time.perf_counter() + max(PREDICT_SHARE * options.budget, PREDICT_MIN_S))
    for t in trials:
        bad = same_interface(graph, t.graph)
        if bad:
            t.status, t.reason = "rejected", f"not a valid candidate: {bad}"
    todo = [t for t in trials if t.status == "pending"]
    runner.baseline_id = todo[0].id if todo else -1   # the original under the default schedule, if a candidate

    runner.main_key, runner.odd_key = main_key, odd_key
    out_dtypes = [o.dtype for o in graph.outputs]
    data = runner.references(ahead, lambda: prepare_references(*job))
    notes += data.notes
    if data.odd is not None:
        runner.add_data(odd_key, *data.odd, out_dtypes)
    expected = data.expected if bounded else \
        _baseline_reference(runner, graph, trials, variant, backend_spec, data.inputs, notes)
    runner.add_data(main_key, data.inputs, expected, out_dtypes)
    input_sets, expected = load_arrays(data.inputs), load_arrays(expected)
    odd = _OddCounterparts(graph, variant, explored, options) if variant is not None and options.odd_shapes else None
    counts = {"tried": 0, "verified": 0, "rejected": 0}
    progress.update(total=min(len(todo), options.max_trials), **counts)

    def on_done(t: TrialRecord):
        counts["tried"] += 1
        counts["verified" if t.status == "verified" else "rejected"] += t.status in ("verified", "rejected")
        progress.update(**counts)

    progress.phase("verifying")
    # no new verification starts after VERIFY_SHARE of the remaining budget: the rest is for timing
    # the verification windows count from now: preparing the reference (the interpreter, or the
    # baseline run at small and full shapes) can take seconds on a loaded machine, and windows
    # counted from the end of exploration then closed before any rewritten program started
    t_ready = time.perf_counter()
    result.seconds["references"] = t_ready - t_explore
    rest_v = max(deadline - t_ready, 0.0)
    runner.grace = GRACE_SHARE * rest_v
    verify_deadline = t_ready + VERIFY_SHARE * rest_v
    # breadth first: the original program and every rewritten program under its default
    # schedule, in parallel (a rewritten program can be several times faster, a schedule
    # rarely is; with ~1 s builds a small budget used to end inside the original's
    # schedules); then the original under its other schedules and a short probe to rank
    # them, so the rewritten programs' other schedules are tried best first
    first = [t for t in todo if t.graph == graph]
    later = [t for t in todo if t.graph != graph]
    firsts: dict[int, TrialRecord] = {}     # each rewritten program's first trial: its default schedule
    for t in later:
        firsts.setdefault(t.candidate, t)
    # rewritten programs by predicted time (stable: the static rank breaks ties), so the
    # programs that can win are built first when the budget allows only a few
    defaults = sorted(firsts.values(), key=lambda t: t.predicted)
    later = sorted((t for t in later if firsts[t.candidate] is not t), key=lambda t: t.predicted)
    # a rewritten program the cost model predicts far slower than the original waits behind the
    # original's other schedules (an f16 MLP's six rewrites, predicted 3.6-150x slower and
    # measured 1.5-43x, took the first round and no other tile of the original was tried)
    base = min((t.predicted for t in first), default=math.inf)
    if math.isfinite(base):
        slow = [t for t in defaults if t.predicted > FIRST_ROUND_FACTOR * base]
        defaults = [t for t in defaults if t.predicted <= FIRST_ROUND_FACTOR * base]
        later = slow + later
    window = VERIFY_SHARE * rest_v
    # (the original's second schedule joins the first round: a backend lists there the
    # alternative that most often decides small programs, e.g. one CPU thread, whose pool
    # handoffs cost more than a small kernel)
    runner.verify_all(first[:2] + defaults, backend_spec, t_ready + window, on_done, trials,
                      hard_deadline=verify_deadline)
    # the original program's other schedules: up to 80 % of the verification time when
    # rewritten programs' other schedules are waiting too
    runner.verify_all(first[2:], backend_spec, t_ready + (0.8 * window if later else window), on_done, trials,
                      hard_deadline=verify_deadline)
    if time.perf_counter() < verify_deadline:     # (past it no later trial starts: nothing to order)
        later = _order_by_schedule_probe(runner, first, later, backend_spec, options)
    room = max(options.max_trials - len(first) - len(defaults), 0)
    if len(later) > room:
        notes.append(f"{len(first) + len(defaults) + len(later)} trials; verifying at most {options.max_trials}")
        for t in later[room:]:
            t.status, t.reason = "skipped", "beyond max_trials"
        later = later[:room]
    runner.verify_all(later, backend_spec, verify_deadline, on_done, trials)
    t_verify = time.perf_counter()
    result.seconds["build+verify"] = t_verify - t_ready
    survivors = _drop_duplicates([t for t in trials if t.status == "verified"])
    if not survivors:
        spent = time.perf_counter() >= hard_end
        raise SearchError("no candidate passed verification" +
                          (f" within the budget ({options.budget:g} s; pass a larger budget=)" if spent else "") + ":\n" +
                          "\n".join(f"  trial {t.id} ({t.description}, {t.schedule_text}): {t.status}: {t.reason}"
                                     for t in trials))
    progress.phase("timing")
    # finishing a winner other than the original costs a build at odd shapes (about its build
    # in the worker; the original's was built for the references): timing leaves room for it
    finish = max((t.build_s for t in survivors if t is not result.baseline()), default=0.0) if odd is not None else 0.0
    _successive_halving(runner, survivors, backend_spec, min(deadline, hard_end - finish), options, progress, notes,
                        result.baseline())
    t_timing = time.perf_counter()
    result.seconds["timing"] = t_timing - t_verify
    # fastest first; each must also pass at odd shapes and build here before it is chosen
    for t in _finalists(survivors, result.baseline()):
        t.variant_graph = odd(t) if odd is not None else None
        if odd is not None and t.variant_graph is None:
            t.note = "odd shapes not checked: no counterpart of this program there"
        if t.variant_graph is not None:
            progress.phase("odd shapes")
            runner.check_variant(t, backend_spec)
            if t.status == "rejected":
                counts["verified"] -= 1
                counts["rejected"] += 1
                progress.update(**counts)
                continue
        exe = _build_here(backend, t, input_sets[0], expected[0], out_dtypes, notes)
        if exe is not None:
            t.status = "chosen"
            result.winner, result.executable = t, exe
            runner.retime(t, backend_spec)
            break
    result.seconds["final checks"] = time.perf_counter() - t_timing
    _learn(model, trials, result, notes, options.cost_model_dir)
    if result.winner is None:
        raise SearchError("no verified candidate was timed and built in the compiling process:\n" + "\n".join(notes) +
                          "\n" + "\n".join(f"  trial {t.id} ({t.description}, {t.schedule_text}): {t.status}: {t.reason}"
                                            for t in trials if t.status not in ("skipped", "pending")))
    result.seconds["total"] = time.perf_counter() - t_start
    progress.close(f"saturn: compiled for {target} in {result.seconds['total']:.1f} s: "
                   f"{counts['tried']} tried, {counts['verified']} verified, {counts['rejected']} rejected, "
                   f"best {format_seconds(result.winner.median)}")
    return result


PREDICT_SHARE, PREDICT_MIN_S = 0.05, 0.2   # seconds for the cost model's predictions: 5 % of the budget, >= 0.2 s


def _predict(trials, backend, model, deadline) -> None:
    """Each trial's predicted time: its program's (counted once per program) times its
    schedule's factor (the model's, with the backend's prior for this program), 1 for the
    program's first schedule; past `deadline` the rest stay unknown (inf) and keep their
    static-rank order."""
    by_program: dict[int, tuple] = {}
    for t in trials:
        first = t.candidate not in by_program
        if first:
            feats = cost_model.features(t.graph, backend) if time.perf_counter() <= deadline else None
            by_program[t.candidate] = (feats, model.predict(feats), t.schedule)
        t.features, program_s, first_schedule = by_program[t.candidate]
        if first or not math.isfinite(program_s):
            t.predicted = program_s
            continue
        prior = _schedule_prior(backend, t.graph, t.schedule, first_schedule, model) \
            if time.perf_counter() <= deadline else None
        t.predicted = program_s * model.factor(t.schedule_text, program_s, prior)


def _schedule_prior(backend, graph, schedule, first, model) -> float | None:
    """The backend's prediction of `schedule`'s time over `first`'s for `graph` (None: it has none)."""
    fn = getattr(backend, "schedule_factor", None)
    if not callable(fn) or schedule is None or first is None:
        return None
    try:
        return fn(graph, schedule, first, model.coefficients)
    except Exception:   # a program that does not lower is the build's to report
        return None


def _learn(model, trials, result, notes, directory) -> None:
    """Rank correlation of predicted and measured times (per trial, and per program at its best
    schedule); then the measurements join the device's model for the next search: each
    program's time under its first schedule (else its best), and each other schedule's time
    over the first's."""
    timed = [t for t in trials if t.rounds and math.isfinite(t.predicted)]
    best: dict[int, TrialRecord] = {}
    firsts: dict[int, TrialRecord] = {}
    for t in trials:
        firsts.setdefault(t.candidate, t)
    for t in timed:
        if t.candidate not in best or t.median < best[t.candidate].median:
            best[t.candidate] = t
    result.cost_model = {
        "source": model.source,
        "trials": len(timed),
        "rho_trials": cost_model.spearman([t.predicted for t in timed], [t.median for t in timed]),
        "programs": len(best),
        "rho_programs": cost_model.spearman([t.predicted for t in best.values()], [t.median for t in best.values()]),
    }
    measured = [(firsts[c] if firsts[c].rounds else t) for c, t in best.items()]
    ratios = [(t.schedule_text, t.median / firsts[t.candidate].median, firsts[t.candidate].predicted) for t in timed
              if firsts[t.candidate] is not t and firsts[t.candidate].rounds]
    try:
        model.observe([(t.features, t.median) for t in measured], ratios)
        if directory != "":
            cost_model.save(model, directory)
    except OSError as e:
        notes.append(f"the cost model could not be saved ({e}); the next search starts from the same model")


@dataclass
class References:
    """A search's verification data: input sets and expected outputs at the compiled shapes
    and at the odd shapes (arrays, or `StoredArray`s where they went to files), and notes."""
    inputs: list
    expected: list
    odd: tuple | None
    notes: list[str]
    key: str = ""        # which search's (a worker's answer to an earlier, abandoned search is skipped)


def prepare_references(reference: Graph, graph: Graph, seed: int, elementwise: bool, reference_limit: float,
                       variant_graph: Graph | None, bounded: bool = True, directory: str | None = None,
                       key: str = "") -> References:
    """The verification input sets of `graph` (and of its odd-shaped counterpart) and the
    bounded float64 references of `reference` on them (`_references`, or with sums of
    products as matrix products: `_matmul_references`). Not `bounded` (a program too big even
    for that): the input sets and the odd shapes' references only, `expected` None (the
    original program's run gives them: `_baseline_reference`). With `directory`, big sets are
    written there (`store_arrays`) and come back as `StoredArray`s: what a worker returns."""
    notes: list[str] = []
    odd = _odd_references(variant_graph, seed, notes) if variant_graph is not None else None
    input_sets = verify.verification_inputs(graph, seed, bounded)
    expected = None
    if not bounded:
        pass
    elif elementwise:
        expected = _references(reference, input_sets)
    else:
        input_sets, expected = _matmul_references(reference, graph, input_sets, reference_limit,
                                                  variant_graph is not None, notes)
    if expected is not None:
        _note_unchecked(expected, notes, "at the compiled shapes")
    if directory is not None:
        input_sets = store_arrays(input_sets, directory, f"{key}-in")
        if expected is not None:
            expected = store_arrays(expected, directory, f"{key}-out")
        if odd is not None:
            odd = (store_arrays(odd[0], directory, f"{key}-odd-in"), store_arrays(odd[1], directory, f"{key}-odd-out"))
    return References(input_sets, expected, odd, notes, key)


def _odd_references(variant_graph: Graph, seed: int, notes: list[str]) -> tuple[list, list]:
    """The input sets and bounded references at the odd shapes (their own seed)."""
    odd_inputs = verify.verification_inputs(variant_graph, seed + 1)
    odd_expected = _references(variant_graph, odd_inputs)
    _note_unchecked(odd_expected, notes, f"at {_shapes(variant_graph)}")
    return odd_inputs, odd_expected


def _references(graph: Graph, input_sets) -> list:
    """The bounded float64 reference of each input set of `verify.verification_inputs(graph)`
    (the normal family's calibrated: `verify.reference`)."""
    families = numerics.verification_families(n.dtype for n in graph.inputs)
    return [verify.reference(graph, s, calibrate=f == numerics.NORMAL) for f, s in zip(families, input_sets)]


def _note_unchecked(expected, notes, where: str) -> None:
    """Say where the bounded reference leaves most output elements unchecked: an element whose
    error bound is infinite accepts any value (past the first-order bound of a deep program on
    random inputs, e.g. a transformer block at s64 d128 on every family)."""
    fractions = []
    for outs in expected:
        free = [np.mean(~(bounds.unpack(e)[1] < np.inf)) for e in outs
                if isinstance(e, np.ndarray) and e.ndim and bounds.is_packed(e, e.shape[1:])]
        fractions.append(max(free, default=0.0))
    if fractions and max(fractions) > 0.5:
        notes.append(f"the float64 reference {where} bounds few outputs: " +
                     ", ".join(f"{f:.0%}" for f in fractions) +
                     " of some output's elements per input set have no finite error bound (any value passes there)")


def _matmul_references(reference: Graph, graph: Graph, input_sets, reference_limit: float, has_variant: bool, notes):
    """Input sets and bounded float64 references for a program whose reference is affordable
    only with its sums of products as matrix products (`ir.bounds`): a family whose values
    force elementwise products past a quarter of the reference limit (infinities, NaN,
    overflow) is left to the odd shapes."""
    families = numerics.verification_families(n.dtype for n in graph.inputs)
    kept, expected, dropped = [], [], []
    for family, inputs in zip(families, input_sets):
        try:
            expected.append(verify.reference(reference, inputs, product_limit=reference_limit / 4,
                                             calibrate=family == numerics.NORMAL))
        except bounds.TooCostly as e:
            dropped.append(f"{family.name} ({e})")
            continue
        kept.append(inputs)
    work = verify.reference_work(reference)
    notes.append(f"the interpreter would need {work:.2g} element-ops per input set: the float64 reference computes "
                 "its sums of products as matrix products" +
                 (f"; families checked {'at the odd shapes only' if has_variant else 'nowhere'}: "
                  + ", ".join(dropped) if dropped else ""))
    if not kept:
        raise SearchError("no verification family has an affordable float64 reference at the compiled shapes: "
                          + ", ".join(dropped))
    return kept, expected


def _baseline_reference(runner: _Runner, graph: Graph, trials, variant, backend_spec, input_sets, notes):
    """Reference outputs for a program too big for the interpreter: the original program under
    the backend's default schedule, run in a worker, after that same program and schedule
    matched the interpreter at smaller odd shapes (the variant; checked at once on another
    worker). Every candidate is then compared with it at the compiled shapes; finalists are
    checked at the small shapes too."""
    first = next((t for t in trials if t.graph == graph), None)
    schedule = first.schedule if first is not None else None
    work = verify.reference_work(graph)
    runner.add_data(runner.main_key + "-inputs", input_sets, None, [])
    run = ("run", Trial(-2, backend_spec, graph, schedule, ""), runner.main_key + "-inputs")
    if variant is None:
        notes.append(f"the interpreter would need {work:.2g} element-ops per input set and the function does not "
                     "trace at smaller shapes: the reference is the original program under the default schedule, "
                     "itself unchecked")
        got, = runner.call_together([run])
    else:
        got, res = runner.call_together([run, ("verify", Trial(-1, backend_spec, variant.graph, schedule,
                                                                runner.odd_key))])
        if isinstance(res, WorkerFailure):
            res = verify.CheckResult(False, res.reason)
        if not res.ok:
            raise SearchError(f"the original program under the default schedule fails against the interpreter at "
                              f"{_shapes(variant.graph)}: {res.reason}; no trusted reference at the compiled shapes")
        notes.append(f"the interpreter would need {work:.2g} element-ops per input set: candidates were compared with "
                     f"the original program under the default schedule, which matched the interpreter at "
                     f"{_shapes(variant.graph)}")
    if isinstance(got, WorkerFailure):
        raise SearchError(f"the original program under the default schedule failed at the compiled shapes: "
                          f"{got.reason}") from None
    return [list(outs) for outs in got]


def _shapes(g: Graph) -> str:
    return ", ".join(str(list(n.shape)) for n in g.inputs)


class _OddCounterparts:
    """Finds a trial's program at odd shapes: the retraced original for the original program;
    for an e-graph candidate, the candidate of the odd-shaped program's exploration (run once,
    lazily, only when a rewritten program reaches the final checks) with the same extraction
    profile and the same compute-op counts."""

    def __init__(self, graph: Graph, variant: ShapeVariant, explored: bool, options: SearchOptions):
        self.graph, self.variant, self.explored, self.options = graph, variant, explored, options
        self.by_signature: dict | None = None
        self.seconds = 0.0

    def __call__(self, t: TrialRecord) -> Graph | None:
        if t.graph == self.graph:  # hash-consed nodes: equal programs compare equal cheaply
            return self.variant.graph
        if not self.explored:
            return None
        if self.by_signature is None:
            t0 = time.perf_counter()
            opts = SearchOptions(**{**self.options.__dict__, "budget": min(self.options.budget, 5.0) * 0.5})
            cands, _, _ = explore_candidates(self.variant.graph, opts, [])
            self.by_signature = {}
            for c in cands:
                if same_interface(self.variant.graph, c.graph) is None:
                    self.by_signature.setdefault(_signature(c.description, c.graph), c.graph)
            self.seconds = time.perf_counter() - t0
        return self.by_signature.get(_signature(t.description, t.graph))


def _signature(description: str, graph: Graph) -> tuple:
    profile = str(description).split(":")[0].split("~")[0]
    counts = graph.op_counts()
    return (profile,) + tuple(sorted((k, v) for k, v in counts.items() if k not in ("view", "const", "input")))


def _order_by_schedule_probe(runner: _Runner, probed, later, backend_spec, options) -> list:
    """`later` sorted by how fast the original program ran under each schedule (a few runs
    each); stable, so the static rank still orders programs within one schedule."""
    ok = [t for t in probed if t.status == "verified"]
    if len(ok) < 2 or not later:
        return later
    speed = {}
    for t in ok:
        try:
            # about 50 ms of runs each (at least min_repeat, at most 20): enough to rank schedules
            n = max(options.min_repeat, min(20, int(0.05 / max(t.run_s, 1e-6))))
            speed[t.schedule_text] = median(runner.time(t, backend_spec, 1, n))
        except WorkerFailure as e:
            t.status, t.reason = "rejected", f"failed while timing: {e.reason}"
    rank = {name: i for i, name in enumerate(sorted(speed, key=speed.get))}
    # every program under its default schedule first (its own kernels may be of kinds the
    # original program has no schedules for, e.g. a flash kernel); then by the probe's ranking,
    # a schedule the original does not have ranked by its place in the program's own list
    pos, seen = {}, {}
    for t in later:
        pos[t.id] = seen.get(t.candidate, 0)
        seen[t.candidate] = pos[t.id] + 1
    return sorted(later, key=lambda t: (pos[t.id] > 0, rank.get(t.schedule_text, pos[t.id])))


def _drop_duplicates(verified: list[TrialRecord]) -> list[TrialRecord]:
    """Programs that lower to the same code under the same schedule are timed once; under any
    schedule where the hash covers all a call runs (e.g. every tensor-core schedule of a
    program whose products are f32 renders the same SIMT kernels)."""
    first: dict[tuple, TrialRecord] = {}
    out = []
    for t in verified:
        key = (t.source_hash,) if t.whole_code else (t.source_hash, t.schedule_text)
        if t.source_hash and key in first:
            t.status, t.reason = "duplicate", f"same generated code as trial {first[key].id}"
            continue
        first[key] = t
        out.append(t)
    return out


def _final_key(t: TrialRecord):
    # trials that reached a later round were timed longer: compare them first, then by median
    return (-len(t.rounds), t.median, t.id)


# A candidate displaces the original program under the default schedule only when timed
# faster in the same round by this much and by more than the noise of both (the middle halves
# of their runs do not overlap): otherwise the choice follows the noise (on the 2-core VM the
# search chose tile variants of the layernorm and the odd GPT-2 decoder that the benchmark then
# timed 10-24 % slower), and a non-default winner of a big program costs another build to
# check it at odd shapes (1.7-3 s past a budget of 10 s for the 2-layer decoders on 2 cores).
WIN_MARGIN = 0.02


def _quartiles(samples: list[float]) -> tuple[float, float]:
    if not samples:
        return (math.inf, math.inf)
    q = np.percentile(samples, [25, 75])
    return (float(q[0]), float(q[1]))


def _finalists(survivors, baseline: TrialRecord | None) -> list[TrialRecord]:
    """The timed trials in the order they are tried as the winner: fastest first, but the
    baseline first unless the fastest beat it clearly (WIN_MARGIN, and the middle halves of
    their runs apart) in the last round both reached."""
    ordered = sorted((t for t in survivors if t.rounds), key=_final_key)
    if baseline is None or baseline not in ordered or ordered[0] is baseline:
        return ordered
    best, last = ordered[0], len(baseline.rounds) - 1    # (every survivor is timed from the first round)
    clear = len(best.rounds) > last and best.rounds[last][1] <= (1 - WIN_MARGIN) * baseline.rounds[last][1]
    if clear and len(best.spread) > last and len(baseline.spread) > last:
        clear = best.spread[last][1] < baseline.spread[last][0]
    if not clear:
        ordered.remove(baseline)
        ordered.insert(0, baseline)
    return ordered


def _successive_halving(runner: _Runner, survivors, backend_spec, deadline, options, progress, notes, baseline=None):
    """Time all survivors briefly, keep the faster half, time those longer, until one is left
    beside the baseline (original program, default schedule), which is timed in every round and
    never pruned, so it always has a time to compare with."""
    alive = _prune_slow(list(survivors), options.prune_factor, baseline)
    rounds_left = max(1, math.ceil(math.log2(len(alive)))) + 1 if len(alive) > 1 else 1
    repeat = options.min_repeat
    best = float("inf")
    request_s = REQUEST_S        # one timing request's cost beyond its runs: measured each round
    while alive:
        runner.prepare_timing(alive)
        remaining = max(deadline - time.perf_counter(), 0.0)
        # what the budget cannot time even briefly is not timed: the slowest go first (they
        # cannot win), the baseline (or else the fastest) always stays
        keep = baseline if baseline in alive else min(alive, key=_run_estimate)
        while len(alive) > 1 and sum((options.min_repeat + 1) * _run_estimate(t) + request_s for t in alive) > remaining:
            drop = max((t for t in alive if t is not keep), key=_run_estimate)
            drop.status, drop.reason = "skipped", "budget spent before it was timed"
            alive.remove(drop)
        share = remaining / rounds_left
        one_each = sum(max(_run_estimate(t), 1e-6) for t in alive)  # one run of every trial
        # interleave: every trial gets a slice of its runs in turn, so a change in machine load
        # during the round hits all of them alike instead of whichever ran last; fewer slices
        # where the requests' own cost (~0.2 s for a big program) would take a quarter of the
        # round, and one past the deadline
        slices = min(INTERLEAVE, repeat) if len(alive) > 1 and remaining > 0 else 1
        while slices > 1 and slices * len(alive) * request_s > 0.25 * share:
            slices -= 1
        affordable = int(max(share - slices * len(alive) * request_s, 0.0) / (one_each * 1.25))
        cap = options.max_repeat if len(alive) > 1 else min(options.max_repeat, 20)  # a lone survivor is timed for the report only
        # grow towards what the round can afford, never past it (the doubling of a later round
        # included), and never below min_repeat
        repeat = max(options.min_repeat, min(max(repeat, min(cap, affordable)), affordable))
        runs: dict[int, list[float]] = {t.id: [] for t in alive}
        t_round, requests = time.perf_counter(), 0
        for k in range(slices):
            if k and time.perf_counter() >= deadline:
                break                   # every trial has a slice: rank on what was measured
            n = repeat // slices + (1 if k < repeat % slices else 0)
            warmup = max(1, repeat // 5) if k == 0 else 1
            batch = [t for t in alive if t.status != "rejected"]
            for t, got in zip(batch, runner.time_each(batch, backend_spec, warmup, n)):
                requests += 1
                if isinstance(got, WorkerFailure):
                    t.status, t.reason, t.rounds = "rejected", f"failed while timing: {got.reason}", []
                else:
                    runs[t.id] += got
        measured = sum(sum(r) for r in runs.values())
        if requests:
            request_s = max((time.perf_counter() - t_round - measured) / requests, 0.0)
        for t in alive:
            if t.status != "rejected":
                t.rounds.append((repeat, median(runs[t.id])))
                t.spread.append(_quartiles(runs[t.id]))
                t.status = "timed"
                best = min(best, t.median)
        progress.update(best=best)
        # a trial that timed prune_factor times slower than the baseline is never timed again
        if baseline is not None and baseline.rounds:
            for t in alive:
                if t is not baseline and t.status == "timed" and t.median > options.prune_factor * baseline.median:
                    t.status, t.reason = "pruned", f"timed {t.median / baseline.median:.0f}x slower than the original"
        alive = sorted((t for t in alive if t.status == "timed"), key=lambda t: (t.median, t.id))
        rounds_left -= 1
        if len(alive) <= 1 or time.perf_counter() >= deadline:
            if len(alive) > 1:
                notes.append(f"budget spent with {len(alive)} candidates still in the running; chose the fastest so far")
            return
        # the faster half goes on, and the baseline with it: a candidate displaces it only when
        # clearly faster in the same round (_finalists), and the first round's few runs are the
        # noisiest (the original layernorm timed 1.26 ms there, 0.6-0.7 ms later)
        others = [t for t in alive if t is not baseline]
        halved = others[:max(1, math.ceil(len(others) / 2))] + ([baseline] if baseline in alive else [])
        if len(halved) >= len(alive) or len(halved) == 1:
            return
        alive = sorted(halved, key=lambda t: (t.median, t.id))
        repeat *= 2


def _run_estimate(t: TrialRecord) -> float:
    """Seconds per run: the median timed so far, else the verification run's."""
    return t.median if t.rounds else t.run_s


def _prune_slow(trials: list[TrialRecord], factor: float, baseline=None) -> list[TrialRecord]:
    """The static step of the halving: a trial whose verification run was `factor` times
    slower than the fastest one's is not timed at all (the baseline always is)."""
    best = min(t.run_s for t in trials)
    kept = []
    for t in trials:
        if t is not baseline and t.run_s > factor * best and t.run_s > PRUNE_FLOOR:
            t.status, t.reason = "pruned", f"its verification run was {t.run_s / best:.0f}x slower than the fastest"
        else:
            kept.append(t)
    return kept


def _build_here(backend, t: TrialRecord, args, expected, out_dtypes, notes):
    """Build the chosen trial in this process and check it once more on the first input set."""
    try:
        exe = backend.build(t.graph, t.schedule)
        res = verify.check_executable(exe, [args], [expected], out_dtypes)
        t.max_error = verify.max_relative_error(expected, verify._as_list(exe(*args)))
    except Exception as e:
        notes.append(f"trial {t.id} failed to build here: {type(e).__name__}: {e}")
        return None
    if not res.ok:
        t.status, t.reason = "rejected", f"failed when rebuilt here: {res.reason}"
        notes.append(f"trial {t.id} {t.reason}")
        return None
    return exe


# --- the report ----------------------------------------------------------------------------

def format_report(r: SearchResult) -> str:
    o = r.options
    lines = [f"search: target {r.target}" + (f" ({r.device})" if r.device else "") +
             f", budget {o.budget:g} s, seed {o.seed}, cache {r.cache}" + (f" [{r.cache_path}]" if r.cache_path else "")]
    if r.seconds:
        lines.append("time: " + ", ".join(f"{k} {v:.2f} s" for k, v in r.seconds.items()))
    if r.phases:
        lines.append("e-graph phases:")
        lines.append(f"  {'phase':<20} {'iters':>5} {'e-nodes':>9} {'e-classes':>9} {'seconds':>8}")
        for p in r.phases:
            lines.append(f"  {p.name:<20} {p.iterations:>5} {p.enodes:>9} {p.eclasses:>9} {p.seconds:>8.2f}")
    n_prog = len({t.candidate for t in r.trials})
    lines.append(f"candidates: {n_prog} programs, {len(r.trials)} (program, schedule) trials")
    lines.append(f"  {'#':>3} {'prog':>4} {'cost':>9} {'predicted':>10} {'schedule':<24} {'status':<9} {'median':>10} {'runs':>5}  "
                 f"{'program / reason'}")
    skipped: dict[str, int] = {}
    for t in r.trials:
        if t.status == "skipped":  # summarized below: a search under budget skips many
            skipped[t.reason] = skipped.get(t.reason, 0) + 1
            continue
        runs = sum(n for n, _ in t.rounds)
        note = t.description if t.status in ("timed", "chosen", "verified") else f"{t.description}: {t.reason}"
        lines.append(f"  {t.id:>3} {t.candidate:>4} {t.cost:>9.3g} {format_seconds(t.predicted):>10} {t.schedule_text:<24.24} {t.status:<9} "
                     f"{format_seconds(t.median):>10} {runs:>5}  {note}")
    if skipped:
        lines.append("  skipped: " + "; ".join(f"{n} trials ({why})" for why, n in skipped.items()))
    if r.winner is not None:
        w, base = r.winner, r.baseline()
        speed = ""
        if base is not None and base is not w and base.rounds:
            speed = f"; the original program under the default schedule: {format_seconds(base.median)}"
        lines.append(f"chosen: trial {w.id} ({w.description}, schedule {w.schedule_text}), "
                     f"median {format_seconds(w.median)}{speed}; max relative error {w.max_error:.1e}"
                     + (f"; {w.note}" if w.note else ""))
    cm = r.cost_model
    if cm:
        def rho(v):
            return "n/a" if v is None else f"{v:+.2f}"
        lines.append(f"cost model ({cm['source']}): Spearman rho predicted vs measured {rho(cm['rho_trials'])} over "
                     f"{cm['trials']} timed trials, {rho(cm['rho_programs'])} over {cm['programs']} programs at their "
                     "best schedule")
    lines += [f"note: {n}" for n in r.notes]
    return "\n".join(lines)
