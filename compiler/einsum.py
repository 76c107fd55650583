"""einsum: the equation parsed into diagonal views, sums, permutes and reshapes around `matmul`,
so every pairwise contraction is the frontend's broadcast-multiply-sum that the matmul rules
and kernels recognize."""
from __future__ import annotations

import math
import string

from compiler.errors import DTypeError, ShapeError
from compiler.tensor import Tensor

LETTERS = set(string.ascii_letters)


def _parse_term(term: str, ndim: int | None, n_ell: int, op: str) -> list[str]:
    """The labels of one term; an ellipsis becomes the digit labels of its (right-aligned) axes."""
    if term.count("...") > 1:
        raise ShapeError(f"more than one ... in {term!r}", op)
    head, _, tail = term.partition("...")
    bad = set(head + tail) - LETTERS
    if bad:
        raise ShapeError(f"invalid subscript {sorted(bad)[0]!r} in {term!r} (letters and ... only)", op)
    if "..." not in term:
        return list(term)
    k = n_ell if ndim is None else ndim - len(head) - len(tail)
    return list(head) + [str(d) for d in range(n_ell - k, n_ell)] + list(tail)


def einsum(equation: str, *operands) -> Tensor:
    """Like torch.einsum (and numpy's): e.g. einsum("bij,bjk->bik", a, b)."""
    op = "einsum"
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not isinstance(equation, str):
        raise DTypeError(f"the equation must be a string, got {type(equation).__name__}", op)
    if not operands or not all(isinstance(t, Tensor) for t in operands):
        raise DTypeError("einsum takes an equation and one or more Tensors", op)
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise ShapeError(f"{equation!r} has {len(terms)} operands, got {len(operands)} tensors", op)
    n_ell = max([t.ndim - len(term.replace("...", "")) for term, t in zip(terms, operands) if "..." in term],
                default=0)
    labels = []
    for term, t in zip(terms, operands):
        lab = _parse_term(term, t.ndim, n_ell, op)
        if len(lab) != t.ndim:
            raise ShapeError(f"term {term!r} has {len(lab)} subscripts for a tensor of shape {t.shape}", op)
        labels.append(lab)
    counts: dict[str, int] = {}
    for lab in labels:
        for c in lab:
            counts[c] = counts.get(c, 0) + 1
    if arrow:
        out = _parse_term(rhs, None, n_ell, op)
        if len(set(out)) != len(out) or any(c not in counts for c in out):
            raise ShapeError(f"output subscripts {rhs!r} repeat or name an unknown subscript", op)
    else:   # implicit output: the ellipsis axes, then the letters used once, sorted
        out = [str(d) for d in range(n_ell)] + sorted(c for c, k in counts.items() if k == 1 and c in LETTERS)
    sizes: dict[str, int] = {}
    for lab, t in zip(labels, operands):
        for c, s in zip(lab, t.shape):
            if sizes.get(c, 1) not in (1, s) and s != 1:
                raise ShapeError(f"subscript {c!r} has sizes {sizes[c]} and {s} "
                                 f"(shapes {[x.shape for x in operands]})", op)
            if s != 1 or c not in sizes:
                sizes[c] = s
    items = [_prepare(t, lab, sizes, out, labels[:i] + labels[i + 1:]) for i, (t, lab) in enumerate(zip(operands, labels))]
    t, lab = items[0]
    for i, (u, ulab) in enumerate(items[1:], start=1):
        later = {c for _, l in items[i + 1:] for c in l}
        t, lab = _contract(t, lab, u, ulab, set(out) | later, sizes)
    t = _sum_labels(t, lab, [c for c in lab if c not in out])
    lab = [c for c in lab if c in out]
    t = t.permute([lab.index(c) for c in out]) if lab else t
    return t.expand(tuple(sizes[c] for c in out)) if t.shape != tuple(sizes[c] for c in out) else t


def _sum_labels(t: Tensor, lab: list[str], drop: list[str]) -> Tensor:
    return t.sum(tuple(lab.index(c) for c in drop)) if drop else t


def _prepare(t: Tensor, lab: list[str], sizes, out, others) -> tuple[Tensor, list[str]]:
    """One operand with repeated subscripts taken as diagonals and private subscripts summed."""
    lab = list(lab)
    while len(set(lab)) != len(lab):
        c = next(c for c in lab if lab.count(c) > 1)
        i = lab.index(c)
        j = lab.index(c, i + 1)
        t = t.diagonal(0, i, j)
        lab = [x for k, x in enumerate(lab) if k not in (i, j)] + [c]
    used = set(out) | {c for o in others for c in o}
    private = [c for c in lab if c not in used]
    t = _sum_labels(t, lab, private)
    return t, [c for c in lab if c not in private]


def _contract(a: Tensor, la, b: Tensor, lb, keep: set, sizes) -> tuple[Tensor, list[str]]:
    """a * b summed over the shared subscripts not in `keep`, as one matmul."""
    batch = [c for c in la if c in lb and c in keep]
    inner = [c for c in la if c in lb and c not in keep]
    left = [c for c in la if c not in lb]
    right = [c for c in lb if c not in la]
    if not inner:   # nothing to sum: a broadcast product
        order = batch + left + right
        return _aligned(a, la, order) * _aligned(b, lb, order), order

    def full(t, lab, names):   # expand size-1 axes of shared subscripts so both sides agree
        return t.expand(tuple(sizes[c] if c in names else s for c, s in zip(lab, t.shape)))

    a, b = full(a, la, inner), full(b, lb, inner)
    m = math.prod(sizes[c] for c in left)
    k = math.prod(sizes[c] for c in inner)
    n = math.prod(sizes[c] for c in right)
    am = a.permute([la.index(c) for c in batch + left + inner])
    am = am.reshape(am.shape[:len(batch)] + (m, k))
    bm = b.permute([lb.index(c) for c in batch + inner + right])
    bm = bm.reshape(bm.shape[:len(batch)] + (k, n))
    prod = am @ bm
    prod = prod.reshape(prod.shape[:len(batch)] + tuple(sizes[c] for c in left + right))
    return prod, batch + left + right


def _aligned(t: Tensor, lab, order) -> Tensor:
    """t with its axes in `order` and size-1 axes for the subscripts it lacks."""
    present = [c for c in order if c in lab]
    t = t.permute([lab.index(c) for c in present]) if present else t
    shape, it = [], iter(t.shape)
    for c in order:
        shape.append(next(it) if c in lab else 1)
    return t.reshape(tuple(shape))
