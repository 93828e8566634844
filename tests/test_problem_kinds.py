"""Problem kinds: the registry tells the formats apart, every loaded problem carries its kind, nothing
outside the kinds compares a problem's entry (or its locator) to tell a format, and a new format is one
`ProblemKind` subclass plus a registry line."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kscience.campaigns.campaign import overrides_for, problem_name, suite_locators
from kscience.problems import ProblemError, builtin, kinds, load_problem, loaded_here
from kscience.problems.fit import size_hint
from kscience.problems.kind import ProblemKind
from kscience.problems.kinds import KINDS, kind_for, kind_named

DATA = Path(__file__).parent / "data"
KERNELBENCH = DATA / "kernelbench_linear_relu.py"
GPUMODE = DATA / "gpumode" / "scaled_add"
PACKAGE = Path(__file__).resolve().parents[1] / "kscience"
# Where a format is described: its own module, the interface and the registry.
KIND_MODULES = {"problems/kind.py", "problems/kinds.py", "problems/builtin.py", "problems/kernelbench.py",
                "problems/gpumode.py"}


def test_each_locator_is_claimed_by_its_own_kind_and_the_problem_carries_it():
    for locator, name, entry in (("softmax", "builtin", "custom_kernel"), (str(KERNELBENCH), "kernelbench", "ModelNew"),
                                 (str(GPUMODE), "gpumode", "custom_kernel")):
        kind = kind_for(locator)
        assert kind.name == name and kind_named(name) is kind
        problem = load_problem(locator)
        assert problem.kind is kind and problem.entry == entry
        assert problem.summary()["kind"] == name and problem.summary()["entry"] == entry
    assert [k.name for k in KINDS] == ["builtin", "kernelbench", "gpumode"]


def test_what_each_kind_answers():
    kernelbench = kind_for(str(KERNELBENCH))
    assert kernelbench.builds_model and kernelbench.one_shape and not kernelbench.in_package
    assert kernelbench.call.startswith("ModelNew(*get_init_inputs())")
    assert set(kernelbench.settable(str(KERNELBENCH))) >= {"batch_size", "in_features"}
    assert builtin.KIND.in_package and not builtin.KIND.builds_model and builtin.KIND.settable("softmax") == {}
    assert kind_for(str(GPUMODE)).found(GPUMODE) and not kind_for(str(GPUMODE)).found(DATA)
    assert kernelbench.found(KERNELBENCH) and not kernelbench.found(DATA / "two_launch_softmax.py")
    assert kernelbench.files(KERNELBENCH) == [KERNELBENCH]
    travels = {p.name for p in kind_for(str(GPUMODE)).files(GPUMODE)}
    assert {"reference.py", "task.yml", "utils.py"} <= travels  # utils.py: a helper beside the folder and not any(n.endswith(".pyc") for n in travels)


def test_a_locator_no_kind_claims_gets_the_one_wording(tmp_path):
    with pytest.raises(ProblemError, match=r"no problem 'nothing\.txt': not a built-in \(.*softmax.*\), "
                                           r"a KernelBench \.py file or a folder"):
        kind_for("nothing.txt")
    with pytest.raises(ProblemError, match="no problem kind 'toml'"):
        kind_named("toml")


def test_campaigns_ask_the_kinds_for_names_settings_and_suites(tmp_path):
    assert problem_name("softmax") == "softmax" and problem_name(str(KERNELBENCH)) == KERNELBENCH.stem
    assert overrides_for(str(KERNELBENCH), {"batch_size": 4, "nope": 1}) == {"batch_size": 4}
    assert overrides_for("softmax", {"batch_size": 4}) == {}
    found = suite_locators(str(DATA))
    assert str(KERNELBENCH.resolve()) in found and str(DATA / "two_launch_softmax.py") not in found
    assert "(its sizes: " in size_hint(load_problem(str(KERNELBENCH), {"batch_size": 4}))
    assert size_hint(load_problem("softmax")) == ""


def test_no_module_outside_the_kinds_tells_a_format_by_its_entry_or_its_locator():
    """`entry == "ModelNew"`, `locator in builtin_names()` and the like: a kind's question asked the long way."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        where = path.relative_to(PACKAGE).as_posix()
        if where in KIND_MODULES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            parts = [node.left, *node.comparators]
            literal = any(isinstance(p, ast.Constant) and p.value in ("ModelNew", "custom_kernel") for p in parts)
            names = any(isinstance(p, ast.Call) and getattr(p.func, "id", getattr(p.func, "attr", ""))
                        == "builtin_names" for p in parts)
            if literal or names:
                found.append(f"{where}:{node.lineno}")
    assert not found, "formats told apart outside the kinds: " + ", ".join(found)


class _Toy(ProblemKind):
    """A format that names a built-in as `toy:NAME`: one class and a registry line is all it takes."""
    name, title, in_package = "toy", "a toy:NAME", True

    def claims(self, locator: str) -> bool:
        return locator.startswith("toy:")

    def load(self, locator: str, overrides: dict, probed: dict | None):
        problem = builtin.load_builtin(locator.removeprefix("toy:"), overrides)
        problem.kind, problem.name = self, locator
        return problem


def test_a_new_kind_is_a_class_and_a_registry_line(monkeypatch):
    monkeypatch.setattr(kinds, "KINDS", (*KINDS, _Toy()))
    before = loaded_here()
    problem = load_problem("toy:rmsnorm")
    assert problem.kind.name == "toy" and problem.name == "toy:rmsnorm" and problem.entry == "custom_kernel"
    assert loaded_here() == before  # its files travel with the package, as it says
    with pytest.raises(ProblemError, match="a KernelBench .py file, a folder or a toy:NAME"):
        kind_for("neither")
