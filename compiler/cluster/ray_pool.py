"""Workers as Ray actors: the same requests as compiler.workers, served by `handle` in an
actor process. A candidate that crashes its actor kills only that actor (Ray reports it
dead); one that hangs is killed at its deadline; either way the slot gets a fresh actor.
Input data goes once through Ray's object store; compiled objects are shared through the
cache directory (SATURN_CACHE_DIR, which every node should see at the same path)."""
from __future__ import annotations

import os
import socket

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from compiler.cluster.devices import DEVICE_ENV, device_count, is_cuda, pin_env
from compiler.cluster.fake import ROLE_ENV
from compiler.workers import WorkerFailure, WorkerPool, _first_line, _WorkerState, handle, load_arrays


class _Serve:
    """The actor: one worker's state, serving one request at a time."""

    def __init__(self, env: dict):
        import faulthandler
        faulthandler.enable()
        os.environ.update(env)
        self.state = _WorkerState()

    def whoami(self) -> tuple[str, int]:
        return socket.gethostname(), os.getpid()

    def serve(self, request):
        try:
            result = ("ok", handle(self.state, request))
        except BaseException as e:  # noqa: BLE001 - report, then be replaced
            self.state.broken = True
            result = ("error", f"{type(e).__name__}: {_first_line(e)}")
        return result + (self.state.broken,)


_Actor = ray.remote(max_restarts=0, max_task_retries=0)(_Serve)


class RayWorker:
    """One actor, driven like compiler.workers.Worker: `start` a request, `finish` it by a deadline."""

    def __init__(self, make_actor):
        self.actor = make_actor()
        self.who = self.actor.whoami.remote()
        self.ref = None
        self.data_keys: set[str] = set()
        self.retiring = False   # it answered that a candidate raised: replace it
        self.dead = False

    def alive(self) -> bool:
        return not (self.dead or self.retiring or self.ref is not None)

    def post(self, request) -> None:
        self.actor.serve.remote(request)   # answered in order before later requests; the answer is dropped

    def start(self, request) -> None:
        if not self.alive():
            raise WorkerFailure("the worker retired or died before the request", crashed=self.dead)
        self.ref = self.actor.serve.remote(request)

    def finish(self, timeout: float, limit: float | None = None):
        ready, _ = ray.wait([self.ref], timeout=max(timeout, 0.0))
        if not ready:
            self.kill()
            raise WorkerFailure(f"timeout: no answer within {limit if limit is not None else timeout:.1f} s")
        ref, self.ref = self.ref, None
        try:
            status, value, self.retiring = ray.get(ref)
        except RayActorError as e:
            self.dead = True
            raise WorkerFailure(f"crashed (its Ray actor died: {_first_line(e)[:200]})", crashed=True) from None
        if self.retiring:
            self.kill()
        if status == "error":
            raise WorkerFailure(f"error: {value}")
        return value

    def call(self, request, timeout: float):
        self.start(request)
        return self.finish(timeout)

    def where(self) -> str:
        try:
            host, pid = ray.get(self.who, timeout=5)
            return f"{host} pid {pid}"
        except (RayActorError, GetTimeoutError):
            return "lost"

    def kill(self) -> None:
        self.dead = True
        if not ray.is_initialized():   # Ray was shut down: its actors went with it (and ray.kill would abort)
            return
        try:
            ray.kill(self.actor, no_restart=True)
        except Exception:  # already gone
            pass

    def close(self) -> None:
        self.kill()


