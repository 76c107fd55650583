"""The CPU runtime's worker threads: they take a kernel's chunks and wait for the next kernel
in native code, without the GIL.

Handing chunks to sleeping Python workers cost this 2-core VM 50-80 us per kernel (a futex
wake, then the GIL passed back and forth), as much as a small kernel: the odd conv ran 0.26 ms
after a rest against 0.18 ms back to back. Here each worker thread runs a JIT-compiled loop
(`saturn_serve`) that polls the pool's generation word (a `pause` per poll, the core yielded
every 256 polls: a woken thread may share the poller's core, and two pollers on one core made
1.8 ms calls), takes chunk indices from the task's atomic counter and calls the kernel itself;
only after a while with no work does it return to Python and sleep on a condition.

The caller waits for the kernel's chunks, not for the workers: on a loaded machine a worker may
not run for milliseconds, and the caller then runs every chunk itself. To write the next task it
first sets the generation word to BUSY and waits until no worker is inside the task (a worker
counts itself in, then checks the generation again, so it either sees BUSY and leaves or is
counted), so a late worker never reads half of one task and half of the next. One caller at a
time holds the pool; `run` says no to a second concurrent caller, which then runs its chunks on
its own thread, so calls from many threads stay correct.
"""
from __future__ import annotations

import atexit
import ctypes
import os
import threading

import numpy as np

SPIN_POLLS = 1 << 16     # polls before an idle worker sleeps: about 1-2 ms with a pause each
WAIT_POLLS = 1 << 12     # polls of a waiting caller per native call
MAX_ARGS = 48            # pointer arguments of a kernel the native loop can call (more: the caller alone)
LINE = 8                 # int64 words per cache line: the words polled each sit on their own
BUSY = -1                # the generation word while the caller rewrites the task
STOP = -2                # the generation word once the process exits: workers leave their loop

# task words: 0 kernel address, 1 pointer arguments, 2 chunk bounds address, 3 chunks;
# LINE: the next chunk to take, 2 LINE: chunks finished, 3 LINE: workers inside the task (all
# atomic); 4 LINE + who * MAX_ARGS: participant `who`'s arguments
_TASK_IR = """
declare i32 @sched_yield()
{declare}

{polls}

define void @saturn_publish(ptr %word, i64 %v) {{
  store atomic i64 %v, ptr %word seq_cst, align 8
  ret void
}}

{call}

define void @saturn_run_chunks(ptr %task, i64 %who) {{
entry:
  %fn = load ptr, ptr %task, align 8
  %np = getelementptr i64, ptr %task, i64 1
  %n = load i64, ptr %np, align 8
  %chp = getelementptr i64, ptr %task, i64 2
  %ch = load ptr, ptr %chp, align 8
  %ncp = getelementptr i64, ptr %task, i64 3
  %nc = load i64, ptr %ncp, align 8
  %nextp = getelementptr i64, ptr %task, i64 {line}
  %finp = getelementptr i64, ptr %task, i64 {line2}
  %row = mul i64 %who, {max_args}
  %off = add i64 %row, {args_at}
  %args = getelementptr i64, ptr %task, i64 %off
  br label %loop
loop:
  %c = atomicrmw add ptr %nextp, i64 1 monotonic
  %more = icmp slt i64 %c, %nc
  br i1 %more, label %body, label %out
body:
  %ia = mul i64 %c, 2
  %pa = getelementptr i64, ptr %ch, i64 %ia
  %a = load i64, ptr %pa, align 8
  %ib = add i64 %ia, 1
  %pb = getelementptr i64, ptr %ch, i64 %ib
  %b = load i64, ptr %pb, align 8
  call void @saturn_call(ptr %fn, ptr %args, i64 %n, i64 %a, i64 %b)
  %f = atomicrmw add ptr %finp, i64 1 release
  br label %loop
out:
  ret void
}}

define i64 @saturn_serve(ptr %words, ptr %task, i64 %who, i64 %seen, i64 %polls) {{
entry:
  %activep = getelementptr i64, ptr %task, i64 {line3}
  %me = add i64 %who, 1
  br label %wait
wait:
  %s = phi i64 [ %seen, %entry ], [ %g, %busy ], [ %g, %left ], [ %g, %ran ]
  %g = call i64 @saturn_wait_change(ptr %words, i64 %s, i64 %polls)
  %idle = icmp eq i64 %g, %s
  br i1 %idle, label %out, label %check
check:
  %isstop = icmp eq i64 %g, {stop}
  br i1 %isstop, label %stopped, label %notstop
stopped:
  ret i64 %g
notstop:
  %isbusy = icmp eq i64 %g, {busy}
  br i1 %isbusy, label %busy, label %enter
busy:
  br label %wait
enter:
  %a0 = atomicrmw add ptr %activep, i64 1 seq_cst
  %g2 = load atomic i64, ptr %words seq_cst, align 8
  %same = icmp eq i64 %g2, %g
  br i1 %same, label %run, label %left
left:
  %a1 = atomicrmw sub ptr %activep, i64 1 seq_cst
  br label %wait
run:
  call void @saturn_run_chunks(ptr %task, i64 %me)
  %a2 = atomicrmw sub ptr %activep, i64 1 release
  br label %ran
ran:
  br label %wait
out:
  ret i64 %s
}}
"""


