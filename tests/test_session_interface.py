"""The judge's helpers reach the session only through the interfaces in `driving`: measure.py and
drive.py through `TimedSession`, checking.py through `CheckingSession`. Every member a module uses is
declared in its interface, everything declared is used, and `session.Session` provides each member with
the same signature. Read from the source, so a member used but undeclared fails here, not on a GPU.
"""

from __future__ import annotations

import ast
import inspect

import pytest

from kscience.evaluate.judge import checking, drive, measure
from kscience.evaluate.judge.driving import CheckingSession, TimedSession
from kscience.evaluate.judge.session import Session

INTERFACES = [(TimedSession, (measure, drive)), (CheckingSession, (checking,))]
BY_NAME = pytest.mark.parametrize("interface, modules", INTERFACES, ids=[i.__name__ for i, _ in INTERFACES])


def _declared(interface) -> tuple[set[str], set[str]]:
    """(data members, methods) of the Protocol."""
    methods = {n for n, v in vars(interface).items() if inspect.isfunction(v) and not n.startswith("__")}
    return set(interface.__annotations__), methods


def _used_in(source: str) -> set[str]:
    """Every `session.X` the source reads or calls."""
    tree = ast.parse(source)
    return {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "session"}


def _assigned_in_init(cls) -> set[str]:
    tree = ast.parse(inspect.getsource(cls))
    init = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    return {t.attr for node in ast.walk(init) if isinstance(node, (ast.Assign, ast.AnnAssign))
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            for t in ast.walk(target) if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
            and t.value.id == "self"}


@BY_NAME
def test_the_interface_lists_exactly_what_its_modules_use(interface, modules):
    data, methods = _declared(interface)
    used = set().union(*(_used_in(inspect.getsource(module)) for module in modules))
    assert used == data | methods, (f"used, not declared: {sorted(used - data - methods)}; "
                                    f"declared, not used: {sorted((data | methods) - used)}")


@BY_NAME
def test_the_modules_take_the_typed_interface_wherever_they_take_a_session(interface, modules):
    untyped = [f"{module.__name__}.{name}" for module in modules for name, fn in vars(module).items()
               if inspect.isfunction(fn) and fn.__module__ == module.__name__
               and "session" in inspect.signature(fn).parameters
               and inspect.signature(fn).parameters["session"].annotation != interface.__name__]
    assert not untyped, untyped


@BY_NAME
def test_session_provides_every_member_with_the_same_signature(interface, modules):
    data, methods = _declared(interface)
    assert data <= _assigned_in_init(Session), sorted(data - _assigned_in_init(Session))
    for name in methods:
        ours, theirs = inspect.signature(getattr(Session, name)), inspect.signature(getattr(interface, name))
        shape = [(p.name, p.kind, p.default) for p in ours.parameters.values()]
        assert shape == [(p.name, p.kind, p.default) for p in theirs.parameters.values()], name


def test_the_checks_see_a_member_used_but_not_declared():
    used = _used_in("def f(session):\n    return session.seq + session.device.l2_bytes\n")
    data, methods = _declared(TimedSession)
    assert used - data - methods == {"seq"}
    assert "seq" in _assigned_in_init(Session)  # a Session member, yet not part of the interface
