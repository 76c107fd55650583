"""Fusion family: which intermediates are materialized (CONTIGUOUS) and which are recomputed
inside their consumer. Backends fuse elementwise chains and reductions with their epilogues
by default; these rules offer the other choice. Rules are consumer-side (the consumer reads
`contiguous(x)` or `x`), so a materialized value is its own e-class and extraction can pick
it, instead of a self-loop `contiguous(x) == x` that no extractor would choose."""
from rewrites.pattern import Rule, contiguous, exp2, mul, sum_
from rewrites.vars import a, x, y

F = "fusion"
RULES = [
    # sum(exp2(x), a) -> sum(contiguous(exp2(x)), a)     materialize an exp that a reduction reads
    Rule("materialize-exp2-for-sum", sum_(exp2(x), a), sum_(contiguous(exp2(x)), a), family=F),
    # exp2(x) * y -> contiguous(exp2(x)) * y              ... and that an epilogue reads again
    Rule("materialize-exp2-for-mul", mul(exp2(x), y), mul(contiguous(exp2(x)), y), family=F),
    # contiguous(contiguous(x)) -> contiguous(x)        materializing twice is materializing once
    Rule("materialize-once", contiguous(contiguous(x)), contiguous(x), family=F),
    # sum(contiguous(x), a) -> sum(x, a)                  recompute inside the reduction
    Rule("recompute-in-sum", sum_(contiguous(x), a), sum_(x, a), family=F),
    # contiguous(x) * y -> x * y                          recompute inside the epilogue
    Rule("recompute-in-mul", mul(contiguous(x), y), mul(x, y), family=F),
]
