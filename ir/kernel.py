"""The backend-neutral kernel IR: what `ir.lower` produces and every code backend renders.

A `KernelProgram` is a list of `Kernel`s over named `Buffer`s. A kernel is a loop nest over one
output index space (`axes`, outer to inner). Per iteration it evaluates value expressions and
stores them. Values are small trees: `Load` (through an index expression, guarded by bounds),
`Const`, `Compute` (an elementwise primitive op), `Reduce` (a loop over its own reduction
variables), `Ref` (a named `Let`), `Iota` (an index expression's own value) and `Gather` (a
load at a position computed from data). A `Let` is computed once per iteration of the first
`depth` axes and reused by everything deeper: that is how a softmax's row max and row sum are
computed once per row inside the same kernel that writes the normalized row.

Index expressions are integer affine forms (`Lin`) over loop variables and floor div/mod atoms,
simplified on construction with the known ranges of the loop variables, so div/mod survive only
where a view really needs them. Everything here is immutable and hashable.

The algorithm (this file) and the schedule (`Schedule`, also here) are separate: one kernel can
be rendered under many schedules.
"""
from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from dataclasses import dataclass, fields

from ir.dtypes import DType
from ir.ops import Op

class Struct:
    """Immutable value semantics with a cached hash (trees share sub-trees; hashing stays linear)."""

    def _key(self) -> tuple:
        names = type(self).__dict__.get("_field_names")
        if names is None:
            names = tuple(f.name for f in fields(self))
            type.__setattr__(type(self), "_field_names", names)
        return tuple(getattr(self, n) for n in names)

    def __hash__(self) -> int:
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((type(self).__name__,) + self._key())
            object.__setattr__(self, "_hash", h)
        return h

    def __eq__(self, other) -> bool:
        if self is other:
            return True
        if type(self) is not type(other) or hash(self) != hash(other):
            return False
        a, b = self._representative(), other._representative()
        if a is b:
            return True
        if a._key() != b._key():
            return False
        # equal: b's class of equal values joins a's, so comparing them (or values that contain
        # them) again costs one step; without it, equal values built apart (a norm's scale,
        # rebuilt at every use) were compared as trees, exponential in their nesting
        object.__setattr__(b, "_rep", a)
        return True

    def _representative(self) -> "Struct":
        x = self
        while "_rep" in x.__dict__:
            x = x.__dict__["_rep"]
        if x is not self:
            object.__setattr__(self, "_rep", x)        # (path compression)
        return x

    def __getstate__(self):
        # string hashes differ between processes: never carry a cached hash (or the link to
        # an equal value) through pickle
        return {k: v for k, v in self.__dict__.items() if k not in ("_hash", "_rep")}


def struct(cls):
    """A frozen dataclass with Struct's equality and cached hash."""
    return dataclass(frozen=True, eq=False)(cls)


def digest(root, buffers: dict[str, str] | None = None) -> str:
    """sha256 of a kernel-IR value's full content (every field of every Struct, recursively),
    the same in every process (unlike `hash`): a cache key. Iterative, and each shared subtree
    is digested once, so a 2,000-op chain or a DAG-shaped value costs its size, not its depth
    or its number of paths. `buffers`: names the `buffer` fields (of loads, gathers and
    stores) are digested as instead (two kernels that differ only in which buffers they use)."""
    memo: dict[int, bytes] = {}
    keep = []                       # what was visited stays alive, so its id stays its own
    stack: list = [(root, None)]
    while stack:
        x, kids = stack.pop()
        if id(x) in memo:
            continue
        if kids is None:
            if isinstance(x, Struct):
                kids = x._key()     # (a fresh tuple for some types, e.g. Const's repr: kept below)
                if buffers is not None and isinstance(x, (Load, Gather, Store)):
                    i = type(x)._field_names.index("buffer")     # (set by _key)
                    kids = kids[:i] + (buffers.get(kids[i], kids[i]),) + kids[i + 1:]
            elif isinstance(x, (tuple, list)):
                kids = tuple(x)
            else:
                memo[id(x)] = hashlib.sha256(f"{type(x).__name__}:{x!r}".encode()).digest()
                keep.append(x)
                continue
            keep.append(kids)
            stack.append((x, kids))
            stack.extend((k, None) for k in kids if id(k) not in memo)
            continue
        h = hashlib.sha256(type(x).__name__.encode())
        for k in kids:
            h.update(memo[id(k)])
        memo[id(x)] = h.digest()
        keep.append(x)
    return memo[id(root)].hex()


