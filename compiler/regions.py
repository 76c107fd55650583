"""Compiling a big program region by region (`ir/regions.py` cuts it).

Each distinct region is searched once (e-graph, candidates, schedules, verification against the
interpreter at its own size and at odd shapes, timing), with a share of the budget by the work
it stands for (ops times repeats), and cached under its own key: identical layers share one
search, one executable and one cache entry, and a new model made of known layers compiles warm.
The regions' executables then run in order, each region's results handed to the regions that
read them.

Used by `compile()` on the CPU target for programs of at least REGIONS_MIN_OPS compute ops
(`regions=True/False` forces it); the CUDA target compiles whole programs until the chained
device path is measured on the device.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from backends.base import wall_clock_benchmark
from compiler import cache as cache_mod
from compiler import verify
from compiler.progress import Progress
from compiler.search import SearchOptions, ShapeVariant, describe_schedule, same_interface, search
from compiler.trace import Spec
from ir import regions as R
from ir.graph import Graph

REGIONS_MIN_OPS = 200       # compute ops: below this one search sees the whole program
TARGETS = ("cpu",)          # targets whose executables chain on host arrays


def split_for(graph: Graph, target: str, option, reference_limit: float = verify.REFERENCE_LIMIT) -> R.Split | None:
    """How `compile()` cuts `graph`, or None to search it whole: by the `regions` option (True,
    False), else on targets in TARGETS for programs of REGIONS_MIN_OPS compute ops or more that
    the float64 reference cannot check whole (`reference_limit`) and whose regions repeat, as
    the layers of a model do. A program the reference can check is searched better whole: a
    4-layer GPT-2 of width 64 (seq 64) cut into 5 regions ran 3.2 ms per call, whole 1.6 ms,
    since each region's share of the budget timed one schedule where the whole search compared
    several."""
    if target not in TARGETS or option is False:
        return None
    if option is None and (graph.num_compute_ops() < REGIONS_MIN_OPS
                           or verify.reference_work(graph, matmul=True) <= reference_limit):
        return None
    s = R.split(graph)
    if s is None or len(s.regions) < 2:
        return None
    if option is None and len(s.groups()) == len(s.regions):
        return None     # nothing repeats: one search of the whole program spends the budget better
    return s


class RegionsExecutable:
    """Runs the regions' executables in order; identical regions share one executable."""

    def __init__(self, split: R.Split, executables: list, entries: list | None = None):
        # entries: each region's chosen program and schedule (cache.Entry), what save() writes
        self.split, self.executables, self.entries = split, executables, entries

    def __call__(self, *args) -> list[np.ndarray]:
        made: list[list] = []
        for r, exe in zip(self.split.regions, self.executables):
            made.append(list(exe(*(_value(args, made, s) for s in r.sources))))
        return [made[o.region][o.index] for o in self.split.outputs]

    def benchmark(self, args, warmup: int = 3, repeat: int = 20) -> list[float]:
        """Wall-clock seconds per call, one entry per timed run (after `warmup` untimed runs)."""
        return wall_clock_benchmark(self, args, warmup, repeat)

    def profile(self, args, repeat: int = 5) -> list[tuple[str, float]]:
        """Median seconds per kernel, each named after its region (r3.k2_add), in order."""
        out, made = [], []
        for i, (r, exe) in enumerate(zip(self.split.regions, self.executables)):
            ins = [_value(args, made, s) for s in r.sources]
            out += [(f"r{i}.{k}", t) for k, t in exe.profile(ins, repeat)] if hasattr(exe, "profile") else []
            made.append(list(exe(*ins)))
        return out

    @property
    def source(self) -> str:
        parts, seen = [], {}
        for i, (r, exe) in enumerate(zip(self.split.regions, self.executables)):
            if r.key in seen:
                parts.append(f"; region {i}: the code of region {seen[r.key]}")
                continue
            seen[r.key] = i
            parts.append(f"; region {i}\n{getattr(exe, 'source', '<none>')}")
        return "\n".join(parts)


def _value(args, made, s: R.Source):
    if s.region >= 0:
        return made[s.region][s.index]
    a = args[s.index]
    return np.asarray(a).reshape(-1)[s.start:s.stop] if s.stop > 0 else a


@dataclass
class RegionOutcome:
    """One distinct region: which regions it stands for, and how it was compiled."""
    indices: list[int]
    ops: int
    cache: str = ""                  # hit | stored | miss | off
    seconds: float = 0.0
    budget: float = 0.0
    description: str = ""
    median: float = 0.0
    report: str = ""


