"""The package's import graph: no cycles, no function-local imports of kscience modules except
where an optional dependency (or the worker's import order) needs one, the layers in one direction,
and the evaluator's trust sides apart (the worker loads nothing of the judge's side, and the reverse).

The graph is read from the source with `ast`, function-local imports and those behind `if TYPE_CHECKING:`
included, because a cycle through a lazy or an annotation-only import is still two modules that cannot
be understood (or moved) apart. Importing
`a.b.c` also runs `a/__init__` and `a/b/__init__`, so an edge to a module is also an edge to its
packages, except those the importer itself lives in (they are loaded before it runs).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "kscience"

# (importer, imported): function-local on purpose, and why.
LAZY_ALLOWED = {
    ("kscience", "kscience.jupyter.magics"): "IPython (the jupyter extra), loaded by %load_ext only",
    ("kscience", "kscience.jupyter.results"): "kscience.open_run: the notebook side, loaded when asked",
    ("kscience.cli", "kscience.cli.main"): "the command's signal handlers are in place before it loads",
    ("kscience.cli.browse_commands", "kscience.jupyter.export"): "matplotlib (the jupyter extra), only to draw a page",
    ("kscience.jupyter.views", "kscience.jupyter.dashboard"): "ipywidgets, only where widgets render",
    ("kscience.jupyter.results", "kscience.jupyter.plots"): "matplotlib, only when a run is drawn",
    ("kscience.jupyter.results", "kscience.jupyter.static"): "matplotlib, only when a run is drawn",
    ("kscience.evaluate.executors.slot", "kscience.evaluate.judge.evaluation"):
        "the judge (and torch), loaded in the slot's own process",
    ("kscience.evaluate.executors.ray_cluster", "kscience.evaluate.judge.evaluation"): "runs inside the Ray actor",
    ("kscience.evaluate.executors.ray_cluster", "kscience.evaluate.sandbox.spares"): "runs inside the Ray actor",
    # The worker forks a reaper first and confines itself before loading what runs the candidate.
    **{("kscience.evaluate.worker.__main__", f"kscience.evaluate.{m}"): "worker import order"
       for m in ("clocks", "worker.confine", "worker.harness", "worker.integrity", "kernel_times", "library_rule",
                 "lifeline", "shared_buffer", "staging", "proctree", "worker.timing", "wire")},
    ("kscience.evaluate.worker.harness", "kscience.device"): "worker import order",
    ("kscience.evaluate.worker.harness", "kscience.problems"): "worker import order",
}


def module_files() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def imports(modules: dict[str, Path]) -> list[tuple[str, str, bool, int]]:
    """(importer, imported module, inside a function, line) for every import of a kscience module."""
    found = []
    for name, path in modules.items():
        is_package = path.name == "__init__.py"

        def visit(node, local: bool) -> None:
            for child in ast.iter_child_nodes(node):
                targets = []
                if isinstance(child, ast.Import):
                    targets = [a.name for a in child.names]
                elif isinstance(child, ast.ImportFrom):
                    base = child.module or ""
                    if child.level:  # relative: resolve against this module's package
                        package = name.split(".") if is_package else name.split(".")[:-1]
                        package = package[: len(package) - (child.level - 1)]
                        base = ".".join(package + ([base] if base else []))
                    targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in child.names]
                for target in targets:
                    if target in modules:
                        found.append((name, target, local, child.lineno))
                visit(child, local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

        visit(ast.parse(path.read_text(), str(path)), False)
    return found


def graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for importer, target, _, _ in imports(modules):
        own = set(_ancestors(importer)) | {importer}
        edges[importer] |= {t for t in (*_ancestors(target), target) if t not in own and t in modules}
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None (depth-first search, colouring nodes)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = dfs(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state:
            cycle = dfs(start)
            if cycle:
                return cycle
    return None


def test_the_package_has_no_import_cycles():
    cycle = find_cycle(graph(module_files()))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_an_import_behind_type_checking_closes_a_cycle(tmp_path):
    (tmp_path / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                   "    from kscience.b import B\n")
    (tmp_path / "b.py").write_text("from kscience.a import A\n")
    modules = {"kscience.a": tmp_path / "a.py", "kscience.b": tmp_path / "b.py"}
    assert find_cycle(graph(modules)) == ["kscience.a", "kscience.b", "kscience.a"]


def test_the_cycle_finder_finds_a_planted_cycle():
    edges = {"kscience.a": {"kscience.b"}, "kscience.b": {"kscience.c"}, "kscience.c": {"kscience.a"},
             "kscience.d": set()}
    assert find_cycle(edges) == ["kscience.a", "kscience.b", "kscience.c", "kscience.a"]
    assert find_cycle({"kscience.a": {"kscience.b"}, "kscience.b": set()}) is None


def test_kscience_modules_are_imported_at_the_top_unless_an_optional_dependency_needs_otherwise():
    lazy = [(importer, target, line) for importer, target, local, line in imports(module_files()) if local]
    unexpected = [f"{importer}:{line} imports {target}" for importer, target, line in lazy
                  if (importer, target) not in LAZY_ALLOWED]
    assert not unexpected, "function-local imports of kscience modules:\n" + "\n".join(unexpected)


# The layers, lowest first: a module may import its own layer and those below, never one above. The
# top-level modules are the package's face (`kscience`, `usage`) and two basics every layer shares
# (`device`: what this machine is; `redact`: no credential leaves a process).
LAYERS = (
    ("kscience.version", "kscience.device", "kscience.redact"),
    ("kscience.problems",),
    ("kscience.evaluate",),
    ("kscience.record",),
    ("kscience.scientist",),
    ("kscience.run",),
    ("kscience.campaigns",),
    ("kscience.cli", "kscience.jupyter", "kscience.usage"),
    ("kscience", "kscience.__main__"),
)


def layer_of(module: str) -> int:
    for rank, prefixes in enumerate(LAYERS):
        if any(module == p or (p != "kscience" and module.startswith(p + ".")) for p in prefixes):
            return rank
    raise AssertionError(f"{module} is in no layer: add it to LAYERS (or move it into a layer's package)")


def _stated_order(text: str) -> list[list[str]]:
    """The layers a text names in its "problems -> evaluate -> ..." line, each as its sorted folder names."""
    found = re.search(r"\bproblems(?: -> [a-z]+(?:/[a-z]+)*)+", text)
    assert found, "no 'problems -> ...' line"
    return [sorted(part.strip().split("/")) for part in found.group(0).split("->")]


def test_the_readme_the_package_and_the_map_state_the_layers_in_this_order():
    folders = [sorted(p.removeprefix("kscience.") for p in prefixes
                      if "." in p and (ROOT / p.removeprefix("kscience.")).is_dir()) for prefixes in LAYERS]
    expected = [names for names in folders if names]
    texts = {name: (ROOT.parent / name).read_text() for name in ("README.md", "kscience/__init__.py",
                                                               "docs/architecture.md")}
    for name, text in texts.items():
        assert _stated_order(text) == expected, name


def test_every_module_imports_only_its_own_layer_and_those_below():
    upward = [f"{importer}:{line} imports {target}" for importer, target, _, line in imports(module_files())
              if layer_of(target) > layer_of(importer)]
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def test_the_two_faces_do_not_borrow_from_each_other():
    """The magics call the command line only through its entry point, `kscience.cli.main.main`; the command
    line takes the notebook's pages and figures only through `kscience.jupyter.export`."""
    borrowed = [f"{importer} imports {target}" for importer, target, _, _ in imports(module_files())
                if importer.startswith("kscience.jupyter") and target.startswith("kscience.cli")
                and target != "kscience.cli.main"]
    borrowed += [f"{importer} imports {target}" for importer, target, _, _ in imports(module_files())
                 if importer.startswith("kscience.cli") and target.startswith("kscience.jupyter")
                 and target != "kscience.jupyter.export"]
    assert not borrowed, "\n".join(borrowed)


