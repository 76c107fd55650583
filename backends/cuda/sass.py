"""The SASS of a compiled kernel (nvdisasm) and one check on it: no instruction uses a wgmma's
accumulators before the wait that retires it.

The accumulators of `wgmma.mma_async` are written asynchronously until a `wgmma.wait_group`
retires the group; the PTX a kernel hands to ptxas reads them only after that wait, but ptxas
(CUDA 13.0) has been seen to schedule the reads (the epilogue's f32 -> f16 conversions) above
the final `WARPGROUP.DEPBAR.LE gsb0, 0x0` of a main loop the front end had unrolled twice: the
tile then misses its last k-step's product. The GPU computes that wrong product every time;
compute-sanitizer (slower memory) and the host runner (no ptxas) do not. This reads the
machine code, where the fault is, so it is checked without a GPU."""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path


def find_nvdisasm() -> str | None:
    """$SATURN_NVDISASM, then PATH, then the CUDA toolkit's, then the nvidia-cuda-nvdisasm wheel's."""
    for cand in (os.environ.get("SATURN_NVDISASM"), shutil.which("nvdisasm"), "/usr/local/cuda/bin/nvdisasm"):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for cand in sorted(Path(root).glob("*/bin/nvdisasm")):
            if os.access(cand, os.X_OK):
                return str(cand)
    return None


def disassemble(cubin: bytes, nvdisasm: str | None = None) -> list[str]:
    """The cubin's SASS, one instruction per line, each function's after a `.section` line."""
    tool = nvdisasm or find_nvdisasm()
    if tool is None:
        raise FileNotFoundError("nvdisasm not found (set SATURN_NVDISASM or install nvidia-cuda-nvdisasm)")
    with tempfile.TemporaryDirectory(prefix="saturn_sass_") as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        out = subprocess.run([tool, "-c", str(path)], capture_output=True, text=True, check=True).stdout
    return [line.split(";")[0].strip() for line in out.splitlines()
            if re.search(r"/\*[0-9a-f]{4,}\*/", line) or line.strip().startswith(".section")]


_HGMMA = re.compile(r"HGMMA\.64x(\d+)x\d+\.F32\S* R(\d+),")
_RETIRED = "WARPGROUP.DEPBAR.LE gsb0, 0x0"
_REG = re.compile(r"\bR(\d+)\b")


def early_accumulator_uses(sass: list[str]) -> list[str]:
    """Instructions that read or write an f32 HGMMA's accumulator registers after it and before
    the next wait that retires every group, in listing order within each function (a main
    loop's exit falls through to what follows it; a branch placing a use there that only runs
    after a wait would be reported too: no kernel here has one, and a false report refuses a
    right kernel, never passes a wrong one)."""
    pending: set[int] = set()
    early = []
    for ins in sass:
        m = _HGMMA.search(ins)
        if m:
            first, count = int(m.group(2)), int(m.group(1)) // 2
            pending |= set(range(first, first + count))
            continue
        if _RETIRED in ins or ins.startswith(".section"):     # (a new function starts with none)
            pending = set()
            continue
        if pending and {int(r) for r in _REG.findall(ins)} & pending:
            early.append(ins)
    return early
