"""Every attention kernel schedule of the CUDA backend against PyTorch's SDPA, at issue sizes.

    python -m benchmarks.attention_kernels [--quick] [--json FILE]

For each case (batch, heads, seq, head dim, dtype, with or without a causal mask) the traced
attention program is built under every attention schedule the backend offers (mma.sync and
wgmma tiles), checked against PyTorch in float32, and timed with CUDA events (median of
`--repeat` runs after warm-up, inputs resident on the device). PyTorch's SDPA is timed the same
way: with `is_causal=True` (it skips the masked tiles) and with an additive mask tensor.
FLOP/s count every score (causal ones too). Needs a GPU, pycuda and torch with CUDA.
"""
from __future__ import annotations

import math

import numpy as np

from benchmarks import schedule_tables

CASES = [  # (b, h, s, d, dtype, causal): False, "is_causal" (the mask computed in the kernel,
           # its removed key tiles skipped) or "mask" (an additive mask tensor, as the decoders)
    (4, 16, 2048, 64, "f16", False), (4, 16, 2048, 64, "bf16", False),
    (4, 16, 2048, 128, "f16", False), (4, 16, 2048, 128, "bf16", False),
    (4, 16, 2048, 64, "f16", "is_causal"), (4, 16, 2048, 64, "bf16", "is_causal"),
    (4, 16, 2048, 128, "f16", "is_causal"), (4, 16, 2048, 128, "bf16", "is_causal"),
    (4, 16, 2048, 64, "f16", "mask"), (1, 16, 1024, 128, "f16", "mask"), (4, 16, 2047, 64, "f16", False),
]


def case_label(case) -> str:
    b, h, s, d, dtype, causal = case
    return f"b{b} h{h} s{s} d{d} {dtype}{' ' + causal if causal else ''}"


def _program(b, h, s, d, dtype, causal):
    from compiler import nn
    from compiler.trace import spec, trace

    def masked(q, k, v, mask):
        return ((q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(d)) + mask).softmax(-1) @ v
    specs = [spec((b, h, s, d), dtype)] * 3
    if causal == "mask":
        return trace(masked, *specs, spec((s, s), dtype))
    if causal == "is_causal":
        return trace(lambda q, k, v: nn.attention_with_scores(q, k, v, is_causal=True)[0], *specs)
    return trace(nn.attention, *specs)


def _torch_time(fn, repeat: int) -> float:
    """Median seconds per call (CUDA events around each, after 5 untimed calls)."""
    from benchmarks.hf_models_gpu import time_calls
    return float(np.median(time_calls(fn, 5, repeat)))


def run_case(be, case, repeat: int, out=print) -> list[dict]:
    import torch
    import torch.nn.functional as F
    b, h, s, d, dtype, causal = case
    g = _program(*case)
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = [torch.randn((b, h, s, d), generator=gen, device="cuda", dtype=tdt) for _ in range(3)]
    mask = torch.triu(torch.full((s, s), float("-inf"), device="cuda"), 1).to(tdt) if causal else None
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=None, is_causal=bool(causal))
    args = [x.cpu().float().numpy().astype(g.inputs[0].dtype.np) for x in (q, k, v)]
    if causal == "mask":
        args.append(mask.cpu().float().numpy().astype(g.inputs[3].dtype.np))
    flops = 4 * b * h * s * s * d
    label = case_label(case)
    rows = []
    with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.FLASH_ATTENTION]):
        t = _torch_time(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)), repeat)
    rows.append({"case": label, "kernel": "torch SDPA (flash" + (", is_causal)" if causal else ")"), "ms": t * 1e3})
    if causal:
        t = _torch_time(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), repeat)
        rows.append({"case": label, "kernel": "torch SDPA (mask tensor)", "ms": t * 1e3})
    sdpa = rows[0]["ms"]
    for sched in [x for x in be.schedules(g) if x.attn is not None]:
        exe, why = be.try_build(g, sched)
        if exe is None:
            rows.append({"case": label, "kernel": sched.name, "error": why[:200]})
            continue
        got = torch.from_numpy(np.asarray(exe(*args)[0], np.float32)).cuda()
        err = float((got - want).abs().max() / want.abs().max())
        t = float(np.median(exe.benchmark(args, warmup=5, repeat=repeat)))
        detail = [l.detail for l in exe.launches if l.kind == "attention"]
        rows.append({"case": label, "kernel": sched.name, "ms": t * 1e3, "max_rel_err": err,
                     "detail": detail[0] if detail else "", "launches": len(exe.launches)})
        exe.close()
    schedule_tables.report(rows, label, flops, sdpa, "SDPA", out,
                           extra=lambda r: f"  err {r['max_rel_err']:.1e}" if "max_rel_err" in r else "")
    return rows


def _precompile(be, cases) -> None:
    schedule_tables.precompile([_program(*c) for c in cases], lambda g: [x for x in be.schedules(g) if x.attn is not None])


def main(argv=None) -> int:
    return schedule_tables.main(__doc__, CASES, run_case, _precompile, argv, repeat=30, label=case_label)


if __name__ == "__main__":
    raise SystemExit(main())
