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
the e-graph holds both forms of each product and extraction picks one.

A product of a softmax with another operand is an online contraction (`attend`, flash
attention when the softmax is over attention scores): `attend(x, y, a)` is
sum(softmax2(x, a) * y, a) with softmax2(x) = exp2(x - max x) / sum exp2(x - max x), so the
softmax's scale moves into the scores (`x * c`) and the backends run it as one streaming
kernel that never stores the softmax. softmax2 is shift-invariant, so max(c x) may stand for
c max(x) whatever the sign of c. The frontend computes a half-typed softmax in f32 and rounds
it before the product; the term computes it in f32 and does not round (more accurate, within
the check's bound of the left side's roundings)."""
from rewrites.pattern import (Cond, Dim, IsF32, flt, IsFloat, Rule, add, attend, cast, contract, exp2, expand, max_,
                              mul, mulc, recip, sum_, unsq)
from rewrites.vars import a, c, m, n, x, y

F = "kernels"
RULES = [
    # sum(x * y, a) -> contract(x, y, a)      (floats)
    Rule("contraction", sum_(mul(x, y), a), contract(x, y, a), (IsFloat(x),), family=F),
    # contract(x, y, a) -> sum(x * y, a)      (f32: so the reduction rules see the sum; a half-typed
    #                                         product would round where the contraction does not)
    Rule("contraction-as-sum", contract(x, y, a), sum_(mul(x, y), a), (IsF32(x),), family=F),
]

# softmax(x) along a, as the frontend writes it: e = exp2((x - bcast(max x)) * c), e * recip(bcast(sum e))
_e = exp2(mulc(add(x, mulc(expand(max_(x, a), a, n), -1.0)), c))
_softmax = mul(_e, recip(expand(sum_(_e, a), a, n)))


def _operand(p):        # a product's left operand: p broadcast along a new axis after a
    return expand(unsq(p, a + 1), a + 1, m)


# contract(bcast(softmax(x)), y, a) -> attend(bcast(x * c), y, a)   (and with the softmax rounded to a half)
for _name, _p in (("attention", _softmax), ("attention-f16", cast(cast(_softmax, "f16"), "f32")),
                  ("attention-bf16", cast(cast(_softmax, "bf16"), "f32"))):
    RULES.append(Rule(_name, contract(_operand(_p), y, a), attend(_operand(mulc(x, c)), y, a),
                      (IsF32(x),), family=F))
# attend(bcast(x * c), y, a) -> contract(bcast(softmax(x)), y, a)   if c > 0   (f32: so the softmax rules
#                                                                       see the softmax; with c < 0 exp2((x - max x) c) overflows)
RULES.append(Rule("attention-as-softmax", attend(_operand(mulc(x, c)), y, a), contract(_operand(_softmax), y, a),
                  (IsF32(x), Cond("==", n, Dim(x, a)), flt(0.0, c)), family=F))

# the rules that write a term as its definition: for the e-graph only (applied straight to a
# program, rewrites.apply.kernel_terms, they would undo what the others make)
DEFINITIONS = ("contraction-as-sum", "attention-as-softmax")