@dataclass
class RegionsReport:
    """What a region-by-region compile did; str() is the text explain() shows."""
    count: int
    outcomes: list[RegionOutcome] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line: the regions and what was chosen for each distinct one."""
        def which(ix):
            return "+".join(map(str, ix)) if len(ix) < 4 else f"{ix[0]}+{ix[1]}+...+{ix[-1]} ({len(ix)} regions)"
        return f"{self.count} regions ({len(self.outcomes)} distinct): " + "; ".join(
            f"{which(o.indices)} {o.description}" for o in self.outcomes)

    def __str__(self) -> str:
        lines = [f"regions: the program was cut into {self.count} regions at its narrowest points "
                 f"(layer boundaries), {len(self.outcomes)} distinct; each distinct region searched "
                 f"or loaded once"]
        for o in self.outcomes:
            where = ", ".join(map(str, o.indices))
            how = (f"cache hit ({o.seconds:.2f} s)" if o.cache == "hit" else
                   f"searched in {o.seconds:.1f} s of a {o.budget:.1f} s share, cache {o.cache}")
            lines.append(f"  region {where}: {o.ops} compute ops; {how}; chosen {o.description}, "
                         f"median {o.median * 1e3:.4g} ms")
        lines += [f"note: {n}" for n in self.notes]
        for o in self.outcomes:
            if o.report:
                lines += ["", f"region {o.indices[0]} ({'cached' if o.cache == 'hit' else 'search'}):", o.report]
        return "\n".join(lines)


def odd_regions(split: R.Split, variant: ShapeVariant | None) -> list | None:
    """Each region's counterpart in the odd-shaped program (the region at the same place, of
    the same ops and interface ranks), if every region has one. The odd program may have more
    regions: a size that counts layers (weights stacked over layers) changes too."""
    if variant is None:
        return None
    odd = R.split(variant.graph)
    if odd is None or len(odd.regions) < len(split.regions):
        return None
    for a, b in zip(split.regions, odd.regions):
        ga, gb = a.graph, b.graph
        if ga.op_counts() != gb.op_counts() or [len(x.shape) for x in ga.inputs] != [len(x.shape) for x in gb.inputs] \
                or [len(x.shape) for x in ga.outputs] != [len(x.shape) for x in gb.outputs]:
            return None
    return [ShapeVariant(r.graph) for r in odd.regions[:len(split.regions)]]


def _weight(o: RegionOutcome) -> int:
    """A region's claim on the budget: the work it stands for, its compute ops times how many
    regions run it (by ops alone, the 12-layer GPT-2's first layer got 4.7 s of budget 10 and
    the layer that runs 11 times 1.2 s; now 0.8 s and 5.6 s)."""
    return o.ops * len(o.indices)


def compile_regions(graph: Graph, split: R.Split, backend, *, target: str, backend_spec, device: str, options: SearchOptions,
                    name: str, variant, use_cache: bool, directory: str | None,
                    version: str, start: float | None = None):
    """(RegionsExecutable, RegionsReport, chosen whole program): each distinct region loaded
    from the cache or searched, in order, the budget shared among the searches by the work each
    stands for (`_weight`).
    `variant()`: the program at odd shapes (None if it does not retrace), asked for only when a
    region is searched. `start`: when the budget began (compile()'s call: its tracing counts)."""
    t0 = time.perf_counter()
    deadline = (t0 if start is None else start) + options.budget
    report = RegionsReport(len(split.regions))
    groups = split.groups()
    chosen: dict[str, tuple] = {}       # key -> (executable, cache.Entry of the chosen program)
    pending: list[tuple[str, list[int], dict, RegionOutcome]] = []       # searched below
    for key, indices in groups.items():
        g = split.regions[indices[0]].graph
        specs = [Spec(x.shape, x.dtype, x.arg[1]) for x in g.inputs]
        ckey = cache_mod.make_key(g, specs, target, device, version)
        outcome = RegionOutcome(indices, g.num_compute_ops(), cache="off")
        report.outcomes.append(outcome)
        if use_cache:
            t1 = time.perf_counter()
            entry, _, _ = cache_mod.load(ckey, directory)
            if entry is not None and same_interface(g, entry.graph) is None:
                try:
                    exe = cache_mod.build(backend, entry)
                except Exception:  # noqa: BLE001 - a stale entry: search again
                    exe = None
                if exe is not None:
                    chosen[key] = (exe, entry)
                    outcome.cache, outcome.seconds = "hit", time.perf_counter() - t1
                    outcome.description = f"{entry.description} [{describe_schedule(entry.schedule)}]"
                    outcome.median, outcome.report = entry.median, entry.report
                    continue
        pending.append((key, indices, ckey, outcome))
    remaining = sum(_weight(o) for _, _, _, o in pending)
    odd = None
    if pending:
        t1 = time.perf_counter()
        whole_odd = variant()
        report.notes.append(f"tracing the program at odd shapes took {time.perf_counter() - t1:.1f} s")
        odd = odd_regions(split, whole_odd)
        if odd is None:
            report.notes.append("odd shapes not checked: " + ("the odd-shaped program cuts differently"
                                                              if whole_odd is not None else
                                                              "the function does not trace at other shapes"))
    for key, indices, ckey, outcome in pending:
        i = indices[0]
        g = split.regions[i].graph
        share = max(0.0, deadline - time.perf_counter()) * _weight(outcome) / max(remaining, 1)
        remaining -= _weight(outcome)
        opts = SearchOptions(**{**options.__dict__, "budget": share})
        t1 = time.perf_counter()
        title = f"{name} for {target}, region {i + 1}/{len(split.regions)}" + (
            f" (x{len(indices)})" if len(indices) > 1 else "")
        result = search(g, backend, target=target, backend_spec=backend_spec, device=device, options=opts,
                        progress=Progress(title, quiet=options.quiet), variant=odd[i] if odd else None)
        w = result.winner
        outcome.seconds, outcome.budget = time.perf_counter() - t1, share
        outcome.description = f"{w.description} [{describe_schedule(w.schedule)}]"
        outcome.median, outcome.report = w.median, str(result)
        program = getattr(result.executable, "program", None) if hasattr(backend, "build_program") else None
        entry = cache_mod.Entry(w.graph, w.schedule, w.description, w.median, str(result), program=program)
        chosen[key] = (result.executable, entry)
        if use_cache:
            try:
                cache_mod.store(ckey, entry, directory)
                outcome.cache = "stored"
            except Exception as e:  # noqa: BLE001 - an unwritable cache costs the next compile, not this one
                outcome.cache = "miss"
                report.notes.append(f"could not write region {i}'s cache entry: {type(e).__name__}: {e}")
    exes = [chosen[r.key][0] for r in split.regions]
    entries = [chosen[r.key][1] for r in split.regions]
    whole = R.compose(split, [e.graph for e in entries], graph.inputs)
    return RegionsExecutable(split, exes, entries), report, whole
