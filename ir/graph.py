"""A program: its input nodes (in call order) and output nodes, with printing and hashing."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ir.node import Node
from ir.ops import COMPUTE, Op


def toposort(outputs) -> list[Node]:
    order, seen = [], set()
    for root in outputs:
        stack = [(root, False)]
        while stack:
            n, done = stack.pop()
            if done:
                order.append(n)
                continue
            if n in seen:
                continue
            seen.add(n)
            stack.append((n, True))
            stack.extend((s, False) for s in reversed(n.srcs) if s not in seen)
    return order


def format_arg(n: Node) -> str:
    if n.op == Op.INPUT:
        return f"#{n.arg[0]} {n.arg[1]}"
    if n.op == Op.CONST:
        return repr(n.arg)
    if n.op in (Op.SUM, Op.MAX, Op.CONTRACT, Op.ATTEND):
        return f"axes={n.arg}"
    if n.op == Op.VIEW:
        return str(n.arg)
    if n.op == Op.GATHER:
        return f"axis={n.arg}"
    return ""


@dataclass(frozen=True)
class Graph:
    inputs: tuple[Node, ...]
    outputs: tuple[Node, ...]

    @property
    def nodes(self) -> list[Node]:
        return toposort(self.outputs)

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.op.value] = counts.get(n.op.value, 0) + 1
        return counts

    def num_compute_ops(self) -> int:
        return sum(1 for n in self.nodes if n.op in COMPUTE)

    def __str__(self) -> str:
        names: dict[Node, str] = {}
        lines = []
        for i, n in enumerate(self.nodes):
            names[n] = f"%{i}"
            srcs = ", ".join(names[s] for s in n.srcs)
            arg = format_arg(n)
            body = ", ".join(x for x in (srcs, arg) if x)
            lines.append(f"%{i} = {n.op.value}({body}) : {n.dtype.value}{list(n.shape)}")
        outs = ", ".join(names[o] for o in self.outputs)
        return "\n".join(lines + [f"return {outs}"])

    def structural_hash(self) -> str:
        """Stable across processes: hashes the printed program, not object identities."""
        return hashlib.sha256(str(self).encode()).hexdigest()[:32]
