"""Online-softmax family: max and sum over a split axis become a running max and a rescaled
running sum (and, for attention, a rescaled running accumulator). Nothing here names softmax
or attention. The one identity: for x split into tiles (`split(x, a, t)`, tile axis a+1),

    exp(x_j - m) = exp(m_b - m) * exp(x_j - m_b),   m = max(x) over the row, m_b = max over tile b

applied to any exp of x minus its own row max broadcast over the split axis. The algebra
family then pulls the per-tile factor exp(m_b - m) out of each tile's sum (`sum-factor-*`):
sum_j exp(x_j - m) = sum_b exp(m_b - m) * l_b, and sum_j exp(x_j - m) v_j =
sum_b exp(m_b - m) * acc_b; that is the online-softmax / flash-attention recurrence.
The subtracted value must be the row max (m >= m_b), so exp(m_b - m) <= 1 never overflows:
the same identity with an arbitrary g is true over the reals but overflows (the soundness
check finds it at large magnitudes)."""
from rewrites.pattern import IsTile, Rule, add, exp2, expand, max_, mul, mulc, split, unsq
from rewrites.vars import a, c, m, t, x

F = "online_softmax"
_xs = split(x, a, t)                                     # x with axis a split into (m, t) tiles
_row_max = expand(unsq(max_(x, a), a + 1), a, m)          # the row max, broadcast over tiles
_tile_max = max_(_xs, a + 1)                              # m_b
RULES = [
    # exp2((split(x) - bcast(max(x))) * c) -> bcast(exp2((m_b - max(x)) * c)) * exp2((split(x) - bcast(m_b)) * c)   if tile(t)
    Rule("rescale-by-block-max",
         exp2(mulc(add(_xs, mulc(expand(_row_max, a + 1, t), -1.0)), c)),
         mul(expand(exp2(mulc(add(_tile_max, mulc(_row_max, -1.0)), c)), a + 1, t),
             exp2(mulc(add(_xs, mulc(expand(_tile_max, a + 1, t), -1.0)), c))),
         (IsTile(t),), family=F),
]
