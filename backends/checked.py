"""Cache files that are checked before use: magic, a JSON header line, then the payload.

The header names what the file was made for (its key) and the payload's size and SHA-256; a
file that is truncated, corrupted or made for another key is rejected, and the caller rebuilds
it, so nothing damaged ever reaches a loader (a damaged object file handed to the JIT can crash
the process). Files are written atomically (temp file + rename). A checksum catches accidents,
not attacks: a cache directory is trusted like any other user-owned cache.

Used for the CPU backend's object files, CUDA cubins and the compile cache of search winners.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import threading


class InvalidEntry(Exception):
    """A cache file that must not be used; the message says why."""


def pack(magic: bytes, header: dict, payload: bytes) -> bytes:
    """`payload` behind `magic` and `header` (JSON; size and sha256 are added)."""
    header = dict(header, size=len(payload), sha256=hashlib.sha256(payload).hexdigest())
    return magic + json.dumps(header, sort_keys=True).encode() + b"\n" + payload


def unpack(data: bytes, magic: bytes) -> tuple[dict, bytes]:
    """(header, payload) of an intact file; InvalidEntry if it is not one. The caller compares
    the header's key with the one it looked up."""
    if not data.startswith(magic):
        raise InvalidEntry("not a Saturn cache entry (bad magic)")
    end = data.find(b"\n", len(magic))
    if end < 0:
        raise InvalidEntry("truncated header")
    try:
        header = json.loads(data[len(magic):end])
    except ValueError:
        raise InvalidEntry("unreadable header") from None
    if not isinstance(header, dict):
        raise InvalidEntry("unreadable header")
    payload = data[end + 1:]
    if len(payload) != header.get("size"):
        raise InvalidEntry(f"truncated: {len(payload)} of {header.get('size')} bytes")
    if hashlib.sha256(payload).hexdigest() != header.get("sha256"):
        raise InvalidEntry("checksum mismatch (corrupted)")
    return header, payload


def read(path, magic: bytes, key) -> bytes:
    """The payload of the file at `path` if it is intact and was made for `key` (any JSON
    value); InvalidEntry otherwise, OSError (FileNotFoundError) when it cannot be read."""
    with open(path, "rb") as f:
        data = f.read()
    header, payload = unpack(data, magic)
    if header.get("key") != key:
        raise InvalidEntry("made for a different key")
    return payload


def write_atomic(path, data: bytes) -> None:
    """Write `data` to `path` so that no reader ever sees part of it."""
    directory = os.path.dirname(os.fspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write(path, magic: bytes, key, payload: bytes) -> None:
    write_atomic(path, pack(magic, {"key": key}, payload))


_WARNED: set[str] = set()
_WARNED_LOCK = threading.Lock()


def warn_write_failure(what: str, directory, error: BaseException) -> None:
    """Say on stderr, once per process for each kind of cache, that writing it failed (the
    compile still works; it is just not cached)."""
    with _WARNED_LOCK:
        if what in _WARNED:
            return
        _WARNED.add(what)
    print(f"saturn: warning: could not write the {what} cache in {directory} ({type(error).__name__}: {error}); "
          "compiles still work but are not cached (warned once)", file=sys.stderr)
