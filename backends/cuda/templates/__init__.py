"""CUDA C++ kernel templates. Each module renders one kernel family from a plan step."""
from __future__ import annotations

MAX_GRID_YZ = 65535     # the most blocks along gridDim.y and gridDim.z


def batched_grid(n_tiles: int, m_tiles: int, batch: int) -> tuple[tuple[int, int, int], int]:
    """The grid of a batched matrix product (x: n tiles, y: m tiles, z: batches) and `split`,
    how many batches share one z index: past 65535 batches (64 x 2048 attention rows times a
    64-wide product, say) the extra ones go to y, which then holds m_tiles * split rows."""
    split = -(-batch // MAX_GRID_YZ)
    if m_tiles * split > MAX_GRID_YZ:
        raise ValueError(f"a batched product of {batch} x {m_tiles} row tiles exceeds the grid")
    return (n_tiles, m_tiles * split, -(-batch // split)), split


def block_coords(m_tiles: int, batch: int, split: int) -> tuple[str, str, str]:
    """CUDA expressions matching batched_grid: the block's batch index, its m-tile index, and
    an early exit for the blocks past the last batch (whole blocks, before any barrier)."""
    if split == 1:
        return "blockIdx.z", "blockIdx.y", ""
    bz = f"((long long)blockIdx.z * {split} + blockIdx.y / {m_tiles})"
    return bz, f"(blockIdx.y % {m_tiles})", f"if (bz >= {batch}LL) return;"
