"""The table of ATen overloads Saturn translates: name ('aten.add.Tensor') -> function."""
from __future__ import annotations

from typing import Callable

from compiler.errors import UnsupportedError

OPS: dict[str, Callable] = {}


class Unsupported(UnsupportedError):
    """An operator's arguments that the translation does not cover."""


def op(*names: str):
    """Register `fn` for the ATen overloads `names` (written 'add.Tensor', as in 'aten.add.Tensor')."""
    def register(fn):
        for name in names:
            OPS["aten." + name] = fn
        return fn
    return register
