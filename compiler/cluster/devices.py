"""Which devices a host has, how a worker is pinned to one, and what makes two devices'
timings comparable (their identity: model, driver and clock state).

A backend may say for itself: `device_count()` (devices on this host) and `device_identity()`
(the device this process runs on, as a DeviceIdentity); otherwise the CUDA target counts GPUs
with nvidia-smi and names them through pycuda, and every other target is one CPU.
"""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import dataclass

DEVICE_ENV = "SATURN_DEVICE"   # the index of the device a pinned worker times on


@dataclass(frozen=True)
class DeviceIdentity:
    """Timings from two devices are compared only when every field is equal."""
    kind: str      # cpu | cuda | a test backend's own kind
    model: str
    driver: str
    clocks: str    # the clock state timings depend on (locked application clocks, governor)

    def __str__(self) -> str:
        return f"{self.model} (driver {self.driver or '-'}, clocks {self.clocks or '-'})"


def is_cuda(backend) -> bool:
    return getattr(backend, "name", "") == "cuda"


def device_count(backend) -> int:
    """Devices of `backend`'s kind on this host (at least 1)."""
    fn = getattr(backend, "device_count", None)
    if callable(fn):
        return max(1, int(fn()))
    if is_cuda(backend):
        return max(1, len(_visible_gpus()))
    return 1


def pin_env(backend, index: int) -> dict:
    """The environment that pins a worker process to device `index` of this host."""
    env = {DEVICE_ENV: str(index)}
    if is_cuda(backend):
        gpus = _visible_gpus()
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = gpus[index % len(gpus)]
    return env


def _visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES entries."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [g.strip() for g in visible.split(",") if g.strip()]
    out = _nvidia_smi(["-L"])
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def _nvidia_smi(args: list[str]) -> str:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return ""
    try:
        return subprocess.run([exe, *args], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def probe(backend) -> DeviceIdentity:
    """The identity of the device this process runs `backend` on (called in a pinned worker)."""
    fn = getattr(backend, "device_identity", None)
    if callable(fn):
        return fn()
    if is_cuda(backend):
        return _cuda_identity()
    return _cpu_identity()


def _cpu_identity() -> DeviceIdentity:
    from compiler.cache import cpu_name
    governor = ""
    try:
        with open("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor") as f:
            governor = "governor " + f.read().strip()
    except OSError:
        pass
    return DeviceIdentity("cpu", f"{platform.machine()} {cpu_name()} x{os.cpu_count()}", platform.release(), governor)


def _cuda_identity() -> DeviceIdentity:
    """GPU 0 of this process (the one it is pinned to): its name, the driver, and its clocks
    (application clocks, which a locked GPU reports, and the maximum SM clock)."""
    import pycuda.driver as drv
    drv.init()
    dev = drv.Device(0)
    bus = dev.pci_bus_id()            # "0000:19:00.0"; nvidia-smi names the domain with 8 digits
    domain, _, rest = bus.partition(":")
    fields = "driver_version,clocks.applications.graphics,clocks.applications.memory,clocks.max.sm"
    row = _nvidia_smi(["-i", f"{domain.zfill(8)}:{rest}", f"--query-gpu={fields}",
                       "--format=csv,noheader"]).strip().split(", ")
    if len(row) == 4:
        driver, clocks = row[0], f"app {row[1]}/{row[2]}, max sm {row[3]}"
    else:
        driver, clocks = str(drv.get_driver_version()), "unknown"
    major, minor = dev.compute_capability()
    return DeviceIdentity("cuda", f"{dev.name()} sm_{major}{minor}", driver, clocks)
