"""PyTorch models through Saturn: `torch.compile(model, backend="saturn")`.

The backend is registered under torch's `torch_dynamo_backends` entry point (pyproject.toml),
so installing Saturn is enough. `explain(compiled)` reports what ran where. This package
imports torch only when the backend runs, never on `import compiler`. See docs/torch.md.
"""
from __future__ import annotations


def saturn_backend(gm, example_inputs, options=None, mode=None):
    """The torch.compile backend (Dynamo calls it with an FX graph and example inputs).
    Settings go in `options`; `mode` names Inductor's presets and is refused."""
    from compiler.torch_backend.backend import compile_graph
    return compile_graph(gm, example_inputs, options, mode)


def register() -> None:
    """Make `backend="saturn"` resolve where the entry point is missing (a checkout used without
    `pip install`); installing registers the same function through the entry point."""
    from torch import _dynamo
    if "saturn" not in _dynamo.list_backends():
        _dynamo.register_backend(name="saturn")(saturn_backend)


def explain(compiled=None):
    """A `Report` of what the backend did for `compiled` (print it); every graph if None."""
    from compiler.torch_backend.report import explain as explain_records
    return explain_records(compiled)


__all__ = ["saturn_backend", "explain", "register"]
