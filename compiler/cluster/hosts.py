"""The workers of a cluster: a pool of build workers, a pool of timing workers (one per device)
and the home worker (on the device that will run the result), kept open across searches."""
from __future__ import annotations

import atexit
import os
from dataclasses import dataclass

from compiler.cluster import Local, Ray
from compiler.cluster.devices import device_count, pin_env
from compiler.cluster.fake import ROLE_ENV
from compiler.workers import WorkerPool


@dataclass
class Cluster:
    name: str
    builders: object        # a WorkerPool or a RayPool: build + verify, any of them
    devices: object         # one pinned timing worker per device
    home: object            # a pool of one whose worker runs on the device that runs the result
    home_is_device0: bool   # the home worker is device 0 of `devices` itself (local clusters)
    key: tuple = ()

    def label(self, pool, i: int) -> str:
        return f"{'build worker' if pool is self.builders else 'device'} {i}"

    def describe(self, pool, i: int) -> str:
        """The label and the process (host and pid) behind it now."""
        return f"{self.label(pool, i)} ({pool.where(i)})"

    def close(self) -> None:
        for pool in (self.builders, self.devices, self.home):
            try:
                pool.close()
            except Exception:  # a Ray cluster already shut down: its actors are gone anyway
                pass


_OPEN: dict[tuple, Cluster] = {}


def open_cluster(spec, backend) -> Cluster:
    """The cluster for `spec` and `backend`'s devices, started on first use and then reused."""
    if isinstance(spec, Local):
        n = device_count(backend)
        pins = tuple(tuple(sorted(pin_env(backend, i).items())) for i in range(n))
        key = ("local", spec.build_workers, pins)
        if key not in _OPEN:
            _OPEN[key] = _open_local(spec, backend, n, key)
        return _OPEN[key]
    if isinstance(spec, Ray):
        from compiler.cluster import ray_pool
        key = ray_pool.cluster_key(spec, backend)
        # one set of actors at a time: an earlier session's are gone, another backend's hold resources
        for k in [k for k in _OPEN if k[0] == "ray" and k != key]:
            _OPEN.pop(k).close()
        if key not in _OPEN:
            _OPEN[key] = ray_pool.open_ray(spec, backend, key)
        return _OPEN[key]
    raise TypeError(f"not a cluster spec: {spec!r}")


def _open_local(spec: Local, backend, n: int, key) -> Cluster:
    builders = spec.build_workers or os.cpu_count() or 1
    # build workers spread over the devices (a GPU build is verified on a GPU)
    build_pool = WorkerPool(builders, env=lambda i: {**pin_env(backend, i % n), ROLE_ENV: "build"})
    device_pool = WorkerPool(n, env=lambda i: {**pin_env(backend, i), ROLE_ENV: "time"})
    return Cluster(f"local: {build_pool.size} build workers, {n} device(s)", build_pool, device_pool, device_pool,
                   True, key)


def _close_all() -> None:
    for c in _OPEN.values():
        c.close()
    _OPEN.clear()


atexit.register(_close_all)
