"""Flash attention on Hopper's warpgroup MMA (f16/bf16, f32 accumulation): the same online
softmax as `attention.py`, with both products as wgmma.mma_async.

Each warpgroup (128 threads) owns 64 query rows. S = Q K^T reads Q and K from shared memory
(k-contiguous, 128-byte swizzled, as the wgmma GEMM's operands); P stays in registers (the S
accumulators re-packed as A fragments: wgmma's register A layout is the accumulator's) and
O += P V reads V from shared memory as it is in memory, n-contiguous (the transposed-B
descriptor of the GEMM's MN-major form). K/V tiles are double-buffered with cp.async. Head
dims of 64 and 128 (a 128-byte swizzle row is 64 halves). Needs sm_90a (the marker below).
"""
from __future__ import annotations

from dataclasses import dataclass

from backends.cuda.templates.attention import AttnShape, Keep, _mask_code, batch_offsets, keep_parts, safe_max
from backends.cuda.templates.gemm_wgmma import COMMON, NEEDS_ARCH_SPECIFIC, helpers, register_a_helper


@dataclass(frozen=True)
class AttnWGConfig:
    wgs: int = 2          # warpgroups per block, 64 query rows each
    bkv: int = 64         # keys per K/V tile (the n of S = Q K^T)
    overlap: bool = False  # the next tile's S = Q K^T on the tensor cores during this tile's softmax
                           # (K copied a tile ahead of V; S in two register sets)

    @property
    def name(self) -> str:
        return f"attn_wg{self.wgs}_kv{self.bkv}" + ("o" if self.overlap else "")

    @property
    def threads(self) -> int:
        return 128 * self.wgs

    @property
    def bq(self) -> int:
        return 64 * self.wgs


WG_ATTN_CONFIGS = [AttnWGConfig(2, 64), AttnWGConfig(2, 128), AttnWGConfig(1, 128)]
# rendered and tested, not offered by the search: the overlapped loop ran 0.56-0.91x SDPA where
# the schedules above reached 0.99-1.22x, on all five cases timed (H100, 2026-12-07,
# results/raw/h100-2026-12-07-session34-*-attention.txt)
WG_ATTN_EXPERIMENTAL = [AttnWGConfig(2, 64, True)]


def fits_dims(d: int, dv: int) -> bool:
    """Head dims whose rows are whole 128-byte swizzle rows, and wgmma's n limits."""
    return d in (64, 128) and dv in (64, 128)


def fits(shape: AttnShape) -> bool:
    return fits_dims(shape.d, shape.dv)


def smem_bytes(shape: AttnShape, cfg: AttnWGConfig) -> int:
    return 1024 + 2 * (cfg.bq * shape.d + 2 * cfg.bkv * (shape.d + shape.dv))


