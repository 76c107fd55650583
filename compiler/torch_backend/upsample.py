"""`torch.nn.functional.interpolate` kept whole through AOTAutograd, as the operator
`saturn.interpolate`.

ATen decomposes upsampling while it traces (a Python kernel at the Autograd key, ahead of any
decomposition table): nearest and bilinear become `_unsafe_index` over int64 positions built
from `arange`, which Saturn cannot run (no 64-bit integers). Before that trace, `keep_whole`
replaces each interpolate call of the Dynamo graph whose arguments are static by a call to
`saturn.interpolate`, a custom operator that AOTAutograd leaves as one node:
`cnn.interpolate` translates it with `compiler.conv.interpolate`, and where the translation
does not cover it (a non-integer scale) PyTorch runs it, as `F.interpolate` itself.
"""
from __future__ import annotations

import inspect
from typing import Optional

import torch
import torch.nn.functional as F

MODES = ("nearest", "linear", "bilinear", "trilinear")   # what compiler.conv.interpolate covers


@torch.library.custom_op("saturn::interpolate", mutates_args=())
def interpolate(input: torch.Tensor, size: Optional[list[int]], scale_factor: Optional[list[float]],  # noqa: A002
                mode: str, align_corners: Optional[bool]) -> torch.Tensor:
    return F.interpolate(input, size=size, scale_factor=scale_factor, mode=mode, align_corners=align_corners)


@interpolate.register_fake
def _(input, size, scale_factor, mode, align_corners):  # noqa: A002
    spatial = size if size else [int(s * f) for s, f in zip(input.shape[2:], scale_factor)]
    return input.new_empty(tuple(input.shape[:2]) + tuple(spatial))


def _per_axis(value, nd: int, kind):
    """An interpolate size or scale as a list of `nd` values of `kind`; None when it is absent,
    False when it is not a static number (or numbers) of that kind."""
    if value is None:
        return None
    values = list(value) if isinstance(value, (list, tuple)) else [value] * nd
    ok = len(values) == nd and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    if not ok or (kind is int and any(not isinstance(v, int) for v in values)):
        return False
    return [kind(v) for v in values]


def keep_whole(gm) -> int:
    """Replace the static interpolate calls of the Dynamo graph `gm` in place; returns how many."""
    signature = inspect.signature(F.interpolate)
    replaced = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not F.interpolate:
            continue
        try:
            bound = signature.bind(*node.args, **node.kwargs)
        except TypeError:
            continue
        bound.apply_defaults()
        a = bound.arguments
        x = a["input"]
        val = getattr(x, "meta", {}).get("example_value")
        if val is None or val.dim() < 3 or a["mode"] not in MODES or a["antialias"] or a["recompute_scale_factor"]:
            continue
        nd = val.dim() - 2
        size, scale = _per_axis(a["size"], nd, int), _per_axis(a["scale_factor"], nd, float)
        if size is False or scale is False or (size is None) == (scale is None):
            continue
        align = a["align_corners"]
        if not (align is None or isinstance(align, bool)):
            continue
        with gm.graph.inserting_before(node):
            new = gm.graph.call_function(torch.ops.saturn.interpolate.default, (x, size, scale, a["mode"], align))
        new.meta.update(node.meta)
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
        replaced += 1
    if replaced:
        gm.recompile()
    return replaced
