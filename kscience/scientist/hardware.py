"""The hardware a run is about, in words a model can use: name, vendor stack and architecture.

Two devices matter and they may differ: the device the evaluator times on (the CPU interpreter
on a laptop, an H100 in CI) and the target the kernels are written for (that same device, or
one named with `--target`). Both are described by `Hardware`, built from a device's name and
kind (`describe`) or from a target the user typed (`named_target`).

Architectures come from vendor datasheets (NVIDIA Hopper/Ampere/Ada/Blackwell whitepapers,
AMD CDNA3 ISA guide); a GPU not in the table keeps its name and a compute capability when
torch can read one.
"""

from __future__ import annotations

from dataclasses import dataclass

# (substring of the device name, upper case) -> (kind, architecture); most specific first.
_KNOWN = (
    ("H200", "cuda", "NVIDIA Hopper, sm_90: 132 SMs, 228 KB shared memory per SM, wgmma tensor cores, fp8 e4m3fn"),
    ("H100", "cuda", "NVIDIA Hopper, sm_90: 132 SMs, 228 KB shared memory per SM, wgmma tensor cores, fp8 e4m3fn"),
    ("GH200", "cuda", "NVIDIA Hopper, sm_90"),
    ("B200", "cuda", "NVIDIA Blackwell, sm_100"),
    ("A100", "cuda", "NVIDIA Ampere, sm_80: 108 SMs, 164 KB shared memory per SM, no fp8 tensor cores"),
    ("L40", "cuda", "NVIDIA Ada, sm_89"),
    ("MI325X", "rocm", "AMD CDNA3, gfx942: 304 CUs, 64 KB LDS per CU, wave64, fp8 e4m3fnuz"),
    ("MI300", "rocm", "AMD CDNA3, gfx942: 304 CUs, 64 KB LDS per CU, wave64, fp8 e4m3fnuz"),
    ("MI250", "rocm", "AMD CDNA2, gfx90a: wave64, no fp8 matrix cores"),
)
CPU_ARCHITECTURE = "Triton interpreter on the host CPU (NumPy per program instance; no GPU involved)"


@dataclass(frozen=True)
class Hardware:
    name: str  # "NVIDIA H100 80GB HBM3", "cpu (Triton interpreter)", or what the user typed
    kind: str  # "cuda", "rocm", "cpu" or "unknown"
    architecture: str  # one line for people and models

    @property
    def interpreted(self) -> bool:
        return self.kind == "cpu"

    @property
    def topics(self) -> list[str]:
        """Words that select knowledge notes for this hardware."""
        return [t for t in (self.kind, self.name) if t and t != "unknown"]

    def line(self) -> str:
        return f"{self.name} ({self.architecture})"


def _lookup(name: str) -> tuple[str, str] | None:
    upper = name.upper()
    return next(((kind, arch) for key, kind, arch in _KNOWN if key in upper), None)


def describe(kind: str, name: str, capability: tuple[int, int] | None = None) -> Hardware:
    """A device as the evaluator reports it (`Device.describe()` or an EvalResult's `device`)."""
    if kind == "cpu":
        return Hardware(name or "cpu (Triton interpreter)", "cpu", CPU_ARCHITECTURE)
    known = _lookup(name)
    if known is not None:
        return Hardware(name, kind or known[0], known[1])
    if capability is not None and kind == "cuda":
        return Hardware(name, kind, f"NVIDIA sm_{capability[0]}{capability[1]}")
    return Hardware(name or "unknown device", kind or "unknown", "architecture not known to kscience")


def describe_device(device) -> Hardware:
    """A `kscience.device.Device` (real or built by hand, as tests simulate an H100)."""
    capability = None
    if device.kind == "cuda" and _lookup(device.name) is None:
        try:
            import torch

            capability = torch.cuda.get_device_capability() if torch.cuda.is_available() else None
        except Exception:  # no driver: the name is all there is
            capability = None
    return describe(device.kind, device.name, capability)


def named_target(text: str) -> Hardware:
    """`--target h100`, `--target MI300X`, `--target cpu`: the hardware the kernels are for."""
    text = text.strip()
    if text.lower() in ("cpu", "interpreter"):
        return describe("cpu", "")
    known = _lookup(text)
    if known is None:
        return Hardware(text, "unknown", "not in kscience's table: say what you know of it in a knowledge note")
    kind, arch = known
    vendor = "NVIDIA" if kind == "cuda" else "AMD"
    name = text if text.upper().startswith(vendor) else f"{vendor} {text.upper()}"
    return Hardware(name, kind, arch)


UNNAMED = Hardware("not named", "unknown", "the run evaluates on the CPU interpreter only; name the GPU the "
                   "kernels are for with --target (h100, mi300x) so that prompts and notes match it")


def run_target(setting: str | None, evaluated_on: Hardware) -> Hardware:
    """The target of a run: as set, else the device it evaluates on, unless that is the CPU interpreter,
    which no kernel is written for."""
    if setting:
        return named_target(setting)
    return UNNAMED if evaluated_on.interpreted else evaluated_on