def _poll_ir(name: str, stop_when: str, pause: str) -> str:
    """i64 name(word*, x, polls): polls the word (acquire) until `icmp stop_when v, x` holds or
    `polls` polls have passed, a pause per poll and the core yielded every 256; returns the
    last value read."""
    return f"""define i64 @{name}(ptr %word, i64 %x, i64 %polls) {{
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %idle ], [ %next, %yield ]
  %v = load atomic i64, ptr %word acquire, align 8
  %done = icmp {stop_when} i64 %v, %x
  br i1 %done, label %out, label %poll
poll:
  {pause}
  %next = add i64 %i, 1
  %more = icmp ult i64 %next, %polls
  br i1 %more, label %idle, label %out
idle:
  %low = and i64 %next, 255
  %turn = icmp eq i64 %low, 0
  br i1 %turn, label %yield, label %loop
yield:
  %r = call i32 @sched_yield()
  br label %loop
out:
  ret i64 %v
}}"""


def _call_ir() -> str:
    """saturn_call(kernel, args, n, a, b): kernel(args[0], ..., args[n-1], a, b)."""
    cases = " ".join(f"i64 {n}, label %c{n}" for n in range(MAX_ARGS + 1))
    blocks = []
    for n in range(MAX_ARGS + 1):
        loads = "".join(f"  %p{n}_{j}a = getelementptr i64, ptr %args, i64 {j}\n"
                        f"  %p{n}_{j} = load ptr, ptr %p{n}_{j}a, align 8\n" for j in range(n))
        params = "".join(f"ptr %p{n}_{j}, " for j in range(n))
        blocks.append(f"c{n}:\n{loads}  call void %fn({params}i64 %a, i64 %b)\n  ret void")
    return ("define void @saturn_call(ptr %fn, ptr %args, i64 %n, i64 %a, i64 %b) {\nentry:\n"
            f"  switch i64 %n, label %none [ {cases} ]\n" + "\n".join(blocks) + "\nnone:\n  ret void\n}")


_native: dict = {}
_native_lock = threading.Lock()
_FUNCS = {"wait_value": ("saturn_wait_value", ctypes.c_int64, (ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)),
          "publish": ("saturn_publish", None, (ctypes.c_void_p, ctypes.c_int64)),
          "run": ("saturn_run_chunks", None, (ctypes.c_void_p, ctypes.c_int64)),
          "serve": ("saturn_serve", ctypes.c_int64,
                    (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64))}


def native() -> dict:
    """The pool's native functions by role, compiled once per process (cached on disk)."""
    if not _native:
        with _native_lock:
            if not _native:
                from backends.llvm import jit
                triple = jit.target_info()[0]
                if triple.startswith(("x86_64", "i686", "i386")):
                    pause, declare = "call void @llvm.x86.sse2.pause()", "declare void @llvm.x86.sse2.pause()"
                elif triple.startswith("aarch64"):
                    pause, declare = "call void @llvm.aarch64.hint(i32 1)", "declare void @llvm.aarch64.hint(i32)"
                else:
                    pause, declare = "", ""
                polls = _poll_ir("saturn_wait_change", "ne", pause) + "\n\n" + _poll_ir("saturn_wait_value", "eq", pause)
                ir = f'target triple = "{triple}"\n' + _TASK_IR.format(
                    polls=polls, declare=declare, call=_call_ir(), line=LINE, line2=2 * LINE, line3=3 * LINE,
                    busy=BUSY, stop=STOP, max_args=MAX_ARGS, args_at=4 * LINE)
                addrs, _, engine = jit.load(ir, [name for name, _, _ in _FUNCS.values()])
                fns = {role: ctypes.CFUNCTYPE(res, *args)(addrs[name]) for role, (name, res, args) in _FUNCS.items()}
                fns["engine"] = engine         # the code lives as long as its engine
                _native.update(fns)
    return _native


