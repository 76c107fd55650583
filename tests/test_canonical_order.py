"""The serialized e-graph's content order (`bridge.canonical_order`) is the same whatever order
egglog lists the classes and e-nodes in."""
from __future__ import annotations

import random

from rewrites.bridge import ENode, canonical_order


def _node(op, children=(), ints=(), floats=()):
    return ENode(op, tuple(children), tuple(ints), tuple(floats), (), False)


def _content(classes: dict) -> list:
    """The ordered classes with children as positions: what extraction sees, without ids."""
    pos = {c: i for i, c in enumerate(classes)}
    return [[(e.op, e.ints, e.floats, tuple(pos[k] for k in e.children)) for e in nodes]
            for nodes in classes.values()]


def _shuffled(classes: dict, seed: int) -> dict:
    rng = random.Random(seed)
    items = [(c, rng.sample(nodes, len(nodes))) for c, nodes in classes.items()]
    rng.shuffle(items)
    return dict(items)


def test_classes_that_differ_only_deep_down_are_ordered_by_content():
    """Two chains of 12 exp2 over different inputs look alike for 12 levels: their order
    comes from the leaves, not from the listing."""
    classes = {}
    tops = []
    for chain, leaf in (("a", 0), ("b", 1)):
        classes[f"{chain}0"] = [_node("inp", ints=(leaf,))]
        for i in range(1, 13):
            classes[f"{chain}{i}"] = [_node("exp2", [f"{chain}{i - 1}"])]
        tops.append(f"{chain}12")
    classes["root"] = [_node("add", tops), _node("add", tops[::-1])]
    want = _content(canonical_order(classes, ["root"]))
    for seed in range(8):
        assert _content(canonical_order(_shuffled(classes, seed), ["root"])) == want


def test_float_arguments_order_totally():
    """-0.0 == 0.0 and NaN compares false with everything: neither may leave a tie to the listing."""
    classes = {"x": [_node("inp", ints=(0,))],
               "y": [_node("mulc", ["x"], floats=(f,)) for f in (0.0, -0.0, float("nan"), 1.0, float("-inf"))]}
    want = _content(canonical_order(classes, ["y"]))
    assert [e[2] for e in want[0]][:2] == [(float("-inf"),), (-0.0,)]
    for seed in range(8):
        got = _content(canonical_order(_shuffled(classes, seed), ["y"]))
        assert repr(got) == repr(want)
