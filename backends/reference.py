"""The reference target: runs the numpy interpreter. Always available; slow; exact by definition."""
from __future__ import annotations

from ir.graph import Graph
from ir.interpreter import evaluate


class ReferenceExecutable:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.source = str(graph)

    def __call__(self, *args):
        return evaluate(self.graph, args)


class ReferenceBackend:
    name = "reference"

    def unavailable_reason(self):
        return None

    def build(self, graph: Graph, schedule=None) -> ReferenceExecutable:
        return ReferenceExecutable(graph)