class SpinPool:
    """`workers` daemon threads that, with the caller, run each published kernel's chunks."""

    def __init__(self, workers: int):
        self.workers = workers
        self._fn = native()
        self._words = np.zeros(LINE, np.int64)             # word 0: the generation (or BUSY)
        self._task = np.zeros(4 * LINE + (1 + workers) * MAX_ARGS, np.int64)
        self._args = self._task[4 * LINE:].reshape(1 + workers, MAX_ARGS)
        self._words_at, self._task_at = self._words.ctypes.data, self._task.ctypes.data
        self._gen = 0
        self._held = threading.Lock()          # one caller at a time
        self._wake = threading.Condition()
        self._threads = [threading.Thread(target=self._serve, args=(i,), name=f"saturn-cpu-{i}", daemon=True)
                         for i in range(workers)]
        for t in self._threads:
            t.start()

    @property
    def participants(self) -> int:
        return 1 + self.workers

    def _serve(self, i: int) -> None:
        serve, seen = self._fn["serve"], 0
        while True:
            seen = serve(self._words_at, self._task_at, i, seen, SPIN_POLLS)   # the GIL released
            if seen == STOP:
                return
            with self._wake:                   # idle for a while: sleep until the next generation
                while int(self._words[0]) in (seen, BUSY):
                    self._wake.wait()

    def stop(self) -> None:
        """End the workers' loops (at exit: their code must not be freed under them)."""
        held = self._held.acquire(timeout=1.0)      # (a caller still running gets a second)
        try:
            with self._wake:
                self._fn["publish"](self._words_at, STOP)
                self._wake.notify_all()
            for t in self._threads:
                t.join(1.0)
        finally:
            if held:
                self._held.release()

    def _wait_for(self, word: int, want: int) -> None:
        wait = self._fn["wait_value"]
        while wait(self._task_at + 8 * word, want, WAIT_POLLS) != want:
            pass

    def run(self, kernel: int, rows, chunks: np.ndarray) -> bool:
        """Run kernel(*rows[who], a, b) for every (a, b) row of `chunks` (int64, C order) on the
        workers and this thread, participant `who` passing its own argument row (one per
        participant, at most MAX_ARGS pointers each, all the same length); return once every
        chunk is done. False (nothing run) when another caller holds the pool."""
        if not self._held.acquire(blocking=False):
            return False
        try:
            publish = self._fn["publish"]
            publish(self._words_at, BUSY)
            self._wait_for(3 * LINE, 0)        # no worker still inside the last task
            t, n = self._task, len(rows[0])
            t[0], t[1], t[2], t[3], t[LINE], t[2 * LINE] = kernel, n, chunks.ctypes.data, len(chunks), 0, 0
            for who, row in enumerate(rows):
                self._args[who, :n] = row
            self._gen += 1
            with self._wake:
                publish(self._words_at, self._gen)
                self._wake.notify_all()
            try:
                self._fn["run"](self._task_at, 0)
                self._wait_for(2 * LINE, len(chunks))
            except BaseException:
                # (an interrupt between polls) workers may still be writing the caller's
                # buffers: they must be done before those can be freed
                publish(self._words_at, BUSY)
                self._wait_for(3 * LINE, 0)
                raise
            return True
        finally:
            self._held.release()


_POOLS: dict[int, SpinPool] = {}
_POOLS_LOCK = threading.Lock()


def pool(workers: int) -> SpinPool:
    p = _POOLS.get(workers)
    if p is None:
        with _POOLS_LOCK:   # two first calls at once must not make two pools
            p = _POOLS.get(workers)
            if p is None:
                p = _POOLS[workers] = SpinPool(workers)
    return p


def _stop_all() -> None:
    for p in list(_POOLS.values()):
        p.stop()
    _POOLS.clear()


# threads do not survive fork: a child process makes its own pools
os.register_at_fork(after_in_child=_POOLS.clear)
# the workers run JIT code that module teardown would free: end them first
atexit.register(_stop_all)
