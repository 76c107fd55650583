"""Isolated worker processes that build, verify and time untrusted candidates.

Generated native code may segfault or loop forever. Each worker is a fresh Python process
(`python -m compiler.workers`) fed pickled requests over a pipe; a crash or a missed deadline
kills only that worker, which is replaced, and the candidate is rejected with the reason.
Workers are plain subprocesses rather than multiprocessing children so that the user's
`__main__` module is never re-imported. A worker keeps the executables it built, so timing
a verified candidate on the worker that built it costs no rebuild.

Every request gets exactly one answer, read in order. A request whose answer was never read
(its caller was interrupted, e.g. by Ctrl-C, between sending and reading) leaves the worker
out of step: its next answer would be taken for another request's, so such a worker is
killed and replaced instead of reused. Workers ignore SIGINT: Ctrl-C interrupts the compiling
process, which decides which workers to keep.

Requests: ("data", key, input_sets, expected_sets, out_dtypes) stores inputs once;
("verify", trial) builds and checks a candidate; ("build", trial) only compiles one (warming
the backend's disk cache); ("verify_variant", trial) checks it at odd
shapes; ("time", trial, warmup, repeat) times one; ("identity", backend) names the device this
worker times on (compiler.cluster.devices).

A worker may be pinned to one device by the environment it starts with (`Worker(env=...)`:
CUDA_VISIBLE_DEVICES and SATURN_DEVICE), as the timing workers of a cluster are.
"""
from __future__ import annotations

import atexit
import hashlib
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

# big data sets travel as files (re-exported: the search stores, the workers load)
from compiler.array_files import FILE_BYTES, load_arrays, store_arrays  # noqa: F401

_HEADER = struct.Struct("<Q")
KILL_REAP_S = 5.0     # how long a killed worker is waited for before it is left to the OS


# --- framing -------------------------------------------------------------------------------

