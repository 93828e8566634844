"""Noticing a candidate that rewires the harness around it (the untrusted side).

Before the candidate is imported, the worker records the identity of everything its checks
and clocks depend on: the clocks in `time`, CUDA events and synchronisation, the tensor
methods used to poison, copy and send outputs, the harness's own functions and methods, the
channel, and the interpreter's trace hooks and torch's override modes. After the import and
after every call it compares them again; any difference ends the evaluation as `rejected`.

Binding names early is not enough on its own: a candidate can reach the running harness
through `sys.modules` and replace a module global or a class attribute, or find the harness's
objects through the garbage collector and set attributes on them. The harness's classes are
slotted, so no method can be shadowed on an instance, and the slots fixed once an object is built
are watched (`watch`) as module globals are. What this cannot see
is native-level tampering (ctypes writes into the interpreter's memory) or a change that is
undone before the next comparison; the judge's wall-clock cross-checks are the backstop.
"""

from __future__ import annotations

import builtins
import gc
import sys
import threading
import time
from types import FunctionType, GetSetDescriptorType, MemberDescriptorType, ModuleType

import torch

# Bound before any candidate runs, so that replacing the builtins cannot blind the check itself.
_vars, _getattr, _list = vars, getattr, list

_TENSOR_METHODS = ("clone", "copy_", "fill_", "zero_", "contiguous", "cpu", "detach", "view", "reshape",
                   "numpy", "untyped_storage", "data_ptr", "is_floating_point", "numel", "element_size",
                   "to", "__torch_function__", "__torch_dispatch__", "device", "dtype", "shape", "layout")


def _fixed_points() -> list[tuple[object, str, str]]:
    """(owner, attribute, printable name) of library objects the harness relies on."""
    points = [(time, n, f"time.{n}") for n in ("perf_counter", "perf_counter_ns", "monotonic", "time")]
    points += [(torch.Tensor, n, f"torch.Tensor.{n}") for n in _TENSOR_METHODS]
    points += [(torch, n, f"torch.{n}") for n in ("empty", "empty_like", "equal", "Tensor")]
    points += [(torch.cuda, n, f"torch.cuda.{n}") for n in ("synchronize", "Event", "current_stream", "Stream")]
    points += [(torch.cuda.Event, n, f"torch.cuda.Event.{n}") for n in
               ("__new__", "__init__", "record", "elapsed_time", "synchronize", "query")]
    points += [(torch._C, n, f"torch._C.{n}") for n in ("_cuda_synchronize",) if hasattr(torch._C, n)]
    points += [(builtins, n, f"builtins.{n}") for n, v in vars(builtins).items() if callable(v)]
    return points


def _members(owner) -> list[tuple[object, str, str]]:
    """Every function-valued attribute of a harness module or class, by name."""
    label = owner.__name__
    out = []
    for name, value in list(vars(owner).items()):
        if isinstance(value, (FunctionType, type, staticmethod, classmethod, property, MemberDescriptorType,
                              GetSetDescriptorType)) or callable(value):
            out.append((owner, name, f"{label}.{name}"))
            if isinstance(value, type) and value.__module__ == getattr(owner, "__name__", None):
                out += _members(value)
    return out


class Integrity:
    """A snapshot of what must not change while a candidate runs, and the check against it."""

    def __init__(self, harness_modules: list[ModuleType]):
        points = _fixed_points()
        for module in harness_modules:
            points += _members(module)
        # Own attributes are read through the owner's live namespace (a module dict or class
        # mappingproxy, both stable objects), inherited ones through getattr.
        self._points = []
        for owner, name, label in points:
            own = _vars(owner)
            mapping = own if name in own else None
            self._points.append((owner, mapping, name, label, own[name] if mapping is not None else
                                 _getattr(owner, name, None)))
        self._gc_callbacks = _list(gc.callbacks)
        self._watched: dict[str, list[tuple[object, str, object]]] = {}

    def watch(self, key: str, obj, names) -> None:
        """Check from now on that the attributes `names` of `obj` keep the objects they hold now;
        watching another object under the same `key` lets the previous one go (a shape's buffers)."""
        self._watched[key] = [(obj, name, _getattr(obj, name)) for name in names]

    def violation(self) -> str | None:
        """A one-line description of the first thing found changed, or None."""
        for owner, mapping, name, label, original in self._points:
            current = mapping.get(name) if mapping is not None else _getattr(owner, name, None)
            if current is not original:
                return f"candidate replaced {label}"
        for key, points in self._watched.items():
            for obj, name, original in points:
                if _getattr(obj, name, None) is not original:
                    return f"candidate replaced the {key}'s {name}"
        if sys.gettrace() is not None or sys.getprofile() is not None:
            return "candidate installed a trace or profile hook"
        if threading.gettrace() is not None or threading.getprofile() is not None:
            return "candidate installed a thread trace or profile hook"
        if torch._C._len_torch_function_stack() or torch._C._len_torch_dispatch_stack():
            return "candidate left a torch function or dispatch mode active"
        if gc.callbacks != self._gc_callbacks:
            return "candidate installed a garbage-collector callback"
        return None
