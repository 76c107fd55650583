"""Fake devices for tests: the CPU backend, but each pinned worker claims to be device
$SATURN_DEVICE of a list of models, so several CPU timing workers act as distinct devices and
device assignment, identity matching and re-timing are tested without GPUs.

`build_delay` makes build workers slow, so a test can catch one busy; `lose_once` simulates a lost worker: the first worker of the given role ("build" or "time")
to build (or, for "time", run) a candidate kills itself with SIGKILL, once per marker file.
"""
from __future__ import annotations

import os
import signal
import time

from compiler.cluster.devices import DEVICE_ENV, DeviceIdentity

ROLE_ENV = "SATURN_WORKER_ROLE"   # "build" or "time", set by the cluster for its workers


class FakeDevices:
    name = "fake-devices"

    def __init__(self, models=("fake-A", "fake-A"), lose_once: tuple[str, str] | None = None,
                 build_delay: float = 0.0):
        self.models = tuple(models)
        self.lose_once = lose_once       # (role, marker file path)
        self.build_delay = build_delay   # seconds each build sleeps first (a slow compiler)

    def _cpu(self):
        from backends import get_backend
        return get_backend("cpu")

    def unavailable_reason(self):
        return None

    @property
    def device_name(self) -> str:
        return f"fake devices {','.join(self.models)}"

    def device_count(self) -> int:
        return len(self.models)

    def device_identity(self) -> DeviceIdentity:
        i = int(os.environ.get(DEVICE_ENV, "0"))
        return DeviceIdentity("fake", self.models[i % len(self.models)], "fake-driver", "fixed")

    def schedules(self, graph):
        return self._cpu().schedules(graph)

    def build(self, graph, schedule=None):
        self._maybe_die("build")
        if self.build_delay and os.environ.get(ROLE_ENV) == "build":
            time.sleep(self.build_delay)
        exe = self._cpu().build(graph, schedule)
        return _Dying(exe, self) if self.lose_once and self.lose_once[0] == "time" else exe

    def _maybe_die(self, role: str) -> None:
        if not self.lose_once or self.lose_once[0] != role or os.environ.get(ROLE_ENV) != role:
            return
        try:
            os.close(os.open(self.lose_once[1], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        os.kill(os.getpid(), signal.SIGKILL)


class _Dying:
    """An executable whose first run in a timing worker kills that worker (once). It hides the
    wrapped executable's own `benchmark`, so that timing goes through __call__."""

    def __init__(self, exe, backend: FakeDevices):
        self.exe, self.backend = exe, backend
        self.source = exe.source

    def __getattr__(self, name):
        if name == "benchmark":
            raise AttributeError(name)
        return getattr(self.exe, name)

    def __call__(self, *args):
        self.backend._maybe_die("time")
        return self.exe(*args)
