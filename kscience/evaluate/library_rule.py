"""A problem that forbids calling its baselines' libraries: the judge's look at the source, the worker's traps.

Both halves are needed. The static look (trusted side, before any worker starts) refuses a source that
imports a forbidden package or names a forbidden function, through an alias or a string. A name built at
run time escapes it; for that the worker (untrusted side, before the candidate is imported) refuses the
forbidden packages at import and replaces the forbidden functions of modules it already holds (torch.mm)
with traps that raise. A candidate that undoes a trap natively is beyond both; the judge's rule is meant to
keep honest search from reporting a library call as a kernel, not to stop a determined cheat.
"""

from __future__ import annotations

import ast
import importlib.abc
import sys


class ForbiddenCall(RuntimeError):
    pass


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """`torch.mm` for an attribute chain on a name, with import aliases resolved."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(aliases.get(node.id, node.id))
    return ".".join(reversed(parts))


def static_violation(source: str, forbidden: tuple[str, ...]) -> str | None:
    """One line naming the first forbidden entry point the source imports, names or spells, or None.
    A source that does not parse is left to the worker, which reports its syntax error."""
    if not forbidden:
        return None
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    aliases: dict[str, str] = {}
    used: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                used.append(a.name)
                aliases[(a.asname or a.name).split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            used.append(node.module)
            for a in node.names:
                used.append(f"{node.module}.{a.name}")
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Store):
            name = _dotted(node, aliases)
            used += [name] if name else []
        elif isinstance(node, ast.Name) and node.id in aliases:
            used.append(aliases[node.id])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            # importlib.import_module("quack"), getattr(torch, "_scaled_mm"): a string that is a whole name, or
            # a private one's last part (a common word such as "matmul" is left to the worker's trap)
            used += [name for name in forbidden
                     if node.value == name or node.value == name.rsplit(".", 1)[-1] and node.value.startswith("_")]
    for name in used:
        hit = next((f for f in forbidden if name == f or name.startswith(f + ".")), None)
        if hit:
            return f"the source calls {hit}, a baseline's library this problem forbids candidates to call"
    return None


class _RefuseImports(importlib.abc.MetaPathFinder):
    """Refuses importing the forbidden packages and modules."""

    def __init__(self, modules: tuple[str, ...]):
        self.modules = modules

    def find_spec(self, fullname, path=None, target=None):
        hit = next((m for m in self.modules if fullname == m or fullname.startswith(m + ".")), None)
        if hit:
            raise ForbiddenCall(f"importing {hit} is forbidden: it is a baseline's library, which this problem "
                                "forbids candidates to call")
        return None


def _trap(name: str):
    def trapped(*args, **kwargs):
        raise ForbiddenCall(f"the candidate called {name}, a baseline's library this problem forbids "
                            "candidates to call")
    return trapped


def install_traps(forbidden: tuple[str, ...]) -> None:
    """In the worker, before the candidate is imported: a function of a module already imported (torch.mm,
    torch.Tensor.__matmul__) is replaced by a trap; any other name is a package or module, refused at import
    (and dropped from sys.modules, so an import made before this is made again, and refused)."""
    modules = []
    for name in forbidden:
        owner_path, _, attr = name.rpartition(".")
        owner = _loaded(owner_path) if owner_path else None
        if owner is not None and hasattr(owner, attr) and not isinstance(getattr(owner, attr), type(sys)):
            setattr(owner, attr, _trap(name))
        else:
            modules.append(name)
    for loaded in [m for m in sys.modules if any(m == x or m.startswith(x + ".") for x in modules)]:
        del sys.modules[loaded]
    if modules:
        sys.meta_path.insert(0, _RefuseImports(tuple(modules)))


def _loaded(path: str):
    """The module or class `path` names, from what this process has imported already; None otherwise."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        obj = sys.modules.get(".".join(parts[:i]))
        if obj is None:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr, None)
            if obj is None:
                return None
        return obj
    return None
