"""What produced a run's numbers: device, driver, library versions, seeds and model ids, stored
with the run (and again, with the earlier ones kept, each time it is resumed)."""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys

import torch
import triton

from kscience.run.config import RunConfig
from kscience.device import detect
from kscience.version import __version__


def _gpu_driver() -> str | None:
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def environment(config: RunConfig, model: str) -> dict:
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] \
        if torch.cuda.is_available() else []
    return {"device": detect().describe(), "gpus": gpus, "driver": _gpu_driver(),
            "cuda": torch.version.cuda, "hip": torch.version.hip, "torch": torch.__version__,
            "triton": triton.__version__, "kscience": __version__, "python": sys.version.split()[0],
            "platform": platform.platform(), "seed": config.seed, "llm": config.llm, "model": model,
            "executor": config.executor}