class RayPool(WorkerPool):
    """Slots of Ray actors, each replaced by a fresh actor when it dies, hangs or retires
    (WorkerPool's slots, reset and close; actors instead of processes, data through the object store)."""

    def __init__(self, size: int, make_actor):
        super().__init__(size)
        self.make_actor = make_actor     # slot index -> a new actor handle
        self.data_refs: dict[str, object] = {}   # data key -> the request in the object store

    def _new_worker(self, i: int) -> RayWorker:
        return RayWorker(lambda: self.make_actor(i))

    def ensure_data(self, i: int, data_request, timeout: float) -> RayWorker:
        w = self.get(i)
        key = data_request[1]
        if key not in w.data_keys:
            if key not in self.data_refs:   # arrays stored as files here are read and put once
                kind, _, inputs, expected, out_dtypes = data_request
                self.data_refs[key] = ray.put((kind, key, load_arrays(inputs), load_arrays(expected), out_dtypes))
            w.call(self.data_refs[key], timeout)
            w.data_keys.add(key)
        return w

    def wait(self, indices: list[int], timeout: float) -> list[int]:
        refs = {self.workers[i].ref: i for i in indices}
        ready, _ = ray.wait(list(refs), num_returns=1, timeout=max(timeout, 0.0))
        if ready:
            ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        return [refs[r] for r in ready]

    def where(self, i: int) -> str:
        w = self.workers[i]
        return w.where() if w is not None else "not started"

    def reset(self, timeout: float = 10.0) -> None:
        self.data_refs.clear()
        super().reset(timeout)

    def close(self) -> None:
        super().close()
        self.data_refs.clear()


def _connect(spec) -> None:
    if not ray.is_initialized():
        ray.init(address=spec.address, log_to_driver=False)


def cluster_key(spec, backend) -> tuple:
    _connect(spec)
    kind = "cuda" if is_cuda(backend) else ("devices", device_count(backend)) if hasattr(backend, "device_count") else "cpu"
    return ("ray", ray.get_runtime_context().get_job_id(), spec.address, spec.build_workers, kind)


def _shared_env() -> dict:
    """What every actor process starts with: this process's import path, a fixed string-hash
    seed (as local workers have) and the cache directory, shared by all."""
    from backends.base import cache_root
    from compiler.workers import _child_env
    env = _child_env()
    return {"PYTHONPATH": env["PYTHONPATH"], "PYTHONHASHSEED": env["PYTHONHASHSEED"],
            "SATURN_CACHE_DIR": str(cache_root())}


def open_ray(spec, backend, key):
    from compiler.cluster.hosts import Cluster
    _connect(spec)
    runtime_env = {"env_vars": _shared_env()}
    resources = ray.cluster_resources()
    n_build = spec.build_workers or max(1, int(resources.get("CPU", 1)))

    def builder(i):
        return _Actor.options(num_cpus=1, runtime_env=runtime_env).remote({ROLE_ENV: "build"})

    if is_cuda(backend):
        n_dev = max(1, int(resources.get("GPU", 0)))

        def device(i):   # Ray pins the actor to its GPU (CUDA_VISIBLE_DEVICES)
            return _Actor.options(num_cpus=0, num_gpus=1, runtime_env=runtime_env).remote(
                {DEVICE_ENV: "0", ROLE_ENV: "time"})
    elif hasattr(backend, "device_count"):   # devices the backend names itself (the fake ones of the tests)
        n_dev = device_count(backend)

        def device(i):
            return _Actor.options(num_cpus=0, runtime_env=runtime_env).remote({DEVICE_ENV: str(i), ROLE_ENV: "time"})
    else:   # the CPU: one timing actor per node
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
        n_dev = max(1, len(nodes))

        def device(i):
            where = NodeAffinitySchedulingStrategy(nodes[i % len(nodes)], soft=False)
            return _Actor.options(num_cpus=0, scheduling_strategy=where, runtime_env=runtime_env).remote(
                {DEVICE_ENV: "0", ROLE_ENV: "time"})

    # the device that runs the result is this process's device 0, timed by a local worker
    home = WorkerPool(1, env=lambda i: {**pin_env(backend, 0), ROLE_ENV: "time"})
    name = f"ray{' ' + spec.address if spec.address else ''}: {n_build} build actors, {n_dev} device actor(s)"
    return Cluster(name, RayPool(n_build, builder), RayPool(n_dev, device), home, False, key)
