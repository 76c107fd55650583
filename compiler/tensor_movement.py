"""Movement ops beyond reshape/permute/expand/slice/pad, mixed into `Tensor`. All are views
(metadata, no copies) except where noted: replicate and reflect padding place their edges
with `cat`."""
from __future__ import annotations

import math

from compiler.errors import ShapeError
from compiler.tensor_args import int_list, is_int, norm_axes, norm_axis

PAD_MODES = ("constant", "reflect", "replicate", "circular")


class MovementOps:
    """Movement methods of `Tensor`."""

    def flip(self, *dims):
        dims = dims[0] if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims
        axes = norm_axes("flip", tuple(dims), self.ndim, self.shape)
        axes = tuple(a for a in axes if self.ndim and self.shape[a] > 1)
        return self._move(lambda st: st.flip(axes)) if axes else self

    def narrow(self, dim: int, start: int, length: int):
        dim = norm_axis("narrow", dim, self.ndim, self.shape)
        size = self.shape[dim]
        if not is_int(start) or not is_int(length) or not -size <= start <= size:
            raise ShapeError(f"start {start!r} is out of range for axis {dim} of size {size}", "narrow")
        start %= size if size else 1
        if length < 0 or start + length > size:
            raise ShapeError(f"start {start} + length {length} exceeds axis {dim} of size {size}", "narrow")
        return self.slice(dim, start, start + length)

    def split(self, split_size_or_sections, dim: int = 0):
        """Pieces of `split_size` along `dim` (the last may be smaller), or of the listed sizes."""
        dim = norm_axis("split", dim, self.ndim, self.shape)
        size = self.shape[dim]
        if is_int(split_size_or_sections):
            step = int(split_size_or_sections)
            if step <= 0 and not (step == 0 and size == 0):
                raise ShapeError(f"split size must be positive, got {step}", "split")
            sizes = [min(step, size - s) for s in range(0, size, step)] if step else [0]
        else:
            sizes = list(int_list("split", "sections", split_size_or_sections))
            if sum(sizes) != size or any(s < 0 for s in sizes):
                raise ShapeError(f"sections {sizes} do not add up to axis {dim} of size {size}", "split")
        out, start = [], 0
        for s in sizes:
            out.append(self.slice(dim, start, start + s))
            start += s
        return tuple(out)

    def chunk(self, chunks: int, dim: int = 0):
        """Like torch.chunk: pieces of ceil(size / chunks), so there may be fewer than `chunks`."""
        if not is_int(chunks) or chunks <= 0:
            raise ShapeError(f"chunks must be a positive int, got {chunks!r}", "chunk")
        dim = norm_axis("chunk", dim, self.ndim, self.shape)
        size = self.shape[dim]
        return self.split(max(-(-size // chunks), 1) if size else 0, dim)

    def tensor_split(self, sections: int, dim: int = 0):
        """`sections` pieces whose sizes differ by at most one (the first ones larger)."""
        if not is_int(sections) or sections <= 0:
            raise ShapeError(f"sections must be a positive int, got {sections!r}", "tensor_split")
        dim = norm_axis("tensor_split", dim, self.ndim, self.shape)
        q, r = divmod(self.shape[dim], sections)
        return self.split([q + 1] * r + [q] * (sections - r), dim)

    def unbind(self, dim: int = 0):
        dim = norm_axis("unbind", dim, self.ndim, self.shape)
        return tuple(self.select(dim, i) for i in range(self.shape[dim]))

    def select(self, dim: int, index: int):
        dim = norm_axis("select", dim, self.ndim, self.shape)
        return self[(slice(None),) * dim + (index,)]

    def movedim(self, source, destination):
        src = norm_axes("movedim", source, self.ndim, self.shape)
        dst = norm_axes("movedim", destination, self.ndim, self.shape)
        if len(src) != len(dst):
            raise ShapeError(f"movedim needs as many destinations as sources, got {source} and {destination}",
                             "movedim")
        order = [None] * self.ndim
        for s, d in zip(src, dst):
            order[d] = s
        rest = iter(a for a in range(self.ndim) if a not in src)
        return self.permute([o if o is not None else next(rest) for o in order])

    moveaxis = movedim

    def swapaxes(self, a: int, b: int):
        return self.transpose(a, b)

    def unflatten(self, dim: int, sizes):
        dim = norm_axis("unflatten", dim, self.ndim, self.shape)
        sizes = list(int_list("unflatten", "sizes", sizes))
        if sizes.count(-1) == 1:
            known = math.prod(s for s in sizes if s != -1)
            sizes[sizes.index(-1)] = self.shape[dim] // known if known else 0
        if math.prod(sizes) != self.shape[dim]:
            raise ShapeError(f"sizes {tuple(sizes)} do not multiply to axis {dim} of size {self.shape[dim]}",
                             "unflatten")
        return self.reshape(self.shape[:dim] + tuple(sizes) + self.shape[dim + 1:])

    def repeat(self, *sizes):
        """Tile the tensor `sizes[i]` times along each axis (like torch.Tensor.repeat): a view
        that expands a new axis in front of each one and merges the pairs."""
        sizes = sizes[0] if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else sizes
        sizes = int_list("repeat", "sizes", tuple(sizes))
        if len(sizes) < self.ndim or any(s < 0 for s in sizes):
            raise ShapeError(f"repeat needs one non-negative count per axis of {self.shape} (or more), "
                             f"got {sizes}", "repeat")
        src = (1,) * (len(sizes) - self.ndim) + self.shape
        x = self.reshape(tuple(d for s in src for d in (1, s)))
        x = x.expand(tuple(d for r, s in zip(sizes, src) for d in (r, s)))
        return x.reshape(tuple(r * s for r, s in zip(sizes, src)))

    def tile(self, *dims):
        """Like torch.tile: `repeat` with missing leading counts taken as 1."""
        dims = dims[0] if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims
        dims = int_list("tile", "dims", tuple(dims))
        return self.repeat((1,) * (self.ndim - len(dims)) + tuple(dims))

    def roll(self, shifts, dims=None):
        """Rotate elements along `dims` (flattened when None): a slice of the axis repeated twice."""
        if dims is None:
            return self.flatten().roll(shifts, 0).reshape(self.shape)
        shifts = int_list("roll", "shifts", shifts)
        dims = norm_axes("roll", dims, self.ndim, self.shape) if not isinstance(dims, (tuple, list)) else \
            tuple(norm_axis("roll", d, self.ndim, self.shape) for d in dims)
        if len(shifts) != len(dims):
            raise ShapeError(f"roll needs one shift per dim, got {shifts} and {dims}", "roll")
        x = self
        for s, d in zip(shifts, dims):
            n = x.shape[d]
            if n == 0 or s % n == 0:
                continue
            twice = x.repeat(tuple(2 if a == d else 1 for a in range(x.ndim)))
            x = twice.slice(d, n - s % n, 2 * n - s % n)
        return x

    def unfold(self, dimension: int, size: int, step: int):
        """All windows of `size` elements `step` apart along `dimension`, as a new last axis
        (like torch.Tensor.unfold): a view with overlapping strides, nothing is copied."""
        dim = norm_axis("unfold", dimension, self.ndim, self.shape)
        n = self.shape[dim] if self.ndim else 1
        if not is_int(size) or not is_int(step) or size < 0 or step <= 0 or size > n:
            raise ShapeError(f"unfold of size {size!r}, step {step!r} along an axis of {n}", "unfold")
        x = self.movedim(dim, -1) if self.ndim else self.reshape(1)
        w = x.windows((size,), (step,))
        return w.movedim(-2, dim) if self.ndim else w.reshape(w.shape[-2:])

    def windows(self, kernel, stride=None, dilation=None):
        """Sliding windows over the trailing len(kernel) axes: (..., S) -> (..., O, K), tap k of
        window o reading o*stride + k*dilation (the view convolutions and pooling reduce)."""
        kernel = int_list("windows", "kernel", kernel)
        n = len(kernel)
        stride = int_list("windows", "stride", stride if stride is not None else 1, n)
        dilation = int_list("windows", "dilation", dilation if dilation is not None else 1, n)
        spatial = self.shape[self.ndim - n:]
        if n > self.ndim or any(k < 1 for k in kernel) or any(s < 1 for s in stride + dilation):
            raise ShapeError(f"windows {kernel} (stride {stride}, dilation {dilation}) over {self.shape}", "windows")
        for s, k, d in zip(spatial, kernel, dilation):
            if d * (k - 1) + 1 > s:
                raise ShapeError(f"a window of {k} taps {d} apart does not fit in an axis of {s} "
                                 f"(input {self.shape})", "windows")
        return self._move(lambda st: st.windows(kernel, stride, dilation))

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1):
        """The diagonal of axes dim1, dim2 as a new last axis (like torch.diagonal): a view
        whose stride is the sum of both axes' strides."""
        a, b = norm_axis("diagonal", dim1, self.ndim, self.shape), norm_axis("diagonal", dim2, self.ndim, self.shape)
        if a == b:
            raise ShapeError(f"diagonal needs two different axes, got {dim1} and {dim2}", "diagonal")
        rest = [d for d in range(self.ndim) if d not in (a, b)]
        x = self.permute(rest + [a, b])
        r, c = x.shape[-2:]
        x = x[..., max(-offset, 0):, max(offset, 0):]
        n = max(min(x.shape[-2], x.shape[-1]), 0)
        x = x[..., :n, :n]
        flat = x.reshape(x.shape[:-2] + (n * n,))
        return flat[..., ::n + 1] if n else flat

    def diag(self, diagonal: int = 0):
        """Like torch.diag: of a 2-d tensor its `diagonal`-th diagonal (a view); of a 1-d one the
        square matrix with it on that diagonal and zeros elsewhere (a `where` on a diagonal mask)."""
        if not is_int(diagonal):
            raise ShapeError(f"diag's diagonal must be an int, got {diagonal!r}", "diag")
        k = int(diagonal)
        if self.ndim == 2:
            return self.diagonal(k)
        if self.ndim != 1:
            raise ShapeError(f"diag takes a 1-d or 2-d tensor, got shape {self.shape}", "diag")
        from compiler.creation import triangle
        n = self.shape[0] + abs(k)
        v = self.pad([(0, abs(k))], 0) if k else self
        # row i holds v[i] (at column i + k) for k >= 0; column j holds v[j] (at row j - k) below
        vals = v.reshape(n, 1) if k >= 0 else v.reshape(1, n)
        return triangle(n, n, k, "eq").where(vals, vals._const(0))   # (0 of its dtype: False for bool)

    # --- padding modes --------------------------------------------------------------------------
    def _pad_mode(self, pads, mode: str):
        """Pad with edge values: reflect (mirror, edge not repeated), replicate (edge
        repeated), circular (wrap around). Axis by axis, each a view or a cat of views."""
        from compiler.tensor import cat
        x = self
        for axis, (before, after) in enumerate(pads):
            if before == after == 0:
                continue
            n = x.shape[axis]
            if mode == "circular":
                if before > n or after > n:
                    raise ShapeError(f"circular padding ({before}, {after}) exceeds axis {axis} of size {n}", "pad")
                x = x.repeat(tuple(3 if a == axis else 1 for a in range(x.ndim))).slice(axis, n - before, 2 * n + after)
                continue
            if mode == "reflect" and (before >= n or after >= n):
                raise ShapeError(f"reflect padding ({before}, {after}) must be smaller than axis {axis} of size {n}",
                                 "pad")
            if mode == "replicate" and n == 0:
                raise ShapeError(f"replicate padding of an empty axis {axis}", "pad")
            parts = []
            if before:
                parts.append(x.slice(axis, 1, before + 1).flip(axis) if mode == "reflect" else
                             x.slice(axis, 0, 1).expand(tuple(before if a == axis else s for a, s in enumerate(x.shape))))
            parts.append(x)
            if after:
                parts.append(x.slice(axis, n - 1 - after, n - 1).flip(axis) if mode == "reflect" else
                             x.slice(axis, n - 1, n).expand(tuple(after if a == axis else s for a, s in enumerate(x.shape))))
            x = cat(parts, axis)
        return x