def test_the_store_and_the_evaluator_do_not_reach_into_each_other_or_the_screens():
    edges = graph(module_files())
    assert not {t for t in edges["kscience.record.store"] if t.startswith("kscience.evaluate")}
    for name, targets in edges.items():
        if name.startswith("kscience.evaluate"):
            bad = {t for t in targets if t.split(".")[1] in ("jupyter", "cli", "run", "record", "campaigns",
                                                             "scientist")}
            assert not bad, f"{name} imports {sorted(bad)}"


# The evaluator's two sides (kscience/evaluate/__init__.py). The worker process runs candidate code,
# so it loads nothing of the trusted side; the shared modules are loaded by both processes, so they
# import neither side; the trusted side runs no worker code, save the one import stated here.
EVALUATE = "kscience.evaluate"
SHARED = {f"{EVALUATE}.{m}" for m in ("clocks", "kernel_times", "library_rule", "lifeline", "proctree", "result",
                                      "shared_buffer", "staging", "wire")}
WORKER = f"{EVALUATE}.worker"
TRUSTED = tuple(f"{EVALUATE}.{p}" for p in ("executors", "judge", "profile", "sandbox"))
BELOW_THE_EVALUATOR = ("kscience.device", "kscience.problems")  # what a worker may load from outside it
TRUSTED_IMPORTS_OF_THE_WORKER = {
    ("kscience.evaluate.sandbox.workers", "kscience.evaluate.worker.confine"):
        "the sandbox reports the Landlock the worker will find (confine.landlock_abi) and hands it the paths "
        "it must not read under confine's own variable",
}


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def side_violations(edges) -> list[str]:
    """The (importer, imported) pairs among `edges` that cross the evaluator's sides the wrong way."""
    bad = []
    for importer, target in edges:
        if _within(importer, WORKER) or importer in SHARED:
            allowed = (target in SHARED or (_within(importer, WORKER) and _within(target, WORKER))
                       or any(_within(target, p) for p in BELOW_THE_EVALUATOR))
            if not allowed:
                bad.append(f"{importer} imports {target}")
        elif (any(_within(importer, p) for p in TRUSTED) and _within(target, WORKER)
              and (importer, target) not in TRUSTED_IMPORTS_OF_THE_WORKER):
            bad.append(f"{importer} imports {target}")
    return bad


