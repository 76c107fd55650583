"""Every row of the table in docs/errors.md: the bad input raises exactly the listed SaturnError
subclass, with the listed fragment in its message; on the command line it is one line on
stderr and exit code 2."""
from __future__ import annotations

import builtins
import os
import re
import shlex

import numpy as np
import pytest

import compiler
import compiler.errors as errors
from compiler import cat, einsum, spec, trace, where

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "errors.md")
ROW = re.compile(r"^\| (\w+) \| `([^`]+)`( \([^)]*\))? \| (\w+) \| (.+) \|$")


def _rows():
    rows = []
    with open(DOC) as f:
        for line in f:
            m = ROW.match(line.rstrip("\n"))
            if m and m.group(1) != "class":
                where_, code, note, cls, fragment = m.groups()
                rows.append((where_, code, (note or "").strip(" ()"), cls, fragment))
    return rows


ROWS = _rows()


def f(x):
    return x.softmax(-1)


def f2(x, y):
    return x + y


@pytest.fixture(scope="module")
def names():
    cf = compiler.compile(f, spec((4, 8)), target="reference")
    return {"f": f, "f2": f2, "cf": cf, "compile": compiler.compile, "spec": spec, "trace": trace, "np": np,
            "cat": cat, "einsum": einsum, "where": where}


def _cuda_available() -> bool:
    from backends import BackendUnavailable, get_backend
    try:
        get_backend("cuda")
    except BackendUnavailable:
        return False
    return True


def test_table_is_big_and_has_no_duplicates():
    assert len(ROWS) >= 40
    codes = [r[1] for r in ROWS]
    assert len(set(codes)) == len(codes), [c for c in codes if codes.count(c) > 1]
    assert {r[0] for r in ROWS} >= {"compile", "spec", "call", "frontend", "cli"}


@pytest.mark.parametrize("where_,code,note,cls,fragment", ROWS, ids=[r[1][:60] for r in ROWS])
def test_bad_input(names, capsys, tmp_path, monkeypatch, where_, code, note, cls, fragment):
    if note == "no GPU here" and _cuda_available():
        pytest.skip("a GPU is available here")
    monkeypatch.setenv("SATURN_CACHE_DIR", str(tmp_path))
    error = getattr(errors, cls)
    assert issubclass(error, errors.SaturnError)
    if where_ == "cli":
        from compiler.cli import main
        argv = shlex.split(code)
        assert argv[0] == "saturn"
        rc = main(argv[1:])
        err = capsys.readouterr().err.strip()
        assert rc == 2
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err
        assert f"{cls}: " in err and fragment in err, err
        return
    # run as written, as code of docs/errors.md: that is then "the user's line" the error names
    code_object = builtins.compile(code, DOC, "eval")
    with pytest.raises(errors.SaturnError) as info:
        eval(code_object, dict(names))   # noqa: S307
    assert type(info.value) is error, f"{type(info.value).__name__}: {info.value}"
    assert fragment in str(info.value)
    assert f"at {DOC}:1" in str(info.value)


@pytest.mark.parametrize("method", ["nonzero", "argwhere", "unique", "unique_consecutive", "bincount"])
def test_ops_with_data_dependent_shapes_say_so(method):
    from compiler.errors import UnsupportedError

    def f(x):
        return getattr(x, method)()
    with pytest.raises(UnsupportedError, match="shape depends on the data"):
        compiler.compile(f, compiler.spec((4,)), target="reference")
