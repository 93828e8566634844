"""The evaluator's map stays true: `kscience/evaluate/__init__.py` lists every module once, under its
subpackage, and each subpackage's `__init__.py` names its own files and imports nothing."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import kscience.evaluate

EVALUATE = Path(kscience.evaluate.__file__).parent
SUBPACKAGES = sorted(p.name for p in EVALUATE.iterdir() if (p / "__init__.py").exists())


def _modules() -> set[tuple[str, str]]:
    """(subpackage or "" for the top, file name) of every module but the __init__ files."""
    top = {("", p.name) for p in EVALUATE.glob("*.py") if p.name != "__init__.py"}
    return top | {(sub, p.name) for sub in SUBPACKAGES for p in (EVALUATE / sub).glob("*.py")
                  if p.name != "__init__.py"}


def _listed(doc: str) -> list[tuple[str, str]]:
    """(subpackage, file) of each module line of the package docstring's map."""
    out, folder = [], None
    for line in doc.splitlines():
        if line.startswith("Both sides"):
            folder = ""
        elif header := re.match(r"^  (\w+)/\s", line):
            folder = header.group(1)
        elif folder is not None and (entry := re.match(r"^    (\w+\.py)\s", line)):
            out.append((folder, entry.group(1)))
    return out


def test_the_package_docstring_lists_every_module_once_under_its_subpackage():
    listed = _listed(kscience.evaluate.__doc__)
    assert sorted(listed) == sorted(set(listed)), "listed twice"
    assert set(listed) == _modules(), (f"missing: {sorted(_modules() - set(listed))}; "
                                       f"no such module: {sorted(set(listed) - _modules())}")


def test_each_subpackage_names_its_files_and_imports_nothing():
    for sub in SUBPACKAGES:
        tree = ast.parse((EVALUATE / sub / "__init__.py").read_text())
        doc = ast.get_docstring(tree) or ""
        unnamed = [name for folder, name in _modules() if folder == sub and name not in doc]
        assert not unnamed, f"{sub}/__init__.py does not name {unnamed}"
        assert len(tree.body) == 1, f"{sub}/__init__.py holds more than its docstring"


def test_the_map_reader_sees_a_missing_module():
    doc = "Trusted side:\n  judge/     x\n    session.py   y\nBoth sides (this folder):\n    wire.py   z\n"
    assert _listed(doc) == [("judge", "session.py"), ("", "wire.py")]
