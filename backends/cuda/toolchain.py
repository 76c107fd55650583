"""nvcc: compile CUDA C++ to a cubin for one architecture, cached on disk by source hash + arch.

Needs no GPU and no pycuda, so the renderer's output can be checked anywhere nvcc exists.
A compile failure is returned as data (`CompileResult.error`), never raised past the caller.
A cached binary is checked before use (backends/checked.py: its key, size and SHA-256); a
damaged or foreign one is compiled again and overwritten.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from backends import checked
from backends.base import cache_root
from backends.cuda import sass

BINARY_MAGIC = b"SATURN-CUDA-BINARY\n"
NVCC_FLAGS = ("-O3", "-std=c++17")
# nvcc >= 11.8 optimizes a translation unit's kernels on all cores: a 2-layer decoder's 24
# kernels compiled in 3.4 s instead of 6.8 s on the H200 host (16 cores)
SPLIT_COMPILE = ("-split-compile=0",)


def find_nvcc() -> str | None:
    """Path of nvcc: $SATURN_NVCC, then PATH, then /usr/local/cuda/bin/nvcc; None if absent."""
    for cand in (os.environ.get("SATURN_NVCC"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def cache_dir() -> Path:
    return cache_root() / "cuda"


_VERSION: dict[str, str] = {}


def nvcc_version(nvcc: str) -> str:
    if nvcc not in _VERSION:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
        _VERSION[nvcc] = out.strip().splitlines()[-1] if out.strip() else "unknown"
    return _VERSION[nvcc]


def _splits(nvcc: str) -> bool:
    """Whether this nvcc takes -split-compile (release 11.8 and later)."""
    m = re.search(r"(?:release |cuda_)(\d+)\.(\d+)", nvcc_version(nvcc))
    return m is not None and (int(m.group(1)), int(m.group(2))) >= (11, 8)


@dataclass
class CompileResult:
    binary: bytes | None      # cubin (or PTX text as bytes for kind="ptx")
    log: str                  # nvcc's stderr (ptxas -v resource report included)
    error: str | None         # None on success, else why it failed
    cached: bool = False
    seconds: float = 0.0


def compile_source(source: str, arch: str, kind: str = "cubin", extra_flags: tuple[str, ...] = ()) -> CompileResult:
    """Compile `source` for `arch` (e.g. "sm_90") to a cubin (or "ptx"), using the disk cache.

    The cache key is sha256(source, arch, kind, flags, nvcc version).
    """
    import time
    nvcc = find_nvcc()
    if nvcc is None:
        return CompileResult(None, "", "nvcc not found (set SATURN_NVCC or put nvcc on PATH)")
    flags = NVCC_FLAGS + (SPLIT_COMPILE if _splits(nvcc) else ()) + tuple(extra_flags)
    # a wgmma cubin is cached as checked or unchecked (no nvdisasm): one compiled before the
    # machine-code check, or where it could not run, is compiled and checked again once it can
    nvdisasm = sass.find_nvdisasm() if kind == "cubin" and "wgmma.mma_async" in source else None
    key = hashlib.sha256("\0".join([source, arch, kind, " ".join(flags), nvcc_version(nvcc), "v2",
                                     "sass-checked" if nvdisasm else ""]).encode()).hexdigest()
    cdir = cache_dir()
    path = cdir / f"{key[:40]}.{kind}"
    logpath = cdir / f"{key[:40]}.log"
    cached = cached_binary(path, key)
    if cached is not None:
        try:
            log = logpath.read_text()
        except (OSError, UnicodeDecodeError):   # the log only feeds the resource report
            log = ""
        return CompileResult(cached, log, None, cached=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="saturn_nvcc_") as tmp:
        src = Path(tmp) / "kernels.cu"
        src.write_text(source)
        out = Path(tmp) / f"kernels.{kind}"
        cmd = [nvcc, *arch_flags(source, arch), f"--{kind}", *flags, "-Xptxas", "-v", "-o", str(out), str(src)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            return CompileResult(None, "", "nvcc timed out after 600 s")
        log = proc.stderr + proc.stdout
        if proc.returncode != 0 or not out.exists():
            return CompileResult(None, log, f"nvcc failed (exit {proc.returncode}): {_first_error(log)}",
                                 seconds=time.perf_counter() - t0)
        binary = out.read_bytes()
    if nvdisasm:
        # a wgmma accumulator used before its wait computes wrong products on the GPU alone
        # (host runs and a profiler's slower memory hide it): refused, never cached
        early = sass.early_accumulator_uses(sass.disassemble(binary, nvdisasm))
        if early:
            return CompileResult(None, log, f"ptxas placed {len(early)} uses of wgmma accumulators before the wait "
                                 f"that retires them (first: {early[0]}): the kernel would compute wrong values",
                                 seconds=time.perf_counter() - t0)
    try:   # the log first: a binary in the cache implies its log (written atomically, both)
        checked.write_atomic(logpath, log.encode())
        checked.write(path, BINARY_MAGIC, key, binary)
    except OSError as e:
        checked.warn_write_failure("CUDA binary", cdir, e)
    return CompileResult(binary, log, None, seconds=time.perf_counter() - t0)


def cached_binary(path: Path, key: str) -> bytes | None:
    """The binary cached at `path` for `key`, or None if it is missing, damaged or foreign."""
    try:
        return checked.read(path, BINARY_MAGIC, key)
    except (OSError, checked.InvalidEntry):
        return None


ARCH_SPECIFIC_MARKER = "// saturn: needs arch-specific target (a)"


def arch_flags(source: str, arch: str) -> list[str]:
    """-arch=sm_XY, or the architecture-specific target sm_XYa (wgmma, setmaxnreg) when the
    source asks for it; XY always comes from the device's compute capability."""
    if ARCH_SPECIFIC_MARKER in source:
        num = arch.removeprefix("sm_").rstrip("a")
        return [f"-gencode=arch=compute_{num}a,code=sm_{num}a"]
    return [f"-arch={arch}"]


def _first_error(log: str) -> str:
    for line in log.splitlines():
        if "error" in line:
            return line.strip()[:300]
    return log.strip()[:300]


def parse_resources(log: str) -> dict[str, dict[str, int]]:
    """ptxas -v report -> {kernel: {registers, shared, stack, spill_stores, spill_loads}}."""
    import re
    res: dict[str, dict[str, int]] = {}
    current = None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            current = m.group(1)
            res[current] = {}
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            res[current].update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            res[current]["registers"] = int(m.group(1))
            m2 = re.search(r"(\d+) bytes smem", line)
            if m2:
                res[current]["shared"] = int(m2.group(1))
    return res