def render(name: str, dtype: str, shape: AttnShape, cfg: AttnWGConfig, params: str, q: str, k: str, v: str,
           out_type: str, mask: str = "", keep: Keep | None = None) -> str:
    T = "__half" if dtype == "f16" else "__nv_bfloat16"
    ty = "f16" if dtype == "f16" else "bf16"
    pack = "pack_f16" if dtype == "f16" else "pack_bf16"
    conv = {"__half": "__float2half_rn", "__nv_bfloat16": "__float2bfloat16_rn"}.get(out_type, "")
    pair_t = {"__half": "__half2", "__nv_bfloat16": "__nv_bfloat162", "float": "float2"}[out_type]
    pack2 = {"__half": "__floats2half2_rn", "__nv_bfloat16": "__floats2bfloat162_rn", "float": "make_float2"}[out_type]
    D, DV, BQ, BKV, NT = shape.d, shape.dv, cfg.bq, cfg.bkv, cfg.threads
    Q_BYTES, K_BYTES, V_BYTES = BQ * D * 2, BKV * D * 2, BKV * DV * 2
    mk = shape.mask
    qo, ko, vo, oo, mo = batch_offsets(shape)
    sc = repr(float(shape.scale_log2))
    mask_setup, mask_loads, mask_add = _mask_code(shape, mask, mo, keep)
    safe = safe_max(shape, keep)
    keep_scope, keep_setup, keep_scan, score_ok = keep_parts(name, shape, BQ, BKV, keep, NT)
    # adjacent output columns: one 2-wide store (aligned: every row and batch start even)
    paired = shape.o_sd == 1 and shape.o_ss % 2 == 0 and all(b[4] % 2 == 0 for b in shape.batch)
    if paired:
        store = "\n".join(
            f"      if (row{h} < {shape.sq}) *reinterpret_cast<{pair_t}*>(out + o_base + (long long)row{h} * {shape.o_ss} + col)"
            f" = {pack2}(o[4 * j + {2 * h}] * r{h}, o[4 * j + {2 * h + 1}] * r{h});" for h in range(2))
    else:
        store = "\n".join(
            f"      if (row{h} < {shape.sq}) {{\n"
            f"        out[o_base + (long long)row{h} * {shape.o_ss} + col * {shape.o_sd}] = {conv}(o[4 * j + {2 * h}] * r{h});\n"
            f"        out[o_base + (long long)row{h} * {shape.o_ss} + (col + 1) * {shape.o_sd}] = {conv}(o[4 * j + {2 * h + 1}] * r{h});\n"
            f"      }}" for h in range(2))
    def s_product(dst: str, k_s: str) -> str:
        return (f"    wg_fence();\n    #pragma unroll\n    for (int kk = 0; kk < {D // 16}; ++kk)\n"
                f"      wgmma_n{BKV}_{ty}_t0({dst}, wg_desc(sQ + (kk >> 2) * {BQ * 128} + wg * {64 * 128} + (kk & 3) * 32),\n"
                f"                          wg_desc({k_s} + (kk >> 2) * {BKV * 128} + (kk & 3) * 32), kk > 0);\n"
                f"    wg_commit();\n")
    regs = f"""  float o[{DV // 2}], s[{BKV // 2}]{f", s_next[{BKV // 2}]" if cfg.overlap else ""};
  #pragma unroll
  for (int i = 0; i < {DV // 2}; ++i) o[i] = 0.f;
  float m0 = -__int_as_float(0x7f800000), m1 = m0, l0 = 0.f, l1 = 0.f;
  const int rbase = q0 + wg * 64 + wq * 16 + (lane >> 2);
"""
    if not cfg.overlap:
        loop_head = f"""  load_k(0, t_lo);
  load_v(0, t_lo);
  cp_async_commit();

{regs}  for (int t = t_lo; t < t_hi; ++t) {{
    const int buf = (t - t_lo) & 1;
    if (t + 1 < t_hi) {{ load_k(buf ^ 1, t + 1); load_v(buf ^ 1, t + 1); }}
    cp_async_commit();
    cp_async_wait<1>();
    fence_proxy_async();
    __syncthreads();
    const uint32_t v_s = sV + buf * {V_BYTES};
{s_product("s", f"(sK + buf * {K_BYTES})")}    wg_wait<0>();
    wg_hold(s);
"""
        loop_tail = """    wg_hold(o);
    __syncthreads();           // every warpgroup is done with this stage: it may be refilled"""
    else:
        # copy groups, oldest first: (Q, K[t_lo]), V[t_lo], K[t_lo + 1]; then per tile t: V[t + 1]
        # at its start, K[t + 2] at its end (into K[t]'s buffer, free once both S[t] and the
        # block's barrier are past), so the wait for all but the newest group finds K[t + 1] and
        # V[t] landed
        loop_head = f"""  load_k(0, t_lo);
  cp_async_commit();
  load_v(0, t_lo);
  cp_async_commit();
  if (t_lo + 1 < t_hi) load_k(1, t_lo + 1);
  cp_async_commit();

{regs}  if (t_lo < t_hi) {{
    cp_async_wait<2>();
    fence_proxy_async();
    __syncthreads();
{s_product("s", "sK")}    wg_wait<0>();
    wg_hold(s);
  }}
  for (int t = t_lo; t < t_hi; ++t) {{
    const int i = t - t_lo;
    const bool more = t + 1 < t_hi;
    if (more) load_v((i + 1) & 1, t + 1);
    cp_async_commit();
    cp_async_wait<1>();
    fence_proxy_async();
    __syncthreads();
    const uint32_t v_s = sV + (i & 1) * {V_BYTES};
    if (more) {{   // S[t + 1] runs while this warpgroup's softmax of S[t] does
{s_product("s_next", f"(sK + ((i + 1) & 1) * {K_BYTES})")}    }}
"""
        loop_tail = f"""    wg_hold(o);
    wg_hold(s_next);
    __syncthreads();           // every warpgroup is done with V[t] and K[t]: they may be refilled
    if (t + 2 < t_hi) load_k(i & 1, t + 2);
    cp_async_commit();
    if (more) {{
      #pragma unroll
      for (int j = 0; j < {BKV // 2}; ++j) s[j] = s_next[j];
    }}"""
    return f"""
{NEEDS_ARCH_SPECIFIC}
{COMMON}
#ifndef SATURN_WGMMA_N{BKV}_{ty}_T0
#define SATURN_WGMMA_N{BKV}_{ty}_T0
{helpers(BKV, dtype, 0)}
#endif
#ifndef SATURN_WGMMA_RA_N{DV}_{ty}
#define SATURN_WGMMA_RA_N{DV}_{ty}
{register_a_helper(DV, dtype)}
#endif

{keep_scope}extern "C" __global__ void __launch_bounds__({NT}) {name}({params}) {{
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t sQ = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t sK = sQ + {Q_BYTES}, sV = sK + {2 * K_BYTES};
  const int tid = threadIdx.x, lane = tid & 31, wg = tid >> 7, wq = (tid >> 5) & 3;
  const long long bz = blockIdx.y;
{keep_setup}  const {T}* Qb = reinterpret_cast<const {T}*>({q}) + ({qo});
  const {T}* Kb = reinterpret_cast<const {T}*>({k}) + ({ko});
  const {T}* Vb = reinterpret_cast<const {T}*>({v}) + ({vo});
  const long long o_base = {oo};
  // Q, K: rows of 64 halves (128 B), 16-byte chunk c of row r at r * 128 + ((c ^ (r & 7)) * 16),
  // one such block per 64 head-dim columns; Q's copies land while the mask is scanned
  for (int c = tid; c < {BQ * D // 8}; c += {NT}) {{
    const int r = c / {D // 8}, ch = c % {D // 8};
    const bool ok = q0 + r < {shape.sq};
    cp_async16(sQ + (ch >> 3) * {BQ * 128} + r * 128 + (((ch & 7) ^ (r & 7)) << 4),
               ok ? Qb + (long long)(q0 + r) * {shape.q_ss} + ch * 8 : Qb, ok ? 16 : 0);
  }}
{mask_setup}{keep_scan}  auto load_k = [&](int buf, int t) {{
    const int j0 = t * {BKV};
    const uint32_t k_s = sK + buf * {K_BYTES};
    for (int c = tid; c < {BKV * D // 8}; c += {NT}) {{
      const int r = c / {D // 8}, ch = c % {D // 8};
      const bool ok = j0 + r < {shape.skv};
      cp_async16(k_s + (ch >> 3) * {BKV * 128} + r * 128 + (((ch & 7) ^ (r & 7)) << 4),
                 ok ? Kb + (long long)(j0 + r) * {shape.k_ss} + ch * 8 : Kb, ok ? 16 : 0);
    }}
  }};
  // V as it is (n-contiguous): atoms of 8 key rows x 64 columns (1024 B, swizzled), key
  // groups 1024 B apart, 64-column blocks {BKV * 128} B apart
  auto load_v = [&](int buf, int t) {{
    const int j0 = t * {BKV};
    const uint32_t v_s = sV + buf * {V_BYTES};
    for (int c = tid; c < {BKV * DV // 8}; c += {NT}) {{
      const int r = c / {DV // 8}, cn = c % {DV // 8};
      const bool ok = j0 + r < {shape.skv};
      cp_async16(v_s + (cn >> 3) * {BKV * 128} + (r >> 3) * 1024 + (r & 7) * 128 + (((cn & 7) ^ (r & 7)) << 4),
                 ok ? Vb + (long long)(j0 + r) * {shape.v_ss} + cn * 8 : Vb, ok ? 16 : 0);
    }}
  }};
{loop_head}    const int j0 = t * {BKV};
    const bool ragged = j0 + {BKV} > {shape.skv};
    {"const bool full = t >= f_lo && t < f_hi;" if keep is not None else ""}
    {"const bool masked_tile = (seen_tiles[t] & 2) != 0;" if mk is not None and keep is None else ""}
    // scale, mask keys past the end (last tile only), running max
    float mx0 = m0, mx1 = m1;
    #pragma unroll
    for (int j = 0; j < {BKV // 8}; ++j) {{
      {mask_loads}
      #pragma unroll
      for (int e = 0; e < 4; ++e) {{
        const int key = j0 + j * 8 + (lane & 3) * 2 + (e & 1), row = rbase + (e >> 1) * 8;
        float x = s[4 * j + e] * {sc}f;
        {mask_add}
        s[4 * j + e] = ({score_ok}) ? x : -__int_as_float(0x7f800000);
      }}
      mx0 = fmaxf(mx0, fmaxf(s[4 * j], s[4 * j + 1]));
      mx1 = fmaxf(mx1, fmaxf(s[4 * j + 2], s[4 * j + 3]));
    }}
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1)); mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1)); mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float ref0 = {safe("mx0")}, ref1 = {safe("mx1")};
    const float a0 = ex2_ftz(m0 - ref0), a1 = ex2_ftz(m1 - ref1);
    m0 = mx0; m1 = mx1;
    l0 *= a0; l1 *= a1;
    #pragma unroll
    for (int j = 0; j < {DV // 8}; ++j) {{ o[4 * j] *= a0; o[4 * j + 1] *= a0; o[4 * j + 2] *= a1; o[4 * j + 3] *= a1; }}
    uint32_t pa[{BKV // 16}][4];
    #pragma unroll
    for (int j = 0; j < {BKV // 8}; ++j) {{
      s[4 * j] = ex2_ftz(s[4 * j] - ref0); s[4 * j + 1] = ex2_ftz(s[4 * j + 1] - ref0);
      s[4 * j + 2] = ex2_ftz(s[4 * j + 2] - ref1); s[4 * j + 3] = ex2_ftz(s[4 * j + 3] - ref1);
      l0 += s[4 * j] + s[4 * j + 1]; l1 += s[4 * j + 2] + s[4 * j + 3];
      // P as wgmma's register A fragments (rows r, r + 8; keys 16 kt + {{0..7}}, + {{8..15}})
      pa[j >> 1][(j & 1) * 2] = {pack}(s[4 * j], s[4 * j + 1]);
      pa[j >> 1][(j & 1) * 2 + 1] = {pack}(s[4 * j + 2], s[4 * j + 3]);
    }}
    wg_fence();
    #pragma unroll
    for (int kt = 0; kt < {BKV // 16}; ++kt)
      wgmma_ra_n{DV}_{ty}(o, pa[kt], wg_desc2(v_s + kt * 2048, {BKV * 128}, 1024), 1);
    wg_commit();
    wg_wait<0>();
{loop_tail}
  }}
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1); l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1); l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const float r0 = 1.f / l0, r1 = 1.f / l1;
  const int row0 = rbase, row1 = rbase + 8;
  #pragma unroll
  for (int j = 0; j < {DV // 8}; ++j) {{
    const int col = j * 8 + (lane & 3) * 2;
{store}
  }}
}}
"""


def grid(shape: AttnShape, cfg: AttnWGConfig) -> tuple[int, int, int]:
    return ((shape.sq + cfg.bq - 1) // cfg.bq, shape.batch_count, 1)
