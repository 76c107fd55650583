"""Register-tiled SIMT GEMM (f32 FMA; any dtype, any operand view): 128x128 block tile, 8x8
outputs per thread, k-tiles of 8 through shared memory with the next tile prefetched into
registers. Operand elements come from device functions `lda_<name>(params, bz, m, k)` and
`ldb_<name>(params, bz, k, n)` and the output offset from `cflat_<name>(bz, row, col)`, rendered by the planner, so strided, permuted and masked views
all work; the planner passes `a_kcontig` / `b_ncontig` to pick a coalesced thread mapping.
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

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)


SIMT_CONFIGS = [SimtConfig(128, 128, 8, 8, 8), SimtConfig(64, 64, 8, 4, 4), SimtConfig(128, 64, 8, 8, 4)]


def render(name: str, m: int, n: int, k: int, cfg: SimtConfig, params: str, call_args: str,
           loaders: str, epilogue: str, out_conv: str, a_kcontig: bool, b_ncontig: bool, batch: int = 1) -> str:
    NT, BM, BN, BK, TM, TN = cfg.threads, cfg.bm, cfg.bn, cfg.bk, cfg.tm, cfg.tn
    bz, my, past_end = block_coords(-(-m // BM), batch)
    tx_n = BN // TN
    a_per = BM * BK // NT
    b_per = BK * BN // NT
    a_map = f"int mm = e / {BK}, kk = e % {BK};" if a_kcontig else f"int mm = e % {BM}, kk = e / {BM};"
    b_map = f"int kk = e / {BN}, nn = e % {BN};" if b_ncontig else f"int nn = e % {BN}, kk = e / {BN};"
    if not b_ncontig:
        b_map = f"int nn = e / {BK}, kk = e % {BK};"
    half_m, half_n = TM // 2, TN // 2
    return f"""
{loaders}
{epilogue}

extern "C" __global__ void __launch_bounds__({NT}) {name}({params}) {{
  __shared__ float As[{BK}][{BM + 4}];
  __shared__ float Bs[{BK}][{BN + 4}];
  const int tid = threadIdx.x;
  const int tx = tid % {tx_n}, ty = tid / {tx_n};
  const long long bz = {bz};
  {past_end}
  const int m0 = {my} * {BM}, n0 = blockIdx.x * {BN};
  float acc[{TM}][{TN}];
  #pragma unroll
  for (int i = 0; i < {TM}; ++i)
    #pragma unroll
    for (int j = 0; j < {TN}; ++j) acc[i][j] = 0.f;
  float ra[{a_per}], rb[{b_per}];
  auto fetch = [&](int k0) {{
    #pragma unroll
    for (int i = 0; i < {a_per}; ++i) {{
      int e = tid + i * {NT}; {a_map}
      int gm = m0 + mm, gk = k0 + kk;
      ra[i] = (gm < {m} && gk < {k}) ? lda_{name}({call_args}, bz, gm, gk) : 0.f;
    }}
    #pragma unroll
    for (int i = 0; i < {b_per}; ++i) {{
      int e = tid + i * {NT}; {b_map}
      int gk = k0 + kk, gn = n0 + nn;
      rb[i] = (gk < {k} && gn < {n}) ? ldb_{name}({call_args}, bz, gk, gn) : 0.f;
    }}
  }};
  auto stash = [&]() {{
    #pragma unroll
    for (int i = 0; i < {a_per}; ++i) {{ int e = tid + i * {NT}; {a_map} As[kk][mm] = ra[i]; }}
    #pragma unroll
    for (int i = 0; i < {b_per}; ++i) {{ int e = tid + i * {NT}; {b_map} Bs[kk][nn] = rb[i]; }}
  }};
  fetch(0);
  stash();
  __syncthreads();
  for (int k0 = 0; k0 < {k}; k0 += {BK}) {{
    const bool more = k0 + {BK} < {k};
    if (more) fetch(k0 + {BK});
    #pragma unroll
    for (int kk = 0; kk < {BK}; ++kk) {{
      float a[{TM}], b[{TN}];
      #pragma unroll
      for (int i = 0; i < {half_m}; ++i) {{ a[i] = As[kk][ty * {half_m} + i]; a[{half_m} + i] = As[kk][{BM // 2} + ty * {half_m} + i]; }}
      #pragma unroll
      for (int j = 0; j < {half_n}; ++j) {{ b[j] = Bs[kk][tx * {half_n} + j]; b[{half_n} + j] = Bs[kk][{BN // 2} + tx * {half_n} + j]; }}
      #pragma unroll
      for (int i = 0; i < {TM}; ++i)
        #pragma unroll
        for (int j = 0; j < {TN}; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }}
    __syncthreads();
    if (more) {{ stash(); __syncthreads(); }}
  }}
  #pragma unroll
  for (int i = 0; i < {TM}; ++i) {{
    const int row = m0 + (i < {half_m} ? ty * {half_m} + i : {BM // 2} + ty * {half_m} + (i - {half_m}));
    if (row >= {m}) continue;
    #pragma unroll
    for (int j = 0; j < {TN}; ++j) {{
      const int col = n0 + (j < {half_n} ? tx * {half_n} + j : {BN // 2} + tx * {half_n} + (j - {half_n}));
      if (col >= {n}) continue;
      const long long flat = cflat_{name}(bz, row, col);
      out[flat] = {out_conv}(epi_{name}({call_args}, flat, acc[i][j]));
    }}
  }}
}}
"""


def grid(m: int, n: int, batch: int, cfg: SimtConfig) -> tuple[int, int, int]:
    return batched_grid((n + cfg.bn - 1) // cfg.bn, (m + cfg.bm - 1) // cfg.bm, batch)[0]
