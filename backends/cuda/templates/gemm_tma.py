"""Hopper GEMM with the tensor memory accelerator: one producer warp copies A and B tiles by
TMA (`cp.async.bulk.tensor`) into a ring of shared-memory stages, consumer warpgroups multiply
them with wgmma, and two mbarriers per stage hand each stage over (full: the copy landed;
empty: every consumer is done reading it). Loads cost the consumers no instructions, and the
producer runs ahead by the ring's depth.

The copies write the 128-byte swizzled layout wgmma reads (16-byte chunk c of row r at
r*128 + ((c ^ (r & 7)) * 16)), the same layout as backends/cuda/templates/gemm_wgmma.py's
cp.async loaders: A is k-contiguous (boxes of 64 k x BM rows); B is either k-contiguous (one box
of 64 k x BN) or n-contiguous (BN/64 boxes of 64 n x 64 k, read through the descriptor's
transpose bit). Edges past M, N or K are filled with zeros by the copy engine, so no load is
masked.

Persistent blocks walk output tiles in one of two ways. Cooperative: both consumer warpgroups
share each tile (64 rows each) and store it together, the producer filling the ring meanwhile.
Ping-pong: each consumer warpgroup owns every other tile of its block whole, and their main
loops take turns (two named barriers hand the turn over), so one warpgroup stores its tile while
the other multiplies: the tensor cores stay busy through the epilogues, which matters where a
tile has few k-steps (short K, batched products). Outputs may also leave by TMA stores, and
cooperative blocks may pair up in clusters that share B by multicast, or one-tile blocks split the
tiles of a sparse last wave along K, a cluster's two blocks summing through distributed shared
memory (`TMAConfig`).

The tensor maps (CUtensorMap) are kernel parameters encoded on the host for each binding of
buffers (backends/cuda/tensor_map.py); this module renders the kernel and names the maps it
needs. Needs sm_90a.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from backends.cuda.templates import batched_grid, block_coords
from backends.cuda.templates import gemm_wgmma as wg
from backends.cuda.templates.gemm_tc import GemmShape, batch_offsets

PRODUCER_REGS, CONSUMER_REGS = 40, 232      # setmaxnreg: 128 * 40 + 256 * 232 <= 65536
BARRIER_BYTES = 128     # full/empty mbarriers of up to 8 stages; a persistent staged tile follows


@dataclass(frozen=True)
class TMAConfig:
    bm: int = 128          # 64 rows per consumer warpgroup
    bn: int = 256          # wgmma N (<= 256, multiple of 8; of 64 to read an n-contiguous B or store by TMA,
                           # both in 64-column boxes)
    stages: int = 4
    persistent: bool = False   # one block per SM looping over output tiles (grouped 8 m-tiles at a
                               # time for L2 reuse); the producer copies the next tile's stages
                               # while the consumers store the last one
    smem_epilogue: bool = False   # outputs staged in shared memory, then stored as 16-byte rows: in
                                  # the drained stages (one tile per block), or with `persistent` in
                                  # a tile of their own, so the producer fills the ring meanwhile
    pingpong: bool = False     # (persistent) two consumer warpgroups, each with whole tiles of bm x bn
                               # of its own, their main loops in turn (module docstring)
    tma_store: bool = False    # (persistent, staged) each consumer warpgroup stages 64 rows at a time
                               # in 64x64 swizzled boxes of its own and one thread stores them by TMA
                               # (2-byte outputs of 16-byte aligned rows; others store directly)
    cluster: int = 1           # 2 (persistent, cooperative): the two blocks of a cluster take vertically
                               # adjacent tiles and share each stage's B, each copying half and
                               # multicasting it to both: B's traffic from L2 halves
    split_k: int = 1           # 2 (one tile per block): the tiles of a last wave that would leave half the
                               # SMs idle are split in two along K (`split_tiles`); the two blocks of a
                               # cluster share such a tile, the second handing its partial sums to the
                               # first through distributed shared memory (1024x2048x5632: 64 tiles of
                               # 128x256 on 128 SMs; 1024x5632x2048: 176 tiles, the last 44 split)

    def __post_init__(self):
        assert 16 * self.stages <= BARRIER_BYTES and self.bm % 64 == 0 and self.bn % 8 == 0 and self.bn <= 256
        # ping-pong: a warpgroup holds a whole tile's accumulators (at most 176 registers a thread
        # of its 232; 128x176 staged compiles without spills, storing directly it spills)
        assert not self.pingpong or (self.persistent and self.bm * self.bn <= 128 * 176)
        assert not self.tma_store or (self.persistent and self.smem_epilogue and self.whole_boxes)
        # a cluster's blocks copy half of B each: whole 8-row swizzle atoms of a k-contiguous B (an
        # n-contiguous one in whole 64-column boxes: `refuses`)
        assert self.cluster == 1 or (self.cluster == 2 and self.persistent and not self.pingpong and self.bn % 16 == 0)
        # split-K: the partial sums of a tile fit the drained ring; its two barriers follow the stages'
        assert self.split_k == 1 or (self.split_k == 2 and not self.persistent and self.cluster == 1
                                     and self.stages <= 7 and self.partial_bytes <= self.stages * self.stage_bytes)

    @property
    def name(self) -> str:
        walk = "pp" if self.pingpong else ("p" if self.persistent else "")
        staged = "t" if self.tma_store else ("e" if self.smem_epilogue else "")
        return f"tma{self.bm}x{self.bn}s{self.stages}" + walk + staged + (f"c{self.cluster}" if self.cluster > 1 else "") \
            + (f"k{self.split_k}" if self.split_k > 1 else "")

    @classmethod
    def from_name(cls, name: str) -> "TMAConfig":
        """The config `name` names (`tma128x256s3pe`, `tma128x128s5ek2`, ...: the inverse of
        .name), for timing a tile that no list holds; ValueError if it names none."""
        m = re.fullmatch(r"tma(\d+)x(\d+)s(\d+)(pp|p)?(t|e)?(?:c(\d))?(?:k(\d))?", name)
        if m is None:
            raise ValueError(f"{name!r} is not a TMA tile name (e.g. tma128x256s3pe)")
        bm, bn, stages, walk, staged, cluster, split = m.groups()
        try:
            cfg = cls(int(bm), int(bn), int(stages), walk is not None, staged is not None, walk == "pp",
                      staged == "t", int(cluster or 1), int(split or 1))
        except AssertionError:
            raise ValueError(f"{name!r} names no valid TMA tile") from None
        if cfg.name != name:
            raise ValueError(f"{name!r} is not a TMA tile name (it reads as {cfg.name})")
        return cfg

    @property
    def whole_boxes(self) -> bool:
        """Whether the tile's width is a whole number of 64-column boxes, the boxes an
        n-contiguous B is read in and TMA stores write (a k-contiguous B is one box of any width)."""
        return self.bn % 64 == 0

    @property
    def clustered(self) -> bool:
        """Whether the kernel runs in clusters of two blocks (B multicast or split K)."""
        return self.cluster == 2 or self.split_k == 2

    @property
    def partial_bytes(self) -> int:
        """Bytes of one block's f32 accumulators: a split-K tile's partial sums."""
        return self.bm * self.bn * 4

    @property
    def consumers(self) -> int:
        return 2 if self.pingpong else self.bm // 64

    @property
    def row_blocks(self) -> int:
        """m64 wgmma row blocks one consumer warpgroup multiplies per k16 step."""
        return self.bm // 64 if self.pingpong else 1

    @property
    def threads(self) -> int:
        return 128 * (self.consumers + 1)

    @property
    def stage_bytes(self) -> int:
        return (self.bm + self.bn) * 128

    @property
    def own_tile(self) -> bool:
        """Whether the staged outputs have their own shared tile (2-byte outputs) after the
        ring and its barriers."""
        return self.persistent and self.smem_epilogue

    @property
    def out_tile_bytes(self) -> int:
        """Bytes of the staged output tile(s) after the barriers: one bm x bn tile, or with
        `pingpong` or `tma_store` 64 rows per consumer (their tiles are stored 64 rows at a
        time)."""
        if not self.own_tile:
            return 0
        if self.tma_store:
            return 2 * 64 * self.bn * 2
        return 2 * wg.smem_tile_bytes(64, self.bn, 2) if self.pingpong else wg.smem_tile_bytes(self.bm, self.bn, 2)

    @property
    def out_tile_offset(self) -> int:
        """Of the staged tiles from the barriers: swizzled boxes start 1024-byte aligned."""
        return 1024 if self.tma_store else BARRIER_BYTES

    @property
    def smem_bytes(self) -> int:
        return self.stages * self.stage_bytes + 1024 + self.out_tile_offset + self.out_tile_bytes


# searched: on the H100 outputs staged through shared memory (e) won products with few k-steps
# per output (16384x4096x1024: 0.82x cuBLAS against 0.66x), a persistent walk (p) wide ones, and
# both (pe: a tile of their own, stored while the producer fills the ring) most: 4096^3 0.93x,
# 2048x11008x4096 1.06x, batched 4096x4096x128 0.70x against 0.39x
# (results/h100-product-kernels-tma-2026-12-06-session25-788f819.txt); outputs stored by TMA
# (pt: the consumers multiply on while the copy engine stores) won the store-bound products:
# 64 x 4096x4096x128 1.03x (128x256) and 1.00x (128x128) against 0.73x, 16384x4096x1024 0.95x
# against 0.89x (results/h100-product-kernels-tma-experimental-2026-12-06-session29-919075c.txt)
TMA_CONFIGS = [TMAConfig(128, 256, 3, True, True), TMAConfig(128, 256, 3, False, True), TMAConfig(128, 128, 5, True, True),
               TMAConfig(128, 256, 4, True), TMAConfig(128, 128, 6, False, True), TMAConfig(128, 128, 6, True),
               TMAConfig(128, 256, 4), TMAConfig(128, 256, 3, True, True, tma_store=True),
               TMAConfig(128, 128, 5, True, True, tma_store=True)]
# not searched (never the best in those runs): the 192-wide tiles, for products whose n leaves a
# 256-wide last wave mostly idle (1024x5632: 176 tiles of 128x256 are 2 rounds of 256 columns on
# 132 SMs, 240 of 128x192 2 rounds of 192); the ping-pong tiles, for products of few k-steps per
# tile (64 x 4096x4096x128: 1.00x with 128x128 tiles, where TMA stores reach 1.03x); clusters of
# two sharing B (0.60-0.82x on the H100 in 128x256 tiles, about the unclustered tile's time
# since their stage release stopped fencing the cluster's memory: 0.25-0.63x before; 128x128
# tiles 0.76-0.91x on the Llama products in session 32, behind the unclustered tile; 128x176
# clustered is in the tile prior, tiles.TMA); split K, for
# products of fewer tiles than SMs and long K (1024x2048x5632: 0.80x against the default's 0.82x).
# The ping-pong tiles computed wrong products on the H100 until d3f9cf0 (64x256s3ppe at
# 1024x2048x5632 and 16384x4096x1024, 64x176 at 1024x5632x2048, 128x128s5ppe at 1024x2048x5632;
# each tile missing its last k-step): ptxas had scheduled the staged epilogue's conversions of a
# main loop unrolled twice above its last wait (sass.py; tests/test_wgmma_order.py). Right since,
# H100 (results/raw/h100-2026-12-07-session32-product-pp-d3f9cf0.txt): 128x128s5ppe 0.97x cuBLAS
# at 1024x5632x2048 against 0.88x for the cooperative 128x128 tile (in the tile prior), 0.59x at
# 1024x2048x5632 (one tile per block: one consumer works) and 0.61x at 16384x4096x1024; the
# 64-row ping-pong tiles 0.50-0.82x, not listed (64x256s5pp, listed before, spills 20 bytes of
# registers under a bias epilogue since its main loop is not unrolled). 128x176 ping-pong (a
# warpgroup holds 176 accumulators; staged, as storing directly spills): 1.02-1.07x at
# 2048x11008x4096 and 0.89-0.93x at 16384x4096x1024 (the best there) in four H100 runs, 0.65x at
# 1024x5632x2048 (two tiles a block); in the tile prior. Ping-pong warpgroups leaving two wgmma
# groups in flight instead of one (each stage released a k-step later) were right and slower at
# every shape (results/raw/h100-2026-12-07-session32-99faaf5-product-g2-r*.txt): not kept.
# 128x176 (k-contiguous B): 0.72-0.74x cuBLAS at 1024x5632x2048 against 0.61-0.67x for the
# default in two H100 runs (the same 256 tiles as cuBLAS's 176x128; ncu: 42 us against 34, 2.3x
# the instructions), behind the 128x256 tiles elsewhere; in the tile prior (tiles.TMA).
# benchmarks/product_kernels.py --experimental times these.
TMA_EXPERIMENTAL_CONFIGS = [TMAConfig(128, 128, 4, True, True), TMAConfig(128, 256, 3, True), TMAConfig(128, 128, 6),
                            TMAConfig(64, 256, 5), TMAConfig(128, 192, 4, True, True), TMAConfig(128, 192, 4, False, True),
                            TMAConfig(128, 128, 5, True, True, True), TMAConfig(128, 128, 5, True, False, True),
                            TMAConfig(128, 128, 5, True, True, True, True), TMAConfig(64, 256, 4, True, True, True, True),
                            TMAConfig(128, 256, 3, True, True, cluster=2), TMAConfig(128, 128, 5, True, True, cluster=2),
                            TMAConfig(128, 256, 3, split_k=2), TMAConfig(128, 128, 5, False, True, split_k=2),
                            TMAConfig(128, 176, 4, True), TMAConfig(128, 176, 4, True, True), TMAConfig(128, 176, 5, False, True),
                            TMAConfig(128, 176, 4, True, True, True), TMAConfig(128, 176, 4, True, True, cluster=2),
                            # one consumer warpgroup of 64 rows: twice the blocks on products of few
                            # tiles (a GQA layer's k or v projection, 1024x512x2048: 64 blocks against
                            # 32 of 128x128 on 132 SMs; cuBLAS 9-10 us there, 128x128 15 us on the H100)
                            TMAConfig(64, 128, 6, False, True)]
# (a 128x256 split-K tile with its outputs staged spills 72-92 bytes of registers: not listed)
SMS = 132              # blocks of a persistent grid: the SMs of an H100 / H200
GROUP_M = 8            # m-tiles walked together by consecutive tiles of a persistent block


def fits(shape: GemmShape, dtype: str) -> str | None:
    """Why the TMA kernel cannot run this product (None: it can). Tensor maps need 16-byte
    aligned bases and row strides; batches are one axis of fixed strides."""
    if dtype not in ("f16", "bf16"):
        return "operands are not f16/bf16"
    b_rows = shape.b_sk if shape.b_layout == "kn" else shape.b_sn
    if shape.b_layout == "kn" and shape.b_sn != 1 or shape.b_layout == "nk" and shape.b_sk != 1:
        return "B has no unit stride"
    if any(v % 8 for v in (shape.a_off, shape.a_sm, shape.b_off, b_rows)):
        return "an operand's base or row stride is not 16-byte aligned"
    axes = [b for b in shape.batch if b[0] > 1]
    if len(axes) > 1:
        return "more than one batch axis"
    if axes and (axes[0][1] % 8 or axes[0][2] % 8):
        return "a batch stride is not 16-byte aligned"
    return None


def refuses(shape: GemmShape, cfg: TMAConfig) -> str | None:
    """Why the tile `cfg` cannot run this product (None: it can): an n-contiguous B is read in
    boxes of 64 columns, so a tile of another width (or a cluster's half of one) reads only
    k-contiguous ones."""
    if shape.b_layout == "kn" and not cfg.whole_boxes:
        return f"an n-contiguous B is read in 64-column boxes: a {cfg.bn}-wide tile reads only k-contiguous B"
    if shape.b_layout == "kn" and cfg.cluster == 2 and cfg.bn % 128:
        return f"a cluster's blocks copy half of an n-contiguous B each, in 64-column boxes: {cfg.bn} columns do not halve so"
    return None


def tensor_maps(shape: GemmShape, cfg: TMAConfig, out_itemsize: int = 0) -> list[tuple]:
    """(operand, dims innermost first, element strides of the outer dims, box, offset) of A's
    and B's maps, and the output's where the kernel stores by TMA (`stores_by_tma`, given the
    output's element size); a batch axis is the third dim of an operand that moves along it."""
    batch = next((b for b in shape.batch if b[0] > 1), None)
    a_dims, a_strides, a_box = [shape.k, shape.m], [shape.a_sm], [64, cfg.bm]
    if shape.b_layout == "nk":
        b_dims, b_strides, b_box = [shape.k, shape.n], [shape.b_sn], [64, cfg.bn // cfg.cluster]
    else:
        b_dims, b_strides, b_box = [shape.n, shape.k], [shape.b_sk], [64, 64]
    if batch is not None:
        if batch[1]:
            a_dims, a_strides, a_box = a_dims + [batch[0]], a_strides + [batch[1]], a_box + [1]
        if batch[2]:
            b_dims, b_strides, b_box = b_dims + [batch[0]], b_strides + [batch[2]], b_box + [1]
    maps = [("a", a_dims, a_strides, a_box, shape.a_off), ("b", b_dims, b_strides, b_box, shape.b_off)]
    if out_itemsize and stores_by_tma(shape, cfg, out_itemsize):
        c_dims, c_strides, c_box = [shape.n, shape.m], [shape.c_sm], [64, 64]
        if batch is not None:
            c_dims, c_strides, c_box = c_dims + [batch[0]], c_strides + [batch[3]], c_box + [1]
        maps.append(("c", c_dims, c_strides, c_box, 0))
    return maps


def stores_by_tma(shape: GemmShape, cfg: TMAConfig, out_itemsize: int) -> bool:
    """Whether `cfg` stores this product's outputs by TMA: 2-byte outputs in rows of unit
    stride, rows and batches 16-byte aligned."""
    return cfg.tma_store and out_itemsize == 2 and wg.smem_epilogue_ok(shape, 2)


MBAR = r"""
#ifndef SATURN_MBAR
#define SATURN_MBAR
DEV void mbar_init(uint32_t bar, int count) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count)); }
DEV void mbar_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
DEV void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
DEV void mbar_arrive(uint32_t bar) { asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory"); }
// returns once the barrier's phase of this parity has completed
DEV void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile("{\n.reg .pred done;\nwait_%=:\n"
               "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
               "@!done bra wait_%=;\n}" :: "r"(bar), "r"(parity) : "memory");
}
// as mbar_wait, and what the cluster's other blocks wrote before their arrivals is visible
DEV void mbar_wait_cluster(uint32_t bar, uint32_t parity) {
  asm volatile("{\n.reg .pred done;\nwait_%=:\n"
               "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
               "@!done bra wait_%=;\n}" :: "r"(bar), "r"(parity) : "memory");
}
// 16 bytes to this block's shared memory / from the shared memory of the cluster's block `cta`
DEV void st_shared_f4(uint32_t at, float a, float b, float c, float d) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" :: "r"(at), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
DEV void ld_cluster_f4(uint32_t at, uint32_t cta, float* v) {
  asm volatile("{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %4, %5;\n"
               "ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [remote];\n}"
               : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3]) : "r"(at), "r"(cta) : "memory");
}
DEV void tma_load_2d(uint32_t dst, const void* map, int x, int y, uint32_t bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
               :: "r"(dst), "l"(map), "r"(x), "r"(y), "r"(bar) : "memory");
}
DEV void tma_load_3d(uint32_t dst, const void* map, int x, int y, int z, uint32_t bar) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
               :: "r"(dst), "l"(map), "r"(x), "r"(y), "r"(z), "r"(bar) : "memory");
}
// the same copy into the shared memory of every block of the cluster in `mask`, each signalling
// its own barrier at `bar`
DEV void tma_load_2d_mc(uint32_t dst, const void* map, int x, int y, uint32_t bar, uint16_t mask) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;"
               :: "r"(dst), "l"(map), "r"(x), "r"(y), "r"(bar), "h"(mask) : "memory");
}
DEV void tma_load_3d_mc(uint32_t dst, const void* map, int x, int y, int z, uint32_t bar, uint16_t mask) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3, %4}], [%5], %6;"
               :: "r"(dst), "l"(map), "r"(x), "r"(y), "r"(z), "r"(bar), "h"(mask) : "memory");
}
// arrive on the barrier at `bar` of the cluster's block `cta`: to free a stage this thread only
// read (release at the block's scope: no fence over the cluster's memory at every k-step)
DEV void mbar_arrive_cta(uint32_t bar, uint32_t cta) {
  asm volatile("{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
               "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}" :: "r"(bar), "r"(cta) : "memory");
}
// the same, and what this thread wrote or read across the cluster before is done for the block
// that waits (mbar_wait_cluster): a hand-over of shared memory between blocks
DEV void mbar_arrive_cta_release(uint32_t bar, uint32_t cta) {
  asm volatile("{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
               "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n}" :: "r"(bar), "r"(cta) : "memory");
}
// named barrier `id` of `n` threads: wait there / count this warp's threads in and go on
DEV void named_sync(int id, int n) { asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(n) : "memory"); }
DEV void named_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(n) : "memory"); }
DEV void cluster_sync() { asm volatile("barrier.cluster.arrive;\nbarrier.cluster.wait;" ::: "memory"); }
DEV uint32_t cluster_rank() { uint32_t r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r; }
DEV void tma_store_2d(const void* map, uint32_t src, int x, int y) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
               :: "l"(map), "r"(x), "r"(y), "r"(src) : "memory");
}
DEV void tma_store_3d(const void* map, uint32_t src, int x, int y, int z) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];"
               :: "l"(map), "r"(x), "r"(y), "r"(z), "r"(src) : "memory");
}
DEV void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
DEV void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
DEV void bulk_wait() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
template <int R> DEV void regs_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(R)); }
template <int R> DEV void regs_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(R)); }
struct __align__(64) TensorMap { unsigned long long bits[16]; };
#endif
"""


def _load(map_name: str, dims: list, dst: str, x: str, y: str, bz: str, multicast: bool = False) -> str:
    mc, mask = ("_mc", ", 3") if multicast else ("", "")
    if len(dims) == 3:
        return f"tma_load_3d{mc}({dst}, &{map_name}, {x}, {y}, (int){bz}, full{mask})"
    return f"tma_load_2d{mc}({dst}, &{map_name}, {x}, {y}, full{mask})"


def render(name: str, dtype: str, shape: GemmShape, cfg: TMAConfig, params: str, call_args: str,
           epilogue: str, out_type: str, pair_store: bool, epi_after: bool = False) -> str:
    """The kernel: one output tile per block, or with `cfg.persistent` one block per SM
    looping over tiles t = blockIdx.x, + gridDim.x, ... with one stage counter `it` across
    tiles (a consumer releases a tile's last stage after its final wgmma, and the producer is
    already filling the next tile's stages while the consumers store). `epi_after`: a staged
    epilogue runs after the product is staged (render.epilogue_after)."""
    ty = "f16" if dtype == "f16" else "bf16"
    BM, BN, S, NT, C = cfg.bm, cfg.bn, cfg.stages, cfg.threads, cfg.consumers
    A_ST = BM * 128
    KT = (shape.k + 63) // 64
    (_, a_dims, *_), (_, b_dims, *_) = tensor_maps(shape, cfg)
    _, _, c_off = batch_offsets(shape)
    tb = 1 if shape.b_layout == "kn" else 0
    load_a = _load("tmA", a_dims, "sa", "k0", "m0", "bz")
    pair, split = cfg.cluster == 2, cfg.split_k == 2
    if tb:   # n-contiguous B: BN/64 boxes of 64 n x 64 k, 8192 bytes apart (a cluster's blocks: half each)
        b_desc = "db + kk * 128"      # (each k16 step 2048 bytes on: 128 in the descriptor's address field)
        b_base = "wg_desc2(sb, 8192, 1024)"
        boxes = (f"int j = rank * {BN // 128}; j < rank * {BN // 128} + {BN // 128}; ++j" if pair
                 else f"int j = 0; j < {BN // 64}; ++j")
        load_b = f"for ({boxes}) " + _load("tmB", b_dims, "sb + j * 8192", "n0 + j * 64", "k0", "bz", pair) + ";"
    else:
        b_desc = "db + kk * 2"
        b_base = "wg_desc(sb)"
        load_b = (_load("tmB", b_dims, f"sb + rank * {BN // 2 * 128}", "k0", f"n0 + rank * {BN // 2}", "bz", True)
                  if pair else _load("tmB", b_dims, "sb", "k0", "n0", "bz")) + ";"
    counter = "it" if cfg.persistent else "kt"
    # arrivals that free a stage: every consumer thread; in a cluster one per consumer warp of
    # either block (both blocks' B halves land in each other's stage)
    readers = 128 if cfg.pingpong else (2 * C * 4 if pair else C * 128)
    release = ("if (lane == 0) {{ mbar_arrive_cta({bar}, 0); mbar_arrive_cta({bar}, 1); }}" if pair
               else "mbar_arrive({bar});")
    produce = f"""        const int s = {counter} % {S};
        const uint32_t full = bars + 16 * s, sa = base + s * {cfg.stage_bytes}, sb = sa + {A_ST};
        mbar_wait(full + 8, (({counter} / {S}) & 1) ^ 1);      // (a fresh barrier's previous phase counts as done)
        mbar_expect_tx(full, {cfg.stage_bytes});
        const int k0 = {"(kb + kt)" if split else "kt"} * 64;
        {load_a};
        {load_b}"""
    consume = f"""    const int s = {counter} % {S};
    mbar_wait(bars + 16 * s, ({counter} / {S}) & 1);
    const uint32_t sa = base + s * {cfg.stage_bytes} + wg * {64 * 128};
    const uint32_t sb = base + s * {cfg.stage_bytes} + {A_ST};
    const uint64_t da = wg_desc(sa), db = {b_base};      // a k16 step on: + 32 bytes, + 2 in the address field
    wg_fence();
    #pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_n{BN}_{ty}_t{tb}(acc, da + kk * 2, {b_desc}, 1);
    wg_commit();
    wg_wait<1>();
    if (kt > 0) {release.format(bar=f"bars + 16 * (({counter} - 1) % {S}) + 8")}   // tile kt-1's stage may be refilled"""
    acc = f"""  const long long c_base = {c_off};
  float acc[{BN // 2}];
  #pragma unroll
  for (int i = 0; i < {BN // 2}; ++i) acc[i] = 0.f;"""
    store = wg.direct_epilogue(name, shape, BN, call_args, out_type, pair_store)
    staged_types = ("__half", "__nv_bfloat16") if cfg.own_tile else ("__half", "__nv_bfloat16", "float")
    by_tma = stores_by_tma(shape, cfg, _itemsize(out_type))
    if by_tma:
        store = tma_store_epilogue(name, shape, BN, call_args, out_type, who="wg",
                                   region=f"(bars + {cfg.out_tile_offset} + wg * {64 * BN * 2})", after=epi_after)
    elif cfg.smem_epilogue and not cfg.tma_store and out_type in staged_types \
            and wg.smem_epilogue_ok(shape, 4 if out_type == "float" else 2):
        # the consumers' own barrier (the producer warps have left). One tile per block: every
        # stage has been consumed, so the ring is free once both warpgroups' last wgmma is done.
        # Persistent: the tile after the barriers, free once every consumer has stored the last
        # tile's rows (the first barrier)
        store = wg.smem_epilogue(name, shape, cfg, call_args, out_type, wg._CONVERT.get(out_type, ""),
                                 sync=f"named_sync(1, {C * 128});", drain="",
                                 tid="(tid - 128)", threads=C * 128,
                                 at=f"(bars + {BARRIER_BYTES})" if cfg.own_tile else "base", after=epi_after)
    if cfg.persistent:
        mt, nt = -(-shape.m // BM), -(-shape.n // BN)
        if pair:    # a cluster walks pairs of tiles, one above the other; block `rank` the lower one
            mt2 = -(-mt // 2)
            tiles, walk = mt2 * nt * shape.batch_count, "int t = blockIdx.x >> 1; t < {tiles}; t += gridDim.x >> 1"
            coords = tile_coords(mt2, nt, 2 * BM, BN, m0="pm0") + f"\n      const int m0 = pm0 + rank * {BM};"
        else:
            tiles, walk = mt * nt * shape.batch_count, "int t = blockIdx.x; t < {tiles}; t += gridDim.x"
            coords = tile_coords(mt, nt, BM, BN)
        walk = walk.format(tiles=tiles)
        block = ""
        # in a cluster the producer returns only once every stage is free again: the other
        # block's consumers have made their last arrivals here and read the last B halves
        # this block multicast to them
        tail = f"""
      for (int i = 0; i < {S}; ++i, ++it) mbar_wait(bars + 16 * (it % {S}) + 8, ((it / {S}) & 1) ^ 1);""" if pair else ""
        producer = f"""      int it = 0;
      for ({walk}) {{
      {coords}
      for (int kt = 0; kt < {KT}; ++kt, ++it) {{
{produce}
      }}
      }}{tail}"""
        consumer = _pingpong(name, shape, cfg, b_base, b_desc, ty, tb, call_args, out_type, pair_store, by_tma,
                             epi_after) \
            if cfg.pingpong else f"""  int it = 0;
  for ({walk}) {{
    {coords}
{acc}
  for (int kt = 0; kt < {KT}; ++kt, ++it) {{
{consume}
  }}
  wg_wait<0>();
  wg_hold(acc);
  {release.format(bar=f"bars + 16 * ((it - 1) % {S}) + 8")}                 // and this tile's last
{store}
  }}{_LAST_STORES if by_tma else ""}"""
    else:
        if split:   # pairs of whole tiles, then the tiles split in two (`split_tiles`)
            mt, nt = -(-shape.m // BM), -(-shape.n // BN)
            whole, KH = split_tiles(shape, cfg)[0], -(-KT // 2)
            block = f"""
  const uint32_t rank = cluster_rank();
  const int c = blockIdx.x >> 1;
  const bool halves = c >= {whole // 2};      // the pair shares tile t, block `rank` multiplying k-steps [kb, kb + kn)
  const int t = halves ? {whole} + (c - {whole // 2}) : 2 * c + (int)rank;
  const int kb = halves ? (int)rank * {KH} : 0, kn = !halves ? {KT} : rank ? {KT - KH} : {KH};
  {tile_coords(mt, nt, BM, BN)}"""
        else:
            bz, my, past_end = block_coords(-(-shape.m // BM), shape.batch_count)
            block = f"""
  const long long bz = {bz};
  {past_end}
  const int m0 = {my} * {BM}, n0 = blockIdx.x * {BN};"""
        steps = "kn" if split else KT
        producer = f"""      for (int kt = 0; kt < {steps}; ++kt) {{
{produce}
      }}"""
        consumer = f"""{acc}
  for (int kt = 0; kt < {steps}; ++kt) {{
{consume}
  }}
  wg_wait<0>();
  wg_hold(acc);{_split_reduce(cfg) if split else ""}
{store}"""
    rank = "\n  const uint32_t rank = cluster_rank();" if pair else ""
    ready = "cluster_sync();                     // both blocks' barriers are ready" if cfg.clustered else "__syncthreads();"
    inits = f"mbar_init(bars + {SPLIT_READY}, {C * 128}); mbar_init(bars + {SPLIT_DONE}, {C * 128});" if split else ""
    return f"""
{wg.NEEDS_ARCH_SPECIFIC}
{wg.COMMON}
{MBAR}
#ifndef SATURN_WGMMA_N{BN}_{ty}_T{tb}
#define SATURN_WGMMA_N{BN}_{ty}_T{tb}
{wg.helpers(BN, dtype, tb)}
#endif
{epilogue}

extern "C" __global__ void {"__cluster_dims__(2, 1, 1) " if cfg.clustered else ""}__launch_bounds__({NT}, 1) {name}(const __grid_constant__ TensorMap tmA,
    const __grid_constant__ TensorMap tmB, {"const __grid_constant__ TensorMap tmC, " if by_tma else ""}{params}) {{
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t bars = base + {S * cfg.stage_bytes};      // full[s] at bars + 16 s, empty[s] at + 8
  const int tid = threadIdx.x, wgi = tid >> 7;{block}{rank}
  if (tid == 0) {{
    for (int s = 0; s < {S}; ++s) {{ mbar_init(bars + 16 * s, 1); mbar_init(bars + 16 * s + 8, {readers}); }}
    {inits}
    mbar_fence_init();
  }}
  {ready}
  if (wgi == 0) {{                     // the producer: one thread issues every copy
    regs_dec<{PRODUCER_REGS}>();
    if (tid == 0) {{
{producer}
    }}
    return;
  }}
  regs_inc<{CONSUMER_REGS}>();
  const int wg = wgi - 1, lane = tid & 31, wq = (tid >> 5) & 3;
{consumer}
}}
"""


SPLIT_READY, SPLIT_DONE = BARRIER_BYTES - 16, BARRIER_BYTES - 8    # split K's barriers, after 7 stages at most


def _split_reduce(cfg: TMAConfig) -> str:
    """Split K's hand-over, after both blocks' main loops: block 1 writes its accumulators into
    its drained ring (once both its warpgroups' last products have read it), 16 bytes per
    thread at a time, and arrives on block 0's barrier; block 0 adds them, read across the
    cluster, tells block 1 it may leave, and stores the tile."""
    n = cfg.consumers * 128
    return f"""
  const int ct = tid - 128;
  if (halves && rank) {{
    named_sync(1, {n});
    #pragma unroll
    for (int q = 0; q < {cfg.bn // 8}; ++q)
      st_shared_f4(base + (q * {n} + ct) * 16, acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]);
    mbar_arrive_cta_release(bars + {SPLIT_READY}, 0);
    mbar_wait(bars + {SPLIT_DONE}, 0);        // block 0 has read them
    return;
  }}
  if (halves) {{
    mbar_wait_cluster(bars + {SPLIT_READY}, 0);
    #pragma unroll
    for (int q = 0; q < {cfg.bn // 8}; ++q) {{
      float v[4];
      ld_cluster_f4(base + (q * {n} + ct) * 16, 1, v);
      acc[4 * q] += v[0]; acc[4 * q + 1] += v[1]; acc[4 * q + 2] += v[2]; acc[4 * q + 3] += v[3];
    }}
    mbar_arrive_cta_release(bars + {SPLIT_DONE}, 1);
  }}"""


def tile_coords(mt: int, nt: int, bm: int, bn: int, m0: str = "m0") -> str:
    """C statements giving tile t's batch `bz` and corner (`m0`, n0): consecutive t walk GROUP_M
    m-tiles down one n column, then the next column (the A rows they share stay in L2)."""
    return f"""const long long bz = t / {mt * nt};
      const int r = t % {mt * nt}, first = (r / {GROUP_M * nt}) * {GROUP_M}, rows = min({mt} - first, {GROUP_M});
      const int {m0} = (first + (r % {GROUP_M * nt}) % rows) * {bm}, n0 = ((r % {GROUP_M * nt}) / rows) * {bn};"""


def tile_corner(t: int, mt: int, nt: int, bm: int, bn: int) -> tuple[int, int]:
    """(m0, n0) of tile t of one batch element, as `tile_coords` computes it on the device."""
    first = (t // (GROUP_M * nt)) * GROUP_M
    rows = min(mt - first, GROUP_M)
    r = t % (GROUP_M * nt)
    return (first + r % rows) * bm, (r // rows) * bn


def _pingpong(name: str, shape: GemmShape, cfg: TMAConfig, b_base: str, b_desc: str, ty: str, tb: int,
              call_args: str, out_type: str, pair_store: bool, by_tma: bool, epi_after: bool = False) -> str:
    """The consumers' code of the ping-pong walk. The producer copies the block's tiles
    i = 0, 1, 2, ... (t = blockIdx.x + i * gridDim.x) in order; consumer warpgroup `cw` takes the
    tiles with i % 2 == cw, whose stages are it = i * KT + kt of the ring. Named barrier 2 + w
    is warpgroup w's turn: a main loop starts once the other warpgroup's last one has waited
    for all its stages, so a stage's full barrier is never waited on two phases early (a
    parity wait cannot tell those apart). The epilogue runs 64 rows at a time, through the
    same code as the cooperative walk's (`wg` 0 and `m0` that block's first row)."""
    BM, BN, S, R = cfg.bm, cfg.bn, cfg.stages, cfg.row_blocks
    KT = (shape.k + 63) // 64
    mt, nt = -(-shape.m // BM), -(-shape.n // BN)
    tiles = mt * nt * shape.batch_count
    _, _, c_off = batch_offsets(shape)
    coords = tile_coords(mt, nt, BM, BN, m0="tm0")
    if by_tma:
        store = tma_store_epilogue(name, shape, BN, call_args, out_type, who="cw",
                                   region=f"(bars + {cfg.out_tile_offset} + cw * {64 * BN * 2})", after=epi_after)
    elif cfg.smem_epilogue and not cfg.tma_store and out_type in ("__half", "__nv_bfloat16") \
            and wg.smem_epilogue_ok(shape, 2):
        tile_at = f"(bars + {BARRIER_BYTES} + cw * {wg.smem_tile_bytes(64, BN, 2)})"
        store = wg.smem_epilogue(name, shape, wg.WGConfig(64, BN), call_args, out_type, wg._CONVERT[out_type],
                                 sync="named_sync(4 + cw, 128);", drain="",
                                 tid="(tid & 127)", threads=128, at=tile_at, after=epi_after)
    else:
        store = wg.direct_epilogue(name, shape, BN, call_args, out_type, pair_store)
    stores = "\n".join(f"""  {{
    const int wg = 0, m0 = tm0 + {64 * r};   // rows {64 * r}..{64 * r + 63} of the tile
    float (&acc)[{BN // 2}] = accs[{r}];
{store}
  }}""" for r in range(R))
    mma = "\n      ".join(f"wgmma_n{BN}_{ty}_t{tb}(accs[{r}], da + {r * 64 * 128 // 16} + kk * 2, {b_desc}, 1);"
                          for r in range(R))
    return f"""  const int cw = wg;
  for (int i = cw; blockIdx.x + i * gridDim.x < {tiles}; i += 2) {{
    const int t = blockIdx.x + i * gridDim.x;
    {coords}
    const long long c_base = {c_off};
    float accs[{R}][{BN // 2}];
    #pragma unroll
    for (int r = 0; r < {R}; ++r)
      #pragma unroll
      for (int j = 0; j < {BN // 2}; ++j) accs[r][j] = 0.f;
    if (i > 0) named_sync(2 + cw, 256);                 // my turn
    int it = i * {KT};
    // not unrolled: ptxas (CUDA 13.0) scheduled the staged epilogue's conversions of a main
    // loop unrolled twice above its last wait, and the tile lost its last k-step (sass.py)
    #pragma unroll 1
    for (int kt = 0; kt < {KT}; ++kt, ++it) {{
      const int s = it % {S};
      mbar_wait(bars + 16 * s, (it / {S}) & 1);
      const uint32_t sa = base + s * {cfg.stage_bytes}, sb = sa + {BM * 128};
      const uint64_t da = wg_desc(sa), db = {b_base};
      wg_fence();
      #pragma unroll
      for (int kk = 0; kk < 4; ++kk) {{
      {mma}
      }}
      wg_commit();
      wg_wait<1>();
      if (kt > 0) mbar_arrive(bars + 16 * ((it - 1) % {S}) + 8);
    }}
    if (blockIdx.x + (i + 1) * gridDim.x < {tiles})
      named_arrive(3 - cw, 256);                        // the other's turn
    wg_wait<0>();
    {" ".join(f"wg_hold(accs[{r}]);" for r in range(R))}
    mbar_arrive(bars + 16 * ((it - 1) % {S}) + 8);
{stores}
  }}{_LAST_STORES if by_tma else ""}"""


# a block may not end while its TMA stores still read its shared memory
_LAST_STORES = """
  if ((tid & 127) == 0) bulk_wait();"""


def _itemsize(out_type: str) -> int:
    return {"__half": 2, "__nv_bfloat16": 2, "float": 4}.get(out_type, 0)


def tma_store_epilogue(name: str, shape: GemmShape, BN: int, call_args: str, out_type: str, who: str,
                       region: str, after: bool = False) -> str:
    """One consumer warpgroup's 64 rows (m0 + wg * 64 on; `acc`, `wg`, `wq`, `lane`, `n0`,
    `c_base`, `bz` in scope) through the epilogue into its shared `region` (BN/64 boxes of 64 x 64,
    128-byte swizzled as the loads' tiles, so the 8 rows a warp writes at once hit distinct
    banks), then stored by one thread as TMA copies of the output's map (which clips rows and
    columns past the edges: values there are zeros, never computed). Named barrier 4 + `who`
    orders the warpgroup's writes after the last stores' reads and before the next copy.
    `after`: the region first holds the product rounded to the output's type, then each thread
    runs the epilogue over 16-byte runs of it in place (see render.epilogue_after)."""
    pair_t, pack = wg.pair_types(out_type)
    batch = any(b[0] > 1 for b in shape.batch)
    copy = (f"tma_store_3d(&tmC, region + b * 8192, n0 + b * 64, m0 + wg * 64, (int)bz)" if batch
            else "tma_store_2d(&tmC, region + b * 8192, n0 + b * 64, m0 + wg * 64)")
    if after:
        # guarded as the values are needed (unguarded, ptxas has placed such conversions above
        # the wgmma wait that retires the accumulators: sass.py)
        values = f"""        const float v0 = row < {shape.m} && col < {shape.n} ? acc[j * 4 + 2 * h] : 0.f;
        const float v1 = row < {shape.m} && col + 1 < {shape.n} ? acc[j * 4 + 2 * h + 1] : 0.f;"""
        coords = f"""const int rl = c / {BN // 8}, jj = c % {BN // 8};
        const int row = m0 + wg * 64 + rl, col = n0 + jj * 8;
        const long long flat = c_base + (long long)row * {shape.c_sm} + col;"""
        in_place = f"""
    named_sync(4 + {who}, 128);               // the warpgroup's rows are all in""" + wg.epilogue_over_runs(
            name, shape, call_args, out_type, 64 * BN // 8, 128, "(tid & 127)", coords,
            place="uint4* slot = reinterpret_cast<uint4*>(region_p + (jj >> 3) * 8192 + rl * 128 + (((jj & 7) ^ (rl & 7)) << 4));",
            read="*slot", store="*slot = run;", store_tail="*slot = run;")
    else:
        values = f"""        const float v0 = row < {shape.m} && col < {shape.n} ? epi_{name}({call_args}, flat, acc[j * 4 + 2 * h]) : 0.f;
        const float v1 = row < {shape.m} && col + 1 < {shape.n} ? epi_{name}({call_args}, flat + 1, acc[j * 4 + 2 * h + 1]) : 0.f;"""
        in_place = ""
    return f"""
  {{
    const uint32_t region = {region};
    unsigned char* const region_p = smem_raw + (region - smem_u32(smem_raw));
    const bool leader = (tid & 127) == 0;
    if (leader) bulk_wait_read();             // the last stores have read the region
    named_sync(4 + {who}, 128);
    #pragma unroll
    for (int h = 0; h < 2; ++h) {{
      const int rl = wq * 16 + (lane >> 2) + h * 8, row = m0 + wg * 64 + rl;
      #pragma unroll
      for (int j = 0; j < {BN // 8}; ++j) {{
        const int col = n0 + j * 8 + (lane & 3) * 2;
        const long long flat = c_base + (long long)row * {shape.c_sm} + col;
{values}
        *reinterpret_cast<{pair_t}*>(region_p + (j >> 3) * 8192 + rl * 128 + (((j & 7) ^ (rl & 7)) << 4) + (lane & 3) * 4)
            = {pack}(v0, v1);
      }}
    }}{in_place}
    fence_proxy_async();                      // the writes, visible to the copy engine
    named_sync(4 + {who}, 128);
    if (leader) {{
      for (int b = 0; b < {BN // 64}; ++b) {copy};
      bulk_commit();
    }}
  }}"""


def grid(shape: GemmShape, cfg: TMAConfig) -> tuple[int, int, int]:
    if cfg.cluster == 2:       # clusters of two blocks, one per pair of tiles at most
        pairs = -(-shape.m // (2 * cfg.bm)) * -(-shape.n // cfg.bn) * shape.batch_count
        return (2 * min(pairs, SMS // 2), 1, 1)
    if cfg.persistent:
        tiles = -(-shape.m // cfg.bm) * -(-shape.n // cfg.bn) * shape.batch_count
        return (min(tiles, SMS), 1, 1)
    if cfg.split_k == 2:      # a block per whole tile, two per split one
        whole, halves = split_tiles(shape, cfg)
        return (whole + 2 * halves, 1, 1)
    return batched_grid(-(-shape.n // cfg.bn), -(-shape.m // cfg.bm), shape.batch_count)[0]


def split_tiles(shape: GemmShape, cfg: TMAConfig) -> tuple[int, int]:
    """(whole, split) tiles of a split-K launch (one block per SM): the last wave is split in
    two where it fills at most half the SMs, its tiles then taking half a wave's time (1024 x
    2048 x 5632 in 128x256 tiles: 64 tiles, all split, on 128 SMs; 1024x5632x2048: 132 whole,
    44 split); otherwise every tile runs whole, but for one split where their count is odd
    (the blocks of a cluster take two tiles)."""
    tiles = -(-shape.m // cfg.bm) * -(-shape.n // cfg.bn) * shape.batch_count
    last = tiles % SMS
    whole = tiles - last if last <= SMS // 2 else tiles
    whole -= whole % 2
    return whole, tiles - whole
