"""Which tile a half-precision product gets: an analytical prior over the GEMM templates.

One fixed tile for every product leaves most of an H200 idle on some shapes (1024x512 has 32
tiles of 128x128 for 132 SMs) and quantizes others badly (1024x5632: 2.67 waves). The prior
estimates each candidate's time as

    waves * (resident * (2*bm*bn*k / rate_per_sm + 2*bm*bn / copy_rate_per_sm) + per_wave_overhead)

(+ a B transpose for wgmma), where a tile whose outputs leave by TMA stores, or a ping-pong
tile (one consumer's epilogue under the other's main loop), overlaps the store with the next
tile's math (where a block has a next tile: more than one wave): max of the two instead of
their sum,

with `waves = ceil(tiles / (SMs * resident))`, `resident` the blocks one SM holds (shared
memory, threads), and each template's sustained rate measured on the H200 at 4096^3
(benchmarks/results/h200-cuda-suite-final-2026-11-30.md). `rank_tiles` orders the candidates
by that estimate; `Schedule(gemm="prior", tile_rank=r)` gives every product its r-th choice,
so the search spends its budget on the few tiles that can win instead of every fixed tile.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from backends.cuda.templates.gemm_tc import TCConfig
from backends.cuda.templates.gemm_tma import TMAConfig
from backends.cuda.templates.gemm_wgmma import WGConfig

SMS = 132                       # H200 streaming multiprocessors
SMEM_PER_SM = 227 * 1024
THREADS_PER_SM = 2048
WAVE_OVERHEAD_S = 6e-6          # pipeline fill + epilogue per wave (fitted: MLP k=1024 vs 4096^3)
COPY_BYTES_PER_S = 3.0e12       # the transpose a k-contiguous wgmma B needs, at the copy rate

# (config, sustained TFLOP/s over the whole GPU at 4096^3 f16, blocks per SM at most by registers)
MMA = [(TCConfig(128, 128, 32, 2, 4, 4), 325.0, 2), (TCConfig(128, 128, 64, 2, 2, 3), 344.0, 2),
       (TCConfig(128, 128, 64, 2, 4, 3), 265.0, 2), (TCConfig(128, 256, 32, 2, 4, 3), 264.0, 1),
       (TCConfig(64, 64, 32, 2, 2, 4), 176.0, 4), (TCConfig(64, 128, 32, 2, 2, 4), 220.0, 3)]
WGMMA = [(WGConfig(128, 256, 4, 0, True), 486.0, 1), (WGConfig(128, 128, 5, 0, True), 413.0, 1),
         (WGConfig(128, 256, 3), 452.0, 1), (WGConfig(64, 256, 4), 358.0, 1), (WGConfig(128, 128, 4, 0, True), 400.0, 1)]
WGMMA_MN = [(WGConfig(128, 256, 4, 1, True), 472.0, 1), (WGConfig(128, 128, 5, 1, True), 405.0, 1)]
# the TMA-fed kernel (reads an n-contiguous B as is): rates measured in one run on an H100 at
# 4096^3 f16 (results/h100-product-kernels-tma-2026-12-06-session25-788f819.txt), scaled by 486/473, the
# H200/H100 ratio of the cp.async kernel's 128x256 tile in that run, to this table's H200 terms
TMA = [(TMAConfig(128, 256, 3, True, True), 675.0, 1), (TMAConfig(128, 256, 3, False, True), 653.0, 1),
       (TMAConfig(128, 128, 5, True, True), 628.0, 1), (TMAConfig(128, 256, 4, True), 623.0, 1),
       (TMAConfig(128, 128, 6, False, True), 522.0, 1), (TMAConfig(128, 128, 6, True), 484.0, 1),
       # TMA stores: 0.87 of the staged tile's rate where the math dominates (H100, 1024x2048x5632
       # and 1024x5632x2048: 0.54x / 0.50x cuBLAS against 0.62x / 0.57x), ahead where the stores do
       # (16384x4096x1024 0.95x against 0.89x, 64 x 4096x4096x128 1.03x against 0.73x;
       # results/h100-product-kernels-tma-experimental-2026-12-06-session29-919075c.txt)
       (TMAConfig(128, 256, 3, True, True, tma_store=True), 587.0, 1),
       (TMAConfig(128, 128, 5, True, True, tma_store=True), 546.0, 1),
       # 176 columns (k-contiguous B only): 1024x5632 is 256 tiles of 128x176, two even rounds on
       # 132 SMs, where 128x256 leaves the second round a third idle; 0.88x and 0.98x the 128x256
       # tile's time at 1024x5632x2048 in two H100 runs, which this rate reproduces
       # (results/h100-product-kernels-tiles176-2026-12-07-session31-305c53c-run*.txt)
       (TMAConfig(128, 176, 4, True), 500.0, 1),
       # ping-pong (two consumer warpgroups, each with whole tiles, taking turns at the tensor
       # cores): one warpgroup's epilogue runs under the other's main loop, modelled as the TMA
       # stores' overlap; where blocks have two tiles or fewer, each warpgroup has at most one
       # and the turns hide little (PINGPONG_LONE). H100: 128x128 at 1024x5632x2048 (3 rounds)
       # 0.0609-0.0622 ms against 0.0619-0.0688 for the cooperative tile, at 1024x2048x5632
       # (1 round) 0.082 against 0.057; 128x176 (a warpgroup holds 176 accumulators a thread)
       # 1.06x cuBLAS at 2048x11008x4096 against 0.98-1.01x for 128x256s3pe, 0.89x at
       # 16384x4096x1024 (the default 0.86-0.88x), 0.65x at 1024x5632x2048 (2 rounds) against
       # 0.78x (results/raw/h100-2026-12-07-session32-product-{pp-d3f9cf0,default-23b2b46}.txt,
       # h100-2026-12-07-session32-product-176pp-console.txt)
       (TMAConfig(128, 128, 5, True, True, True), 628.0, 1), (TMAConfig(128, 176, 4, True, True, True), 640.0, 1),
       # clusters of two sharing B (k-contiguous B: 128x176 halves into whole swizzle atoms):
       # the products whose L2-to-SM traffic binds; H100, two runs: 1024x5632x2048 0.0568-0.0572
       # ms (0.83x cuBLAS) against 0.0600 for the 128x128 ping-pong tile, behind elsewhere
       # (1024x2048x5632 0.73x, 16384x4096x1024 0.81x, 2048x11008x4096 0.99x against 1.02x;
       # results/raw/h100-2026-12-07-session32-80f7696-product-c2-r*.txt): this rate puts it
       # first at 1024x5632x2048 alone
       (TMAConfig(128, 176, 4, True, True, cluster=2), 580.0, 1)]
PINGPONG_LONE = 0.71


@dataclass(frozen=True)
class TileChoice:
    kind: str                  # "mma", "wgmma" or "tma"
    config: object             # TCConfig, WGConfig or TMAConfig
    estimate_s: float

    @property
    def name(self) -> str:
        c = self.config
        if self.kind == "mma":
            return f"tc{c.bm}x{c.bn}x{c.bk}w{c.warps_m}x{c.warps_n}s{c.stages}"
        if self.kind == "tma":
            return c.name
        return f"wgmma{c.bm}x{c.bn}s{c.stages}" + (f"mn{c.b_mn}" if c.b_mn else "") + ("e" if c.smem_epilogue else "")


def _resident(smem: int, threads: int, reg_cap: int) -> int:
    return max(1, min(SMEM_PER_SM // (smem + 1024), THREADS_PER_SM // threads, reg_cap))


def estimate(m: int, n: int, k: int, batch: int, bm: int, bn: int, tflops: float, resident: int,
             overlap_store: bool = False) -> float:
    tiles = math.ceil(m / bm) * math.ceil(n / bn) * batch
    waves = math.ceil(tiles / (SMS * resident))
    math_s = resident * 2 * bm * bn * k / (tflops * 1e12 / SMS)
    store_s = resident * 2 * bm * bn / (COPY_BYTES_PER_S / SMS)      # half outputs
    # a tile's TMA stores overlap the math of the block's next tile: only where blocks have one
    overlap = overlap_store and waves > 1
    return waves * ((max(math_s, store_s) if overlap else math_s + store_s) + WAVE_OVERHEAD_S)


def rank_tiles(m: int, n: int, k: int, batch: int, b_kn: bool, wgmma: bool, wgmma_mn: bool,
               tma: bool = False) -> list[TileChoice]:
    """Candidate tiles for an (m, n, k) x batch product, fastest estimate first. `b_kn`: B is
    n-contiguous (weights stored (in, out)); wgmma then transposes it first unless `wgmma_mn`
    (B read as is) is allowed; batched n-contiguous B has no wgmma path. `tma`: the operands
    suit the TMA kernel's tensor maps (it reads an n-contiguous B through `wgmma_mn`)."""
    out = []
    for cfg, rate, regs in MMA:
        if not cfg.valid():
            continue
        res = _resident(cfg.smem_bytes("kn" if b_kn else "nk"), cfg.threads, regs)
        out.append(TileChoice("mma", cfg, estimate(m, n, k, batch, cfg.bm, cfg.bn, rate, res)))
    if wgmma and not (b_kn and batch > 1):
        transpose = 2 * 2 * n * k / COPY_BYTES_PER_S if b_kn else 0.0
        for cfg, rate, regs in WGMMA:
            res = _resident(cfg.smem_bytes, cfg.threads, regs)
            out.append(TileChoice("wgmma", cfg, estimate(m, n, k, batch, cfg.bm, cfg.bn, rate, res) + transpose))
        if b_kn and wgmma_mn and n % 8 == 0:
            for cfg, rate, regs in WGMMA_MN:
                res = _resident(cfg.smem_bytes, cfg.threads, regs)
                out.append(TileChoice("wgmma", cfg, estimate(m, n, k, batch, cfg.bm, cfg.bn, rate, res)))
    if wgmma and tma and (wgmma_mn or not b_kn):      # (a batched n-contiguous B too: 3-d maps)
        for cfg, rate, regs in TMA:
            if b_kn and not cfg.whole_boxes:        # (gemm_tma.refuses)
                continue
            # a persistent block's waves are its rounds of tiles; its gain (the next tile's
            # loads under this one's epilogue) is in its measured rate, not modelled apart
            res = _resident(cfg.smem_bytes, cfg.threads, regs)
            if cfg.pingpong and math.ceil(m / cfg.bm) * math.ceil(n / cfg.bn) * batch <= 2 * SMS:
                rate *= PINGPONG_LONE
            overlap = cfg.tma_store or cfg.pingpong
            out.append(TileChoice("tma", cfg, estimate(m, n, k, batch, cfg.bm, cfg.bn, rate, res, overlap)))
    return sorted(out, key=lambda c: c.estimate_s)
