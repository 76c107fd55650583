"""Register-tiled SIMT GEMM (f32 FMA; any dtype, any operand view): a BMxBN block tile, TMxTN
outputs per thread, k-tiles of BK through two shared buffers (one barrier per k-tile: the next
tile is fetched into registers while the current one is multiplied, then stored into the other
buffer), fragments read from shared memory as 16- or 8-byte vectors. A warp's lanes cover 8
thread columns by 4 thread rows, so a k-step's fragment reads touch few distinct addresses.
Operand elements come from device functions `lda_<name>(params, bz, m, k)` and
`ldb_<name>(params, bz, k, n)` and the output offset from `cflat_<name>(bz, row, col)`, rendered
by the planner, so strided, permuted and masked views all work; the planner passes `a_kcontig` /
`b_ncontig` to pick a coalesced thread mapping.
"""
from __future__ import annotations

from dataclasses import dataclass

from backends.cuda.templates import batched_grid, block_coords


@dataclass(frozen=True)
class SimtConfig:
    bm: int = 128
    bn: int = 128
    bk: int = 8
    tm: int = 8
    tn: int = 8
    min_blocks: int = 2     # blocks an SM holds at once: caps registers at 64K / (threads x this)
    async_copy: bool = False   # f32 operands read through views: copied into shared memory by
                               # cp.async (no registers held across the multiply), where both allow
    vector_loads: bool = False  # f32 operands contiguous along k (A) / n (B): 16-byte register loads

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)

    @property
    def name(self) -> str:
        return (f"simt{self.bm}x{self.bn}x{self.bk}t{self.tm}x{self.tn}b{self.min_blocks}" + ("a" if self.async_copy else "")
                + ("v" if self.vector_loads else ""))


# The searched tiles, the default for large products first: 128x128 by 128 threads of 16x8 with
# 16-byte register loads where the operands allow them (H100, 4096^3 f32, 2026-12-06: 0.93x
# cuBLAS against 0.84x element by element; results/h100-product-kernels-simt-2026-12-06-session29-
# 919075c.txt); 0.84x for 128x256 by 256 threads of 8x16 and for 128x128x16 by 256 threads of 8x8
# one block an SM (the same with vector loads); 0.74x for 256 threads of 8x8 two blocks an SM,
# whose 128-register cap leaves no room for the next tile's loads.
SIMT_CONFIGS = [SimtConfig(128, 128, 8, 16, 8, 2, vector_loads=True), SimtConfig(128, 128, 8, 16, 8, 2),
                SimtConfig(128, 256, 8, 8, 16, 1), SimtConfig(128, 128, 16, 8, 8, 1), SimtConfig(128, 128, 8, 8, 16, 2),
                SimtConfig(64, 128, 8, 8, 8, 3), SimtConfig(128, 64, 8, 8, 8, 3),
                SimtConfig(64, 64, 8, 4, 4), SimtConfig(128, 64, 8, 8, 4)]
# timed by `benchmarks.product_kernels --experimental`, not searched: the async-copy tiles and
# 256 threads of 8x8 two blocks an SM (never the fastest there: 0.68-0.82x); the other tiles with
# 16-byte register loads (0.82-0.84x)
SIMT_EXPERIMENTAL_CONFIGS = [SimtConfig(128, 128, 8, 8, 8, 2), SimtConfig(128, 128, 8, 8, 8, 2, True),
                             SimtConfig(128, 128, 8, 8, 16, 2, True),
                             SimtConfig(128, 256, 8, 8, 16, 1, vector_loads=True),
                             SimtConfig(128, 128, 16, 8, 8, 1, vector_loads=True)]


