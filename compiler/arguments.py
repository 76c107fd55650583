"""Checks of compile()'s arguments, before anything runs: each bad value raises an OptionError
(or TargetError) naming the argument, what it must be and what was given."""
from __future__ import annotations

import dataclasses
import math
import numbers
import os

from compiler.errors import OptionError

# SearchOptions fields a caller may set, with the smallest value each accepts (None: a bool)
_MINIMUM = {"max_candidates": 1, "max_schedules": 1, "max_trials": 1, "timeout": 0.0, "workers": 0,
            "isolate": None, "odd_shapes": None, "reference_limit": 0.0, "prune_factor": 1.0,
            "min_repeat": 1, "max_repeat": 1, "regions": None, "cost_model_dir": "path"}
_POSITIVE = {"timeout", "reference_limit"}   # > 0, not >= 0
_MAY_BE_INFINITE = {"prune_factor", "reference_limit"}   # inf: never prune, always the interpreter


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_real(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def check_budget(budget) -> None:
    if budget is None:
        return
    if not _is_real(budget):
        raise OptionError(f"budget must be a number of seconds, got {budget!r} ({type(budget).__name__})", "compile")
    if not math.isfinite(budget) or budget < 0:
        raise OptionError(f"budget must be a finite number of seconds >= 0, got {budget!r}", "compile")


def check_seed(seed) -> None:
    if not _is_int(seed):
        raise OptionError(f"seed must be an int, got {seed!r} ({type(seed).__name__})", "compile")
    if not 0 <= seed < 2**63:
        raise OptionError(f"seed must be in [0, 2**63), got {seed}", "compile")


def check_flag(name: str, value) -> None:
    if not isinstance(value, bool):
        raise OptionError(f"{name} must be True or False, got {value!r}", "compile")


def check_target(target) -> None:
    if not isinstance(target, str):
        raise OptionError(f"target must be a string ('cpu', 'cuda' or 'reference'), got {target!r}", "compile")


def check_cache(cache) -> None:
    if cache is None or isinstance(cache, bool) or isinstance(cache, (str, os.PathLike)):
        if isinstance(cache, str) and not cache:
            raise OptionError("cache must be None, True, False or a directory, got ''", "compile")
        return
    raise OptionError(f"cache must be None, True, False or a directory (str or Path), got {cache!r}", "compile")


def check_candidates(candidates) -> list | None:
    """The candidates as a list (an iterator is read once, here)."""
    from ir.graph import Graph
    if candidates is None:
        return None
    if isinstance(candidates, (str, bytes)) or not hasattr(candidates, "__iter__"):
        raise OptionError(f"candidates must be a list of programs, got {type(candidates).__name__}", "compile")
    candidates = list(candidates)
    if not candidates:
        raise OptionError("candidates is empty: give at least one program, or None for the e-graph's", "compile")
    for i, c in enumerate(candidates):
        if not isinstance(getattr(c, "graph", None), Graph):
            raise OptionError(f"candidate {i} ({type(c).__name__}) has no .graph Graph", "compile")
    return candidates


def check_function(fn, specs) -> None:
    """`fn` is callable and takes as many positional inputs as there are specs."""
    import inspect
    if not callable(fn):
        raise OptionError(f"the first argument must be the function to compile, got {type(fn).__name__}", "compile")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):   # a builtin without a signature: the trace will tell
        return
    try:
        sig.bind(*range(len(specs)))
    except TypeError as e:
        name = getattr(fn, "__name__", "the function")
        raise OptionError(f"{name} cannot take {len(specs)} inputs (one per spec): {e}", "compile") from None


def check_backend(backend) -> None:
    if backend is not None and not callable(getattr(backend, "build", None)):
        raise OptionError(f"backend must be a backend object with build(), got {type(backend).__name__}", "compile")


def apply_options(opts, options: dict) -> None:
    """Set search options by keyword, each checked against its field's type and range."""
    names = {f.name for f in dataclasses.fields(opts)}
    for k, v in options.items():
        if k not in names or k not in _MINIMUM:
            settable = ", ".join(sorted(_MINIMUM))
            raise OptionError(f"unknown option {k!r}; compile() takes target, budget, quiet, cache, seed, "
                              f"candidates, backend, cluster and the search options {settable}", "compile")
        low = _MINIMUM[k]
        if low == "path":
            if not isinstance(v, (str, os.PathLike)):
                raise OptionError(f"{k} must be a directory (str or Path; '' keeps nothing), got {type(v).__name__}",
                                  "compile")
            v = os.fspath(v)
        elif low is None:
            check_flag(k, v)
        elif type(low) is int:
            if not _is_int(v) or v < low:
                raise OptionError(f"{k} must be an int >= {low}, got {v!r}", "compile")
        else:
            finite = _is_real(v) and (math.isfinite(v) or (k in _MAY_BE_INFINITE and v == math.inf))
            if not finite or v < low or (k in _POSITIVE and v <= 0):
                bound = "> 0" if k in _POSITIVE else f">= {low:g}"
                kind = "a number (inf allowed)" if k in _MAY_BE_INFINITE else "a finite number"
                raise OptionError(f"{k} must be {kind} {bound}, got {v!r}", "compile")
        setattr(opts, k, v)
    if opts.max_repeat < opts.min_repeat:
        raise OptionError(f"max_repeat ({opts.max_repeat}) is below min_repeat ({opts.min_repeat})", "compile")
