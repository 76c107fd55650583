"""Tensor-core GEMM for f16/bf16 with f32 accumulation: mma.sync m16n8k16, ldmatrix,
multi-stage cp.async pipeline through padded shared memory, register tiles per warp.

C[b, m, n] = sum_k A[b, m, k] * B[b, k, n]; A is k-contiguous; B is n-contiguous ("kn") or
k-contiguous ("nk"). Every other index is a compile-time stride. The epilogue is a device
function `epi(params..., flat, acc) -> float` rendered by the planner (bias, activation, ...).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from backends.cuda.templates import batched_grid, block_coords

# one schedule of the tensor-core GEMM: block tile, warps, pipeline depth
@dataclass(frozen=True)
class TCConfig:
    bm: int = 128
    bn: int = 128
    bk: int = 32
    warps_m: int = 2
    warps_n: int = 2
    stages: int = 4

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n

    def smem_bytes(self, b_layout: str) -> int:
        pad = 8
        a = self.bm * (self.bk + pad)
        b = self.bk * (self.bn + pad) if b_layout == "kn" else self.bn * (self.bk + pad)
        return 2 * self.stages * (a + b)

    def valid(self) -> bool:
        wtm, wtn = self.bm // self.warps_m, self.bn // self.warps_n
        return (wtm % 16 == 0 and wtn % 16 == 0 and self.bk % 16 == 0 and self.stages >= 2
                and (self.bm * self.bk // 8) % self.threads == 0 and (self.bk * self.bn // 8) % self.threads == 0)


TC_CONFIGS = [TCConfig(128, 128, 32, 2, 4, 4), TCConfig(128, 128, 64, 2, 2, 3), TCConfig(128, 128, 64, 2, 4, 3),
              TCConfig(128, 256, 32, 2, 4, 3), TCConfig(64, 64, 32, 2, 2, 4)]


@dataclass(frozen=True)
class GemmShape:
    """Index maps of one batched GEMM (element strides; batch axes decoded from blockIdx.z)."""
    m: int
    n: int
    k: int
    batch: tuple[tuple[int, int, int, int], ...]   # per batch axis: (size, a_stride, b_stride, c_stride)
    a_off: int
    a_sm: int          # A stride along m (k stride is 1)
    b_off: int
    b_layout: str      # "kn": n stride 1, k stride b_sk;  "nk": k stride 1, n stride b_sn
    b_sk: int
    b_sn: int
    c_sm: int
    c_sn: int

    @property
    def batch_count(self) -> int:
        return math.prod(s for s, *_ in self.batch)


def batch_offsets(shape: GemmShape, var: str = "bz") -> tuple[str, str, str]:
    """C expressions of the A, B, C element offsets of batch number `var`."""
    a, b, c = [str(shape.a_off)], [str(shape.b_off)], ["0"]
    inner = 1
    for size, sa, sb, sc in reversed(shape.batch):
        i = f"(({var} / {inner}) % {size})" if inner > 1 else f"({var} % {size})"
        if size > 1:
            if sa:
                a.append(f"(long long){i} * {sa}")
            if sb:
                b.append(f"(long long){i} * {sb}")
            if sc:
                c.append(f"(long long){i} * {sc}")
        inner *= size
    return " + ".join(a), " + ".join(b), " + ".join(c)


def tc_aligned(shape: GemmShape) -> bool:
    """16-byte cp.async chunks need 8-element alignment of every row start and of k (and n for kn)."""
    vals = [shape.a_off, shape.a_sm, shape.b_off, shape.k] + [sa for _, sa, _, _ in shape.batch] + \
           [sb for _, _, sb, _ in shape.batch]
    vals += [shape.b_sk, shape.n] if shape.b_layout == "kn" else [shape.b_sn]
    return all(v % 8 == 0 for v in vals)


def _gather_chunk(T: str, conv: str, loader: str, call_args: str, into: str, bound: str, index: str) -> str:
    """Eight elements read one by one through `loader` (any view, any alignment) into one
    16-byte chunk, the C lvalue `into` (shared memory or a register): the path for operands
    that cp.async cannot copy."""
    return f"""
      {{
        uint4 v; {T}* e = reinterpret_cast<{T}*>(&v);
        #pragma unroll
        for (int j = 0; j < 8; ++j) e[j] = ({bound}) ? {conv}({loader}({call_args}, {index})) : {conv}(0.f);
        {into} = v;
      }}"""


def render(name: str, dtype: str, shape: GemmShape, cfg: TCConfig, params: str, call_args: str,
           epilogue: str, out_type: str, pair_store: bool, a_name: str = "A", b_name: str = "B",
           a_gather: bool = False, b_gather: bool = False, loaders: str = "", b_n_fast: bool = False,
           b_runs: bool = False) -> str:
    """The kernel `name`. `params` is the C parameter list (first is `out`), `call_args` the
    matching argument names, `epilogue` a device function epi_<name>(params..., long long flat, float acc)
    returning the output's compute value. `out_type` is the output's storage type.
    a_gather / b_gather: read that operand through lda_<name>/ldb_<name> (in `loaders`) instead
    of cp.async (B is then staged k-contiguous, as for "nk"). b_n_fast: a gathered B's threads
    take consecutive columns (each its 8 k values), so one load instruction of a warp reads 32
    neighbouring columns: for views whose columns lie side by side in memory (a convolution's
    windows), where k-chunks first would read 8 scattered rows per warp. b_runs: B ("nk") is
    copied by cp.async from `b_name` at offsets ldb_runs_<name>(bz, k, n) (in `loaders`), each
    the start of 8 consecutive elements at k a multiple of 8 (a window read from a staged copy
    of its source)."""
    T = "__half" if dtype == "f16" else "__nv_bfloat16"
    mma = "mma_f16" if dtype == "f16" else "mma_bf16"
    bz, my, past_end = block_coords(-(-shape.m // cfg.bm), shape.batch_count)
    pack2 = "__floats2half2_rn" if out_type == "__half" else "__floats2bfloat162_rn"
    pair_t = "__half2" if out_type == "__half" else ("__nv_bfloat162" if out_type == "__nv_bfloat16" else "float2")
    PAD = 8
    wtm, wtn = cfg.bm // cfg.warps_m, cfg.bn // cfg.warps_n
    mi, ni = wtm // 16, wtn // 8
    a_ld = cfg.bk + PAD
    kn = shape.b_layout == "kn" and not b_gather
    b_ld = (cfg.bn + PAD) if kn else (cfg.bk + PAD)
    a_stage = cfg.bm * a_ld
    b_stage = (cfg.bk * b_ld) if kn else (cfg.bn * b_ld)
    a_chunks = cfg.bm * cfg.bk // 8 // cfg.threads
    b_chunks = cfg.bk * cfg.bn // 8 // cfg.threads
    a_off, b_off, c_off = batch_offsets(shape)
    tconv = "__float2half_rn" if dtype == "f16" else "__float2bfloat16_rn"
    b_fetch, b_k0 = "", f"\n    const int k0 = kt * {cfg.bk};"
    b_next, b_after = f"load_stage(nk % {cfg.stages}, nk);", ""
    if b_gather:
        # fetched into registers before the stage's products and stored after them, so the
        # loads' latency hides behind the tensor-core work (cp.async cannot gather)
        pick = f"int r = c % {cfg.bn}, ck = (c / {cfg.bn}) * 8;" if b_n_fast else \
            f"int r = c / {cfg.bk // 8}, ck = (c % {cfg.bk // 8}) * 8;"
        b_fetch = f"""
  uint4 breg[{b_chunks}];
  auto fetch_b = [&](int kt) {{
    const int k0 = kt * {cfg.bk};
    #pragma unroll
    for (int i = 0; i < {b_chunks}; ++i) {{
      int c = tid + i * {cfg.threads};
      {pick}
      int gn = n0 + r, gk = k0 + ck;""" + _gather_chunk(T, tconv, f"ldb_{name}", call_args, "breg[i]",
                                                     f"gn < {shape.n} && gk + j < {shape.k}", "bz, gk + j, gn") + f"""
    }}
  }};
  auto store_b = [&](int stage) {{
    #pragma unroll
    for (int i = 0; i < {b_chunks}; ++i) {{
      int c = tid + i * {cfg.threads};
      {pick}
      *reinterpret_cast<uint4*>(sB + stage * {b_stage} + r * {b_ld} + ck) = breg[i];
    }}
  }};"""
        b_load = """
    fetch_b(kt);
    store_b(stage);"""
        b_k0 = ""
        # the next stage's B fetched with no branch around it (past the last k-tile the last
        # one again, stored into a stage nothing reads after): a conditional fetch gets its
        # loads sunk past the products, next to their stores. That stage was last read before
        # this step's barrier.
        b_next = f"load_a(nk % {cfg.stages}, nk);\n    fetch_b(nk < KT ? nk : KT - 1);"
        b_after = f"\n    store_b(nk % {cfg.stages});"
    if kn:
        b_load = f"""
    #pragma unroll
    for (int i = 0; i < {b_chunks}; ++i) {{
      int c = tid + i * {cfg.threads};
      int r = c / {cfg.bn // 8}, cn = (c % {cfg.bn // 8}) * 8;
      int gk = k0 + r, gn = n0 + cn;
      bool ok = gk < {shape.k} && gn < {shape.n};
      const {T}* src = ok ? Bb + (long long)gk * {shape.b_sk} + gn : Bb;
      cp_async16(smem_u32(sB + stage * {b_stage} + r * {b_ld} + cn), src, ok ? 16 : 0);
    }}"""
        b_frag = f"""
        #pragma unroll
        for (int j = 0; j < {ni // 2}; ++j) {{
          int kr = kk + (lane & 7) + ((lane >> 3) & 1) * 8;
          int nc = wn * {wtn} + j * 16 + (lane >> 4) * 8;
          ldsm_x4_t(bf[2 * j][0], bf[2 * j][1], bf[2 * j + 1][0], bf[2 * j + 1][1], smem_u32(tB + kr * {b_ld} + nc));
        }}"""
    else:
        if not b_gather:
            b_load = f"""
    #pragma unroll
    for (int i = 0; i < {b_chunks}; ++i) {{
      int c = tid + i * {cfg.threads};
      int r = c / {cfg.bk // 8}, ck = (c % {cfg.bk // 8}) * 8;
      int gn = n0 + r, gk = k0 + ck;
      bool ok = gn < {shape.n} && gk < {shape.k};
      const {T}* src = ok ? Bb + {f"ldb_runs_{name}(bz, gk, gn)" if b_runs else f"(long long)gn * {shape.b_sn} + gk"} : Bb;
      cp_async16(smem_u32(sB + stage * {b_stage} + r * {b_ld} + ck), src, ok ? 16 : 0);
    }}"""
        b_frag = f"""
        #pragma unroll
        for (int j = 0; j < {ni // 2}; ++j) {{
          int nr = wn * {wtn} + j * 16 + (lane & 7) + (lane >> 4) * 8;
          int kc = kk + ((lane >> 3) & 1) * 8;
          ldsm_x4(bf[2 * j][0], bf[2 * j][1], bf[2 * j + 1][0], bf[2 * j + 1][1], smem_u32(tB + nr * {b_ld} + kc));
        }}"""
    if a_gather:
        a_load = _gather_chunk(T, tconv, f"lda_{name}", call_args,
                               f"*reinterpret_cast<uint4*>(sA + stage * {a_stage} + r * {a_ld} + ck)",
                               f"gm < {shape.m} && gk + j < {shape.k}", "bz, gm, gk + j")
    else:
        a_load = f"""
      bool ok = gm < {shape.m} && gk < {shape.k};
      const {T}* src = ok ? Ab + (long long)gm * {shape.a_sm} + gk : Ab;
      cp_async16(smem_u32(sA + stage * {a_stage} + r * {a_ld} + ck), src, ok ? 16 : 0);"""
    if pair_store:
        store = f"""
          if (col + 1 < {shape.n}) {{
            float v0 = epi_{name}({call_args}, flat, acc[i][j][2 * h]);
            float v1 = epi_{name}({call_args}, flat + {shape.c_sn}, acc[i][j][2 * h + 1]);
            *reinterpret_cast<{pair_t}*>(out + flat) = {pack2 if pair_t != "float2" else "make_float2"}(v0, v1);
          }} else if (col < {shape.n}) {{
            out[flat] = ({out_type})(epi_{name}({call_args}, flat, acc[i][j][2 * h]));
          }}"""
        if out_type != "float":
            store = store.replace(f"out[flat] = ({out_type})(", "out[flat] = " + (
                "__float2half_rn(" if out_type == "__half" else "__float2bfloat16_rn("))
    else:
        conv = {"__half": "__float2half_rn", "__nv_bfloat16": "__float2bfloat16_rn"}.get(out_type, "")
        store = f"""
          if (col < {shape.n}) out[flat] = {conv}(epi_{name}({call_args}, flat, acc[i][j][2 * h]));
          if (col + 1 < {shape.n}) out[flat + {shape.c_sn}] = {conv}(epi_{name}({call_args}, flat + {shape.c_sn}, acc[i][j][2 * h + 1]));"""
    return f"""
{loaders}
{epilogue}

extern "C" __global__ void __launch_bounds__({cfg.threads}) {name}({params}) {{
  extern __shared__ __align__(16) unsigned char smem_raw[];
  {T}* sA = reinterpret_cast<{T}*>(smem_raw);
  {T}* sB = sA + {cfg.stages * a_stage};
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / {cfg.warps_n}, wn = warp % {cfg.warps_n};
  const long long bz = {bz};
  {past_end}
  const {T}* Ab = reinterpret_cast<const {T}*>({a_name}) + ({a_off});
  const {T}* Bb = reinterpret_cast<const {T}*>({b_name}) + ({b_off});
  const long long c_base = {c_off};
  const int m0 = {my} * {cfg.bm}, n0 = blockIdx.x * {cfg.bn};
  float acc[{mi}][{ni}][4];
  #pragma unroll
  for (int i = 0; i < {mi}; ++i)
    #pragma unroll
    for (int j = 0; j < {ni}; ++j)
      #pragma unroll
      for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.f;

{b_fetch}
  auto load_a = [&](int stage, int kt) {{
    const int k0 = kt * {cfg.bk};
    #pragma unroll
    for (int i = 0; i < {a_chunks}; ++i) {{
      int c = tid + i * {cfg.threads};
      int r = c / {cfg.bk // 8}, ck = (c % {cfg.bk // 8}) * 8;
      int gm = m0 + r, gk = k0 + ck;{a_load}
    }}
  }};
  auto load_stage = [&](int stage, int kt) {{
    load_a(stage, kt);{b_k0}{b_load}
  }};

  const int KT = {(shape.k + cfg.bk - 1) // cfg.bk};
  #pragma unroll
  for (int s = 0; s < {cfg.stages - 1}; ++s) {{
    if (s < KT) load_stage(s, s);
    cp_async_commit();
  }}
  for (int kt = 0; kt < KT; ++kt) {{
    cp_async_wait<{cfg.stages - 2}>();
    __syncthreads();
    const int nk = kt + {cfg.stages - 1};
    if (nk < KT) {b_next}
    cp_async_commit();
    const {T}* tA = sA + (kt % {cfg.stages}) * {a_stage};
    const {T}* tB = sB + (kt % {cfg.stages}) * {b_stage};
    #pragma unroll
    for (int kk = 0; kk < {cfg.bk}; kk += 16) {{
      uint32_t af[{mi}][4], bf[{ni}][2];
      #pragma unroll
      for (int i = 0; i < {mi}; ++i) {{
        int r = wm * {wtm} + i * 16 + (lane & 15);
        int c = kk + (lane >> 4) * 8;
        ldsm_x4(af[i][0], af[i][1], af[i][2], af[i][3], smem_u32(tA + r * {a_ld} + c));
      }}{b_frag}
      #pragma unroll
      for (int i = 0; i < {mi}; ++i)
        #pragma unroll
        for (int j = 0; j < {ni}; ++j) {mma}(acc[i][j], af[i], bf[j][0], bf[j][1]);
    }}{b_after}
  }}
  cp_async_wait<0>();

  #pragma unroll
  for (int i = 0; i < {mi}; ++i) {{
    #pragma unroll
    for (int h = 0; h < 2; ++h) {{
      const int row = m0 + wm * {wtm} + i * 16 + (lane >> 2) + h * 8;
      if (row >= {shape.m}) continue;
      #pragma unroll
      for (int j = 0; j < {ni}; ++j) {{
        const int col = n0 + wn * {wtn} + j * 8 + (lane & 3) * 2;
        const long long flat = c_base + (long long)row * {shape.c_sm} + (long long)col * {shape.c_sn};{store}
      }}
    }}
  }}
}}
"""


def grid(shape: GemmShape, cfg: TCConfig) -> tuple[int, int, int]:
    return batched_grid((shape.n + cfg.bn - 1) // cfg.bn, (shape.m + cfg.bm - 1) // cfg.bm, shape.batch_count)[0]
