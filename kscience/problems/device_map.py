"""Run a problem's own code with its `'cuda'` tensors placed on another device.

Many GPU MODE references write `torch.randn(..., device='cuda')` or
`torch.Generator(device='cuda')`. `torch.set_default_device` only moves tensors made without a
device, so on a machine without a GPU such a problem cannot build its inputs. Inside
`mapped_device(target)`:

* a TorchFunctionMode rewrites every torch function and Tensor method call that names a CUDA
  device (a `device=` keyword, or a device given to `Tensor.to`, `.cuda()`, `new_*`) to `target`;
  the mode is per thread and only lasts for the block;
* `torch.Generator` is not a torch function (it is a class), so the problem module's own `torch`
  name is a `TorchProxy` (see `proxy_torch`) whose `Generator(device='cuda')` builds a generator on
  `target` while a mapping is active, and is plain `torch` otherwise.

The problem's code runs inside the block (the judge's and the worker's input builders), and on a
machine without a GPU a candidate's import and calls do too (`Harness.candidate_device`), so a
published solution that says `.to('cuda')` runs there as well; only device arguments are
rewritten, and the block is closed before the worker's integrity check. A generator seeded on the CPU draws different numbers from one seeded on a
GPU, which does not matter: kscience picks its own seeds and compares against the reference on
the same data.
"""

from __future__ import annotations

import contextlib
import threading
import types

import torch
from torch.overrides import TorchFunctionMode

_active = threading.local()  # .target: the device 'cuda' maps to in this thread, while a block runs


def _is_cuda(value) -> bool:
    if isinstance(value, torch.device):
        return value.type == "cuda"
    return isinstance(value, str) and (value == "cuda" or value.startswith("cuda:"))


class _CudaTo(TorchFunctionMode):
    def __init__(self, target: str):
        super().__init__()
        self.target = torch.device(target)

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if _is_cuda(kwargs.get("device")):
            kwargs["device"] = self.target
        if func is torch.Tensor.cuda:  # t.cuda(...) is t.to(target)
            return args[0].to(self.target)
        if func is torch.Tensor.to:
            args = tuple(self.target if _is_cuda(a) else a for a in args)
        return func(*args, **kwargs)


@contextlib.contextmanager
def mapped_device(target: str):
    """Within the block, tensors and generators asked for on 'cuda' are made on `target`.
    With a CUDA target the block changes nothing."""
    if torch.device(target).type == "cuda":
        yield
        return
    previous = getattr(_active, "target", None)
    _active.target = target
    try:
        with _CudaTo(target):
            yield
    finally:
        _active.target = previous


def _generator(device=None):
    target = getattr(_active, "target", None)
    if target is not None and _is_cuda(device):
        # The meta device (sizes without memory, to see whether a problem fits) has no generator
        # of its own; factories on meta accept a CPU one.
        device = "cpu" if torch.device(target).type == "meta" else target
    return torch.Generator(device=device) if device is not None else torch.Generator()


class TorchProxy(types.ModuleType):
    """`torch` for a problem module: every name is torch's, except `Generator`, which follows the
    active mapping (a class cannot be caught by a TorchFunctionMode)."""

    def __init__(self):
        super().__init__("torch")

    def __getattr__(self, name):
        return _generator if name == "Generator" else getattr(torch, name)


def proxy_torch(module) -> None:
    """Give a problem module (and the helpers it imported) the mapping-aware `torch`."""
    if getattr(module, "torch", None) is torch:
        module.torch = TorchProxy()
