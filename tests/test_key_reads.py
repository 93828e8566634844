"""A ceiling on string-key reads outside the evaluator (`x["literal"]` and `x.get("literal")`, counted with `ast`
as issue 57 counts them): the records the layers hand each other are typed (kscience/record/, the campaign's
report rows), so a read by key is a dict at a process, database or JSON boundary, or a shape nobody typed yet.
The ceiling only comes down: a change that lowers the count lowers CEILING with it."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "kscience"
CEILING = 209


def is_key_read(node: ast.AST) -> bool:
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
            and bool(node.args) and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str))


def key_reads() -> dict[str, int]:
    """Per module outside kscience/evaluate/, its string-key reads."""
    counts = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] == "evaluate":
            continue
        counts[str(path.relative_to(PACKAGE))] = sum(map(is_key_read, ast.walk(ast.parse(path.read_text()))))
    return counts


def test_string_key_reads_outside_the_evaluator_stay_under_the_ceiling():
    counts = key_reads()
    worst = ", ".join(f"{name} {n}" for name, n in sorted(counts.items(), key=lambda kv: -kv[1])[:5])
    assert sum(counts.values()) <= CEILING, f"{sum(counts.values())} string-key reads (most in: {worst})"


def test_the_counter_counts_both_forms_and_nothing_else():
    tree = ast.parse('row["id"]; row.get("name"); row[0]; row[key]; row.get(key); getattr(row, "id")')
    assert sum(map(is_key_read, ast.walk(tree))) == 2