# --------------------------------------------------------------------------------------------
# index expressions
# --------------------------------------------------------------------------------------------


@struct
class Var(Struct):
    """A loop variable ranging over [0, extent)."""
    name: str
    extent: int

    def __str__(self) -> str:
        return self.name


@struct
class Div(Struct):
    """floor(arg / divisor), divisor > 0. floordiv() builds it only with an argument that is
    non-negative over its whole range, so the renderers' truncating division (C `/`, LLVM
    `sdiv`) computes it."""
    arg: "Lin"
    divisor: int

    def __str__(self) -> str:
        return f"({_paren(self.arg)} // {self.divisor})"


@struct
class Mod(Struct):
    """arg - divisor * floor(arg / divisor), divisor > 0 (a floor modulo: never negative). Its
    argument is non-negative over its range, as Div's, so C's `%` / LLVM's `srem` compute it."""
    arg: "Lin"
    divisor: int

    def __str__(self) -> str:
        return f"({_paren(self.arg)} % {self.divisor})"


Atom = Var | Div | Mod


def _paren(e: "Lin") -> str:
    return str(e) if len(e.terms) + (e.const != 0) <= 1 else f"({e})"


@struct
class Lin(Struct):
    """const + sum(coeff * atom): the one index-expression type. Build with the helpers below."""
    terms: tuple[tuple[Atom, int], ...] = ()
    const: int = 0

    def __str__(self) -> str:
        parts = [(str(a) if c == 1 else f"{c}*{a}") for a, c in self.terms]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts)

    @property
    def is_const(self) -> bool:
        return not self.terms

    def vars(self) -> set[Var]:
        out: set[Var] = set()
        for a, _ in self.terms:
            out |= atom_vars(a)
        return out

    def coeff(self, v: Var) -> int:
        """The coefficient of loop variable v when it appears only as a plain term, else 0."""
        return sum(c for a, c in self.terms if a == v)

    def __add__(self, other: "Lin | int") -> "Lin":
        other = as_lin(other)
        return _normalize(self.terms + other.terms, self.const + other.const)

    __radd__ = __add__

    def __mul__(self, k: int) -> "Lin":
        if k == 0:
            return Lin()
        return _normalize(tuple((a, c * k) for a, c in self.terms), self.const * k)

    __rmul__ = __mul__

    def __floordiv__(self, d: int) -> "Lin":
        return floordiv(self, d)

    def __mod__(self, d: int) -> "Lin":
        return mod(self, d)


def atom_vars(a: Atom) -> set[Var]:
    return {a} if isinstance(a, Var) else a.arg.vars()


def as_lin(x) -> Lin:
    if isinstance(x, Lin):
        return x
    if isinstance(x, int):
        return Lin((), x)
    if isinstance(x, (Var, Div, Mod)):
        return Lin(((x, 1),), 0)
    raise TypeError(f"not an index expression: {x!r}")


def _atom_key(a: Atom) -> str:
    return f"{type(a).__name__}:{a}"


def _normalize(terms, const: int) -> Lin:
    merged: dict[Atom, int] = {}
    for a, c in terms:
        merged[a] = merged.get(a, 0) + c
    # (x // d) * (k*d) + (x % d) * k -> x * k   (undo an unflatten/reflatten round trip)
    changed = True
    while changed:
        changed = False
        for a, c in list(merged.items()):
            if isinstance(a, Mod) and c and a in merged:
                div = Div(a.arg, a.divisor)
                if merged.get(div, 0) == c * a.divisor:
                    del merged[a], merged[div]
                    inner = a.arg * c
                    for ia, ic in inner.terms:
                        merged[ia] = merged.get(ia, 0) + ic
                    const += inner.const
                    changed = True
                    break
    items = tuple(sorted(((a, c) for a, c in merged.items() if c), key=lambda t: _atom_key(t[0])))
    return Lin(items, const)


def atom_range(a: Atom) -> tuple[int, int]:
    """Inclusive [lo, hi] of an atom."""
    if isinstance(a, Var):
        return 0, max(a.extent - 1, 0)
    lo, hi = lin_range(a.arg)
    if isinstance(a, Div):
        return lo // a.divisor, hi // a.divisor
    if lo >= 0 and hi < a.divisor:
        return lo, hi
    return 0, a.divisor - 1


def lin_range(e: Lin) -> tuple[int, int]:
    lo = hi = e.const
    for a, c in e.terms:
        alo, ahi = atom_range(a)
        lo += min(c * alo, c * ahi)
        hi += max(c * alo, c * ahi)
    return lo, hi


