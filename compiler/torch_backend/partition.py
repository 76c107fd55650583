"""Split an ATen graph into Saturn regions and PyTorch nodes.

Every call node is asked `translate.why_unsupported`; torch's capability-based partitioner
groups the supported ones into the largest regions that create no cycle (a region never both
feeds and waits for a PyTorch node), and fuses each into a submodule `saturn_region_<i>`.
Regions made only of views, copies and constants compute nothing worth a kernel and stay in
PyTorch, as does every node the partitioner leaves alone.
"""
from __future__ import annotations

import collections

from compiler.torch_backend.translate import op_name, why_unsupported

PREFIX = "saturn_region_"
# nodes that move or copy data but compute nothing
NO_COMPUTE = {"operator.getitem", "aten.view.default", "aten._unsafe_view.default", "aten.reshape.default",
              "aten.t.default", "aten.transpose.int", "aten.permute.default", "aten.expand.default",
              "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default",
              "aten.slice.Tensor", "aten.select.int", "aten.clone.default", "aten.alias.default",
              "aten.lift_fresh_copy.default", "aten.detach.default", "aten._to_copy.default",
              "aten.split.Tensor", "aten.split_with_sizes.default", "aten.unbind.int", "aten.full.default",
              "aten.zeros.default", "aten.ones.default", "aten.scalar_tensor.default",
              "aten.new_empty.default"}


def _support(reasons: dict):
    from torch.fx.passes.operator_support import OperatorSupportBase

    class Support(OperatorSupportBase):
        def is_node_supported(self, submodules, node) -> bool:
            return node.op == "call_function" and reasons.get(node) is None
    return Support()


def reasons_for(gm, device: str = "cpu") -> dict:
    """fx.Node -> None (translatable) or why it stays in PyTorch, for every call node.
    A getitem follows the node it indexes."""
    reasons = {}
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        if op_name(n) == "operator.getitem":
            parent = n.args[0]
            reasons[n] = reasons.get(parent, "indexes a PyTorch node") if hasattr(parent, "op") else "indexes a constant"
        else:
            reasons[n] = why_unsupported(n, device)
    return reasons


def split(nodes: list, order: dict, max_ops: int | None) -> list[list]:
    """`nodes` (one region) cut into runs of at most `max_ops` computing nodes, in graph order.

    Runs that follow the graph's topological order cannot form a cycle with each other or with
    the PyTorch nodes (no path leads from a later run back to an earlier one). A getitem stays
    with the node it indexes, so no run takes a tuple as input."""
    nodes = sorted(nodes, key=order.__getitem__)
    if not max_ops:
        return [nodes]
    runs: list[list] = [[]]
    run_of, count = {}, 0
    for n in nodes:
        if op_name(n) == "operator.getitem" and n.args[0] in run_of:
            runs[run_of[n.args[0]]].append(n)
            continue
        computes = op_name(n) not in NO_COMPUTE
        if computes and count == max_ops:
            runs.append([])
            count = 0
        count += computes
        runs[-1].append(n)
        run_of[n] = len(runs) - 1
    return [r for r in runs if r]


def partition(gm, device: str = "cpu", max_ops: int | None = None):
    """(fused graph module, reasons by node, names of the fused region submodules).

    `reasons` covers every call node of the original graph: None for the nodes inside a region.
    `max_ops` caps the computing nodes of one region (None: no cap)."""
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.utils.fuser_utils import fuse_by_partitions
    reasons = reasons_for(gm, device)
    partitioner = CapabilityBasedPartitioner(gm, _support(reasons), allows_single_node_partition=True)
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    kept = []
    for p in partitioner.propose_partitions():
        for run in split(list(p.nodes), order, max_ops):
            if all(op_name(n) in NO_COMPUTE for n in run):
                for n in run:
                    reasons[n] = "computes nothing on its own (views, copies or constants between PyTorch ops)"
            else:
                kept.append(dict.fromkeys(run))
    fused = fuse_by_partitions(gm, kept, prefix=PREFIX) if kept else gm
    names = [n.target for n in fused.graph.nodes if n.op == "call_module" and str(n.target).startswith(PREFIX)]
    return fused, reasons, names


def fallback_summary(reasons: dict) -> collections.Counter:
    """(op, reason) -> number of nodes that stay in PyTorch."""
    return collections.Counter((op_name(n), r) for n, r in reasons.items()
                               if r is not None and op_name(n) != "operator.getitem")
