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
check finds it at large magnitudes).

A tile that is -inf throughout (a mask's future keys) has m_b = -inf, and exp2(x_j - m_b) would
be exp2(-inf - (-inf)) = NaN where the left side is exp2(-inf - m) = 0. So the tile's own shift
is m_b where m_b is finite and 0 elsewhere: on a tile of -inf every x_j is -inf and its factor
exp2(-inf - 0) = 0 as the left side is, whatever the shift (m_b is +inf or NaN only where the
row max is too, and exp2(m_b - m) is then NaN as the left side is); the rescale factor keeps
m_b, so it stays exp2(c (m_b - m)), which the online lowering reads. Finiteness is written with
the term language's own ops: 0 * m_b < 0 * m_b + 1 holds exactly for finite m_b (0 * inf is
NaN), and the 0 is that test cast to f32 (f32 only: the frontend computes softmax in f32). The
check feeds this rule masked inputs (`Rule.infinities`)."""
from rewrites.pattern import IsF32, IsTile, Rule, add, addc, cast, exp2, expand, lt, max_, mul, mulc, split, unsq, where
from rewrites.vars import a, c, m, t, x

F = "online_softmax"
_xs = split(x, a, t)                                     # x with axis a split into (m, t) tiles
_row_max = expand(unsq(max_(x, a), a + 1), a, m)          # the row max, broadcast over tiles
_tile_max = max_(_xs, a + 1)                              # m_b
_finite = lt(mulc(_tile_max, 0.0), addc(mulc(_tile_max, 0.0), 1.0))    # m_b finite (0 * inf is NaN)
_tile_shift = where(_finite, _tile_max, cast(_finite, "f32"))             # m_b, or 0 where it is not finite
RULES = [
    # (the tile's shift is 0 where its max is not finite: see the module's docstring)
    # exp2((split(x) - bcast(max(x))) * c) -> bcast(exp2((m_b - max(x)) * c)) * exp2((split(x) - bcast(shift_b)) * c)   if tile(t), f32
    Rule("rescale-by-block-max",
         exp2(mulc(add(_xs, mulc(expand(_row_max, a + 1, t), -1.0)), c)),
         mul(expand(exp2(mulc(add(_tile_max, mulc(_row_max, -1.0)), c)), a + 1, t),
             exp2(mulc(add(_xs, mulc(expand(_tile_shift, a + 1, t), -1.0)), c))),
         (IsTile(t), IsF32(x)), family=F, infinities=True),
]