def _chunks(t: int, b: int) -> tuple[int, int]:
    """A thread's `t` outputs along a block side of `b`: (width, stride): runs of `width`
    consecutive elements (16-byte vectors where t allows), `t // width` runs `stride` apart, so a
    warp's 8 lanes read one contiguous 128-byte row piece per run."""
    width = 4 if t % 4 == 0 and t >= 8 else max(1, t // 2)
    return width, b // (t // width)


def _fragment(dst: str, at: int, src: str, width: int) -> str:
    """dst[at .. at + width) = `width` consecutive floats of shared memory from `src` (an
    element reference): one vector read where the width allows (the offsets are multiples of
    the width: rows are padded by 4 floats and the arrays 16-byte aligned)."""
    if width in (2, 4):
        parts = " ".join(f"{dst}[{at + i}] = t.{c};" for i, c in enumerate("xyzw"[:width]))
        return f"{{ const float{width} t = *reinterpret_cast<const float{width}*>(&{src}); {parts} }}"
    base = src[:src.rindex("]")]
    return " ".join(f"{dst}[{at + i}] = {base} + {i}];" for i in range(width))


def _fragments(dst: str, arr: str, t: int, b: int, lane: str) -> str:
    """A thread's `t` operand values of k-step kk, from shared row `arr[buf][kk]`."""
    width, stride = _chunks(t, b)
    return " ".join(_fragment(dst, c * width, f"{arr}[buf][kk][{c * stride} + {lane} * {width}]", width)
                    for c in range(t // width))


def _position(origin: str, idx: str, lane: str, t: int, b: int) -> str:
    """The block-relative row / column of a thread's output `idx` (0 <= idx < t)."""
    width, stride = _chunks(t, b)
    return f"{origin} + ({idx}) / {width} * {stride} + {lane} * {width} + ({idx}) % {width}"


def render(name: str, m: int, n: int, k: int, cfg: SimtConfig, params: str, call_args: str,
           loaders: str, epilogue: str, out_conv: str, a_kcontig: bool, b_ncontig: bool, batch: int = 1,
           sources: tuple[str, str] | None = None, vectors: tuple[str | None, str | None] = (None, None)) -> str:
    """sources: the f32 buffers A and B are read from, by offset functions `oa_<name>(bz, m, k)`
    and `ob_<name>(bz, k, n)` (-1 where the view reads its zero fill), for cfg.async_copy.
    vectors: for A and B, the f32 buffer the register path reads as 16-byte vectors (through
    the same offset functions: unmasked, 4-element aligned, unit stride along k for A and n for
    B, that size a multiple of 4; given with cfg.vector_loads), or None: element by element."""
    NT, BM, BN, BK, TM, TN = cfg.threads, cfg.bm, cfg.bn, cfg.bk, cfg.tm, cfg.tn
    bz, my, past_end = block_coords(-(-m // BM), batch)
    tx_n = BN // TN
    a_per = BM * BK // NT
    b_per = BK * BN // NT
    a_map = f"int mm = e / {BK}, kk = e % {BK};" if a_kcontig else f"int mm = e % {BM}, kk = e / {BM};"
    b_map = f"int kk = e / {BN}, nn = e % {BN};" if b_ncontig else f"int nn = e / {BK}, kk = e % {BK};"
    tiles = -(-k // BK)
    # bounds tests only along sizes that are not a multiple of the tile
    a_in = " && ".join([f"gm < {m}"] * (m % BM != 0) + [f"gk < {k}"] * (k % BK != 0)) or "true"
    b_in = " && ".join([f"gk < {k}"] * (k % BK != 0) + [f"gn < {n}"] * (n % BN != 0)) or "true"
    if tx_n % 8 == 0 and NT % 32 == 0:     # lanes 8 (n) x 4 (m); warps tile the block
        coords = (f"const int lane = tid & 31, warp = tid >> 5;\n"
                  f"  const int tx = (warp % {tx_n // 8}) * 8 + (lane & 7), ty = (warp / {tx_n // 8}) * 4 + (lane >> 3);")
    else:
        coords = f"const int tx = tid % {tx_n}, ty = tid / {tx_n};"
    a_frag = _fragments("a", "As", TM, BM, "ty")
    b_frag = _fragments("b", "Bs", TN, BN, "tx")
    multiply = f"""    #pragma unroll
    for (int kk = 0; kk < {BK}; ++kk) {{
      float a[{TM}], b[{TN}];
      {a_frag}
      {b_frag}
      #pragma unroll
      for (int i = 0; i < {TM}; ++i)
        #pragma unroll
        for (int j = 0; j < {TN}; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }}
"""
    if cfg.async_copy and sources is not None:
        pipeline = _async_pipeline(name, cfg, sources, a_map, b_map, a_in, b_in, tiles, multiply)
    else:
        a_vec = vectors[0] if a_kcontig and (BM * BK // 4) % NT == 0 else None
        b_vec = vectors[1] if b_ncontig and (BK * BN // 4) % NT == 0 else None
        a_decl, a_fetch, a_stash = _operand_io(
            "ra", "As", a_per, NT, a_map, "int gm = m0 + mm, gk = k0 + kk;", a_in, f"lda_{name}({call_args}, bz, gm, gk)",
            a_vec and (f"int mm = e / {BK // 4}, kk = (e % {BK // 4}) * 4;", f"{a_vec} + oa_{name}(bz, gm, gk)"), True)
        b_decl, b_fetch, b_stash = _operand_io(
            "rb", "Bs", b_per, NT, b_map, "int gk = k0 + kk, gn = n0 + nn;", b_in, f"ldb_{name}({call_args}, bz, gk, gn)",
            b_vec and (f"int kk = e / {BN // 4}, nn = (e % {BN // 4}) * 4;", f"{b_vec} + ob_{name}(bz, gk, gn)"), False)
        pipeline = f"""  {a_decl} {b_decl}
  auto fetch = [&](int k0) {{{a_fetch}{b_fetch}
  }};
  auto stash = [&](int buf) {{{a_stash}{b_stash}
  }};
  // k-tile t: the next tile fetched into registers, this one multiplied from buffer `buf`, the
  // next stored into the other buffer (last read before the previous barrier), one barrier. No
  // branch around the fetch (the last tile fetches itself again, stored where nothing reads):
  // a conditional fetch gets its loads sunk past the multiply, next to their stores.
  auto tile = [&](const int buf, const int t) {{
    fetch((t + 1 < {tiles} ? t + 1 : t) * {BK});
{multiply}    stash(buf ^ 1);
    __syncthreads();
  }};
  fetch(0);
  stash(0);
  __syncthreads();
  for (int t = 0; t < {tiles}; ++t) tile(t & 1, t);
"""
    return f"""
{loaders}
{epilogue}

extern "C" __global__ void __launch_bounds__({NT}, {cfg.min_blocks}) {name}({params}) {{
  __shared__ __align__(16) float As[2][{BK}][{BM + 4}];
  __shared__ __align__(16) float Bs[2][{BK}][{BN + 4}];
  const int tid = threadIdx.x;
  {coords}
  const long long bz = {bz};
  {past_end}
  const int m0 = {my} * {BM}, n0 = blockIdx.x * {BN};
  float acc[{TM}][{TN}];
  #pragma unroll
  for (int i = 0; i < {TM}; ++i)
    #pragma unroll
    for (int j = 0; j < {TN}; ++j) acc[i][j] = 0.f;
{pipeline}  #pragma unroll
  for (int i = 0; i < {TM}; ++i) {{
    const int row = {_position("m0", "i", "ty", TM, BM)};
    if (row >= {m}) continue;
    #pragma unroll
    for (int j = 0; j < {TN}; ++j) {{
      const int col = {_position("n0", "j", "tx", TN, BN)};
      if (col >= {n}) continue;
      const long long flat = cflat_{name}(bz, row, col);
      out[flat] = {out_conv}(epi_{name}({call_args}, flat, acc[i][j]));
    }}
  }}
}}
"""


def _operand_io(reg: str, arr: str, per: int, nt: int, index_map: str, coords: str, inside: str, load: str,
                vector: tuple[str, str] | None, transposed: bool) -> tuple[str, str, str]:
    """(declaration, fetch, stash) of one operand's share of a k-tile: `per` elements a thread
    fetched into registers `reg` by `load` (zero outside `inside`), then stored into shared
    `arr[buf][kk][mm or nn]`. With `vector` = (the index map of 4-element groups, the address
    of a group), 16-byte loads; stored as one 16-byte vector, or `transposed` as four elements
    down a column (A is kept k-major in shared memory)."""
    if vector is None:
        return (f"float {reg}[{per}];",
                f"""
    #pragma unroll
    for (int i = 0; i < {per}; ++i) {{
      int e = tid + i * {nt}; {index_map}
      {coords}
      {reg}[i] = ({inside}) ? {load} : 0.f;
    }}""",
                f"""
    #pragma unroll
    for (int i = 0; i < {per}; ++i) {{ int e = tid + i * {nt}; {index_map} {arr}[buf][kk][{"mm" if transposed else "nn"}] = {reg}[i]; }}""")
    group_map, address = vector
    store = (" ".join(f"{arr}[buf][kk + {j}][mm] = {reg}[i].{c};" for j, c in enumerate("xyzw")) if transposed
             else f"*reinterpret_cast<float4*>(&{arr}[buf][kk][nn]) = {reg}[i];")
    return (f"float4 {reg}[{per // 4}];",
            f"""
    #pragma unroll
    for (int i = 0; i < {per // 4}; ++i) {{
      int e = tid + i * {nt}; {group_map}
      {coords}
      {reg}[i] = ({inside}) ? *reinterpret_cast<const float4*>({address}) : float4{{0.f, 0.f, 0.f, 0.f}};
    }}""",
            f"""
    #pragma unroll
    for (int i = 0; i < {per // 4}; ++i) {{
      int e = tid + i * {nt}; {group_map}
      {store}
    }}""")


def _async_pipeline(name: str, cfg: SimtConfig, sources: tuple[str, str], a_map: str, b_map: str,
                    a_in: str, b_in: str, tiles: int, multiply: str) -> str:
    """The k loop with operands copied global -> shared by cp.async, 4 bytes an element, zero
    where out of bounds or masked: tile t+1 is copied into the other buffer while tile t is
    multiplied; a barrier after the copy lands and one after the multiply (the buffer is then
    free for tile t+2)."""
    NT, BM, BN, BK = cfg.threads, cfg.bm, cfg.bn, cfg.bk
    a_buf, b_buf = sources
    return f"""  auto issue = [&](const int buf, const int k0) {{
    #pragma unroll
    for (int i = 0; i < {BM * BK // NT}; ++i) {{
      int e = tid + i * {NT}; {a_map}
      int gm = m0 + mm, gk = k0 + kk;
      const long long o = ({a_in}) ? oa_{name}(bz, gm, gk) : -1LL;
      cp_async4(&As[buf][kk][mm], {a_buf} + (o >= 0 ? o : 0), o >= 0 ? 4 : 0);
    }}
    #pragma unroll
    for (int i = 0; i < {BK * BN // NT}; ++i) {{
      int e = tid + i * {NT}; {b_map}
      int gk = k0 + kk, gn = n0 + nn;
      const long long o = ({b_in}) ? ob_{name}(bz, gk, gn) : -1LL;
      cp_async4(&Bs[buf][kk][nn], {b_buf} + (o >= 0 ? o : 0), o >= 0 ? 4 : 0);
    }}
    cp_async_commit();
  }};
  auto tile = [&](const int buf, const int t) {{
    if (t + 1 < {tiles}) {{ issue(buf ^ 1, (t + 1) * {BK}); cp_async_wait<1>(); }} else cp_async_wait<0>();
    __syncthreads();
{multiply}    __syncthreads();
  }};
  issue(0, 0);
  for (int t = 0; t < {tiles}; ++t) tile(t & 1, t);
"""


def grid(m: int, n: int, batch: int, cfg: SimtConfig) -> tuple[int, int, int]:
    return batched_grid((n + cfg.bn - 1) // cfg.bn, (m + cfg.bm - 1) // cfg.bm, batch)[0]
