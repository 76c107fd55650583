"""CUDA C++ kernel templates. Each module renders one kernel family from a plan step."""
from __future__ import annotations

MAX_GRID_YZ = 65535     # the most blocks along gridDim.y and gridDim.z


def _split(batch: int) -> int:
    """How many batches share one z index: past 65535 batches (64 x 2048 attention rows times a
    64-wide product, say) the extra ones go to y."""
    return -(-batch // MAX_GRID_YZ)


def batched_grid(n_tiles: int, m_tiles: int, batch: int) -> tuple[tuple[int, int, int], int]:
    """The grid of a batched matrix product (x: n tiles, y: m tiles times the split, z:
    batches) and the split (_split)."""
    split = _split(batch)
    if m_tiles * split > MAX_GRID_YZ:
        raise ValueError(f"a batched product of {batch} x {m_tiles} row tiles exceeds the grid")
    return (n_tiles, m_tiles * split, -(-batch // split)), split


def block_coords(m_tiles: int, batch: int) -> tuple[str, str, str]:
    """CUDA expressions matching batched_grid: the block's batch index, its m-tile index, and
    an early exit for the blocks past the last batch (whole blocks, before any barrier)."""
    split = _split(batch)
    if split == 1:
        return "blockIdx.z", "blockIdx.y", ""
    bz = f"((long long)blockIdx.z * {split} + blockIdx.y / {m_tiles})"
    return bz, f"(blockIdx.y % {m_tiles})", f"if (bz >= {batch}LL) return;"
