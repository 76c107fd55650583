"""Save a compiled function to a file and load it back without searching again.

A saved file is a winners'-cache entry (`compiler.cache`) written to a path of the caller's
choice: the chosen program, its schedule and the backend's lowered program, under a header
with the function's key (program hash, input and output shapes and dtypes, target, device,
Saturn version), the payload's size and its SHA-256. The payload is data only (JSON written by
`compiler/codec.py`, which builds nothing but Saturn's IR and the schedule classes in its type
table), so loading a file cannot run code from it. Loading applies the cache's checks (magic,
format, size, checksum, a well-formed payload); a file that fails any of them, or whose program
does not take and return what its key says, raises `SavedFileError` and nothing in it is built
or run. Like the cache, a checksum detects accidents, not attacks.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile

from compiler import cache as cache_mod
from compiler.errors import SaturnError
from compiler.trace import Spec


class SavedFileError(SaturnError, ValueError):
    pass


def save(compiled, path) -> str:
    """Write `compiled` (a `compiler.compile` result) to `path`; returns the path."""
    exe = compiled.executable
    result = compiled.result
    path = os.fspath(path)
    if hasattr(exe, "split"):       # compiled region by region: compiler/saved_regions.py
        from compiler import saved_regions
        return saved_regions.save(compiled, path, _key_of(compiled))
    schedule = getattr(exe, "schedule", None)
    if schedule is None and result is not None and result.winner is not None:
        schedule = result.winner.schedule
    program = getattr(exe, "program", None)
    if compiled.target == "reference" or (schedule is None and program is None):
        raise SavedFileError(f"a function compiled for {compiled.target!r} has no built program to save", "save")
    winner = result.winner if result is not None else None
    entry = cache_mod.Entry(compiled.chosen, schedule,
                            winner.description if winner is not None else "the cached winner",
                            winner.median if winner is not None else 0.0,
                            str(compiled.report) if compiled.report is not None else "", program=program)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(path))) as tmp:
        shutil.move(cache_mod.store(_key_of(compiled), entry, tmp), path)   # written atomically, then moved into place
    return path


def _key_of(compiled) -> dict:
    """The cache key of `compiled`'s program on this machine: what a saved file's header holds."""
    from compiler.api import _saturn_version
    from backends import get_backend
    device = cache_mod.device_name(get_backend(compiled.target), compiled.target)
    return cache_mod.make_key(compiled.graph, compiled.specs, compiled.target, device, _saturn_version())


def _key(path: str) -> dict:
    """The key in the file's header (checked against the payload by cache.read_entry)."""
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    if not head.startswith(cache_mod.MAGIC):
        raise SavedFileError(f"{path} is not a saved Saturn function (bad magic)", "load")
    end = head.find(b"\n", len(cache_mod.MAGIC))
    try:
        key = json.loads(head[len(cache_mod.MAGIC):end])["key"] if end > 0 else None
    except (ValueError, KeyError, TypeError):
        key = None
    if not isinstance(key, dict) or not {"inputs", "outputs", "target", "version"} <= set(key):
        raise SavedFileError(f"{path}: unreadable header", "load")
    return key


def _interface_problem(graph, key: dict) -> str | None:
    ins = [[list(n.shape), n.dtype.value] for n in graph.inputs]
    outs = [[list(n.shape), n.dtype.value] for n in graph.outputs]
    if ins != key["inputs"]:
        return f"its program takes {ins}, its header says {key['inputs']}"
    if outs != key["outputs"]:
        return f"its program returns {outs}, its header says {key['outputs']}"
    return None


def load(path):
    """The function saved at `path`, built for this machine; `SavedFileError` if the file is damaged."""
    from compiler.api import CompiledFunction
    from backends import get_backend
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise SavedFileError(f"{path}: no such file", "load")
    key = _key(path)
    if key.get("regions"):
        return _load_regions(path, key)
    try:
        entry = cache_mod.read_entry(path, key)
    except (cache_mod.InvalidEntry, OSError) as e:
        raise SavedFileError(f"{path} is damaged: {e}", "load") from None
    _check_fits(path, entry.graph, key)
    specs = [Spec(tuple(shape), dtype) for shape, dtype in key["inputs"]]
    exe = cache_mod.build(get_backend(key["target"]), entry)
    report = f"loaded from {path} (saved on {key.get('device', '?')})\nchosen: {entry.description}\n{entry.report}"
    return CompiledFunction(None, specs, entry.graph, key["target"], exe, report, chosen=entry.graph, cache="loaded")


def _check_fits(path: str, graph, key: dict) -> None:
    """The program read from `path` takes and returns what its header says, and this Saturn
    saved it; else SavedFileError (before anything is built)."""
    from compiler.api import _saturn_version
    problem = _interface_problem(graph, key)
    if problem:
        raise SavedFileError(f"{path} is inconsistent: {problem}", "load")
    if key["version"] != _saturn_version():
        raise SavedFileError(f"{path} was saved by Saturn {key['version']}; this is {_saturn_version()}", "load")


def _load_regions(path: str, key: dict):
    from compiler import saved_regions
    from compiler.api import CompiledFunction
    split, entries, whole = saved_regions.read(path, key)
    _check_fits(path, whole, key)
    exe = saved_regions.build(split, entries, key["target"])
    specs = [Spec(tuple(shape), dtype) for shape, dtype in key["inputs"]]
    report = (f"loaded from {path} (saved on {key.get('device', '?')}): {len(split.regions)} regions, "
              f"{len(entries)} distinct\n" + "\n".join(f"region entry {i}: {e.description}" for i, e in enumerate(entries)))
    return CompiledFunction(None, specs, whole, key["target"], exe, report, chosen=whole, cache="loaded")
