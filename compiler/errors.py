"""User-facing errors that name the op, the shapes and the user's own line of code."""
from __future__ import annotations

import os
import sys

from backends.base import BackendUnavailable

_PKG_DIRS = tuple(os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep + d + os.sep
                  for d in ("compiler", "ir", "rewrites", "backends"))


_PKG_NAMES = ("compiler", "ir", "rewrites", "backends")


def _is_internal(frame) -> bool:
    path = os.path.abspath(frame.f_code.co_filename)
    if path.startswith(_PKG_DIRS) or "importlib" in path:
        return True
    # code generated at run time for our classes (dataclass __init__ reads "<string>")
    module = frame.f_globals.get("__name__", "")
    return module.split(".")[0] in _PKG_NAMES and frame.f_code.co_filename.startswith("<")


def user_location() -> str:
    """'file:line' of the innermost stack frame outside Saturn's own packages."""
    f = sys._getframe(1)
    while f is not None:
        if not _is_internal(f):
            return f"{os.path.abspath(f.f_code.co_filename)}:{f.f_lineno}"
        f = f.f_back
    return "<unknown>"


class SaturnError(Exception):
    """Base of every error Saturn raises on bad user input."""

    def __init__(self, message: str, op: str | None = None):
        self.op = op
        where = user_location()
        prefix = f"{op}: " if op else ""
        super().__init__(f"{prefix}{message}\n  at {where}")


class ShapeError(SaturnError, ValueError):
    pass


class DTypeError(SaturnError, TypeError):
    pass


class UnsupportedError(SaturnError, NotImplementedError):
    pass


class OptionError(SaturnError, ValueError, TypeError):
    """A bad argument to compile(), a compiled function's call or a command: an unknown option,
    a value of the wrong type or out of range (a ValueError and a TypeError, as Python raises
    either for such mistakes)."""


class TargetError(SaturnError, BackendUnavailable):
    """An unknown target, or one that cannot run here (no GPU, no pycuda, no nvcc)."""
