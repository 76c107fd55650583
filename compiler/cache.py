"""On-disk cache of search winners, so the second compile of a program is instant.

An entry is keyed by the program's structural hash, the input shapes and dtypes, the target,
the device and the Saturn version. It stores the winning candidate program (a Graph) and its
schedule, plus the search report for explain(). Files are written atomically (temp file +
rename) in the checked format of backends/checked.py. On load an entry is checked before
anything in it is used: magic, the payload size and SHA-256 (a truncated or corrupted entry is
ignored), format version (older formats are ignored and rebuilt), the full key (a foreign entry
is ignored). The payload is data only, JSON written by `compiler/codec.py`: decoding builds
nothing but Saturn's IR nodes and the dataclasses in codec's explicit type table, so a file
cannot run code when it is loaded. A checksum detects accidents, not attacks: the cache
directory is trusted like any other user-owned cache.

Location: $SATURN_CACHE_DIR, else $XDG_CACHE_HOME/saturn, else ~/.cache/saturn.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from dataclasses import dataclass

from backends import checked
from backends.base import cache_root
from compiler import codec
from ir.graph import Graph

MAGIC = b"SATURN-CACHE\n"
InvalidEntry = checked.InvalidEntry
FORMAT = 2        # 1: pickled payloads (ignored now, rebuilt on the next compile)


def cache_dir() -> str:
    return str(cache_root())


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_name(backend, target: str) -> str:
    """What the winner was measured on: the backend's own name for its device, else the CPU."""
    for attr in ("device_name", "device"):
        v = getattr(backend, attr, None)
        v = v() if callable(v) else v
        if isinstance(v, str) and v:
            return v
    return f"{target} on {platform.machine()} {cpu_name()}"


def make_key(graph, specs, target: str, device: str, version: str) -> dict:
    return {"format": FORMAT, "graph": graph.structural_hash(),
            "inputs": [[list(s.shape), s.dtype.value] for s in specs],
            "outputs": [[list(o.shape), o.dtype.value] for o in graph.outputs],
            "target": target, "device": device, "version": version}


def key_digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:40]


@dataclass
class Entry:
    """A cached winner."""
    graph: object           # ir.graph.Graph: the chosen candidate program
    schedule: object
    description: str
    median: float           # seconds per run when it won
    report: str             # the search report text, shown again by explain()
    created: float = 0.0
    program: object = None  # the backend's lowered program (e.g. ir.kernel.KernelProgram), when it
                            # exposes one: rebuilding from it skips lowering, the slow part of a hit


# --- the payload: data only ------------------------------------------------------------------

_ENTRY_FIELDS = ("graph", "schedule", "description", "median", "report", "created", "program")


def dumps_entry(entry: Entry) -> bytes:
    """The entry as JSON (compiler/codec.py); CodecError if it holds something that is not data."""
    return codec.dumps({name: getattr(entry, name) for name in _ENTRY_FIELDS})


def loads_entry(payload: bytes) -> Entry:
    """The Entry `dumps_entry` wrote; InvalidEntry if the payload is anything else."""
    try:
        d = codec.loads(payload)
    except codec.CodecError as e:
        raise InvalidEntry(f"payload rejected: {e}") from None
    if not isinstance(d, dict) or set(d) != set(_ENTRY_FIELDS):
        raise InvalidEntry("payload is not a cache entry")
    if not isinstance(d["graph"], Graph) or not all(isinstance(d[k], str) for k in ("description", "report")) \
            or not all(isinstance(d[k], (int, float)) and not isinstance(d[k], bool) for k in ("median", "created")):
        raise InvalidEntry("payload is not a cache entry (ill-typed fields)")
    return Entry(**d)


# --- store and load ------------------------------------------------------------------------

def entry_path(key: dict, directory: str | None = None) -> str:
    return os.path.join(directory or cache_dir(), key_digest(key) + ".entry")


def store(key: dict, entry: Entry, directory: str | None = None) -> str:
    """Write `entry` atomically; return its path."""
    path = entry_path(key, directory)
    entry.created = entry.created or time.time()
    payload = dumps_entry(entry)
    checked.write_atomic(path, checked.pack(MAGIC, {"format": FORMAT, "key": key}, payload))
    return path



def build(backend, entry: Entry):
    """The executable of a cached (or saved) winner: from its lowered program when the backend
    can take one (no lowering again), else from its graph."""
    if entry.program is not None and hasattr(backend, "build_program"):
        return backend.build_program(entry.program, entry.schedule)
    return backend.build(entry.graph, entry.schedule)


def read_entry(path: str, key: dict) -> Entry:
    """The entry at `path` if it is intact and made for exactly `key`; else InvalidEntry."""
    with open(path, "rb") as f:
        header, payload = checked.unpack(f.read(), MAGIC)
    if header.get("format") != FORMAT:
        raise InvalidEntry(f"format {header.get('format')}, expected {FORMAT}")
    if header.get("key") != key:
        raise InvalidEntry("made for a different program, device or version")
    return loads_entry(payload)


def load(key: dict, directory: str | None = None) -> tuple[Entry | None, str, str]:
    """(entry or None, path, why it was not used). A missing or invalid entry is ignored."""
    path = entry_path(key, directory)
    if not os.path.exists(path):
        return None, path, "miss"
    try:
        return read_entry(path, key), path, ""
    except (InvalidEntry, OSError) as e:
        return None, path, f"ignored invalid entry: {e}"
