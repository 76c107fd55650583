"""Saving and loading a function compiled region by region (compiler/regions.py).

The file is a saved function's (compiler/saved.py): magic, a header with the function's key
(plus the number of regions), the payload's size and SHA-256. The payload is JSON: for each
region, which distinct entry it runs and where each of its inputs comes from; where the
program's outputs are; each distinct region's cache entry (compiler/cache.py, data only,
base64). Loading checks the checksum, then every entry as the cache does, then that every
region reads only earlier regions' outputs and the program's inputs with the shapes and dtypes
its program takes, and that the composed program takes and returns what the key says; a file
that fails any check raises `SavedFileError` and nothing in it is built or run.
"""
from __future__ import annotations

import base64
import binascii
import json
import math

from backends import checked
from compiler import cache as cache_mod
from ir import node as N
from ir import regions as R
from ir.dtypes import DType


def save(compiled, path: str, key: dict) -> str:
    """Write `compiled` (compiled region by region) to `path` under `key`, atomically; returns the path."""
    from compiler.saved import SavedFileError
    exe = compiled.executable
    if exe.entries is None:
        raise SavedFileError("this function's regions carry no entries to save", "save")
    index: dict[int, int] = {}
    entries, regions = [], []
    for r, e in zip(exe.split.regions, exe.entries):
        if id(e) not in index:
            index[id(e)] = len(entries)
            entries.append(base64.b64encode(cache_mod.dumps_entry(e)).decode())
        regions.append({"entry": index[id(e)], "sources": [[s.region, s.index, s.start, s.stop] for s in r.sources]})
    body = {"regions": regions, "outputs": [[o.region, o.index] for o in exe.split.outputs], "entries": entries}
    key = dict(key, regions=len(regions))
    checked.write_atomic(path, checked.pack(cache_mod.MAGIC, {"format": cache_mod.FORMAT, "key": key},
                                            json.dumps(body, sort_keys=True).encode()))
    return path


def read(path: str, key: dict):
    """(Split, distinct entries, composed program) of the file at `path`, checked (module
    docstring); nothing is built. A region's `key` is the index of its entry."""
    from compiler.saved import SavedFileError

    def bad(why: str):
        return SavedFileError(f"{path} is inconsistent: {why}", "load")
    try:
        with open(path, "rb") as f:
            header, payload = checked.unpack(f.read(), cache_mod.MAGIC)
        if header.get("format") != cache_mod.FORMAT or header.get("key") != key:
            raise cache_mod.InvalidEntry("unexpected format or key")
        body = json.loads(payload)
        entries = [cache_mod.loads_entry(base64.b64decode(x, validate=True)) for x in body["entries"]]
    except (cache_mod.InvalidEntry, OSError, ValueError, KeyError, TypeError, binascii.Error) as e:
        raise SavedFileError(f"{path} is damaged: {type(e).__name__}: {e}", "load") from None
    regions: list[R.Region] = []
    try:
        inputs = tuple(N.input_(i, f"x{i}", tuple(shape), DType(dtype)) for i, (shape, dtype) in enumerate(key["inputs"]))
        for i, r in enumerate(body["regions"]):
            e = _index(r["entry"], len(entries), "entry")
            g = entries[e].graph
            if len(r["sources"]) != len(g.inputs):
                raise bad(f"region {i} has {len(r['sources'])} sources for {len(g.inputs)} inputs")
            sources = tuple(_source(s, i, x, regions, inputs, bad) for s, x in zip(r["sources"], g.inputs))
            regions.append(R.Region(g, sources, str(e)))
        outputs = tuple(R.Source(_index(o[0], len(regions), "region"),
                                 _index(o[1], len(regions[o[0]].graph.outputs), "output")) for o in body["outputs"])
    except (KeyError, TypeError, IndexError, ValueError) as e:
        if isinstance(e, SavedFileError):
            raise
        raise bad(f"{type(e).__name__}: {e}") from None
    split = R.Split(tuple(regions), outputs)
    return split, entries, R.compose(split, [r.graph for r in regions], inputs)


def build(split: R.Split, entries: list, target: str):
    """The RegionsExecutable of what `read` returned: each distinct entry built once."""
    from backends import get_backend
    from compiler.regions import RegionsExecutable
    backend = get_backend(target)
    built = [cache_mod.build(backend, e) for e in entries]
    return RegionsExecutable(split, [built[int(r.key)] for r in split.regions],
                             [entries[int(r.key)] for r in split.regions])


def _index(v, n: int, what: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < n:
        raise ValueError(f"{what} {v!r} out of range [0, {n})")
    return v


def _source(s, i: int, x, regions, inputs, bad) -> R.Source:
    """One region input's source, checked against what region i's program takes there."""
    if not (isinstance(s, list) and len(s) == 4 and all(isinstance(v, int) and not isinstance(v, bool) for v in s)):
        raise bad(f"region {i}: ill-formed source {s!r}")
    region, index, start, stop = s
    if region == -1:
        src = inputs[_index(index, len(inputs), "input")]
        if stop:
            if not 0 <= start < stop <= math.prod(src.shape):
                raise bad(f"region {i}: slice [{start}, {stop}) outside input {index}")
            shape = (stop - start,)
        else:
            shape = src.shape
    elif 0 <= region < i:
        outs = regions[region].graph.outputs
        src = outs[_index(index, len(outs), "output")]
        shape = src.shape
    else:
        raise bad(f"region {i} reads region {region}, not an earlier one")
    if tuple(x.shape) != tuple(shape) or x.dtype != src.dtype:
        raise bad(f"region {i}: input of {x.dtype.value}{list(x.shape)} fed {src.dtype.value}{list(shape)}")
    return R.Source(region, index, start, stop)
