"""The dependency runs one way: the IR and the backends never import the frontend and search
(`compiler/`), and the IR never imports a backend. Checked on the source (every import
statement, module level or inside a function)."""
import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORBIDDEN = {"ir": ("compiler", "backends", "rewrites"), "backends": ("compiler",)}


def _imports(path: str):
    tree = ast.parse(open(path).read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module


def _sources(package: str):
    for dirpath, _, files in os.walk(os.path.join(ROOT, package)):
        for f in sorted(files):
            if f.endswith(".py"):
                yield os.path.join(dirpath, f)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_only_downward(package):
    bad = [f"{os.path.relpath(path, ROOT)}:{line} imports {mod}"
           for path in _sources(package) for line, mod in _imports(path)
           if mod.split(".")[0] in FORBIDDEN[package]]
    assert not bad, "\n".join(bad)
