"""What a device lacks for a task, said in words when the task's own reference fails there.

GPU MODE's nvfp4 tasks hand their reference fp4 tensors and call `torch._scaled_mm` on them, which
cuBLAS computes only on Blackwell: on an H100 the reference fails with CUBLAS_STATUS_NOT_SUPPORTED,
on the CPU with "Invalid scaling configuration". Neither says that the device is what is missing.
"""

from __future__ import annotations

import torch

from kscience.problems import members

# Element types torch computes only on NVIDIA GPUs of at least this compute capability, by name
# (fp4 tensor cores arrived with Blackwell, sm_100). fp8 is not listed: the CPU and AMD GPUs compute
# it too, so a failure says nothing about its type. Nothing is said on ROCm, whose fp4 support
# (MI355) follows its own architecture names.
LEAST_CAPABILITY = {"float4_e2m1fn_x2": (10, 0)}


def lacking(data, device: str) -> str | None:
    """Why `device` cannot run a task whose inputs are `data`, or None when their types do not say."""
    where = torch.device(device)
    if where.type == "cuda" and torch.version.hip is not None:
        return None
    names = {str(t.dtype).removeprefix("torch.") for t in members.tensors(data)}
    for name, least in LEAST_CAPABILITY.items():
        if name not in names:
            continue
        if where.type == "cuda":
            have = torch.cuda.get_device_capability(where)
            if have >= least:
                continue
            here = f"this GPU is {have[0]}.{have[1]}"
        else:
            here = f"this device is the {where.type}"
        return (f"its inputs are {name}, which torch computes only on NVIDIA GPUs of compute capability "
                f"{least[0]}.{least[1]} or newer; {here}")
    return None