def floordiv(e: Lin | int, d: int) -> Lin:
    e = as_lin(e)
    if d <= 0:
        raise ValueError("divisor must be positive")
    if d == 1:
        return e
    q_terms, rest = [], []
    for a, c in e.terms:
        if c % d == 0:
            q_terms.append((a, c // d))
        else:
            rest.append((a, c))
    k, r = divmod(e.const, d)
    rest_lin = _normalize(tuple(rest), r)
    lo, hi = lin_range(rest_lin)
    shift = -(lo // d)                          # bring the argument's lower bound into [0, d)
    rest_lin, k, hi = rest_lin + shift * d, k - shift, hi + shift * d
    quotient = _normalize(tuple(q_terms), k)
    if hi < d:                                  # a constant quotient over the whole range
        return quotient
    if len(rest_lin.terms) == 1 and rest_lin.const == 0:
        a, c = rest_lin.terms[0]
        if isinstance(a, Div) and c == 1:       # (x // a) // b -> x // (a*b)
            return quotient + as_lin(Div(a.arg, a.divisor * d))
    split = _factor_split(rest_lin, d)
    if split is not None:                       # (g*x + y) // (g*m) -> x // m   (0 <= y < g)
        g, big, _ = split
        return quotient + floordiv(big, d // g)
    return quotient + as_lin(Div(rest_lin, d))


def mod(e: Lin | int, d: int) -> Lin:
    e = as_lin(e)
    if d <= 0:
        raise ValueError("divisor must be positive")
    if d == 1:
        return Lin()
    rest = tuple((a, c) for a, c in e.terms if c % d != 0)
    rest_lin = _normalize(rest, e.const % d)
    lo, hi = lin_range(rest_lin)
    shift = -(lo // d) * d                      # the argument's lower bound into [0, d), as floordiv
    rest_lin, hi = rest_lin + shift, hi + shift
    if hi < d:                                  # no wrap inside the range
        return rest_lin
    if len(rest_lin.terms) == 1 and rest_lin.const == 0:
        a, c = rest_lin.terms[0]
        if isinstance(a, Mod) and c == 1 and a.divisor % d == 0:   # (x % (k*d)) % d -> x % d
            return mod(a.arg, d)
    split = _factor_split(rest_lin, d)
    if split is not None:                       # (g*x + y) % (g*m) -> g * (x % m) + y   (0 <= y < g)
        g, big, small = split
        return mod(big, d // g) * g + small
    return as_lin(Mod(rest_lin, d))


def _factor_split(e: Lin, d: int) -> tuple[int, Lin, Lin] | None:
    """(g, x, y) with e = g*x + y, g > 1 a common factor of d and of some coefficients, and y
    within [0, g) over its whole range, so that e // d = x // (d/g) and e % d = g*(x % (d/g)) + y:
    a flattened window index, (784*r + p) // 7056 with p < 784, is r // 9. The largest g first;
    None where no factor leaves the rest in range."""
    for g in sorted({math.gcd(c, d) for _, c in e.terms}, reverse=True):
        if g <= 1:
            break
        big = tuple((a, c // g) for a, c in e.terms if c % g == 0)
        small = _normalize(tuple((a, c) for a, c in e.terms if c % g != 0), e.const % g)
        lo, hi = lin_range(small)
        if big and 0 <= lo and hi < g:
            return g, _normalize(big, e.const // g), small
    return None


def lin_values(e: Lin, var_values):
    """`e` evaluated with numpy (int64, floor division), each Var's values from var_values(v)
    (arrays that broadcast together)."""
    import numpy as np
    out = np.int64(e.const)
    for a, c in e.terms:
        if isinstance(a, Var):
            x = var_values(a)
        elif isinstance(a, Div):
            x = np.floor_divide(lin_values(a.arg, var_values), a.divisor)
        else:
            x = np.mod(lin_values(a.arg, var_values), a.divisor)
        out = out + c * x
    return out


@struct
class Bound(Struct):
    """The condition lo <= expr < hi."""
    expr: Lin
    lo: int
    hi: int

    def __str__(self) -> str:
        return f"{self.lo} <= {self.expr} < {self.hi}"


def bound(expr: Lin, lo: int, hi: int) -> Bound | bool:
    """A simplified bound: True if it always holds, False if it never does."""
    elo, ehi = lin_range(expr)
    if elo >= lo and ehi < hi:
        return True
    if ehi < lo or elo >= hi or hi <= lo:
        return False
    return Bound(expr, lo, hi)


# --------------------------------------------------------------------------------------------
# value expressions
# --------------------------------------------------------------------------------------------


@struct
class Load(Struct):
    """buffer[index] where every bound in `valid` holds, else `fill`. dtype: the buffer's."""
    buffer: str
    dtype: DType
    index: Lin
    valid: tuple[Bound, ...] = ()
    fill: float = 0.0


@struct
class Const(Struct):
    value: float | int | bool
    dtype: DType

    def _key(self) -> tuple:  # -0.0 differs from 0.0 and NaN equals itself
        return (repr(self.value), self.dtype)


@struct
class Compute(Struct):
    """An elementwise primitive op (ir.ops.ELEMENTWISE) producing `dtype`.

    Half dtypes compute in f32 and round to the half type after the op (like the interpreter).
    CAST converts srcs[0] to dtype; CMPLT compares in the operands' compute type.
    """
    op: Op
    dtype: DType
    srcs: tuple["Value", ...]


@struct
class Reduce(Struct):
    """op (SUM or MAX) of `body` over all values of `vars` (in row-major order of vars).

    Accumulates in `dtype.compute` (f32 for halves; f32 sums of f32 may use a wider or
    reassociated accumulator only where the schedule allows) and yields `dtype`.
    """
    op: Op
    dtype: DType
    vars: tuple[Var, ...]
    body: "Value"
    # the reduction of a contraction kernel (a CONTRACT node: body is the product of its two
    # operands, both in f32): the backends run these, and only these, as their product kernels
    contraction: bool = False


@struct
class Iota(Struct):
    """The integer value of an index expression (an IOTA node read at that position)."""
    index: Lin
    dtype: DType


@struct
class Gather(Struct):
    """buffer[base + stride * index] where 0 <= index < extent, else 0 (False for bool): a load
    at a position computed from data (`index`, an i32 value). dtype: the buffer's."""
    buffer: str
    dtype: DType
    base: Lin
    stride: int
    extent: int
    index: "Value"


@struct
class Ref(Struct):
    """The value of the kernel's `Let` called `name`."""
    name: str
    dtype: DType


Value = Load | Const | Compute | Reduce | Ref | Iota | Gather


@struct
class Let(Struct):
    """`value`, computed once per iteration of the kernel's first `depth` axes."""
    name: str
    depth: int
    value: Value


@struct
class Online(Struct):
    """The tuple accumulator of online softmax: a running max and sums rescaled as it grows.

    Computed once per iteration of the kernel's first `depth` axes, like a `Let`. Its meaning
    (what `evaluate_program` computes) is a max and sums over `var`:
        Ref(name)    = max over var of tile_max
        Ref(sums[k]) = sum over var of terms[k], reading Ref(name) as that max.
    Each term depends on the max only through one factor exp2(A) with A affine in the max with
    coefficient -scale (scale > 0), so a backend may run it as one pass over var carrying the
    state (m, sums): m' = max(m, tile_max); sums[k] = sums[k] * exp2(scale * (m - m')) + terms[k]
    with Ref(name) read as m'. `ir.lower` builds it from the two-level split reductions
    the online-softmax rules produce (row max of tile maxes, sums of per-tile sums rescaled by
    exp2(c * (m_b - m))); it is what lets them run as one kernel that never materializes tiles.
    """
    name: str
    depth: int
    var: Var
    tile_max: "Value"
    sums: tuple[str, ...]
    terms: tuple["Value", ...]
    scale: float
    # Lane sums (flash attention's accumulator): a term may depend on one output axis deeper
    # than `depth`, `lane`; its sum is then an array over that axis, read back by Ref at the
    # lane's value. `gemv[k]` says how to compute such a term without redoing its lane-free
    # work per lane: (outer factors, r, a factors, b factors) with
    # terms[k] == prod(outer) * sum over r of prod(a) * prod(b), only b reading the lane;
    # r is None (and a empty) when terms[k] == prod(outer) * prod(b).
    lane: Var | None = None
    gemv: tuple = ()

    @property
    def dtype(self) -> DType:
        return self.tile_max.dtype

    def values(self) -> tuple["Value", ...]:
        return (self.tile_max,) + self.terms

    def lane_sum(self, k: int):
        """The gemv form of sum k, or None for a scalar sum."""
        return self.gemv[k] if self.gemv else None


@struct
class Store(Struct):
    buffer: str
    index: Lin
    value: Value


@struct
class Kernel(Struct):
    """A loop nest over `axes` (outer to inner): lets at their depth, then the stores."""
    name: str
    axes: tuple[Var, ...]
    lets: tuple[Let | Online, ...]
    stores: tuple[Store, ...]

    def values(self) -> list["Value"]:
        """Every value the kernel computes (lets, online terms, stores), in order."""
        out = []
        for let in self.lets:
            out.extend(let.values() if isinstance(let, Online) else (let.value,))
        return out + [s.value for s in self.stores]

    @property
    def numel(self) -> int:
        return math.prod(v.extent for v in self.axes)

    def reads(self) -> set[str]:
        out: set[str] = set()
        for e in self.values():
            for node in walk(e):
                if isinstance(node, (Load, Gather)):
                    out.add(node.buffer)
        return out

    def writes(self) -> set[str]:
        return {s.buffer for s in self.stores}

    def __str__(self) -> str:
        return format_kernel(self)


@struct
class Buffer(Struct):
    """A flat array of `size` elements. kind: 'input' | 'output' | 'temp'."""
    name: str
    dtype: DType
    size: int
    kind: str


@struct
class KernelProgram(Struct):
    """Kernels in execution order. `inputs`/`outputs` name buffers in the graph's call order
    (an output name may repeat, or name an input buffer only via a copy kernel)."""
    buffers: tuple[Buffer, ...]
    kernels: tuple[Kernel, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    output_shapes: tuple[tuple[int, ...], ...]

    def buffer(self, name: str) -> Buffer:
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(name)

    def __str__(self) -> str:
        lines = [f"buffers: " + ", ".join(f"{b.name}:{b.kind}:{b.dtype.value}[{b.size}]" for b in self.buffers)]
        lines += [str(k) for k in self.kernels]
        lines.append("outputs: " + ", ".join(self.outputs))
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# schedule (separate from the algorithm)
# --------------------------------------------------------------------------------------------


@struct
class KernelSchedule(Struct):
    """How one kernel runs.

    parallel:     at most how many leading axes are collapsed into the loop that is split into
                  chunks across threads (0: as many as the kernel allows). Chunks never split a
                  reduction, so results do not depend on the thread count.
    vector_width: lanes for the innermost axis (1: scalar).
    unroll:       > 1 turns on the backend's loop unroller (LLVM: the unroll pass; the
                  vectorizer interleaves innermost loops either way).
    tile:         (m, n, k) block sizes for the blocked matmul path; () lets the backend choose.
    fast_math:    allow reassociating reductions (vectorized, still a fixed order per build).
    rows:         an Online loop (flash attention) runs this many consecutive rows of the
                  parallel loop in one pass over the tiles, so the data the rows share (keys,
                  values) is loaded once per step for all of them (1: one row per pass).
    keys:         an Online loop whose tile max is a dot product (attention's scores) steps
                  blocks of keys (two vectors' width on the CPU): the scores as vectors (from a
                  packed K panel, or one FMA per key and vector of the dot with the lanes summed
                  by a shuffle tree), their exps as vectors, the value rows accumulated in
                  registers (False: one key per step).
    library:      "" runs the kernel as generated code; "blas" runs a kernel that is a plain
                  matrix product as a library call (the CPU: the BLAS numpy links,
                  backends/llvm/blas.py); a kernel the library cannot run stays generated.
    """
    parallel: int = 0
    vector_width: int = 8
    unroll: int = 1
    tile: tuple[int, ...] = ()
    fast_math: bool = True
    rows: int = 8
    keys: bool = True
    library: str = ""


@struct
class Schedule(Struct):
    """A program-wide schedule: thread count, a default KernelSchedule and per-kernel overrides."""
    threads: int = 0                       # 0: all cores
    default: KernelSchedule = KernelSchedule()
    overrides: tuple[tuple[str, KernelSchedule], ...] = ()
    name: str = "default"

    def for_kernel(self, name: str) -> KernelSchedule:
        for k, s in self.overrides:
            if k == name:
                return s
        return self.default


# --------------------------------------------------------------------------------------------
# traversal and printing
# --------------------------------------------------------------------------------------------


def children(e: Value) -> tuple[Value, ...]:
    if isinstance(e, Compute):
        return e.srcs
    if isinstance(e, Reduce):
        return (e.body,)
    if isinstance(e, Gather):
        return (e.index,)
    return ()


def walk(e: Value):
    """Every sub-expression of e (pre-order, shared sub-trees visited once)."""
    seen, stack = set(), [e]
    while stack:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        yield x
        stack.extend(reversed(children(x)))


def postorder(e: Value, descend=None):
    """Every sub-expression of e, children before parents, shared sub-trees once (an explicit
    stack: expression depth is not limited by Python's recursion limit). With `descend`, only
    the children of nodes for which descend(node) holds are visited."""
    done, stack = set(), [e]
    while stack:
        x = stack[-1]
        if x in done:
            stack.pop()
            continue
        pending = [c for c in children(x) if c not in done] if descend is None or descend(x) else []
        if pending:
            stack.extend(reversed(pending))
            continue
        stack.pop()
        done.add(x)
        yield x


def value_vars(e: Value, let_vars: dict[str, set[Var]] | None = None, _memo=None) -> set[Var]:
    """Loop variables a value depends on (reduction variables it binds itself excluded).

    `let_vars` maps a Let's name to its own variables, so a Ref counts as depending on them.
    """
    memo = {} if _memo is None else _memo
    if e in memo:
        return memo[e]
    for x in postorder(e):
        if x in memo:
            continue
        if isinstance(x, Load):
            out = set(x.index.vars())
            for b in x.valid:
                out |= b.expr.vars()
        elif isinstance(x, Ref):
            out = set(let_vars.get(x.name, ())) if let_vars else set()
        elif isinstance(x, Iota):
            out = set(x.index.vars())
        elif isinstance(x, Gather):
            out = x.base.vars() | memo[x.index]
        elif isinstance(x, Reduce):
            out = memo[x.body] - set(x.vars)
        else:
            out = set()
            for c in children(x):
                out |= memo[c]
        memo[x] = out
    return memo[e]


LISTING_LIMIT = 4000   # characters of a value's plain listing past which shared parts get names


def format_value(e: Value) -> str:
    """A value as text. Shared sub-expressions are written out at each use, unless that makes the
    text longer than LISTING_LIMIT (a chain of relus doubles it per op): then every shared
    non-leaf sub-expression is listed once as `where vN = ...`."""
    order = list(postorder(e))
    size: dict[Value, int] = {}
    uses: dict[Value, int] = defaultdict(int)
    for x in order:
        size[x] = 8 + sum(size[c] for c in children(x))
        for c in children(x):
            uses[c] += 1
    named = {} if size[e] <= LISTING_LIMIT else \
        {x: f"v{i}" for i, x in enumerate(x for x in order if uses[x] > 1 and children(x))}
    text: dict[Value, str] = {}
    for x in order:
        if isinstance(x, Load):
            t = f"{x.buffer}[{x.index}]"
            if x.valid:
                t += " if " + " and ".join(map(str, x.valid)) + f" else {x.fill}"
        elif isinstance(x, Const):
            t = repr(x.value)
        elif isinstance(x, Iota):
            t = f"iota({x.index})"
        elif isinstance(x, Gather):
            t = f"{x.buffer}[{x.base} + {x.stride}*{text[x.index]} if 0 <= . < {x.extent} else 0]"
        elif isinstance(x, Ref):
            t = x.name
        elif isinstance(x, Reduce):
            vs = ", ".join(f"{v.name}<{v.extent}" for v in x.vars)
            t = f"{'contract' if x.contraction else x.op.value}[{vs}]({text[x.body]})"
        else:
            args = ", ".join(text[s] for s in x.srcs)
            t = f"cast<{x.dtype.value}>({args})" if x.op == Op.CAST else f"{x.op.value}({args})"
        text[x] = named.get(x, t)
        if x in named:
            named[x] = (named[x], t)
    if not named:
        return text[e]
    defs = [f"{name} = {t}" for x, (name, t) in named.items() if x is not e]
    return f"{named[e][1] if e in named else text[e]} where " + "; ".join(defs)


def format_kernel(k: Kernel) -> str:
    axes = ", ".join(f"{v.name}<{v.extent}" for v in k.axes)
    lines = [f"kernel {k.name}({axes}):"]
    for let in k.lets:
        if isinstance(let, Online):
            lines.append(f"  [{let.depth}] online[{let.var.name}<{let.var.extent}] ({let.name}, {', '.join(let.sums)}):"
                         f" {let.name} = max({format_value(let.tile_max)}), rescale exp2({let.scale!r} * (old - new))")
            for name, t in zip(let.sums, let.terms):
                lines.append(f"      {name} = sum({format_value(t)})")
            continue
        lines.append(f"  [{let.depth}] {let.name} = {format_value(let.value)}")
    for st in k.stores:
        lines.append(f"  {st.buffer}[{st.index}] = {format_value(st.value)}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# reference semantics: a numpy evaluator of kernel programs (slow; small shapes; for tests)
# --------------------------------------------------------------------------------------------


def evaluate_program(program: KernelProgram, args) -> list:
    """Run `program` with numpy broadcasting (one array axis per loop variable)."""
    import numpy as np

    bufs = {}
    for name, a in zip(program.inputs, args):
        b = program.buffer(name)
        bufs[name] = np.ascontiguousarray(a, dtype=b.dtype.np).reshape(-1)
    for b in program.buffers:
        if b.kind != "input":
            bufs[b.name] = np.zeros(b.size, b.dtype.np)
    for k in program.kernels:
        _eval_kernel(k, bufs)
    return [bufs[name].reshape(shape).copy() for name, shape in zip(program.outputs, program.output_shapes)]


def _eval_kernel(k: Kernel, bufs) -> None:
    import numpy as np

    all_vars = list(k.axes)
    for let in k.lets:
        if isinstance(let, Online) and let.var not in all_vars:
            all_vars.append(let.var)
    for e in k.values():
        for x in walk(e):
            if isinstance(x, Reduce):
                all_vars.extend(v for v in x.vars if v not in all_vars)
    ndim = len(all_vars)
    pos = {v: i for i, v in enumerate(all_vars)}

    def var_array(v: Var):
        shape = [1] * ndim
        shape[pos[v]] = v.extent
        return np.arange(v.extent, dtype=np.int64).reshape(shape)

    def lin(e: Lin):
        return lin_values(e, var_array)

    env: dict[str, object] = {}
    memo: dict[Value, object] = {}

    def ev(e: Value):
        if e not in memo:
            for x in postorder(e):      # children first: _eval_value's own ev() calls are lookups
                if x not in memo:
                    memo[x] = _eval_value(x, ev, lin, env, bufs, pos, ndim)
        return memo[e]

    for let in k.lets:
        if isinstance(let, Online):   # its meaning: the max over var, then the sums at that max
            axis = pos[let.var]

            def along(x):
                x = np.asarray(x)
                x = x.reshape(x.shape + (1,) * (ndim - x.ndim))
                shape = list(x.shape)
                shape[axis] = let.var.extent
                return np.broadcast_to(x, shape)

            env[let.name] = along(ev(let.tile_max)).max(axis=axis, keepdims=True)
            for name, term in zip(let.sums, let.terms):
                acc = np.float64 if term.dtype == DType.f32 else np.float32
                env[name] = along(ev(term)).astype(acc).sum(axis=axis, keepdims=True).astype(term.dtype.np)
            continue
        env[let.name] = ev(let.value)
    for st in k.stores:
        if any(v.extent == 0 for v in k.axes):
            continue
        shape = [v.extent for v in k.axes] + [1] * (ndim - len(k.axes))
        val = np.broadcast_to(np.asarray(ev(st.value)), shape)
        idx = np.broadcast_to(lin(st.index), shape)
        bufs[st.buffer][idx.reshape(-1)] = val.reshape(-1).astype(bufs[st.buffer].dtype)


def _eval_value(e: Value, ev, lin, env, bufs, pos, ndim):
    import numpy as np

    from ir.interpreter import elementwise

    with np.errstate(all="ignore"):
        if isinstance(e, Const):
            return np.asarray(e.value, dtype=e.dtype.np)
        if isinstance(e, Ref):
            return env[e.name]
        if isinstance(e, Iota):
            return np.asarray(lin(e.index)).astype(np.int32)
        if isinstance(e, Gather):
            j = np.asarray(ev(e.index)).astype(np.int64)
            ok = (j >= 0) & (j < e.extent)
            buf = bufs[e.buffer]
            got = buf[np.where(ok, lin(e.base) + e.stride * j, 0)] if buf.size else np.zeros(j.shape, buf.dtype)
            return np.where(ok, got, np.zeros((), buf.dtype))
        if isinstance(e, Load):
            idx = lin(e.index)
            buf = bufs[e.buffer]
            if not e.valid:
                return buf[idx] if np.ndim(idx) else np.asarray(buf[int(idx)])
            ok = np.bool_(True)
            for b in e.valid:
                x = lin(b.expr)
                ok = ok & (x >= b.lo) & (x < b.hi)
            safe = np.where(ok, idx, 0)
            return np.where(ok, buf[safe], np.asarray(e.fill, dtype=buf.dtype))
        if isinstance(e, Reduce):
            body = ev(e.body)
            axes = tuple(pos[v] for v in e.vars)
            shape = list(np.shape(body)) + [1] * (ndim - np.ndim(body))
            for v in e.vars:
                shape[pos[v]] = v.extent
            body = np.broadcast_to(np.asarray(body).reshape(list(np.shape(body)) + [1] * (ndim - np.ndim(body))), shape)
            if e.op == Op.SUM:
                acc = np.float64 if e.dtype in (DType.f32, DType.f64) else (np.float32 if e.dtype.is_float else np.int64)
                r = body.astype(acc).sum(axis=axes, keepdims=True)
            else:
                r = body.max(axis=axes, keepdims=True)
            return r.astype(e.dtype.np)
        return elementwise(e.op, e.dtype, e.srcs[0].dtype, [np.asarray(ev(s)) for s in e.srcs])


# --------------------------------------------------------------------------------------------
# substitution
# --------------------------------------------------------------------------------------------


def substitute_lin(e: Lin, mapping: dict[Var, Lin]) -> Lin:
    """e with loop variables replaced (div/mod re-simplified)."""
    out = Lin(const=e.const)
    for a, c in e.terms:
        if isinstance(a, Var):
            x = mapping.get(a, as_lin(a))
        elif isinstance(a, Div):
            x = floordiv(substitute_lin(a.arg, mapping), a.divisor)
        else:
            x = mod(substitute_lin(a.arg, mapping), a.divisor)
        out = out + x * c
    return out


def map_leaves(e: Value, leaf, _memo=None) -> Value:
    """e rebuilt with every leaf (Load, Const, Ref) replaced by leaf(it); shared sub-trees once."""
    memo = {} if _memo is None else _memo
    if e in memo:
        return memo[e]
    for x in postorder(e):
        if x in memo:
            continue
        if isinstance(x, Compute):
            memo[x] = Compute(x.op, x.dtype, tuple(memo[s] for s in x.srcs))
        elif isinstance(x, Reduce):
            memo[x] = Reduce(x.op, x.dtype, x.vars, memo[x.body], x.contraction)
        elif isinstance(x, Gather):
            memo[x] = leaf(Gather(x.buffer, x.dtype, x.base, x.stride, x.extent, memo[x.index]))
        else:
            memo[x] = leaf(x)
    return memo[e]


def substitute(e: Value, mapping: dict[Var, Lin], _memo=None) -> Value:
    """e with loop variables replaced in every index and bound."""
    def leaf(x):
        if isinstance(x, Iota):
            return Iota(substitute_lin(x.index, mapping), x.dtype)
        if isinstance(x, Gather):
            return Gather(x.buffer, x.dtype, substitute_lin(x.base, mapping), x.stride, x.extent, x.index)
        if not isinstance(x, Load):
            return x
        return Load(x.buffer, x.dtype, substitute_lin(x.index, mapping),
                    tuple(Bound(substitute_lin(b.expr, mapping), b.lo, b.hi) for b in x.valid), x.fill)
    return map_leaves(e, leaf, _memo)


def _reduce_free(e: Value) -> set:
    """The sub-values of e with no reduction inside (canonical leaves them as they are)."""
    out = set()
    for x in postorder(e):
        if not isinstance(x, Reduce) and all(c in out for c in children(x)):
            out.add(x)
    return out


def canonical(e: Value) -> Value:
    """e with every reduction's variables renamed by nesting depth and position (`_c<depth>_<i>`),
    so two values that differ only in the names of their bound variables compare equal. Each
    distinct sub-value is renamed once per depth (the names depend on nothing else), so values
    that share sub-values many times over, such as a norm's scale rebuilt at every use, take
    steps linear in their size rather than in their number of paths."""
    memo: dict = {}

    def go(x: Value, depth: int, plain: set) -> Value:
        if x in plain:
            return x
        key = (x, depth)
        if key in memo:
            return memo[key]
        if isinstance(x, Reduce):
            new = tuple(Var(f"_c{depth}_{i}", v.extent) for i, v in enumerate(x.vars))
            body = substitute(x.body, {v: as_lin(nv) for v, nv in zip(x.vars, new)})
            r = Reduce(x.op, x.dtype, new, go(body, depth + 1, _reduce_free(body)), x.contraction)
        elif isinstance(x, Compute):
            r = Compute(x.op, x.dtype, tuple(go(s, depth, plain) for s in x.srcs))
        elif isinstance(x, Gather):
            r = Gather(x.buffer, x.dtype, x.base, x.stride, x.extent, go(x.index, depth, plain))
        else:
            r = x
        memo[key] = r
        return r
    return go(e, 0, _reduce_free(e))


def rename_refs(e: Value, names: dict[str, str]) -> Value:
    """e with Ref(old) replaced by Ref(names[old])."""
    return map_leaves(e, lambda x: Ref(names.get(x.name, x.name), x.dtype) if isinstance(x, Ref) else x)
