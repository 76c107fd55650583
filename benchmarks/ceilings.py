"""Measure the device's ceilings in the same run: a large copy (bandwidth) and a large matmul (FLOP/s).

The ceilings turn times into "% of what this device can do": a case's floor is the larger of
(its fewest bytes at the copy rate) and (its FLOPs at the matmul rate for its dtype).
"""
from __future__ import annotations

import statistics

import numpy as np

from benchmarks.timing import wall_clock

# (copy elements of f32, matmul side) per suite and device family
SIZES = {
    ("cpu", "full"): (64 << 20, 2048), ("cpu", "quick"): (16 << 20, 1024), ("cpu", "tiny"): (1 << 20, 256),
    ("cuda", "full"): (256 << 20, 8192), ("cuda", "quick"): (256 << 20, 4096), ("cuda", "tiny"): (16 << 20, 1024),
}


def _median_time(timer, fn, warmup: int = 2, repeat: int = 7) -> float:
    timer(fn, warmup)
    return statistics.median(timer(fn, repeat))


def measure(env, family: str, suite: str, matmul_dtypes: set[str]) -> dict:
    """Return {"copy_GBps", "copy_how", "matmul_GFLOPs": {dtype: rate}, "matmul_how"}.

    `env` is a benchmarks.contenders.TorchEnv or None (numpy on the CPU; nothing on a GPU).
    """
    n_copy, side = SIZES[(family, suite)]
    out: dict = {"copy_GBps": None, "matmul_GFLOPs": {}, "copy_how": "", "matmul_how": ""}
    if env is None:
        if family == "cuda":
            out["copy_how"] = out["matmul_how"] = "not measured: needs PyTorch on the GPU"
            return out
        src = np.random.default_rng(0).standard_normal(n_copy, dtype=np.float32)
        dst = np.empty_like(src)
        t = _median_time(wall_clock, lambda: np.copyto(dst, src))
        out["copy_GBps"] = 2 * src.nbytes / t / 1e9
        out["copy_how"] = f"numpy copyto of {src.nbytes >> 20} MiB f32 (bytes read + written), median of 7"
        a = np.random.default_rng(1).standard_normal((side, side), dtype=np.float32)
        t = _median_time(wall_clock, lambda: a @ a)
        out["matmul_GFLOPs"]["f32"] = 2 * side ** 3 / t / 1e9
        out["matmul_how"] = f"numpy matmul {side}^3 f32 (f16 not measured without PyTorch), median of 7"
        return out

    torch = env.torch
    src = torch.randn(n_copy, device=env.device)
    dst = torch.empty_like(src)
    t = _median_time(env.time, lambda: dst.copy_(src))
    out["copy_GBps"] = 2 * src.numel() * 4 / t / 1e9
    out["copy_how"] = f"torch copy_ of {src.numel() * 4 >> 20} MiB f32 on {env.device} (bytes read + written), median of 7"
    del src, dst
    hows = []
    for dtype in sorted(matmul_dtypes):
        tdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]
        s = side if dtype == "f32" or family == "cuda" else side // 2  # half matmul on a CPU is slow
        a = torch.randn(s, s, device=env.device).to(tdt)
        b = torch.randn(s, s, device=env.device).to(tdt)
        with torch.no_grad():
            t = _median_time(env.time, lambda: a @ b)
        out["matmul_GFLOPs"][dtype] = 2 * s ** 3 / t / 1e9
        hows.append(f"{dtype} {s}^3")
        del a, b
    tf32 = ", TF32 off" if family == "cuda" else ""
    out["matmul_how"] = f"torch matmul ({', '.join(hows)}{tf32}) on {env.device}, median of 7"
    env.free()
    return out


def floor_seconds(nbytes: int, flops: int | None, dtype: str, ceilings: dict) -> float | None:
    """The least time the device could take: bytes at the copy rate or FLOPs at the matmul rate."""
    parts = []
    if ceilings.get("copy_GBps"):
        parts.append(nbytes / (ceilings["copy_GBps"] * 1e9))
    rate = ceilings.get("matmul_GFLOPs", {}).get(dtype)
    if flops and rate:
        parts.append(flops / (rate * 1e9))
    return max(parts) if parts else None
