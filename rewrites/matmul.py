"""Matmul family. A matmul is the broadcast-multiply-sum `sum(mul(expand(A'), expand(B')), k)`
that the frontend builds and the lowering recognizes (tensor cores / blocked kernels); these
rules produce its useful variants: operands swapped (the transposed product), a scalar
epilogue moved into an operand (scale Q instead of the scores), and the squeeze that follows
a matmul moved past its epilogue. Split-K comes from the reduction family's split rules."""
from rewrites.pattern import Rule, mul, mulc, sqz, sum_, addc
from rewrites.vars import a, c, x, y

F = "matmul"
RULES = [
    # sum(x * y, a) -> sum(y * x, a)
    Rule("swap-operands", sum_(mul(x, y), a), sum_(mul(y, x), a), family=F),
    # sum(x, a) * c -> sum(x * c, a)
    Rule("scale-into-reduction", mulc(sum_(x, a), c), sum_(mulc(x, c), a), family=F),
    # (x * y) * c -> (x * c) * y
    Rule("scale-into-operand", mulc(mul(x, y), c), mul(mulc(x, c), y), family=F),
    # sqz(x, a) * c -> sqz(x * c, a)
    Rule("scale-before-squeeze", mulc(sqz(x, a), c), sqz(mulc(x, c), a), family=F),
    # sqz(x, a) + c -> sqz(x + c, a)
    Rule("bias-before-squeeze", addc(sqz(x, a), c), sqz(addc(x, c), a), family=F),
]