def _send(f, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(_HEADER.pack(len(data)))
    f.write(data)
    f.flush()


def _read_exact(f, n: int) -> bytes:
    chunks, left = [], n
    while left:
        b = f.read(left)
        if not b:
            raise EOFError("worker closed the pipe")
        chunks.append(b)
        left -= len(b)
    return b"".join(chunks)


def _recv(f):
    (n,) = _HEADER.unpack(_read_exact(f, _HEADER.size))
    return pickle.loads(_read_exact(f, n))


# --- the worker side -----------------------------------------------------------------------

@dataclass
class Trial:
    """One candidate program under one schedule, as sent to a worker."""
    id: int
    backend: object          # a target name, or a picklable backend object
    graph: object            # ir.graph.Graph
    schedule: object
    data_key: str
    variant_graph: object = None   # the same program at odd shapes, checked too when given
    variant_key: str = ""


class _WorkerState:
    def __init__(self):
        self.data: dict[str, tuple] = {}
        self.exes: dict[int, object] = {}
        self.backends: dict[str, object] = {}
        # Set when a candidate raised: a faulting GPU kernel leaves the device context unusable
        # for every later request, so the worker answers and then exits to be replaced.
        self.broken = False

    def backend(self, spec):
        if not isinstance(spec, str):
            return spec
        if spec not in self.backends:
            from backends import get_backend
            self.backends[spec] = get_backend(spec)
        return self.backends[spec]

    def build(self, trial: Trial):
        exe = self.exes.get(trial.id)
        if exe is None:
            exe = self.backend(trial.backend).build(trial.graph, trial.schedule)
            self.exes[trial.id] = exe
        return exe


def handle(state: _WorkerState, request):
    """Serve one request (also used in-process when isolation is off)."""
    import numpy as np

    from compiler import timing, verify
    kind = request[0]
    if kind == "data":
        _, key, input_sets, expected_sets, out_dtypes = request
        state.data[key] = (load_arrays(input_sets), load_arrays(expected_sets), out_dtypes)
        return ("ok",)
    if kind == "verify":
        trial: Trial = request[1]
        t0 = time.perf_counter()
        try:
            exe = state.build(trial)
        except Exception as e:  # a compile error rejects this candidate only
            state.broken = True
            return verify.CheckResult(False, f"build failed: {type(e).__name__}: {_first_line(e)}",
                                      build_s=time.perf_counter() - t0)
        build_s = time.perf_counter() - t0
        res = _check(state, exe, trial.data_key)
        _library_ran(exe)
        res.build_s = build_s
        identity = getattr(exe, "code_identity", None)      # (backends whose source says it all)
        res.whole_code = identity is not None
        res.source_hash = hashlib.sha256(str(identity if res.whole_code else getattr(exe, "source", "")).encode()).hexdigest()[:16]
        if not res.ok:
            state.exes.pop(trial.id, None)
        return res
    if kind == "build":  # compile a candidate ahead of time: what it compiles lands in the disk caches
        trial = request[1]
        t0 = time.perf_counter()
        try:
            state.backend(trial.backend).build(trial.graph, trial.schedule)   # (not kept: nothing runs it)
        except Exception as e:   # its verification will say why it fails
            return ("failed", f"{type(e).__name__}: {_first_line(e)}")
        return ("built", time.perf_counter() - t0)
    if kind == "references":  # a search's verification data, made while its e-graph is explored
        from compiler.search import prepare_references
        _, job, directory, key = request
        return prepare_references(*job, directory=directory, key=key)
    if kind == "prepare":  # load the backend ahead of the first candidate
        state.backend(request[1])
        return ("ok",)
    if kind == "reset":  # a new search begins: drop the previous one's inputs and executables
        state.data.clear()
        state.exes.clear()
        return ("ok",)
    if kind == "run":  # outputs of a candidate on stored inputs (to serve as the reference)
        _, trial, key = request
        input_sets = state.data[key][0]
        exe = state.build(trial)
        return [[np.array(o, copy=True) for o in verify._as_list(exe(*args))] for args in input_sets]
    if kind == "verify_variant":
        return _check_variant(state, request[1], verify.CheckResult(True))
    if kind == "time":
        _, trial, warmup, repeat = request
        exe = state.build(trial)
        args = state.data[trial.data_key][0][0]
        if _wait_library_quiet(exe):
            _rewarm(exe, args)
        out = timing.measure(exe, args, warmup, repeat)
        _library_ran(exe)
        return out
    if kind == "source":
        return getattr(state.build(request[1]), "source", "")
    if kind == "identity":  # (device identity, host name, process id) of this worker
        import socket

        from compiler.cluster.devices import probe
        return probe(state.backend(request[1])), socket.gethostname(), os.getpid()
    raise ValueError(f"unknown request {kind!r}")


# When numpy's BLAS threads on this host stop spinning after the last library call a worker
# made: a time.monotonic() value (system-wide on Linux), written by that worker, read by any
# worker (of any search) before it times generated code. The spinning threads take the cores
# from whatever runs next (a product timed right after a library call ran 2x slow, 21 ms for
# 11); sleeping after every library run instead cost each interleaved timing slice the wait.
QUIET_FILE = os.path.join(tempfile.gettempdir(), f"saturn-library-quiet-{getattr(os, 'getuid', lambda: 0)()}")
MAX_QUIET_WAIT_S = 1.0


def _quiet_at() -> float:
    try:
        with open(QUIET_FILE, "rb") as f:
            return struct.unpack("<d", f.read(8))[0]
    except (OSError, struct.error):
        return 0.0


def _library_ran(exe) -> None:
    """Note that `exe` just ran a library call, if it has any (its `settle_s`)."""
    seconds = getattr(exe, "settle_s", 0.0)
    if not seconds:
        return
    quiet = time.monotonic() + seconds
    if quiet <= _quiet_at():
        return
    try:
        tmp = f"{QUIET_FILE}.{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(struct.pack("<d", quiet))
        os.replace(tmp, QUIET_FILE)
    except OSError:
        time.sleep(seconds)     # nowhere to say it: wait here, as the other workers cannot


def _wait_library_quiet(exe) -> bool:
    """Before timing generated code, wait for the library threads of a recent call to stop
    spinning (an executable that calls the library itself does not wait: its own calls leave
    them spinning as they would in the user's process). Whether it waited."""
    if getattr(exe, "settle_s", 0.0):
        return False
    wait = _quiet_at() - time.monotonic()
    if wait > 0:
        time.sleep(min(wait, MAX_QUIET_WAIT_S))
    return wait > 0


# Untimed runs after a rest: on the 2-core VM the runs right after a wait ran 2x slow for up to
# 0.1 s (a 1.4 ms product timed 2.2-2.6 ms, then 1.39 again), as the benchmark found
# (benchmarks/timing.REWARM_S).
REWARM_S = 0.1


def _rewarm(exe, args) -> None:
    end = time.perf_counter() + REWARM_S
    while True:
        exe(*args)
        if time.perf_counter() >= end:
            return


def _check(state: _WorkerState, exe, data_key: str):
    """Check `exe` on the stored data `data_key`; a candidate that raises is rejected (and,
    as it may have left the device unusable, the worker retires after answering)."""
    from compiler import verify
    input_sets, expected_sets, out_dtypes = state.data[data_key]
    try:
        return verify.check_executable(exe, input_sets, expected_sets, out_dtypes)
    except Exception as e:
        state.broken = True
        return verify.CheckResult(False, f"raised {type(e).__name__}: {_first_line(e)}")


def _check_variant(state: _WorkerState, trial: Trial, res):
    """Check the candidate again at odd shapes (sizes that are no multiple of any tile)."""
    from compiler import verify
    shapes = ", ".join(str(list(n.shape)) for n in trial.variant_graph.inputs)
    try:
        exe = state.backend(trial.backend).build(trial.variant_graph, trial.schedule)
    except Exception as e:  # the schedule may be specific to the original shapes
        res.note = f"odd shapes ({shapes}) not checked: the schedule does not build there ({type(e).__name__})"
        return res
    odd = _check(state, exe, trial.variant_key)
    if not odd.ok:
        return verify.CheckResult(False, f"at odd shapes ({shapes}): {odd.reason}", build_s=res.build_s,
                                  run_s=res.run_s)
    res.note = f"also verified at odd shapes ({shapes})"
    return res


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else ""


def worker_main() -> None:
    import faulthandler
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # a terminal's Ctrl-C is the parent's to handle
    proto_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything the backend prints goes to the log, never into the protocol
    faulthandler.enable()
    proto_in = sys.stdin.buffer
    state = _WorkerState()
    while True:
        try:
            request = _recv(proto_in)
        except EOFError:
            return
        if request[0] == "exit":
            return
        try:
            result = ("ok", handle(state, request))
        except BaseException as e:  # noqa: BLE001 - report, then be replaced
            state.broken = True
            result = ("error", f"{type(e).__name__}: {_first_line(e)}")
        _send(proto_out, result + (state.broken,))  # the flag: "I am exiting, replace me"
        if state.broken:
            return


# --- the parent side -----------------------------------------------------------------------

class WorkerFailure(Exception):
    """The worker died or missed its deadline; `reason` says which. `crashed`: the worker
    process died (a crashing candidate, or a worker lost to its host), as opposed to a
    timeout or an error the worker reported."""

    def __init__(self, reason: str, crashed: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.crashed = crashed


def _child_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.update(extra or {})
    paths = [os.path.abspath(p or os.curdir) for p in sys.path]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in paths if os.path.isdir(p)))
    env.setdefault("PYTHONHASHSEED", "0")
    return env


