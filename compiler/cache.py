"""On-disk cache of search winners, so the second compile of a program is instant.

An entry is keyed by the program's structural hash, the input shapes and dtypes, the target,
the device and the Saturn version. It stores the winning candidate program (a Graph) and its
schedule, plus the search report for explain(). Files are written atomically (temp file +
rename) in the checked format of backends/checked.py. On load an entry is checked before
anything in it is used: magic, the payload size and SHA-256 (a truncated or corrupted entry is
ignored), format version, the full key (a foreign entry is ignored), and the payload is
unpickled by a restricted unpickler that can only build Saturn's IR types and backend schedule
classes. A checksum detects accidents, not attacks: the cache directory is trusted like any
other user-owned cache.

Location: $SATURN_CACHE_DIR, else $XDG_CACHE_HOME/saturn, else ~/.cache/saturn.
"""
from __future__ import annotations

import builtins
import hashlib
import io
import json
import os
import pickle
import platform
import time
from dataclasses import dataclass

from backends import checked
from backends.base import cache_root

MAGIC = b"SATURN-CACHE\n"
FORMAT = 1


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


# --- restricted unpickling -----------------------------------------------------------------

_SAFE_BUILTINS = {"tuple", "list", "dict", "set", "frozenset", "int", "float", "bool", "str", "bytes",
                  "complex", "slice", "range", "NoneType"}
_SAFE_NUMPY = {("numpy", "dtype"), ("numpy", "ndarray"), ("numpy.core.multiarray", "_reconstruct"),
               ("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "scalar"),
               ("numpy._core.multiarray", "scalar")}


class _RestrictedUnpickler(pickle.Unpickler):
    """Builds only IR types, backend classes, plain containers and numpy scalars/arrays."""

    def find_class(self, module: str, name: str):
        if module == "builtins" and name in _SAFE_BUILTINS:
            return getattr(builtins, name)
        if (module, name) in _SAFE_NUMPY:
            return super().find_class(module, name)
        if module == "compiler.cache" and name == "Entry":
            return Entry
        if (module.startswith("ir.") or module.startswith("backends.")) and "." not in name:
            obj = super().find_class(module, name)
            # a class defined there, not one the module imported (runtime's ThreadPoolExecutor)
            if isinstance(obj, type) and obj.__module__ == module:
                return obj
        raise pickle.UnpicklingError(f"cache entry refers to {module}.{name}, which a cache entry may not contain")


def _loads(data: bytes):
    return _drop_cached_hashes(_RestrictedUnpickler(io.BytesIO(data)).load())


def _drop_cached_hashes(root):
    """Forget hashes that objects cached in their __dict__ (ir.kernel's Struct does): they were
    computed under the writing process's string-hash seed, so after loading they would not
    match equal objects built here, and sets and dicts of them would misbehave."""
    seen, stack, containers = set(), [root], []
    while stack:
        obj = stack.pop()
        if id(obj) in seen or obj is None or isinstance(obj, (str, bytes, int, float, bool)):
            continue
        seen.add(id(obj))
        d = getattr(obj, "__dict__", None)
        if isinstance(d, dict):
            d.pop("_hash", None)
            stack.extend(d.values())
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
            containers.append(obj)
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
            if isinstance(obj, set):
                containers.append(obj)
    for c in containers:  # re-insert under the fresh hashes
        items = list(c.items()) if isinstance(c, dict) else list(c)
        c.clear()
        c.update(items)
    return root


# --- store and load ------------------------------------------------------------------------

def entry_path(key: dict, directory: str | None = None) -> str:
    return os.path.join(directory or cache_dir(), key_digest(key) + ".entry")


def store(key: dict, entry: Entry, directory: str | None = None) -> str:
    """Write `entry` atomically; return its path."""
    path = entry_path(key, directory)
    entry.created = entry.created or time.time()
    payload = pickle.dumps(entry, protocol=4)
    checked.write_atomic(path, checked.pack(MAGIC, {"format": FORMAT, "key": key}, payload))
    return path


InvalidEntry = checked.InvalidEntry


def read_entry(path: str, key: dict) -> Entry:
    """The entry at `path` if it is intact and made for exactly `key`; else InvalidEntry."""
    with open(path, "rb") as f:
        header, payload = checked.unpack(f.read(), MAGIC)
    if header.get("format") != FORMAT:
        raise InvalidEntry(f"format {header.get('format')}, expected {FORMAT}")
    if header.get("key") != key:
        raise InvalidEntry("made for a different program, device or version")
    try:
        entry = _loads(payload)
    except Exception as e:
        raise InvalidEntry(f"payload rejected: {type(e).__name__}: {e}") from None
    if not isinstance(entry, Entry):
        raise InvalidEntry("payload is not a cache entry")
    return entry


def load(key: dict, directory: str | None = None) -> tuple[Entry | None, str, str]:
    """(entry or None, path, why it was not used). A missing or invalid entry is ignored."""
    path = entry_path(key, directory)
    if not os.path.exists(path):
        return None, path, "miss"
    try:
        return read_entry(path, key), path, ""
    except (InvalidEntry, OSError) as e:
        return None, path, f"ignored invalid entry: {e}"