def test_every_evaluator_module_is_on_one_side():
    """A new module is placed: in worker/, in a trusted subpackage, or declared shared here."""
    packages = {EVALUATE, WORKER, *TRUSTED}
    placed = [m for m in module_files() if _within(m, EVALUATE) and m not in packages]
    unplaced = [m for m in placed if m not in SHARED and not _within(m, WORKER)
                and not any(_within(m, p) for p in TRUSTED)]
    assert not unplaced, f"evaluator modules on no side: {unplaced}"


def test_the_evaluators_sides_import_only_what_they_may():
    edges = [(importer, target) for importer, target, _, _ in imports(module_files())]
    assert not side_violations(edges), "\n".join(side_violations(edges))
    used = {(importer, target) for importer, target in edges}
    assert set(TRUSTED_IMPORTS_OF_THE_WORKER) <= used, "a stated exception no module needs any more"


def test_the_side_rules_catch_each_kind_of_crossing():
    assert side_violations([("kscience.evaluate.worker.harness", "kscience.evaluate.judge.session")])
    assert side_violations([("kscience.evaluate.worker.timing", "kscience.redact")])
    assert side_violations([("kscience.evaluate.clocks", "kscience.evaluate.worker.harness")])
    assert side_violations([("kscience.evaluate.wire", "kscience.evaluate.sandbox.workers")])
    assert side_violations([("kscience.evaluate.judge.session", "kscience.evaluate.worker.harness")])
    assert side_violations([("kscience.evaluate.executors.slot", "kscience.evaluate.worker.harness")])
    assert not side_violations([("kscience.evaluate.worker.timing", "kscience.evaluate.clocks"),
                                ("kscience.evaluate.worker.harness", "kscience.problems.outputs"),
                                ("kscience.evaluate.judge.session", "kscience.evaluate.clocks"),
                                *TRUSTED_IMPORTS_OF_THE_WORKER])
