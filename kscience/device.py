"""What the evaluation device is, and the physical ceilings that bound any honest timing.

The peaks are datasheet figures (dense, no sparsity). They are upper bounds, so a
measured time below bytes/peak_bandwidth or flops/peak_rate is physically impossible
and the evaluator rejects it. Where the device is unknown there is no floor.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from importlib import metadata

import torch


@dataclass(frozen=True)
class Peaks:
    bandwidth: float  # bytes/s of device memory
    rates: dict  # FLOP/s by operand precision: "fp32", "bf16", "fp8"


# Datasheet peaks: NVIDIA H100/H200 SXM, AMD MI300X (CDNA3). Matched by substring of the device name.
_PEAKS = {
    "H200": Peaks(4.8e12, {"fp32": 67e12, "bf16": 989e12, "fp8": 1979e12}),
    "H100": Peaks(3.35e12, {"fp32": 67e12, "bf16": 989e12, "fp8": 1979e12}),
    "MI300X": Peaks(5.3e12, {"fp32": 163e12, "bf16": 1307e12, "fp8": 2615e12}),
    "MI325X": Peaks(6.0e12, {"fp32": 163e12, "bf16": 1307e12, "fp8": 2615e12}),
}


@dataclass(frozen=True)
class Device:
    kind: str  # "cuda", "rocm" or "cpu"
    name: str  # e.g. "NVIDIA H100 80GB HBM3", or "cpu (Triton interpreter)"
    l2_bytes: int  # last-level cache to flush between timed calls
    peaks: Peaks | None

    @property
    def torch_device(self) -> str:
        return "cpu" if self.kind == "cpu" else "cuda"

    @property
    def interpreted(self) -> bool:
        return self.kind == "cpu"

    @property
    def fp8_dtype(self) -> torch.dtype:
        # MI300 (gfx942) implements the "fnuz" fp8 variant (no negative zero, bias 8);
        # Hopper and the CPU interpreter implement OCP e4m3fn.
        return torch.float8_e4m3fnuz if self.kind == "rocm" else torch.float8_e4m3fn

    def floor_seconds(self, flops: float, nbytes: float, precision: str) -> float:
        """Shortest physically possible time for the work, or 0.0 when unknown."""
        if self.peaks is None:
            return 0.0
        rate = self.peaks.rates.get(precision, max(self.peaks.rates.values()))
        return max(nbytes / self.peaks.bandwidth, flops / rate)

    def describe(self) -> dict:
        return {"kind": self.kind, "name": self.name, "l2_bytes": self.l2_bytes,
                "interpreted": self.interpreted, "versions": versions(), "host": socket.gethostname()}


DEVICE_VAR = "KSCIENCE_DEVICE"  # =cpu: judge under the Triton interpreter even where a GPU is visible


def cpu_forced() -> bool:
    """Whether the environment asks for the interpreter path (DEVICE_VAR=cpu), read here and nowhere else."""
    return os.environ.get(DEVICE_VAR, "").lower() == "cpu"


def detect(force_cpu: bool | None = None) -> Device:
    """The device evaluations run on; `cpu_forced()` (or `force_cpu`) takes the interpreter path."""
    if force_cpu is None:
        force_cpu = cpu_forced()
    if force_cpu or not torch.cuda.is_available():
        return Device("cpu", "cpu (Triton interpreter)", 0, None)
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    kind = "rocm" if torch.version.hip else "cuda"
    l2 = int(getattr(props, "L2_cache_size", 0) or 64 * 2**20)
    return Device(kind, props.name, l2, peaks_for(props.name))


def peaks_for(name: str) -> Peaks | None:
    """Datasheet peaks of a device by its name (as `torch.cuda.get_device_properties` gives it)."""
    return next((p for key, p in _PEAKS.items() if key in name), None)


def versions() -> dict:
    """torch, Triton and CUDA or HIP versions of this process: which kernel APIs exist depends on them."""
    triton = None
    for package in ("triton", "pytorch-triton-rocm", "pytorch-triton"):  # the ROCm and nightly wheels' names
        try:
            triton = metadata.version(package)
            break
        except metadata.PackageNotFoundError:
            continue
    return {"torch": torch.__version__, "triton": triton, "cuda": torch.version.cuda, "hip": torch.version.hip}
