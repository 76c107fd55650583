"""Reduction / tiling family: split a reduce axis into (n/t, t) and reduce in two stages
(padding non-divisible axes with the reduction's identity), move splits and broadcasts
through elementwise ops so tiles reach the leaves, reduce through broadcasts, reorder and
merge reductions."""
from rewrites.pattern import (IsTile, Rule, add, addc, cast, exp2, expand, gt, log2, lt,
                              lt_, max_, merge, mul, mulc, ne, pad, recip, sin, split, sqrt, sqz,
                              sum_, unsq, where, eq)
from rewrites.pattern import Dim, IsFloat
from rewrites.vars import a, b, c, g, m, n, t, x, y, z

F = "reduction"
_tile = (eq(n, Dim(x, a)), IsTile(t), eq(n % t, 0), gt(n, t))
_tile_pad = (eq(n, Dim(x, a)), IsTile(t), ne(n % t, 0), gt(n, t))

RULES = [
    # --- two-stage reductions (tiling) ---
    # sum(x, a) -> merge(sum(sum(split(x, a, t), a+1), a), a)      if t divides n = dim(x, a) < ... 
    Rule("split-sum", sum_(x, a), merge(sum_(sum_(split(x, a, t), a + 1), a), a), _tile, family=F),
    # max(x, a) -> merge(max(max(split(x, a, t), a+1), a), a)
    Rule("split-max", max_(x, a), merge(max_(max_(split(x, a, t), a + 1), a), a), _tile, family=F),
    # sum(x, a) -> merge(sum(sum(split(pad(x, a, t - n%t, 0), a, t), a+1), a), a)  if t does not divide n
    Rule("split-sum-pad", sum_(x, a),
         merge(sum_(sum_(split(pad(x, a, t - n % t, 0.0), a, t), a + 1), a), a), _tile_pad, family=F),
    # max(x, a) -> merge(max(max(split(pad(x, a, t - n%t, -inf), a, t), a+1), a), a)   (floats only)
    Rule("split-max-pad", max_(x, a),
         merge(max_(max_(split(pad(x, a, t - n % t, float("-inf")), a, t), a + 1), a), a),
         _tile_pad + (IsFloat(x),), family=F),
    # merge(sum(sum(split(x, a, t), a+1), a), a) -> sum(x, a)
    Rule("merge-split-sum", merge(sum_(sum_(split(x, a, t), a + 1), a), a), sum_(x, a), family=F),
    # merge(split(x, a, t), a) -> x
    Rule("merge-split", merge(split(x, a, t), a), x, family=F),
    # --- splits move towards the leaves (so tiles meet the online-softmax identity) ---
    # split(exp2(x), a, t) -> exp2(split(x, a, t))
    Rule("split-exp2", split(exp2(x), a, t), exp2(split(x, a, t)), family=F),
    # split(log2(x), a, t) -> log2(split(x, a, t))
    Rule("split-log2", split(log2(x), a, t), log2(split(x, a, t)), family=F),
    # split(sqrt(x), a, t) -> sqrt(split(x, a, t))
    Rule("split-sqrt", split(sqrt(x), a, t), sqrt(split(x, a, t)), family=F),
    # split(recip(x), a, t) -> recip(split(x, a, t))
    Rule("split-recip", split(recip(x), a, t), recip(split(x, a, t)), family=F),
    # split(sin(x), a, t) -> sin(split(x, a, t))
    Rule("split-sin", split(sin(x), a, t), sin(split(x, a, t)), family=F),
    # split(cast(x, f32), a, t) -> cast(split(x, a, t), f32)
    Rule("split-cast-f32", split(cast(x, "f32"), a, t), cast(split(x, a, t), "f32"), family=F),
    # split(cast(x, f16), a, t) -> cast(split(x, a, t), f16)
    Rule("split-cast-f16", split(cast(x, "f16"), a, t), cast(split(x, a, t), "f16"), family=F),
    # split(cast(x, bf16), a, t) -> cast(split(x, a, t), bf16)
    Rule("split-cast-bf16", split(cast(x, "bf16"), a, t), cast(split(x, a, t), "bf16"), family=F),
    # split(x + y, a, t) -> split(x, a, t) + split(y, a, t)
    Rule("split-add", split(add(x, y), a, t), add(split(x, a, t), split(y, a, t)), family=F),
    # split(x * y, a, t) -> split(x, a, t) * split(y, a, t)
    Rule("split-mul", split(mul(x, y), a, t), mul(split(x, a, t), split(y, a, t)), family=F),
    # split(x < y, a, t) -> split(x, a, t) < split(y, a, t)
    Rule("split-lt", split(lt(x, y), a, t), lt(split(x, a, t), split(y, a, t)), family=F),
    # split(where(x, y, z), a, t) -> where(split(x), split(y), split(z))
    Rule("split-where", split(where(x, y, z), a, t), where(split(x, a, t), split(y, a, t), split(z, a, t)), family=F),
    # split(x + c, a, t) -> split(x, a, t) + c
    Rule("split-addc", split(addc(x, c), a, t), addc(split(x, a, t), c), family=F),
    # split(x * c, a, t) -> split(x, a, t) * c
    Rule("split-mulc", split(mulc(x, c), a, t), mulc(split(x, a, t), c), family=F),
    # split(sum(x, b), a, t) -> sum(split(x, a, t), b)            if b < a
    Rule("split-sum-before", split(sum_(x, b), a, t), sum_(split(x, a, t), b), (lt_(b, a),), family=F),
    # split(sum(x, b), a, t) -> sum(split(x, a, t), b+1)          if b > a
    Rule("split-sum-after", split(sum_(x, b), a, t), sum_(split(x, a, t), b + 1), (gt(b, a),), family=F),
    # split(max(x, b), a, t) -> max(split(x, a, t), b)            if b < a
    Rule("split-max-before", split(max_(x, b), a, t), max_(split(x, a, t), b), (lt_(b, a),), family=F),
    # split(max(x, b), a, t) -> max(split(x, a, t), b+1)          if b > a
    Rule("split-max-after", split(max_(x, b), a, t), max_(split(x, a, t), b + 1), (gt(b, a),), family=F),
    # split(expand(x, a, n), a, t) -> expand(expand(unsq(x, a+1), a, n/t), a+1, t)
    Rule("split-broadcast", split(expand(x, a, n), a, t),
         expand(expand(unsq(x, a + 1), a, n // t), a + 1, t), family=F),
    # split(expand(x, b, n), a, t) -> expand(split(x, a, t), b, n)      if b < a
    Rule("split-expand-before", split(expand(x, b, n), a, t), expand(split(x, a, t), b, n), (lt_(b, a),), family=F),
    # split(expand(x, b, n), a, t) -> expand(split(x, a, t), b+1, n)    if b > a
    Rule("split-expand-after", split(expand(x, b, n), a, t), expand(split(x, a, t), b + 1, n), (gt(b, a),), family=F),
    # split(unsq(x, b), a, t) -> unsq(split(x, a-1, t), b)       if b < a
    Rule("split-unsq-before", split(unsq(x, b), a, t), unsq(split(x, a - 1, t), b), (lt_(b, a),), family=F),
    # split(unsq(x, b), a, t) -> unsq(split(x, a, t), b+1)       if b > a
    Rule("split-unsq-after", split(unsq(x, b), a, t), unsq(split(x, a, t), b + 1), (gt(b, a),), family=F),
    # split(sqz(x, b), a, t) -> sqz(split(x, a+1, t), b)         if b <= a
    Rule("split-sqz-before", split(sqz(x, b), a, t), sqz(split(x, a + 1, t), b), (lt_(b, a + 1),), family=F),
    # split(sqz(x, b), a, t) -> sqz(split(x, a, t), b+1)         if b > a
    Rule("split-sqz-after", split(sqz(x, b), a, t), sqz(split(x, a, t), b + 1), (gt(b, a),), family=F),
    # --- broadcasts: reduce through them, and move them across elementwise ops ---
    # max(expand(g, a, n), a) -> g
    Rule("max-of-broadcast", max_(expand(g, a, n), a), g, family=F),
    # sum(expand(g, b, n), a) -> expand(sum(g, a), b, n)          if a != b
    Rule("sum-through-broadcast", sum_(expand(g, b, n), a), expand(sum_(g, a), b, n), (ne(a, b),), family=F),
    # max(expand(g, b, n), a) -> expand(max(g, a), b, n)          if a != b
    Rule("max-through-broadcast", max_(expand(g, b, n), a), expand(max_(g, a), b, n), (ne(a, b),), family=F),
    # exp2(expand(x, a, n)) -> expand(exp2(x), a, n)
    Rule("exp2-broadcast", exp2(expand(x, a, n)), expand(exp2(x), a, n), family=F),
    # recip(expand(x, a, n)) -> expand(recip(x), a, n)
    Rule("recip-broadcast", recip(expand(x, a, n)), expand(recip(x), a, n), family=F),
    # sqrt(expand(x, a, n)) -> expand(sqrt(x), a, n)
    Rule("sqrt-broadcast", sqrt(expand(x, a, n)), expand(sqrt(x), a, n), family=F),
    # expand(x, a, n) * c -> expand(x * c, a, n)
    Rule("mulc-broadcast", mulc(expand(x, a, n), c), expand(mulc(x, c), a, n), family=F),
    # expand(x, a, n) + c -> expand(x + c, a, n)
    Rule("addc-broadcast", addc(expand(x, a, n), c), expand(addc(x, c), a, n), family=F),
    # expand(x, a, n) * expand(y, a, n) -> expand(x * y, a, n)
    Rule("mul-broadcast", mul(expand(x, a, n), expand(y, a, n)), expand(mul(x, y), a, n), family=F),
    # expand(x, a, n) + expand(y, a, n) -> expand(x + y, a, n)
    Rule("add-broadcast", add(expand(x, a, n), expand(y, a, n)), expand(add(x, y), a, n), family=F),
    # expand(x * y, a, n) -> expand(x, a, n) * expand(y, a, n)
    Rule("broadcast-mul", expand(mul(x, y), a, n), mul(expand(x, a, n), expand(y, a, n)), family=F),
    # unsq(x * y, a) -> unsq(x, a) * unsq(y, a)
    Rule("unsq-mul", unsq(mul(x, y), a), mul(unsq(x, a), unsq(y, a)), family=F),
    # unsq(expand(x, a, n), b) -> expand(unsq(x, b), a, n)         if b > a
    Rule("unsq-expand-after", unsq(expand(x, a, n), b), expand(unsq(x, b), a, n), (gt(b, a),), family=F),
    # unsq(expand(x, a, n), b) -> expand(unsq(x, b), a+1, n)       if b <= a
    Rule("unsq-expand-before", unsq(expand(x, a, n), b), expand(unsq(x, b), a + 1, n), (lt_(b, a + 1),), family=F),
    # expand(expand(x, a, n), b, m) -> expand(expand(x, b, m), a, n)   if a != b
    Rule("expand-commute", expand(expand(x, a, n), b, m), expand(expand(x, b, m), a, n), (ne(a, b),), family=F),
    # sqz(unsq(x, a), a) -> x
    Rule("sqz-unsq", sqz(unsq(x, a), a), x, family=F),
    # --- reorder reductions ---
    # sum(sum(x, a), b) -> sum(sum(x, b), a)
    Rule("sum-reorder", sum_(sum_(x, a), b), sum_(sum_(x, b), a), (ne(a, b),), family=F),
    # max(max(x, a), b) -> max(max(x, b), a)
    Rule("max-reorder", max_(max_(x, a), b), max_(max_(x, b), a), (ne(a, b),), family=F),
]