class Worker:
    """One worker process; `start` a request, then `finish` it with a deadline. `env`: variables
    set for it on top of this process's (e.g. the device it is pinned to)."""

    def __init__(self, env: dict | None = None):
        self.log = tempfile.TemporaryFile()
        # unbuffered pipes: answers are awaited with select on the descriptor, which a buffered
        # reader that read ahead (two answers of posted requests arriving together) would hide
        self.proc = subprocess.Popen([sys.executable, "-m", "compiler.workers"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, env=_child_env(env), bufsize=0)
        self.data_keys: set[str] = set()
        self.unanswered = 0   # requests sent with `post` whose answers are still to be read
        self.kept: list[bool] = []   # for each of those, in order: whether its answer is kept for `collect`
        self.answers: list = []      # kept answers read so far (a WorkerFailure where the request raised)
        self.drain_s = 60.0   # how long the next `start` waits for each of those answers
        self.pending = 0      # requests sent (or being sent) whose answers are not read yet
        self.retiring = False  # it said it exits after its last answer

    def out_of_step(self) -> bool:
        """Whether an answer is owed to nobody (only meaningful between requests): a caller was
        interrupted after sending a request, or in the middle of sending or reading one."""
        return self.pending > self.unanswered

    def alive(self) -> bool:
        """Whether the worker can take a new request (call it between requests)."""
        return not self.retiring and not self.out_of_step() and self.proc.poll() is None

    def post(self, request, timeout: float = 60.0) -> None:
        """Send a request whose answer is read (and dropped) before the next `start`, waiting
        for it at most `timeout` seconds then. It queues behind earlier posted requests without
        waiting for their answers (a fresh worker's `prepare`: a build posted during
        exploration once waited 2 s for it, holding the exploration back)."""
        self._send(request)
        self.unanswered += 1
        self.kept.append(False)
        self.drain_s = max(self.drain_s, timeout)

    def post_kept(self, request) -> None:
        """`post`, but its answer is kept: `collect` returns it."""
        self._send(request)
        self.unanswered += 1
        self.kept.append(True)

    def collect(self, timeout: float):
        """The answer of the oldest kept posted request, waiting at most `timeout` seconds for
        it (earlier posted requests' answers are read on the way)."""
        end = time.perf_counter() + timeout
        while not self.answers:
            if not self.unanswered:
                raise WorkerFailure("no posted request's answer is kept")
            self.read_posted(max(end - time.perf_counter(), 0.0) if self.kept[0] else self.drain_s)
        value = self.answers.pop(0)
        if isinstance(value, WorkerFailure):
            raise value
        return value

    def read_posted(self, timeout: float) -> None:
        """Read the oldest posted request's answer: kept, or dropped. That request raising in
        the worker is its answer's business (kept as the failure), not the next request's; a
        dead or silent worker fails here."""
        self.unanswered -= 1
        keep = self.kept.pop(0)
        try:
            value = self.finish(timeout)
        except WorkerFailure as e:
            if not (keep and str(e).startswith("error:")):
                raise
            value = e
        if keep:
            self.answers.append(value)

    def start(self, request) -> None:
        while self.unanswered:
            self.read_posted(self.drain_s)
        self.drain_s = 60.0
        self._send(request)

    def _send(self, request) -> None:
        if self.retiring:
            raise WorkerFailure("the worker retired after a candidate raised")
        if self.out_of_step():
            self.kill()
            raise WorkerFailure("the worker was left out of step by an interrupted request")
        self.pending += 1   # counted first: a send cut short also leaves the stream out of step
        try:
            _send(self.proc.stdin, request)
        except (BrokenPipeError, OSError):
            raise WorkerFailure(self._death_reason(), crashed=True) from None

    def finish(self, timeout: float, limit: float | None = None):
        """The answer to the started request, waiting at most `timeout` more seconds
        (`limit`: the request's whole allowance, for the message)."""
        ready, _, _ = select.select([self.proc.stdout], [], [], max(timeout, 0.0))
        if not ready:
            self.kill()
            raise WorkerFailure(f"timeout: no answer within {limit if limit is not None else timeout:.1f} s")
        try:
            status, value, self.retiring = _recv(self.proc.stdout)
        except (EOFError, OSError, pickle.UnpicklingError):
            raise WorkerFailure(self._death_reason(), crashed=True) from None
        self.pending -= 1
        if status == "error":
            raise WorkerFailure(f"error: {value}")
        return value

    def call(self, request, timeout: float):
        self.start(request)
        return self.finish(timeout)

    def fileno(self) -> int:
        return self.proc.stdout.fileno()

    def _death_reason(self) -> str:
        try:
            code = self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.returncode
        if code is not None and code < 0:
            try:
                what = signal.Signals(-code).name
            except ValueError:
                what = f"signal {-code}"
        else:
            what = f"exit code {code}"
        tail = self._log_tail()
        return f"crashed ({what})" + (f": {tail}" if tail else "")

    def _log_tail(self) -> str:
        try:
            self.log.seek(0)
            lines = [ln for ln in self.log.read().decode(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        # faulthandler's first line names the fault ("Fatal Python error: Segmentation fault")
        fatal = [ln for ln in lines if ln.startswith("Fatal Python error")]
        return (fatal[0] if fatal else (lines[-1] if lines else ""))[:200]

    def kill(self) -> None:
        """SIGKILL the worker and reap it, without Popen.wait(): a Ctrl-C that lands inside a
        wait on this worker can leave the Popen's wait lock held (CPython cannot guarantee a
        `with` block's exit on an interrupt right after its enter), and a blocking wait on it
        then hangs the process forever (seen in a test run after the interrupt tests)."""
        if self.proc.returncode is not None:
            return
        try:
            self.proc.kill()
        except OSError:
            pass
        end = time.monotonic() + KILL_REAP_S
        while time.monotonic() < end:
            try:
                pid, status = os.waitpid(self.proc.pid, os.WNOHANG)
            except ChildProcessError:      # reaped already (by the Popen, in another call)
                self.proc.returncode = self.proc.returncode if self.proc.returncode is not None else -9
                return
            if pid:
                self.proc.returncode = os.waitstatus_to_exitcode(status)
                return
            time.sleep(0.002)

    def close(self) -> None:
        if self.out_of_step():   # it may be busy with a request nobody waits for: no grace
            self.kill()
        if self.proc.poll() is None:
            try:
                _send(self.proc.stdin, ("exit",))
                self.proc.stdin.close()
                self.proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()
        for pipe in (self.proc.stdin, self.proc.stdout):   # a killed worker's too
            try:
                pipe.close()
            except OSError:
                pass
        self.log.close()


class WorkerPool:
    """A few workers, each replaced when it crashes or hangs. `env(i)`: the extra environment
    of worker i (its device), if any."""

    def __init__(self, size: int, env=None):
        self.size = max(1, size)
        self.env = env
        self.workers: list[Worker | None] = [None] * self.size

    def get(self, i: int) -> Worker:
        w = self.workers[i]
        if w is None or not w.alive():
            if w is not None:
                w.close()
            w = self.workers[i] = self._new_worker(i)
        return w

    def _new_worker(self, i: int) -> Worker:
        return Worker(self.env(i) if self.env is not None else None)

    def where(self, i: int) -> str:
        """Which process worker i is (for reports)."""
        w = self.workers[i]
        return f"pid {w.proc.pid}" if w is not None else "not started"

    def wait(self, indices: list[int], timeout: float) -> list[int]:
        """Those of the workers `indices` (each with a started request) that have answered,
        waiting at most `timeout` seconds for the first."""
        fds = {self.workers[i].fileno(): i for i in indices}
        ready, _, _ = select.select(list(fds), [], [], max(timeout, 0.0))
        return [fds[f] for f in ready]

    def ensure_data(self, i: int, data_request, timeout: float) -> Worker:
        w = self.get(i)
        key = data_request[1]
        if key not in w.data_keys:
            w.call(data_request, timeout)
            w.data_keys.add(key)
        return w

    def reset(self, timeout: float = 10.0) -> None:
        """Forget every search's data and executables, keeping the processes for the next search."""
        for i, w in enumerate(self.workers):
            if w is None or not w.alive():
                continue
            try:
                w.call(("reset",), timeout)
                w.data_keys.clear()
                w.answers.clear()
            except WorkerFailure:
                w.close()
                self.workers[i] = None

    def close(self) -> None:
        for w in self.workers:
            if w is not None:
                w.close()
        self.workers = [None] * self.size

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_SHARED: WorkerPool | None = None


def shared_pool(size: int) -> WorkerPool:
    """One pool per process, reused by every search (worker start-up is paid once)."""
    global _SHARED
    if _SHARED is None or _SHARED.size != max(1, size):
        if _SHARED is None:
            atexit.register(_close_shared)
        else:
            _SHARED.close()
        _SHARED = WorkerPool(size)
    return _SHARED


def _close_shared() -> None:
    if _SHARED is not None:
        _SHARED.close()


if __name__ == "__main__":
    worker_main()
