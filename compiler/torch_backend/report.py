"""What the torch.compile backend did with each graph, and `explain(compiled)` to read it.

Every graph Dynamo hands the backend gets a `GraphRecord`: its regions (compiled by Saturn,
or in PyTorch after a failed compile), the ATen ops that stayed in PyTorch and why, or the
reason the whole graph ran in PyTorch (autograd, dynamic shapes). Records name the Python
frame Dynamo was compiling (its code object and, for a module's method, the module), which is
how `explain` finds the records of one `torch.compile` result.
"""
from __future__ import annotations

import collections
import weakref
from dataclasses import dataclass, field

RECORDS: list["GraphRecord"] = []


@dataclass
class GraphRecord:
    index: int
    frame: str                                   # 'forward' of 'GPT2LMHeadModel', 'fn', ...
    code: object = field(repr=False, default=None)
    owner: object = field(repr=False, default=None)        # weakref to the frame's `self`, if any
    aten_nodes: int = 0
    whole_graph: str = ""                        # set when the whole graph ran in PyTorch: why
    regions: list = field(default_factory=list)  # region.RegionInfo
    fallbacks: collections.Counter = field(default_factory=collections.Counter)  # (op, reason) -> nodes
    calls: int = 0
    run_s: float = 0.0

    def fell_back(self) -> set[str]:
        """The ATen ops (names) that ran in PyTorch in this graph."""
        ops = {op for op, _ in self.fallbacks}
        for r in self.regions:
            if r.status != "saturn":
                ops |= set(r.ops)
        return ops


def new_record(frame: str, code=None, owner=None) -> GraphRecord:
    ref = None
    if owner is not None:
        try:
            ref = weakref.ref(owner)
        except TypeError:
            ref = None
    rec = GraphRecord(len(RECORDS) + 1, frame, code, ref)
    RECORDS.append(rec)
    return rec


@dataclass
class Report:
    """The records of one compiled module or function (all records, if none was named)."""
    graphs: list[GraphRecord]
    graph_breaks: dict          # Dynamo's graph-break reasons in this process -> count

    @property
    def regions(self) -> list:
        return [r for g in self.graphs for r in g.regions]

    @property
    def fallbacks(self) -> collections.Counter:
        total = collections.Counter()
        for g in self.graphs:
            total.update(g.fallbacks)
        return total

    def fell_back(self) -> set[str]:
        return set().union(*(g.fell_back() for g in self.graphs)) if self.graphs else set()

    def __str__(self) -> str:
        return text(self)


def _ms(seconds: float, calls: int) -> str:
    return f"{seconds / calls * 1e3:.3g} ms per call over {calls} call(s)" if calls else "not called yet"


def text(report: Report) -> str:
    lines = [f"saturn torch.compile backend: {len(report.graphs)} graph(s)"]
    if not report.graphs:
        lines.append("  nothing compiled yet (call the compiled module once)")
    for g in report.graphs:
        lines.append(f"graph {g.index} ({g.frame}): {g.aten_nodes} ATen nodes; {_ms(g.run_s, g.calls)}")
        if g.whole_graph:
            lines.append(f"  ran in PyTorch: {g.whole_graph}")
            continue
        for r in g.regions:
            ops = ", ".join(f"{op.removeprefix('aten.')} x{n}" for op, n in r.ops.most_common())
            lines.append(f"  {r.name}: {sum(r.ops.values())} ops ({ops})")
            lines.append(f"    inputs {', '.join(r.inputs)}; {r.outputs} output(s)")
            if r.status == "saturn":
                lines.append(f"    Saturn: compiled in {r.compile_s:.2f} s (cache {r.cache}); chosen: {r.chosen or '?'}; "
                             f"{_ms(r.run_s, r.calls)}"
                             + (f"; {r.copied_inputs} non-contiguous input(s) copied" if r.copied_inputs else ""))
            else:
                lines.append(f"    in PyTorch: {r.reason}")
        if g.fallbacks:
            lines.append("  ops left in PyTorch:")
            for (op, why), n in sorted(g.fallbacks.items()):
                lines.append(f"    {op.removeprefix('aten.')} x{n}: {why}")
    if report.graph_breaks:
        lines.append("graph breaks Dynamo reported in this process:")
        lines += [f"  {why} (x{n})" for why, n in report.graph_breaks.items()]
    else:
        lines.append("graph breaks: none reported by Dynamo in this process")
    return "\n".join(lines)


def _graph_breaks() -> dict:
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return {}
    return dict(counters.get("graph_break", {}))


def _matches(rec: GraphRecord, module, code) -> bool:
    if module is not None:   # a module's records are those compiled with it as `self`
        return rec.owner is not None and rec.owner() is module
    if code is not None and rec.code is not None:
        # a graph break resumes in a generated function named after the original one
        return rec.code is code or (rec.code.co_filename == code.co_filename
                                    and rec.code.co_name.startswith(f"torch_dynamo_resume_in_{code.co_name}_at_"))
    return False


def explain(compiled=None) -> Report:
    """The backend's records for `compiled` (a torch.compile result of a module or function,
    or the module or function itself); every record when `compiled` is None."""
    if compiled is None:
        return Report(list(RECORDS), _graph_breaks())
    target = getattr(compiled, "_orig_mod", None) or getattr(compiled, "_torchdynamo_orig_callable", None) or compiled
    module = target if hasattr(target, "forward") and hasattr(target, "parameters") else None
    fn = getattr(module, "forward", None) if module is not None else target
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    return Report([r for r in RECORDS if _matches(r, module, code)], _graph_breaks())
