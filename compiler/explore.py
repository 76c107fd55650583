"""The e-graph stage: a program in, several equivalent programs out, ranked by a static cost.

    exp = explore(graph)                 # bounded saturation, K-candidate extraction
    exp.candidates[0].graph              # an ordinary primitive Graph (same inputs)
    print(exp)                           # phases, e-graph sizes, times, candidates

Saturation runs in phases, one per rule family (each phase also keeps the earlier families
on), one iteration at a time, stopping at the iteration, node or wall-clock limit (egglog
has no limit of its own). The original program is always a candidate.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

from ir.graph import Graph
from ir.ops import REDUCING, Op


@dataclass
class Limits:
    """Bounds of one exploration. The work is bounded by counts — iterations and e-nodes in
    saturation, programs evaluated in extraction — so one program gives the same candidates
    on any machine. `seconds` is an emergency stop, not a budget: saturation stops past it,
    extraction past twice it (the first two extraction profiles always run, so a tiny limit
    still returns candidates); a phase stopped by it says "time limit"."""
    seconds: float = 20.0
    node_limit: int = 30000          # e-nodes (the shape table not counted)
    iterations: int = 30             # per phase
    tiles: tuple[int, ...] | None = None   # None: derived from the program's reduction lengths
    climb_work: int = 30000          # hill-climb evaluations x program nodes, per start
    extract_work: int | None = None  # random extractions x e-nodes (None: no bound but their count)

    @staticmethod
    def for_budget(budget: float) -> "Limits":
        """A compile's exploration, in proportion to the budget: about what a 2-core machine
        saturates and extracts in 40 % of it, as counts; the clock as an emergency stop."""
        return Limits(seconds=max(0.6 * budget, 0.5),
                      node_limit=int(min(30000, max(2000, 2000 * budget))),
                      climb_work=int(max(1000, 300 * budget)),
                      extract_work=int(max(20000, 8000 * budget)))


@dataclass
class Phase:
    name: str
    iterations: int
    enodes: int
    eclasses: int
    seconds: float
    stopped: str = ""


@dataclass
class Candidate:
    graph: Graph
    cost: float
    description: str


@dataclass
class Exploration:
    candidates: list[Candidate]
    phases: list[Phase]
    tiles: tuple[int, ...] = ()
    seconds: float = 0.0
    extracted: int = 0
    notes: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"e-graph exploration: {len(self.candidates)} candidates from {self.extracted} distinct "
                 f"extractions in {self.seconds:.2f} s; tiles {list(self.tiles)}"]
        for p in self.phases:
            classes = f"{p.eclasses:>7}" if p.eclasses >= 0 else "      ?"
            lines.append(f"  phase {p.name:<16} {p.iterations:>3} iterations  {p.enodes:>7} e-nodes  "
                         f"{classes} e-classes  {p.seconds:6.2f} s  ({p.stopped})")
        for i, c in enumerate(self.candidates):
            lines.append(f"  #{i} cost {c.cost:12.0f}  {c.graph.num_compute_ops():>4} ops  {c.description}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def default_tiles(graph: Graph) -> tuple[int, ...]:
    """One tile size per distinct long reduction length: a power of two near sqrt(n), 16..128.
    Lengths under an eighth of the longest are left whole (attention's 64-long head-dim dot
    products next to 1024-long rows: tiling them too doubles the e-graph for nothing)."""
    lengths = {n.srcs[0].shape[a] for n in graph.nodes if n.op in REDUCING for a in n.arg}
    longest = max(lengths, default=0)
    tiles = {tile_for(length) for length in lengths if length >= 32 and 8 * length >= longest}
    return tuple(sorted(tiles))[:2]


def tile_for(length: int) -> int:
    """The tile for a reduction of this length: a power of two near its square root, 16..128."""
    return min(128, max(16, 2 ** round(math.log2(math.sqrt(max(length, 1))))))


def _describe(profile: str, g: Graph) -> str:
    reds = [n for n in g.nodes if n.op in REDUCING]
    counts = g.op_counts()
    two_level = sum(1 for n in reds if any(s.op in REDUCING or any(t.op in REDUCING for t in s.srcs) for s in n.srcs))
    return (f"{profile}: {len(reds)} reductions ({two_level} two-level, {counts.get('contract', 0)} contractions), "
            f"{counts.get('contiguous', 0)} materialized, {counts.get('exp2', 0)} exp2")


def _has_attend(g: Graph) -> bool:
    return any(n.op == Op.ATTEND for n in g.nodes)


def _profiles_first(cands: list) -> list:
    """The cheapest candidate of each extraction profile first, then the others (cost order)."""
    picked, profiles = [], set()
    for c in cands:
        profile = c.description.split(":")[0].split("~")[0]      # (a hill-climbed one counts apart)
        if profile not in profiles:
            profiles.add(profile)
            picked.append(c)
    return picked + [c for c in cands if c not in picked]


def _interleave(groups: list[list]) -> list:
    out = []
    for i in range(max((len(g) for g in groups), default=0)):
        out += [g[i] for g in groups if i < len(g)]
    return out


def explore(graph: Graph, *, limits: Limits | None = None, max_candidates: int = 8, rules=None,
            progress: Callable[[str], None] | None = None) -> Exploration:
    """Saturate `graph` under the rule families (or just `rules`) and extract up to
    `max_candidates` distinct programs, ranked by `rewrites.cost.static_cost`."""
    from rewrites import bridge, registry
    from rewrites.cost import static_cost
    from rewrites.extract import extract_candidates

    limits = limits or Limits()
    t0 = time.perf_counter()
    tiles = tuple(limits.tiles) if limits.tiles is not None else default_tiles(graph)
    say = progress or (lambda msg: None)
    session = bridge.EGraphSession(graph, tiles)
    phases: list[Phase] = []
    if rules is not None:
        plan = [("custom", [bridge.cached_ruleset("custom", list(rules))])]
    else:
        fam = {f: bridge.cached_ruleset(f, registry.family_rules(f)) for f in registry.families()}
        user = [fam["user"]] if "user" in fam else []
        # the kernels family runs in every phase: a contraction's sum form is what the other
        # families rewrite, and every product they make gets its contraction term
        kernels = [fam["kernels"]]
        plan = [("algebra", [fam["algebra"]] + kernels + user),
                ("reduction", [fam["reduction"], fam["algebra"]] + kernels + user),
                ("online_softmax", [fam["online_softmax"], fam["reduction"], fam["algebra"]] + kernels + user),
                ("fusion+matmul", [fam["fusion"], fam["matmul"]] + kernels + user)]
    # the emergency clocks start once the e-graph and the rulesets exist: translating the rules
    # (once per process) is setup, and on a loaded machine it took most of a small budget's
    # clock, so a fresh process explored less than a warm one
    t_ready = time.perf_counter()
    deadline = t_ready + limits.seconds         # saturation's emergency stop
    end = t_ready + 2 * limits.seconds          # extraction's
    notes = []
    for name, rulesets in plan:
        rulesets = [r for r in rulesets if r is not None]
        if not rulesets:
            continue
        say(f"saturating {name}")
        rep = session.run_phase(name, rulesets, max_iterations=limits.iterations,
                                node_limit=limits.node_limit, deadline=deadline)
        phases.append(Phase(name, rep.iterations, rep.enodes, rep.eclasses, rep.seconds, rep.stopped))
        if rep.stopped.startswith("node limit") or rep.stopped == "time limit":
            notes.append(f"stopped in phase {name}: {rep.stopped}")
            break
    say("extracting candidates")
    ser = session.serialize()
    evaluations = max(10, min(200, limits.climb_work // max(1, len(graph.nodes))))
    extracted = extract_candidates(ser, max_candidates, cost=static_cost, climb_evaluations=evaluations,
                                   random_work=limits.extract_work, deadline=end)
    want = [(o.shape, o.dtype) for o in graph.outputs]
    cands = [Candidate(graph, static_cost(graph), "original program")]
    seen = {graph.structural_hash()}
    for prof, g in extracted:
        if [(o.shape, o.dtype) for o in g.outputs] != want or g.structural_hash() in seen:
            continue
        seen.add(g.structural_hash())
        cands.append(Candidate(g, static_cost(g), _describe(prof, g)))
    original, rest = cands[0], sorted(cands[1:], key=lambda c: c.cost)
    # the best program of each extraction profile first (they aim at different forms: one pass
    # over the data, tiles, online statistics), then the cheapest of the others; by cost alone a
    # few near-identical variants of one form could crowd out a form the model misjudges. The
    # programs with an online-contraction term and those without take turns: the term is cheap
    # by the static cost everywhere, but a target may run it as its definition
    picked = _interleave([_profiles_first([c for c in rest if _has_attend(c.graph) == w]) for w in (True, False)])
    chosen = sorted([original] + picked[:max(0, max_candidates - 1)], key=lambda c: c.cost)
    return Exploration(chosen, phases, tiles, time.perf_counter() - t0, len(extracted), notes)
