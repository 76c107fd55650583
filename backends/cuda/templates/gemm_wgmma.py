"""Hopper GEMM (f16/bf16 in, f32 accumulation) with warpgroup MMA: wgmma.mma_async m64nNk16
reading both operands from shared memory through matrix descriptors.

Tiles of BM x 64 (A) and BN x 64 (B, k-contiguous) are copied by cp.async into the 128-byte
swizzled layout wgmma expects (16-byte chunk c of row r lands at r*128 + ((c ^ (r & 7)) * 16),
each stage 1024-byte aligned), several stages deep. Each warpgroup (128 threads) owns 64 rows
of the block tile and all BN columns; its accumulators stay in registers. B must be
k-contiguous; an n-contiguous B is transposed first by `render_transpose`.
Needs the architecture-specific target (sm_90a): the source carries the marker below.
"""
from __future__ import annotations

from dataclasses import dataclass

from backends.cuda.cexpr import TO_FLOAT
from backends.cuda.templates import batched_grid, block_coords
from backends.cuda.templates.gemm_tc import GemmShape, batch_offsets

NEEDS_ARCH_SPECIFIC = "// saturn: needs arch-specific target (a)"


@dataclass(frozen=True)
class WGConfig:
    bm: int = 128          # 64 rows per warpgroup
    bn: int = 256          # wgmma N (<= 256, multiple of 64)
    stages: int = 4
    b_mn: int = 0          # 1: read an n-contiguous B as is ("MN-major", transpose bit set); 0: transpose
                           # B first. (The other reading of LBO/SBO, n-blocks 1024 B and k-groups 8192 B
                           # apart, gave wrong products on the H200 and was dropped.)
    smem_epilogue: bool = False   # stage the output tile in shared memory for 16-byte row stores

    @property
    def threads(self) -> int:
        return 128 * (self.bm // 64)

    @property
    def smem_bytes(self) -> int:
        return self.stages * (self.bm + self.bn) * 128 + 1024


WG_CONFIGS = [WGConfig(128, 256, 4), WGConfig(128, 256, 3), WGConfig(128, 128, 5), WGConfig(64, 256, 4)]
WG_CONFIGS += [WGConfig(128, 256, 4, 0, True), WGConfig(128, 128, 5, 0, True)]
WG_MN_CONFIGS = [WGConfig(128, 256, 4, 1), WGConfig(128, 256, 4, 1, True), WGConfig(128, 128, 5, 1, True)]


def _accumulators(n: int) -> tuple[int, str, str]:
    """(registers, asm operand list, constraints) of a m64nN f32 accumulator d[]."""
    regs = n // 2
    return regs, ", ".join(f"%{i}" for i in range(regs)), ", ".join(f'"+f"(d[{i}])' for i in range(regs))


def helpers(n: int, dtype: str, trans_b: int = 0) -> str:
    """wgmma_n{n}_{ty}_t{trans_b}(d, desc A, desc B, scale-d): both operands in shared memory."""
    ty = "f16" if dtype == "f16" else "bf16"
    regs, outs, cons = _accumulators(n)
    return (f"DEV void wgmma_n{n}_{ty}_t{trans_b}(float* d, uint64_t da, uint64_t db, int one) {{\n"
            f'  asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{regs + 2}, 0;\\n"\n'
            f'    "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ty}.{ty} {{{outs}}}, %{regs}, %{regs + 1}, p, 1, 1, 0, {trans_b};\\n}}\\n"\n'
            f'    : {cons}\n'
            f'    : "l"(da), "l"(db), "r"(one));\n'
            "}\n")


def register_a_helper(n: int, dtype: str) -> str:
    """wgmma_ra_n{n}_{ty}(d, a, desc B, scale-d): d[64 x n] += a (registers, 64 x 16) * B
    (shared memory, n-contiguous: transposed)."""
    ty = "f16" if dtype == "f16" else "bf16"
    regs, outs, cons = _accumulators(n)
    return (f"DEV void wgmma_ra_n{n}_{ty}(float* d, const uint32_t* a, uint64_t db, int one) {{\n"
            f'  asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{regs + 5}, 0;\\n"\n'
            f'    "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ty}.{ty} {{{outs}}}, '
            f'{{%{regs}, %{regs + 1}, %{regs + 2}, %{regs + 3}}}, %{regs + 4}, p, 1, 1, 1;\\n}}\\n"\n'
            f'    : {cons}\n'
            f'    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(one));\n'
            "}\n")


# the matrix descriptors are plain C (the host runner, backends/cuda/hostsim.py, uses them as
# they are); the instructions behind SATURN_WGMMA_COMMON it replaces with its own
COMMON = r"""
#ifndef SATURN_WGMMA_DESCRIPTORS
#define SATURN_WGMMA_DESCRIPTORS
// K-major operand, 128-byte swizzle: 8 rows x 128 B per core-matrix group (stride 1024 B). The
// address field (bits 0-13) holds addr >> 4; shared addresses stay below 2^18, so a descriptor
// plus (n >> 4) describes the operand n bytes further on (no carry into the next field)
DEV uint64_t wg_desc(uint32_t addr) {
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}
// any layout: leading / stride byte offsets given, 128-byte swizzle
DEV uint64_t wg_desc2(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32) | ((uint64_t)1 << 62);
}
#endif
#ifndef SATURN_WGMMA_COMMON
#define SATURN_WGMMA_COMMON
DEV void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
DEV void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> DEV void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory"); }
// after a wait, before the accumulators are read: the compiler sees a wgmma's outputs written
// when it is issued, so without this it may read them (convert, scale, store) before the wait
template <int N> DEV void wg_hold(float (&d)[N]) {
  #pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}
DEV void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
#endif
"""


def aligned(shape: GemmShape, b_mn: bool = False) -> bool:
    """Rows of A and B start 16-byte aligned (k itself may be ragged: rows are padded or
    the caller checked that k is a multiple of 8)."""
    vals = [shape.a_off, shape.a_sm, shape.b_off] + [b[1] for b in shape.batch] + [b[2] for b in shape.batch]
    if b_mn:
        return shape.b_layout == "kn" and all(v % 8 == 0 for v in vals + [shape.b_sk, shape.n])
    return shape.b_layout == "nk" and all(v % 8 == 0 for v in vals + [shape.b_sn])


def render(name: str, dtype: str, shape: GemmShape, cfg: WGConfig, params: str, call_args: str,
           epilogue: str, out_type: str, pair_store: bool, a_name: str, b_name: str, b_runs: bool = False,
           epi_after: bool = False) -> str:
    """b_runs: B (k-contiguous) is copied from `b_name` at offsets ldb_runs_<name>(bz, k, n), each
    the start of 8 consecutive elements at k a multiple of 8 (defined by the caller). epi_after:
    a staged epilogue runs after the product is staged (render.epilogue_after)."""
    T = "__half" if dtype == "f16" else "__nv_bfloat16"
    ty = "f16" if dtype == "f16" else "bf16"
    BM, BN, S, NT = cfg.bm, cfg.bn, cfg.stages, cfg.threads
    bz, my, past_end = block_coords(-(-shape.m // BM), shape.batch_count)
    A_ST, B_ST = BM * 128, BN * 128
    a_chunks, b_chunks = BM * 8 // NT, BN * 8 // NT
    a_off, b_off, c_off = batch_offsets(shape)
    KT = (shape.k + 63) // 64
    conv = _CONVERT.get(out_type, "")
    tb = 1 if cfg.b_mn else 0
    if cfg.b_mn:
        # B tile: 64 k-rows x BN n-values, n contiguous: atoms of 8 k-rows x 64 n (1024 B, swizzled),
        # k-groups 1024 B apart, 64-wide n-blocks 8192 B apart
        # leading byte offset: between 64-wide n-blocks; stride byte offset: between 8-row k-groups
        b_desc = "wg_desc2(sb + kk * 2048, 8192, 1024)"
        b_load = f"""
    #pragma unroll
    for (int i = 0; i < {b_chunks}; ++i) {{
      const int c = tid + i * {NT}, r = c / {BN // 8}, cn = c % {BN // 8};
      const int gk = k0 + r, gn = n0 + cn * 8;
      const bool ok = gk < {shape.k} && gn < {shape.n};
      const int rr = r & 7;
      cp_async16(sb + (cn >> 3) * 8192 + (r >> 3) * 1024 + rr * 128 + (((cn & 7) ^ rr) << 4),
                 ok ? Bb + (long long)gk * {shape.b_sk} + gn : Bb, ok ? 16 : 0);
    }}"""
    else:
        b_desc = "wg_desc(sb + kk * 32)"
        b_load = f"""
    #pragma unroll
    for (int i = 0; i < {b_chunks}; ++i) {{
      const int c = tid + i * {NT}, r = c >> 3, ch = c & 7;
      const int gn = n0 + r, gk = k0 + ch * 8;
      const bool ok = gn < {shape.n} && gk < {shape.k};
      cp_async16(sb + r * 128 + ((ch ^ (r & 7)) << 4), ok ? Bb + {f"ldb_runs_{name}(bz, gk, gn)" if b_runs else f"(long long)gn * {shape.b_sn} + gk"} : Bb, ok ? 16 : 0);
    }}"""
    if cfg.smem_epilogue and out_type in ("__half", "__nv_bfloat16", "float") and \
            smem_epilogue_ok(shape, 4 if out_type == "float" else 2):
        epilogue_code = smem_epilogue(name, shape, cfg, call_args, out_type, conv, after=epi_after)
    else:
        epilogue_code = direct_epilogue(name, shape, BN, call_args, out_type, pair_store)
    return f"""
{NEEDS_ARCH_SPECIFIC}
{COMMON}
#ifndef SATURN_WGMMA_N{BN}_{ty}_T{tb}
#define SATURN_WGMMA_N{BN}_{ty}_T{tb}
{helpers(BN, dtype, tb)}
#endif
{epilogue}

extern "C" __global__ void __launch_bounds__({NT}, 1) {name}({params}) {{
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, wq = (tid >> 5) & 3;
  const long long bz = {bz};
  {past_end}
  const {T}* Ab = reinterpret_cast<const {T}*>({a_name}) + ({a_off});
  const {T}* Bb = reinterpret_cast<const {T}*>({b_name}) + ({b_off});
  const long long c_base = {c_off};
  const int m0 = {my} * {BM}, n0 = blockIdx.x * {BN};
  float acc[{BN // 2}];
  #pragma unroll
  for (int i = 0; i < {BN // 2}; ++i) acc[i] = 0.f;

  auto load_stage = [&](int s, int kt) {{
    const int k0 = kt * 64;
    const uint32_t sa = base + s * {A_ST + B_ST}, sb = sa + {A_ST};
    #pragma unroll
    for (int i = 0; i < {a_chunks}; ++i) {{
      const int c = tid + i * {NT}, r = c >> 3, ch = c & 7;
      const int gm = m0 + r, gk = k0 + ch * 8;
      const bool ok = gm < {shape.m} && gk < {shape.k};
      cp_async16(sa + r * 128 + ((ch ^ (r & 7)) << 4), ok ? Ab + (long long)gm * {shape.a_sm} + gk : Ab, ok ? 16 : 0);
    }}
{b_load}
  }};

  #pragma unroll
  for (int s = 0; s < {S - 1}; ++s) {{
    if (s < {KT}) load_stage(s, s);
    cp_async_commit();
  }}
  for (int kt = 0; kt < {KT}; ++kt) {{
    cp_async_wait<{S - 2}>();
    fence_proxy_async();
    __syncthreads();
    const uint32_t sa = base + (kt % {S}) * {A_ST + B_ST} + wg * {64 * 128};
    const uint32_t sb = base + (kt % {S}) * {A_ST + B_ST} + {A_ST};
    wg_fence();
    #pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_n{BN}_{ty}_t{tb}(acc, wg_desc(sa + kk * 32), {b_desc}, 1);
    wg_commit();
    wg_wait<1>();
    __syncthreads();           // every warpgroup finished tile kt-1: its stage may be refilled
    const int nk = kt + {S - 1};
    if (nk < {KT}) load_stage(nk % {S}, nk);
    cp_async_commit();
  }}
  wg_wait<0>();
  wg_hold(acc);
{epilogue_code}
}}
"""


_CONVERT = {"__half": "__float2half_rn", "__nv_bfloat16": "__float2bfloat16_rn"}


def pair_types(out_type: str) -> tuple[str, str]:
    """(type, packing function) of two neighbouring outputs stored as one."""
    return {"__half": ("__half2", "__floats2half2_rn"), "__nv_bfloat16": ("__nv_bfloat162", "__floats2bfloat162_rn")
            }.get(out_type, ("float2", "make_float2"))


def direct_epilogue(name: str, shape: GemmShape, BN: int, call_args: str, out_type: str, pair_store: bool) -> str:
    """Each thread's accumulators (a warpgroup's m64nBN fragment; `wg`, `wq`, `lane`, `m0`,
    `n0`, `c_base` in scope) through the epilogue and stored, two neighbours as one pair store
    where `pair_store` (unit column stride, even rows)."""
    conv = _CONVERT.get(out_type, "")
    if pair_store:
        pair_t, pack2 = pair_types(out_type)
        store = f"""
        if (col + 1 < {shape.n}) {{
          float v0 = epi_{name}({call_args}, flat, acc[j * 4 + 2 * h]);
          float v1 = epi_{name}({call_args}, flat + 1, acc[j * 4 + 2 * h + 1]);
          *reinterpret_cast<{pair_t}*>(out + flat) = {pack2}(v0, v1);
        }} else if (col < {shape.n}) {{
          out[flat] = {conv}(epi_{name}({call_args}, flat, acc[j * 4 + 2 * h]));
        }}"""
    else:
        store = f"""
        if (col < {shape.n}) out[flat] = {conv}(epi_{name}({call_args}, flat, acc[j * 4 + 2 * h]));
        if (col + 1 < {shape.n}) out[flat + {shape.c_sn}] = {conv}(epi_{name}({call_args}, flat + {shape.c_sn}, acc[j * 4 + 2 * h + 1]));"""
    return f"""
  #pragma unroll
  for (int h = 0; h < 2; ++h) {{
    const int row = m0 + wg * 64 + wq * 16 + (lane >> 2) + h * 8;
    if (row >= {shape.m}) continue;
    #pragma unroll
    for (int j = 0; j < {BN // 8}; ++j) {{
      const int col = n0 + j * 8 + (lane & 3) * 2;
      const long long flat = c_base + (long long)row * {shape.c_sm} + (long long)col * {shape.c_sn};{store}
    }}
  }}"""


def smem_epilogue(name, shape, cfg, call_args, out_type, conv, sync: str = "__syncthreads();",
                  drain: str = "cp_async_wait<0>();\n  ", tid: str = "tid", threads: int | None = None,
                  at: str = "base", after: bool = False) -> str:
    """Values through the epilogue into a padded shared tile (at shared address `at`; the
    pipeline's drained stages by default), then 16-byte row stores. `sync` is the barrier of
    the threads storing (`threads` of them, numbered by `tid`; all the block's by default),
    `drain` what ends the pipeline's own copies first. `after`: the tile holds the product
    rounded to the output's type and the epilogue runs in the store loop (see `epilogue_after`)."""
    BM, BN = cfg.bm, cfg.bn
    NT = threads or cfg.threads
    osz = 4 if out_type == "float" else 2
    ld = BN + 16 // osz                      # one 16-byte pad per row
    vec = 16 // osz
    if after:
        return _staged_then_epilogue(name, shape, BM, BN, call_args, out_type, conv, sync, drain, tid, NT, at)
    return f"""
  {drain}{sync}{" " * max(1, 42 - len(sync))}// all warpgroups done with the pipeline's shared memory
  {out_type}* tile = reinterpret_cast<{out_type}*>(smem_raw + ({at} - smem_u32(smem_raw)));
  #pragma unroll
  for (int h = 0; h < 2; ++h) {{
    const int r = wg * 64 + wq * 16 + (lane >> 2) + h * 8;
    const int row = m0 + r;
    #pragma unroll
    for (int j = 0; j < {BN // 8}; ++j) {{
      const int cl = j * 8 + (lane & 3) * 2;
      const int col = n0 + cl;
      const long long flat = c_base + (long long)row * {shape.c_sm} + col;
      if (row < {shape.m} && col < {shape.n}) tile[r * {ld} + cl] = {conv}(epi_{name}({call_args}, flat, acc[j * 4 + 2 * h]));
      if (row < {shape.m} && col + 1 < {shape.n}) tile[r * {ld} + cl + 1] = {conv}(epi_{name}({call_args}, flat + 1, acc[j * 4 + 2 * h + 1]));
    }}
  }}
  {sync}
  for (int c = {tid}; c < {BM * BN // vec}; c += {NT}) {{
    const int r = c / {BN // vec}, cl = (c % {BN // vec}) * {vec};
    const int row = m0 + r, col = n0 + cl;
    if (row >= {shape.m}) continue;
    {out_type}* dst = out + c_base + (long long)row * {shape.c_sm} + col;
    if (col + {vec} <= {shape.n}) {{
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(tile + r * {ld} + cl);
    }} else {{
      for (int v = 0; v < {vec} && col + v < {shape.n}; ++v) dst[v] = tile[r * {ld} + cl + v];
    }}
  }}"""


RUNS_IN_FLIGHT = 4      # runs whose epilogue loads a thread issues before their arithmetic


def epilogue_over_runs(name: str, shape: GemmShape, call_args: str, out_type: str, runs: int, threads: int,
                       tid: str, coords: str, place: str, read: str, store: str, store_tail: str) -> str:
    """A staged epilogue's loop (render.epilogue_after): `runs` 16-byte runs of output rows
    taken by `threads` threads (numbered by `tid`), RUNS_IN_FLIGHT runs a thread at a time: the
    group's epilogue loads (epi_load_<name>, vectors) first, then each run read (`read`, a
    uint4), through the epilogue (epi_run_<name>; a run past the last column element by
    element) and stored (`store`; a run past the last column by `store_tail`, its elements in
    `v`). `coords` defines `row`, `col` and `flat` of run `c`; `place` what `read` and the
    stores need besides."""
    vec = 16 // (4 if out_type == "float" else 2)
    g = min(RUNS_IN_FLIGHT, -(-runs // threads))
    groups = -(-runs // (threads * g))
    in_range = f"c < {runs} && " if runs % (threads * g) else ""
    at = f"""const int c = {tid} + (g * {g} + i) * {threads};
      {coords}"""
    return f"""
  #pragma unroll 1
  for (int g = 0; g < {groups}; ++g) {{
    epi_in_{name} pre[{g}];
    #pragma unroll
    for (int i = 0; i < {g}; ++i) {{
      {at}
      if ({in_range}row < {shape.m} && col + {vec} <= {shape.n}) pre[i] = epi_load_{name}({call_args}, flat);
    }}
    #pragma unroll
    for (int i = 0; i < {g}; ++i) {{
      {at}
      if (!({in_range}row < {shape.m} && col < {shape.n})) continue;
      {place}
      uint4 run = {read};
      if (col + {vec} <= {shape.n}) {{
        run = epi_run_{name}({call_args}, flat, run, pre[i]);
        {store}
      }} else {{
        {out_type}* v = reinterpret_cast<{out_type}*>(&run);
        for (int e = 0; e < {vec} && col + e < {shape.n}; ++e) v[e] = {_CONVERT.get(out_type, "")}(epi_{name}({call_args}, flat + e, {TO_FLOAT[out_type]}(v[e])));
        {store_tail}
      }}
    }}
  }}"""


def _staged_then_epilogue(name, shape, BM, BN, call_args, out_type, conv, sync, drain, tid, NT, at) -> str:
    """smem_epilogue with `after`: the accumulators, rounded to the output's type, into the
    padded tile; then the epilogue over 16-byte runs of its rows (epilogue_over_runs), each
    stored to the output. The epilogue rounds the product to that same type first, so the
    values are those of the epilogue run on the accumulators."""
    osz = 4 if out_type == "float" else 2
    ld, vec = BN + 16 // osz, 16 // osz
    coords = f"""const int r = c / {BN // vec}, cl = (c % {BN // vec}) * {vec};
      const int row = m0 + r, col = n0 + cl;
      const long long flat = c_base + (long long)row * {shape.c_sm} + col;"""
    loop = epilogue_over_runs(
        name, shape, call_args, out_type, BM * BN // vec, NT, tid, coords, place=f"{out_type}* dst = out + flat;",
        read=f"*reinterpret_cast<const uint4*>(tile + r * {ld} + cl)", store="*reinterpret_cast<uint4*>(dst) = run;",
        store_tail=f"for (int e = 0; e < {vec} && col + e < {shape.n}; ++e) dst[e] = v[e];")
    return f"""
  {drain}{sync}{" " * max(1, 42 - len(sync))}// all warpgroups done with the pipeline's shared memory
  {out_type}* tile = reinterpret_cast<{out_type}*>(smem_raw + ({at} - smem_u32(smem_raw)));
  #pragma unroll
  for (int h = 0; h < 2; ++h) {{
    const int r = wg * 64 + wq * 16 + (lane >> 2) + h * 8;
    #pragma unroll
    for (int j = 0; j < {BN // 8}; ++j) {{
      // guarded as the values are needed (unguarded, ptxas has placed these conversions above
      // the wgmma wait that retires the accumulators: sass.py)
      const int cl = j * 8 + (lane & 3) * 2;
      if (m0 + r < {shape.m} && n0 + cl < {shape.n}) tile[r * {ld} + cl] = {conv}(acc[j * 4 + 2 * h]);
      if (m0 + r < {shape.m} && n0 + cl + 1 < {shape.n}) tile[r * {ld} + cl + 1] = {conv}(acc[j * 4 + 2 * h + 1]);
    }}
  }}
  {sync}{loop}"""


def smem_tile_bytes(bm: int, bn: int, out_itemsize: int) -> int:
    """The padded shared tile smem_epilogue stages (one 16-byte pad per row)."""
    return bm * (bn * out_itemsize + 16)


def smem_epilogue_ok(shape: GemmShape, out_itemsize: int) -> bool:
    """16-byte stores need unit column stride and 16-byte aligned rows."""
    vec = 16 // out_itemsize
    return shape.c_sn == 1 and shape.c_sm % vec == 0 and all(b[3] % vec == 0 for b in shape.batch)


def grid(shape: GemmShape, cfg: WGConfig) -> tuple[int, int, int]:
    return batched_grid((shape.n + cfg.bn - 1) // cfg.bn, (shape.m + cfg.bm - 1) // cfg.bm, shape.batch_count)[0]


def render_transpose(name: str, ctype: str, n: int, k: int, b_off: int, b_sk: int, kp: int) -> str:
    """out[n, k] = in0[b_off + k * b_sk + n]: B (k rows, n contiguous) to k-contiguous rows of
    length kp (zeros past k)."""
    return f"""
extern "C" __global__ void __launch_bounds__(256) {name}({ctype}* __restrict__ out, const {ctype}* __restrict__ in0) {{
  __shared__ {ctype} tile[64][66];
  const int n0 = blockIdx.x * 64, k0 = blockIdx.y * 64;
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  #pragma unroll
  for (int j = ty; j < 64; j += 8) {{
    const int kk = k0 + j;
    #pragma unroll
    for (int h = 0; h < 2; ++h) {{
      const int nn = n0 + tx * 2 + h;
      tile[j][tx * 2 + h] = (kk < {k} && nn < {n}) ? in0[{b_off} + (long long)kk * {b_sk} + nn] : {ctype}(0.f);
    }}
  }}
  __syncthreads();
  #pragma unroll
  for (int j = ty; j < 64; j += 8) {{
    const int nn = n0 + j;
    #pragma unroll
    for (int h = 0; h < 2; ++h) {{
      const int kk = k0 + tx * 2 + h;
      if (nn < {n} && kk < {kp}) out[(long long)nn * {kp} + kk] = tile[tx * 2 + h][j];
    }}
  }}
}}
"""
