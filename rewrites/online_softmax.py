"""Online-softmax family: rescale by the block maximum, so max and sum over a split axis
become a running max and a rescaled running sum (and, for attention, a rescaled running
accumulator). Nothing here names softmax or attention: the one identity below, applied to
any exp of `y - broadcast(g)` whose broadcast axis is a tile, is
    exp(y - g) = exp(max_k(y) - g) * exp(y - max_k(y))
and the algebra family then pulls the per-tile factor exp(m_b - m) out of the tile's sum
(`sum-factor-*`), which is exactly the online-softmax / flash-attention recurrence."""
from rewrites.pattern import IsTile, Rule, add, exp2, expand, max_, mul, mulc
from rewrites.vars import c, g, k, t, y

F = "online_softmax"
RULES = [
    # exp2((y - expand(g, k, t)) * c) -> expand(exp2((max(y, k) - g) * c), k, t) * exp2((y - expand(max(y, k), k, t)) * c)   if tile(t)
    Rule("rescale-by-block-max",
         exp2(mulc(add(y, mulc(expand(g, k, t), -1.0)), c)),
         mul(expand(exp2(mulc(add(max_(y, k), mulc(g, -1.0)), c)), k, t),
             exp2(mulc(add(y, mulc(expand(max_(y, k), k, t), -1.0)), c))),
         (IsTile(t),), family=F),
]
