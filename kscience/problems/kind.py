"""What a problem kind is: the small interface every problem format (built-in folder, KernelBench file,
GPU MODE directory) answers, so nothing else in kscience tells the formats apart.

A kind says which locators are its own, loads one into a `Problem`, names the constants `--set` may
change without running anything, and answers the few questions the judge, the harness, the baselines
and the prompts ask of a format: what the candidate defines and how it is called, whether the candidate
is a model built like the reference, whether the problem has one shape, whether its files travel with
the package. The registry of kinds is kinds.py; docs/architecture.md says how to add one.
"""

from __future__ import annotations

import ast
from abc import ABC, abstractmethod
from pathlib import Path


class ProblemKind(ABC):
    """One problem format. Subclasses set the class attributes and implement `claims` and `load`."""

    name = ""  # how a stored problem row and `kscience problems --json` name the kind
    title = ""  # what `no such problem` says a locator may be: "a built-in", "a KernelBench .py file"
    entry = "custom_kernel"  # what a candidate defines
    call = "custom_kernel(data)"  # how the judge calls it, as the prompts say
    builds_model = False  # the candidate is a module class the judge builds as it builds the reference's
    one_shape = False  # the problem has one shape, checked and timed everywhere (its module's constants)
    in_package = False  # its files travel with kscience: requests name it and carry none of its files

    @abstractmethod
    def claims(self, locator: str) -> bool:
        """Whether `locator` (a name or a path) is a problem of this kind; reads no more than it must."""

    def found(self, path: Path) -> bool:
        """Whether `path`, met while listing a suite's folder, is a problem of this kind: stricter than
        `claims`, since a folder's other files are not problems (a KernelBench level's helpers)."""
        return False

    @abstractmethod
    def load(self, locator: str, overrides: dict, probed: dict | None):
        """The `Problem` at `locator`, `--set` values applied (`probed`: what a GPU MODE load found before);
        a ProblemError in one line where it cannot be loaded."""

    def files(self, path: Path) -> list[Path]:
        """Every file loading the problem at `path` reads, which travel with its evaluation requests
        (bundle.py); a problem of one file by default."""
        return [path]

    def settable(self, locator: str) -> dict[str, ast.stmt]:
        """The module-level constants `--set NAME=VALUE` may change, by name, read from the source without
        running it; empty where `--set` does not apply or the source does not parse."""
        return {}

    def __repr__(self) -> str:
        return f"<problem kind {self.name}>"
