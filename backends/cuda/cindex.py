"""Index expressions with value ranges: what a chain of views costs on the GPU.

A view's element is found by flattening an index into the offset of the view below and
unflattening that offset into the next shape (`/` and `%` per axis). Rendered as text, a
window over a padded input became 64-bit divisions of whole sums per element. Here an index is
an affine sum `const + sum(coeff * atom)`, each atom a C expression with a known range, and
division and modulo by a constant split off the terms whose coefficients the divisor divides
when the rest provably stays in one quotient (`(3136*k + n) / 3136 = k` for `0 <= n < 3136`),
so most of a view chain folds back to the loop indices.

Ranges assume what holds wherever the access is used: every index lies in its shape, so a
valid offset lies in the layout below. Where a mask fails the result is unused (the validity
test guards the load), so only the valid region must be exact; a division or modulo whose
operand may be negative there keeps its full operand (C truncates toward zero).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

INT_MAX = 2**31 - 1


@dataclass(frozen=True)
class Atom:
    expr: str       # a C expression (parenthesized where needed)
    lo: int
    hi: int


@dataclass(frozen=True)
class Ix:
    terms: tuple[tuple[Atom, int], ...] = ()    # (atom, coefficient), coefficients nonzero
    const: int = 0

    @staticmethod
    def var(expr: str, size: int) -> "Ix":
        """An index known to lie in [0, size)."""
        if size <= 1:
            return Ix((), 0)
        try:
            return Ix((), int(expr))
        except ValueError:
            pass
        if not expr.isidentifier():
            expr = f"({expr})"
        return Ix(((Atom(expr, 0, size - 1), 1),), 0)

    @staticmethod
    def atom(expr: str, lo: int, hi: int) -> "Ix":
        return Ix((), lo) if lo == hi else Ix(((Atom(expr, lo, hi), 1),), 0)

    # --- ranges -------------------------------------------------------------------------------
    @property
    def lo(self) -> int:
        return self.const + sum(min(c * a.lo, c * a.hi) for a, c in self.terms)

    @property
    def hi(self) -> int:
        return self.const + sum(max(c * a.lo, c * a.hi) for a, c in self.terms)

    def _magnitude(self) -> int:
        """A bound on |any partial sum| as rendered (terms in order, then the constant)."""
        return sum(max(abs(c * a.lo), abs(c * a.hi)) for a, c in self.terms) + abs(self.const)

    # --- arithmetic ---------------------------------------------------------------------------
    def __add__(self, other: "Ix | int") -> "Ix":
        if isinstance(other, int):
            return Ix(self.terms, self.const + other)
        coeffs: dict[Atom, int] = {}
        for a, c in self.terms + other.terms:
            coeffs[a] = coeffs.get(a, 0) + c
        return Ix(tuple((a, c) for a, c in coeffs.items() if c), self.const + other.const)

    def __mul__(self, k: int) -> "Ix":
        if k == 0:
            return Ix((), 0)
        return Ix(tuple((a, c * k) for a, c in self.terms), self.const * k)

    def floordiv(self, d: int) -> "Ix":
        """self / d for d > 0, exact where self >= 0 (where C's division is the floor)."""
        if d == 1:
            return self
        q, r = divmod(self.const, d)
        whole = Ix(tuple((a, c // d) for a, c in self.terms if c % d == 0), q)
        rest = Ix(tuple((a, c) for a, c in self.terms if c % d), r)
        if rest.lo >= 0 and rest.hi < d:   # floor((d*W + R) / d) = W for 0 <= R < d
            return whole
        # floor(x / (g*h)) = floor(floor(x / g) / h): divide by a factor g first where that
        # alone folds ((3136 k + n) / 9408 = k / 3 for 0 <= n < 3136)
        atoms = {a for a, _ in self.terms}
        for _, c in self.terms:
            g = math.gcd(c, d)
            if 1 < g < d:
                t = self.floordiv(g)
                if all(a in atoms for a, _ in t.terms):
                    return t.floordiv(d // g)
        if rest.lo >= 0:      # floor((d*W + R) / d) = W + floor(R / d), and C agrees for R >= 0
            return whole + Ix.atom(f"({_cast(rest)} / {d})", rest.lo // d, rest.hi // d)
        return Ix.atom(f"({_cast(self)} / {d})", max(0, _tdiv(self.lo, d)), max(0, _tdiv(self.hi, d)))

    def mod(self, m: int) -> "Ix":
        """self % m for m > 0, exact where self >= 0."""
        if m == 1:
            return Ix((), 0)
        if self.lo >= 0 and self.hi < m:
            return self
        rest = Ix(tuple((a, c) for a, c in self.terms if c % m), self.const % m)
        if rest.lo >= 0:      # (m*W + R) mod m = R mod m, and C agrees for R >= 0
            return rest if rest.hi < m else Ix.atom(f"({_cast(rest)} % {m})", 0, min(m - 1, rest.hi))
        return Ix.atom(f"({_cast(self)} % {m})", 0, m - 1)

    # --- rendering ----------------------------------------------------------------------------
    def wide(self) -> bool:
        return self._magnitude() > INT_MAX

    def render(self) -> str:
        """The sum as C; each term cast to 64 bits where some partial sum may leave int."""
        wide = self.wide()
        parts = []
        for a, c in self.terms:
            x = f"(long long){a.expr}" if wide else a.expr
            parts.append(x if c == 1 else f"{x} * {c}")
        if self.const or not parts:
            parts.append(str(self.const))
        return parts[0] if len(parts) == 1 else "(" + " + ".join(parts) + ")"


def _cast(e: Ix) -> str:
    """The operand of a division: forced to 32 bits where it fits (a 64-bit division by a
    constant is several times the instructions), else to 64."""
    body = e.render()
    return f"(long long){body}" if e.wide() else f"(int){body}"


def _tdiv(x: int, d: int) -> int:
    q = abs(x) // d
    return q if x >= 0 else -q


def unflatten(flat: Ix, shape: tuple[int, ...]) -> tuple[Ix, ...]:
    """The multi-index of flat offset `flat` (in [0, prod(shape)) where used) in `shape`."""
    out = []
    inner = 1
    for s in shape:
        inner *= s
    for i, s in enumerate(shape):
        inner //= s
        if s == 1:
            out.append(Ix((), 0))
            continue
        q = flat.floordiv(inner)
        # the leading axis needs no modulo: flat < prod(shape) where used
        out.append(q if i == 0 or (q.lo >= 0 and q.hi < s) else q.mod(s))
    return tuple(out)


def mask_tests(idx: tuple[Ix, ...], mask) -> list[str] | None:
    """C tests that idx lies in the mask's ranges; None when it never can."""
    tests = []
    for i, (lo, hi) in zip(idx, mask or ()):
        if hi <= lo or i.hi < lo or i.lo >= hi:
            return None
        if i.lo < lo:
            tests.append(f"({i.render()} >= {lo})")
        if i.hi >= hi:
            tests.append(f"({i.render()} < {hi})")
    return tests


def tracker_offset(st, idx: tuple[Ix, ...]) -> tuple[Ix, list[str]] | None:
    """(offset into the source's contiguous layout, validity tests) of a ShapeTracker at idx;
    None when no index is valid."""
    tests: list[str] = []
    cur = idx
    off = Ix()
    for k in range(len(st.views) - 1, -1, -1):
        v = st.views[k]
        t = mask_tests(cur, v.mask)
        if t is None:
            return None
        tests += t
        off = affine(cur, v.strides, v.offset)
        if k > 0:
            cur = unflatten(off, st.views[k - 1].shape)
    return off, tests


def affine(idx: tuple[Ix, ...], strides: tuple[int, ...], offset: int = 0) -> Ix:
    total = Ix((), offset)
    for i, st in zip(idx, strides):
        if st:
            total = total + i * st
    return total
