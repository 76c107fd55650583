"""Flash attention (f16/bf16, f32 accumulation): O = softmax(scale * Q K^T) V in one pass over
K/V tiles with an online softmax, so the score matrix never reaches memory.

Each warp owns 16 query rows; S = Q K^T tiles come from mma.sync with K read from shared
memory (k-contiguous: ldmatrix), P is re-packed from the S accumulators straight into A
fragments (no shared-memory round trip), and O += P V reads V with ldmatrix.trans. K/V tiles
are double-buffered with cp.async. Rows carry (m, l) in registers; l is reduced across the
quad once at the end (its rescalings are uniform per row).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from backends.cuda.cexpr import TO_FLOAT


@dataclass(frozen=True)
class AttnConfig:
    warps: int = 4        # query rows per block = 16 * mtiles * warps
    bkv: int = 64         # keys per K/V tile
    mtiles: int = 1       # m16 tiles of query rows per warp (more: fewer shared-memory reads per row)

    @property
    def name(self) -> str:
        return f"attn_w{self.warps}_m{self.mtiles}_kv{self.bkv}"

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def bq(self) -> int:
        return 16 * self.mtiles * self.warps


ATTN_CONFIGS = [AttnConfig(4, 64, 2), AttnConfig(8, 64, 1), AttnConfig(4, 64, 1), AttnConfig(8, 64, 2),
                AttnConfig(4, 128, 1)]


@dataclass(frozen=True)
class AttnMask:
    """An additive score term m[b.., q, key] read from memory: the kernel's scores are
    scale_log2 * (q . k) + log2 * m (0 / -inf entries: a causal or padding mask)."""
    ctype: str             # storage type of the buffer: __half, __nv_bfloat16 or float
    off: int
    ss: int                # query-row stride
    sk: int                # key stride
    batch: tuple[int, ...] # stride per batch axis
    log2: float


@dataclass(frozen=True)
class AttnShape:
    """Index maps (element strides) of q[b.., sq, d], k[b.., skv, d], v[b.., skv, dv], o[b.., sq, dv]."""
    sq: int
    skv: int
    d: int
    dv: int
    batch: tuple[tuple[int, int, int, int, int], ...]  # per batch axis: (size, q, k, v, o strides)
    q_off: int
    k_off: int
    v_off: int
    q_ss: int
    k_ss: int
    v_ss: int
    o_ss: int
    o_sd: int
    scale_log2: float      # softmax(scale * s) computed as exp2(s * scale * log2(e) - m)
    mask: AttnMask | None = None

    @property
    def batch_count(self) -> int:
        return math.prod(s for s, *_ in self.batch)


def aligned(shape: AttnShape) -> bool:
    vals = [shape.q_off, shape.k_off, shape.v_off, shape.q_ss, shape.k_ss, shape.v_ss, shape.d, shape.dv]
    for _, *st in shape.batch:
        vals += st[:3]
    return all(v % 8 == 0 for v in vals) and shape.d % 16 == 0 and shape.dv % 16 == 0 and shape.d <= 256 and shape.dv <= 256


def smem_bytes(shape: AttnShape, cfg: AttnConfig) -> int:
    pad = 8
    return 2 * (cfg.bq * (shape.d + pad) + 2 * cfg.bkv * (shape.d + pad) + 2 * cfg.bkv * (shape.dv + pad))


def _mask_load(mk: AttnMask, base: str, row: str, key: str) -> str:
    to_f = TO_FLOAT[mk.ctype]
    return f"{to_f}({base}[(long long)({row}) * {mk.ss} + (long long)({key}) * {mk.sk}])"


def _mask_code(shape: AttnShape, mask_ptr: str, mo: str, keep: "Keep | None" = None) -> tuple[str, str, str]:
    """(setup, per-8-key-group loads into mk[4], per-score statement) adding log2 * mask to
    the scaled score x; a thread's two adjacent keys are one 32-bit load where the mask is a
    key-contiguous, even-aligned f16/bf16 buffer. Positions outside (sq, skv) read nothing.
    Without a `keep` predicate the block's scan of the mask (`keep_parts`) tells which key
    tiles hold a mask value other than zero: the others read and add nothing (`masked_tile`,
    the same for the whole block)."""
    mk = shape.mask
    if mk is None:
        return "", "", ""
    setup = f"  const {mk.ctype}* Mb = reinterpret_cast<const {mk.ctype}*>({mask_ptr}) + ({mo});\n"
    pair_t = {"__half": "__half2", "__nv_bfloat16": "__nv_bfloat162"}.get(mk.ctype)
    paired = pair_t is not None and mk.sk == 1 and mk.ss % 2 == 0 and mk.off % 2 == 0 and \
        all(b % 2 == 0 for b in mk.batch)
    to2 = "__half22float2" if mk.ctype == "__half" else "__bfloat1622float2"
    lines = ["#pragma unroll", "for (int hh = 0; hh < 2; ++hh) {",
             "  const int row = rbase + hh * 8, key = j0 + j * 8 + (lane & 3) * 2;"]
    if paired:
        lines += [f"  if (row < {shape.sq} && key + 1 < {shape.skv}) {{",
                  f"    const float2 f2 = {to2}(*reinterpret_cast<const {pair_t}*>(Mb + (long long)row * {mk.ss} + key));",
                  "    mk[2 * hh] = f2.x; mk[2 * hh + 1] = f2.y;", "  } else {"]
    for e in range(2):
        lines.append(f"    mk[2 * hh + {e}] = (row < {shape.sq} && key + {e} < {shape.skv}) ? "
                     f"{_mask_load(mk, 'Mb', 'row', f'key + {e}')} : 0.f;")
    if paired:
        lines.append("  }")
    lines.append("}")
    add = f"x += {repr(float(mk.log2))}f * mk[e];"
    if keep is not None:
        return setup, "\n        ".join(["float mk[4];"] + lines), add
    return setup, "\n        ".join(["float mk[4] = {0.f, 0.f, 0.f, 0.f};", "if (masked_tile) {"] + lines + ["}"]), \
        f"if (masked_tile) {add}"


def batch_offsets(shape: AttnShape) -> tuple[str, str, str, str, str]:
    """C expressions of the q, k, v, o and mask element offsets of batch entry `bz`."""
    mk = shape.mask
    offs = {"q": [str(shape.q_off)], "k": [str(shape.k_off)], "v": [str(shape.v_off)], "o": ["0"],
            "m": [str(mk.off if mk else 0)]}
    inner = 1
    for ax, (size, sq, sk, sv, so) in reversed(list(enumerate(shape.batch))):
        i = f"((bz / {inner}) % {size})" if inner > 1 else f"(bz % {size})"
        for key, st in zip("qkvom", (sq, sk, sv, so, mk.batch[ax] if mk else 0)):
            if st and size > 1:
                offs[key].append(f"(long long){i} * {st}")
        inner *= size
    return tuple(" + ".join(offs[x]) for x in "qkvom")


@dataclass(frozen=True)
class Keep:
    """Which scores count (where(keep, s, -inf)): `code` is a C++ lambda `keep(row, key)` the
    renderer emits (it may read `bz` and the kernel's inputs); `plane`, when the predicate is
    the same for every batch entry and known when compiling, is it as a (sq, skv) bool array,
    from which each block's key tiles are tabulated (tiles it removes entirely are skipped,
    tiles it keeps entirely need no test) and blocks are launched heaviest first."""
    code: str
    plane: object = None      # numpy bool (sq, skv) or None


def tile_table(plane, bq: int, bkv: int) -> list[tuple[int, int, int, int, int]]:
    """Per block, heaviest first: (query tile, first and past-last key tile with a kept
    score, first and past-last of the longest run of key tiles kept entirely)."""
    import numpy as np
    sq, skv = plane.shape
    nq, nk = -(-sq // bq), -(-skv // bkv)
    anyk = np.zeros((nq * bq, nk * bkv), bool)
    anyk[:sq, :skv] = plane
    allk = np.ones((nq * bq, nk * bkv), bool)
    allk[:sq, :skv] = plane
    anyk = anyk.reshape(nq, bq, nk, bkv).any(axis=(1, 3))
    allk = allk.reshape(nq, bq, nk, bkv).all(axis=(1, 3))
    rows = []
    for i in range(nq):
        hit = np.flatnonzero(anyk[i])
        lo, hi = (int(hit[0]), int(hit[-1]) + 1) if hit.size else (0, 0)
        best, run = (0, 0), None
        for t in range(nk + 1):
            if t < nk and allk[i, t]:
                run = t if run is None else run
            elif run is not None:
                if t - run > best[1] - best[0]:
                    best = (run, t)
                run = None
        rows.append((i, lo, hi) + best)
    return sorted(rows, key=lambda r: -(r[2] - r[1]))


def keep_parts(name: str, shape: AttnShape, bq: int, bkv: int, keep: Keep | None,
               threads: int) -> tuple[str, str, str, str]:
    """(file-scope code, block setup defining q0, t_lo, t_hi, f_lo, f_hi and keep(), the scan
    that narrows [t_lo, t_hi) at run time (after the mask's pointer `Mb` exists), the test of
    one score at `row`, `key` inside key tile t) for the attention kernels.

    Key tiles no row of a block can see are skipped: from a table made when compiling where the
    mask is known then (`Keep.plane`), else, for a mask read from memory, from a scan of the
    block's mask rows first (one read of them; a causal mask input then costs half the tiles).
    Skipped tiles contribute nothing, also where V holds inf or NaN at keys the mask removes
    (as PyTorch's flash attention; docs/ir.md)."""
    ntiles = -(-shape.skv // bkv)
    # only a last tile that runs past the keys needs the test (none when the tiles divide them)
    in_range = "true" if shape.skv % bkv == 0 else f"(!ragged || key < {shape.skv})"
    test = in_range if keep is None else f"{in_range} && (full || row >= {shape.sq} || keep(row, key))"
    setup = f"  {keep.code}\n" if keep is not None else ""
    if keep is not None and keep.plane is not None:
        table = tile_table(keep.plane, bq, bkv)
        flat = ", ".join(str(x) for row in table for x in row)
        scope = f"static __device__ const int {name}_tiles[{5 * len(table)}] = {{{flat}}};\n"
        setup = (f"  const int* tiles = {name}_tiles + blockIdx.x * 5;   // heaviest blocks first\n"
                 f"  const int q0 = tiles[0] * {bq}, t_lo = tiles[1], t_hi = tiles[2], f_lo = tiles[3], f_hi = tiles[4];\n"
                 + setup)
        return scope, setup, "", test
    if shape.mask is None and keep is None:
        return "", f"  const int q0 = blockIdx.x * {bq};\n  const int t_lo = 0, t_hi = {ntiles};\n", "", test
    # a mask read from memory: scan it; the last query tiles (a causal mask's heaviest) first
    setup = (f"  const int q0 = (gridDim.x - 1 - blockIdx.x) * {bq};\n"
             f"  int t_lo = 0, t_hi = {ntiles};\n  const int f_lo = 0, f_hi = 0;\n" + setup)
    mk = shape.mask
    neg_inf = {"__half": "0xFC00u", "__nv_bfloat16": "0xFF80u"}.get(mk.ctype) if mk is not None else None
    vec = 8 if (keep is None and neg_inf and mk.sk == 1 and mk.ss % 8 == 0 and mk.off % 8 == 0
                and all(b % 8 == 0 for b in mk.batch) and shape.skv % 8 == 0) else 1
    if vec == 8:   # 16-byte loads of 8 halves, each compared with -inf's and +-0's bits
        check = (f"      const uint4 w = *reinterpret_cast<const uint4*>(Mb + (long long)row * {mk.ss} + key0);\n"
                 f"      const uint32_t ws[4] = {{w.x, w.y, w.z, w.w}};\n"
                 f"      #pragma unroll\n"
                 f"      for (int h = 0; h < 4; ++h) {{\n"
                 f"        found |= ((ws[h] & 0xFFFFu) != {neg_inf}) | ((ws[h] >> 16) != {neg_inf});\n"
                 f"        nonzero |= (ws[h] & 0x7FFF7FFFu) != 0u;\n"
                 f"      }}")
    elif keep is None:
        check = (f"      const float mv = {_mask_load(mk, 'Mb', 'row', 'key0')};\n"
                 f"      found |= mv != -__int_as_float(0x7f800000);\n"
                 f"      nonzero |= mv != 0.f;")
    else:
        seen = []
        if mk is not None:
            seen.append(f"{_mask_load(mk, 'Mb', 'row', 'key0')} != -__int_as_float(0x7f800000)")
        seen.append("keep(row, key0)")
        check = f"      found |= ({' && '.join(seen)});\n      nonzero = true;"
    # every thread scans: each takes a column of `vec` keys and every `groups`-th row of the
    # block (its loads independent, eight in flight), so the scan is bandwidth- not latency-bound
    chunks = -(-shape.skv // vec)
    groups = max(1, threads // chunks)
    if groups > 1:
        columns = (f"  if (threadIdx.x < {groups * chunks}) {{\n"
                   f"    const int c = threadIdx.x % {chunks}, g = threadIdx.x / {chunks};\n")
    else:
        columns = f"  for (int c = threadIdx.x, g = 0; c < {chunks}; c += {threads}) {{\n"
    scan = f"""  // key tiles some row of this block can see (bit 0), and whose mask is not all zero (bit 1)
  __shared__ int seen_tiles[{ntiles}];
  for (int i = threadIdx.x; i < {ntiles}; i += blockDim.x) seen_tiles[i] = 0;
  __syncthreads();
  const int scan_rows = min({bq}, {shape.sq} - q0);
{columns}    const int key0 = c * {vec};
    bool found = false, nonzero = false;
    #pragma unroll 8
    for (int r = g; r < scan_rows; r += {groups}) {{
      const int row = q0 + r;
{check}
    }}
    if (found || nonzero) atomicOr(&seen_tiles[key0 / {bkv}], (found ? 1 : 0) | (nonzero ? 2 : 0));
  }}
  __syncthreads();
  t_lo = {ntiles}; t_hi = 0;
  for (int i = 0; i < {ntiles}; ++i)
    if (seen_tiles[i] & 1) {{ t_lo = min(t_lo, i); t_hi = i + 1; }}
  if (t_lo >= t_hi) t_lo = t_hi = 0;
"""
    return "", setup, scan, test


def safe_max(shape: AttnShape, keep=None):
    """A row's running max as the exponentials' reference: with a mask a key tile can be
    masked out entirely for some rows (-inf max), and the reference is then 0 so that
    exp2(-inf - -inf) never makes a NaN."""
    if shape.mask is None and keep is None:
        return lambda m: m
    return lambda m: f"({m} == -__int_as_float(0x7f800000) ? 0.f : {m})"


def render(name: str, dtype: str, shape: AttnShape, cfg: AttnConfig, params: str, q: str, k: str, v: str,
           out_type: str, mask: str = "", keep: Keep | None = None) -> str:
    T = "__half" if dtype == "f16" else "__nv_bfloat16"
    mma = "mma_f16" if dtype == "f16" else "mma_bf16"
    pack = "pack_f16" if dtype == "f16" else "pack_bf16"
    conv = {"__half": "__float2half_rn", "__nv_bfloat16": "__float2bfloat16_rn"}.get(out_type, "")
    PAD = 8
    D, DV, BQ, BKV, NT, MT = shape.d, shape.dv, cfg.bq, cfg.bkv, cfg.threads, cfg.mtiles
    qld, kld, vld = D + PAD, D + PAD, DV + PAD
    mk = shape.mask
    qo, ko, vo, oo, mo = batch_offsets(shape)
    sc = repr(float(shape.scale_log2))
    mask_setup, mask_loads, mask_add = _mask_code(shape, mask, mo, keep)
    safe = safe_max(shape, keep)
    keep_scope, keep_setup, keep_scan, score_ok = keep_parts(name, shape, BQ, BKV, keep, NT)
    return f"""
{keep_scope}extern "C" __global__ void __launch_bounds__({NT}) {name}({params}) {{
  extern __shared__ __align__(16) unsigned char smem_raw[];
  {T}* sQ = reinterpret_cast<{T}*>(smem_raw);
  {T}* sK = sQ + {BQ * qld};
  {T}* sV = sK + {2 * BKV * kld};
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const long long bz = blockIdx.y;
{keep_setup}  const {T}* Qb = reinterpret_cast<const {T}*>({q}) + ({qo});
  const {T}* Kb = reinterpret_cast<const {T}*>({k}) + ({ko});
  const {T}* Vb = reinterpret_cast<const {T}*>({v}) + ({vo});
  const long long o_base = {oo};
{mask_setup}{keep_scan}
  // Q tile -> shared
  for (int c = tid; c < {BQ * D // 8}; c += {NT}) {{
    int r = c / {D // 8}, cd = (c % {D // 8}) * 8;
    bool ok = q0 + r < {shape.sq};
    cp_async16(smem_u32(sQ + r * {qld} + cd), ok ? Qb + (long long)(q0 + r) * {shape.q_ss} + cd : Qb, ok ? 16 : 0);
  }}
  cp_async_commit();
  auto load_kv = [&](int buf, int t) {{
    const int j0 = t * {BKV};
    for (int c = tid; c < {BKV * D // 8}; c += {NT}) {{
      int r = c / {D // 8}, cd = (c % {D // 8}) * 8;
      bool ok = j0 + r < {shape.skv};
      cp_async16(smem_u32(sK + buf * {BKV * kld} + r * {kld} + cd), ok ? Kb + (long long)(j0 + r) * {shape.k_ss} + cd : Kb, ok ? 16 : 0);
    }}
    for (int c = tid; c < {BKV * DV // 8}; c += {NT}) {{
      int r = c / {DV // 8}, cd = (c % {DV // 8}) * 8;
      bool ok = j0 + r < {shape.skv};
      cp_async16(smem_u32(sV + buf * {BKV * vld} + r * {vld} + cd), ok ? Vb + (long long)(j0 + r) * {shape.v_ss} + cd : Vb, ok ? 16 : 0);
    }}
  }};
  load_kv(0, t_lo);
  cp_async_commit();
  cp_async_wait<1>();
  __syncthreads();

  // each warp owns MT m16 tiles of query rows: K/V fragments read from shared memory once per MT tiles
  uint32_t qf[{MT}][{D // 16}][4];
  #pragma unroll
  for (int mt = 0; mt < {MT}; ++mt)
    #pragma unroll
    for (int t = 0; t < {D // 16}; ++t) {{
      int r = (warp * {MT} + mt) * 16 + (lane & 15), c = t * 16 + (lane >> 4) * 8;
      ldsm_x4(qf[mt][t][0], qf[mt][t][1], qf[mt][t][2], qf[mt][t][3], smem_u32(sQ + r * {qld} + c));
    }}
  float o[{MT}][{DV // 8}][4];
  float m0[{MT}], m1[{MT}], l0[{MT}], l1[{MT}];
  #pragma unroll
  for (int mt = 0; mt < {MT}; ++mt) {{
    #pragma unroll
    for (int j = 0; j < {DV // 8}; ++j) o[mt][j][0] = o[mt][j][1] = o[mt][j][2] = o[mt][j][3] = 0.f;
    m0[mt] = m1[mt] = -__int_as_float(0x7f800000);
    l0[mt] = l1[mt] = 0.f;
  }}

  for (int t = t_lo; t < t_hi; ++t) {{
    const int buf = (t - t_lo) & 1;
    if (t + 1 < t_hi) load_kv(buf ^ 1, t + 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const {T}* tK = sK + buf * {BKV * kld};
    const {T}* tV = sV + buf * {BKV * vld};
    float s[{MT}][{BKV // 8}][4];
    #pragma unroll
    for (int mt = 0; mt < {MT}; ++mt)
      #pragma unroll
      for (int j = 0; j < {BKV // 8}; ++j) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.f;
    #pragma unroll
    for (int kd = 0; kd < {D // 16}; ++kd) {{
      #pragma unroll
      for (int j = 0; j < {BKV // 16}; ++j) {{
        uint32_t b0, b1, b2, b3;
        int nr = j * 16 + (lane & 7) + (lane >> 4) * 8, kc = kd * 16 + ((lane >> 3) & 1) * 8;
        ldsm_x4(b0, b1, b2, b3, smem_u32(tK + nr * {kld} + kc));
        #pragma unroll
        for (int mt = 0; mt < {MT}; ++mt) {{
          {mma}(s[mt][2 * j], qf[mt][kd], b0, b1);
          {mma}(s[mt][2 * j + 1], qf[mt][kd], b2, b3);
        }}
      }}
    }}
    const int j0 = t * {BKV};
    const bool ragged = j0 + {BKV} > {shape.skv};
    {"const bool full = t >= f_lo && t < f_hi;" if keep is not None else ""}
    {"const bool masked_tile = (seen_tiles[t] & 2) != 0;" if mk is not None and keep is None else ""}
    #pragma unroll
    for (int mt = 0; mt < {MT}; ++mt) {{
      // scale, mask keys past the end (last tile only), running max
      float mx0 = m0[mt], mx1 = m1[mt];
      const int rbase = q0 + (warp * {MT} + mt) * 16 + (lane >> 2);
      #pragma unroll
      for (int j = 0; j < {BKV // 8}; ++j) {{
        {mask_loads}
        #pragma unroll
        for (int e = 0; e < 4; ++e) {{
          const int key = j0 + j * 8 + (lane & 3) * 2 + (e & 1), row = rbase + (e >> 1) * 8;
          float x = s[mt][j][e] * {sc}f;
          {mask_add}
          s[mt][j][e] = ({score_ok}) ? x : -__int_as_float(0x7f800000);
        }}
        mx0 = fmaxf(mx0, fmaxf(s[mt][j][0], s[mt][j][1]));
        mx1 = fmaxf(mx1, fmaxf(s[mt][j][2], s[mt][j][3]));
      }}
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1)); mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1)); mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
      const float ref0 = {safe("mx0")}, ref1 = {safe("mx1")};
      const float a0 = ex2_ftz(m0[mt] - ref0), a1 = ex2_ftz(m1[mt] - ref1);
      m0[mt] = mx0; m1[mt] = mx1;
      l0[mt] *= a0; l1[mt] *= a1;
      #pragma unroll
      for (int j = 0; j < {DV // 8}; ++j) {{ o[mt][j][0] *= a0; o[mt][j][1] *= a0; o[mt][j][2] *= a1; o[mt][j][3] *= a1; }}
      #pragma unroll
      for (int j = 0; j < {BKV // 8}; ++j) {{
        s[mt][j][0] = ex2_ftz(s[mt][j][0] - ref0); s[mt][j][1] = ex2_ftz(s[mt][j][1] - ref0);
        s[mt][j][2] = ex2_ftz(s[mt][j][2] - ref1); s[mt][j][3] = ex2_ftz(s[mt][j][3] - ref1);
        l0[mt] += s[mt][j][0] + s[mt][j][1]; l1[mt] += s[mt][j][2] + s[mt][j][3];
      }}
    }}
    // O += P V, P re-packed from the S accumulators into A fragments
    #pragma unroll
    for (int kt = 0; kt < {BKV // 16}; ++kt) {{
      uint32_t pa[{MT}][4];
      #pragma unroll
      for (int mt = 0; mt < {MT}; ++mt) {{
        pa[mt][0] = {pack}(s[mt][2 * kt][0], s[mt][2 * kt][1]);
        pa[mt][1] = {pack}(s[mt][2 * kt][2], s[mt][2 * kt][3]);
        pa[mt][2] = {pack}(s[mt][2 * kt + 1][0], s[mt][2 * kt + 1][1]);
        pa[mt][3] = {pack}(s[mt][2 * kt + 1][2], s[mt][2 * kt + 1][3]);
      }}
      #pragma unroll
      for (int j = 0; j < {DV // 16}; ++j) {{
        uint32_t b0, b1, b2, b3;
        int kr = kt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, nc = j * 16 + (lane >> 4) * 8;
        ldsm_x4_t(b0, b1, b2, b3, smem_u32(tV + kr * {vld} + nc));
        #pragma unroll
        for (int mt = 0; mt < {MT}; ++mt) {{
          {mma}(o[mt][2 * j], pa[mt], b0, b1);
          {mma}(o[mt][2 * j + 1], pa[mt], b2, b3);
        }}
      }}
    }}
    __syncthreads();
  }}
  #pragma unroll
  for (int mt = 0; mt < {MT}; ++mt) {{
    float L0 = l0[mt], L1 = l1[mt];
    L0 += __shfl_xor_sync(0xffffffffu, L0, 1); L0 += __shfl_xor_sync(0xffffffffu, L0, 2);
    L1 += __shfl_xor_sync(0xffffffffu, L1, 1); L1 += __shfl_xor_sync(0xffffffffu, L1, 2);
    const float r0 = 1.f / L0, r1 = 1.f / L1;
    const int row0 = q0 + (warp * {MT} + mt) * 16 + (lane >> 2), row1 = row0 + 8;
    #pragma unroll
    for (int j = 0; j < {DV // 8}; ++j) {{
      const int col = j * 8 + (lane & 3) * 2;
      if (row0 < {shape.sq}) {{
        out[o_base + (long long)row0 * {shape.o_ss} + col * {shape.o_sd}] = {conv}(o[mt][j][0] * r0);
        out[o_base + (long long)row0 * {shape.o_ss} + (col + 1) * {shape.o_sd}] = {conv}(o[mt][j][1] * r0);
      }}
      if (row1 < {shape.sq}) {{
        out[o_base + (long long)row1 * {shape.o_ss} + col * {shape.o_sd}] = {conv}(o[mt][j][2] * r1);
        out[o_base + (long long)row1 * {shape.o_ss} + (col + 1) * {shape.o_sd}] = {conv}(o[mt][j][3] * r1);
      }}
    }}
  }}
}}
"""


def grid(shape: AttnShape, cfg: AttnConfig) -> tuple[int, int, int]:
    return ((shape.sq + cfg.bq - 1) // cfg.bq, shape.batch_count, 1)
