"""Every offline move on every built-in seed (and on each of those moves' kernels once more) gives a
kernel that imports and whose every global name is defined: a move that removes a knob's assignment
must remove each use of it too. Each seed is also tried as `ast.unparse` writes it, every call on one
line, as a user's own seed kernel may be written."""

import ast
import builtins
import importlib.util
import symtable

import pytest

from kscience.problems import builtin_names, load_problem
from kscience.scientist.offline.moves import catalogue


def _shapes(problem) -> list[dict]:
    return problem.tests + problem.benchmarks + problem.cpu_tests + problem.cpu_benchmarks


def undefined_globals(source: str, namespace: dict) -> set[str]:
    """Global names a function of `source` reads that neither the module nor the builtins define."""
    missing, tables = set(), [symtable.symtable(source, "<kernel>", "exec")]
    while tables:
        table = tables.pop()
        tables.extend(table.get_children())
        if table.get_type() == "module":
            continue
        for sym in table.get_symbols():
            if sym.is_global() and sym.is_referenced() and sym.get_name() not in namespace \
                    and not hasattr(builtins, sym.get_name()):
                missing.add(sym.get_name())
    return missing


def load(source: str, path) -> dict:
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"kernel_{abs(hash(source))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return vars(module)


def moved_kernels(name: str, compact: bool) -> list[tuple[str, str]]:
    problem = load_problem(name)
    shapes = _shapes(problem)
    seed = ast.unparse(ast.parse(problem.seed_source)) if compact else problem.seed_source
    out = []
    for move in catalogue(seed, shapes):
        out.append((move.title, move.new_source))
        out += [(f"{move.title}, then {m.title}", m.new_source) for m in catalogue(move.new_source, shapes)]
    return out


@pytest.mark.parametrize("compact", [False, True], ids=["as-shipped", "one-line-calls"])
@pytest.mark.parametrize("name", builtin_names())
def test_every_offline_move_gives_a_kernel_that_loads(name, compact, tmp_path):
    kernels = moved_kernels(name, compact)
    assert kernels, f"no offline move applies to the seed of {name}"
    broken = {}
    for title, source in kernels:
        try:
            missing = undefined_globals(source, load(source, tmp_path / "kernel.py"))
        except Exception as exc:  # noqa: BLE001 - any failure to import is the defect reported
            missing = {f"{type(exc).__name__}: {exc}"}
        if missing:
            broken[title] = sorted(missing)
    assert broken == {}


def test_warps_from_row_length_rewrites_a_launch_written_on_one_line():
    compact = ast.unparse(ast.parse(load_problem("softmax").seed_source))
    (move,) = [m for m in catalogue(compact, []) if m.title == "Warps from row length"]
    assert "num_warps=warps" in move.new_source and "NUM_WARPS" not in move.new_source
