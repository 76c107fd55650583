"""Kernel family: rules that turn primitive sub-programs into kernel terms, the kinds the
backends render as their fast kernels. A sum of products over one axis is a contraction
(`contract`): the backends run it as their matrix-product kernels (tensor-core and blocked
GEMMs, the host BLAS or cuBLAS), its operands' views and elementwise producers fused as the
prologue, its elementwise consumers as the epilogue. Nothing else reaches those kernels, so
whether a product runs as one is a choice made in the e-graph: a rewritten program whose
products the rules split (split-K) or moved keeps its fast kernels where this rule applies
to them.

The contraction computes each product and the sum in f32 (never rounding a half-typed
product in between), so for f16/bf16 it is more accurate than the sum of rounded products
it replaces; the soundness check bounds the left side's roundings, which covers that.

The traced program gets these terms directly (`rewrites.apply.kernel_terms`: the same rules,
applied bottom up), so the user's own algorithm keeps its fast kernels with no exploration;
the e-graph holds both forms of each product and extraction picks one."""
from rewrites.pattern import IsF32, IsFloat, Rule, contract, mul, sum_
from rewrites.vars import a, x, y

F = "kernels"
RULES = [
    # sum(x * y, a) -> contract(x, y, a)      (floats)
    Rule("contraction", sum_(mul(x, y), a), contract(x, y, a), (IsFloat(x),), family=F),
    # contract(x, y, a) -> sum(x * y, a)      (f32: so the reduction rules see the sum; a half-typed
    #                                         product would round where the contraction does not)
    Rule("contraction-as-sum", contract(x, y, a), sum_(mul(x, y), a), (IsF32(x),), family=F),
]
