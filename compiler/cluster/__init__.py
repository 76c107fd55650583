"""Spreading one search over many processes, devices and hosts.

`compile(..., cluster=...)` takes None (the default: this process's small worker pool, as
always), "local" (build workers over all local cores and one timing worker per device),
"ray" (Ray actors on the cluster `ray.init()` finds, or on the one this process already
joined) or "ray://host:port" (a Ray cluster through Ray Client), or a `Local`/`Ray` object to
set the number of build workers. Ray is the optional extra `saturn-tensor[distributed]`.
See docs/distributed.md.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from compiler.errors import OptionError


@dataclass(frozen=True)
class Local:
    """Build workers on this host (0: one per core) and one timing worker per device."""
    build_workers: int = 0


@dataclass(frozen=True)
class Ray:
    """Ray actors: build workers (0: one per CPU of the cluster) and one timing actor per GPU
    (per node for the CPU target). `address`: None for `ray.init()`'s default, or "ray://host:port"."""
    address: str | None = None
    build_workers: int = 0


def check_cluster(cluster) -> Local | Ray | None:
    """`cluster` as a Local or Ray spec (None stays None); a bad value is an OptionError."""
    if cluster is None or isinstance(cluster, (Local, Ray)):
        spec = cluster
    elif isinstance(cluster, str) and cluster == "local":
        spec = Local()
    elif isinstance(cluster, str) and cluster == "ray":
        spec = Ray()
    elif isinstance(cluster, str) and cluster.startswith("ray://") and _host_port(cluster[len("ray://"):]):
        spec = Ray(address=cluster)
    else:
        raise OptionError(f"cluster must be None, 'local', 'ray' or 'ray://host:port' (or a compiler.cluster.Local "
                          f"or Ray), got {cluster!r}", "compile")
    if spec is not None:
        if not isinstance(spec.build_workers, int) or isinstance(spec.build_workers, bool) or spec.build_workers < 0:
            raise OptionError(f"cluster build_workers must be an int >= 0, got {spec.build_workers!r}", "compile")
    if isinstance(spec, Ray) and importlib.util.find_spec("ray") is None:
        raise OptionError(f"cluster={cluster!r} needs Ray, which is not installed: "
                          "pip install 'saturn-tensor[distributed]'", "compile")
    return spec


def _host_port(text: str) -> bool:
    host, sep, port = text.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) < 65536)
