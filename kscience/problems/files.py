"""Importing a problem's Python file as a module of its own."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from kscience.problems.spec import ProblemError


def import_file(path: Path, module_name: str) -> ModuleType:
    """Import a Python file as a fresh module; any failure becomes a one-line ProblemError."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ProblemError(f"{path}: not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up by name
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # a broken problem file is bad input, not a crash
        sys.modules.pop(module_name, None)
        raise ProblemError(f"{path}: {type(exc).__name__}: {exc}") from None
    return module
