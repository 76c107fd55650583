"""Backends: kernel IR -> code. `get_backend(name)` returns one by target name."""
from backends.base import Backend, BackendUnavailable, Executable, get_backend, targets

__all__ = ["Backend", "BackendUnavailable", "Executable", "get_backend", "targets"]
