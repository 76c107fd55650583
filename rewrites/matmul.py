"""Matmul family. A matmul is the broadcast-multiply-sum `sum(mul(expand(A'), expand(B')), k)`
that the frontend builds and the lowering recognizes (tensor cores / blocked kernels); these
rules produce its useful variants: operands swapped (the transposed product), an operand
read through a transposed or strided view materialized once in the layout the product
reads (CONTIGUOUS: the backend then streams it contiguously), a scalar
epilogue moved into an operand (scale Q instead of the scores: fewer multiplies), and a
squeeze that follows a matmul moved past its scalar epilogue. Split-K comes from the
reduction family's split rules; bias and activation epilogues stay elementwise consumers of
the sum, which the lowering fuses."""
from rewrites.pattern import Rule, addc, contiguous, expand, mul, mulc, ne, sqz, sum_
from rewrites.vars import a, b, c, k, m, n, x, y

F = "matmul"
RULES = [
    # sum(x * y, a) -> sum(y * x, a)
    Rule("swap-operands", sum_(mul(x, y), a), sum_(mul(y, x), a), family=F),
    # exact over the reals but not with infinities: x * c underflows to 0 (a subnormal query times
    # 0.125 / ln 2) where y is inf, and 0 * inf is NaN where x * y * c is inf (a softmax row then
    # finite in the program, NaN here; fuzz seed 114227, which verification's inputs missed).
    # Unstable: checked for exactness, kept out of the default search
    # sqz(sum(expand(x, b, n) * expand(y, k, m), a), a) * c -> sqz(sum(expand(x * c, b, n) * expand(y, k, m), a), a)   if b != k  (scale the small operand, not the product)
    Rule("scale-into-operand", mulc(sqz(sum_(mul(expand(x, b, n), expand(y, k, m)), a), a), c),
         sqz(sum_(mul(expand(mulc(x, c), b, n), expand(y, k, m)), a), a), (ne(b, k),), family=F, unstable=True),
    # sum(expand(x, b, n) * y, a) -> sum(expand(contiguous(x), b, n) * y, a)     (a transposed / strided operand copied once into the layout the product reads)
    Rule("materialize-left-operand", sum_(mul(expand(x, b, n), y), a),
         sum_(mul(expand(contiguous(x), b, n), y), a), family=F),
    # sum(x * expand(y, b, n), a) -> sum(x * expand(contiguous(y), b, n), a)
    Rule("materialize-right-operand", sum_(mul(x, expand(y, b, n)), a),
         sum_(mul(x, expand(contiguous(y), b, n)), a), family=F),
    # sqz(x, a) + c -> sqz(x + c, a)
    Rule("bias-before-squeeze", addc(sqz(x, a), c), sqz(addc(x, c), a), family=F),
]
