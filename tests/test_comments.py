"""Comments and docstrings say why the code is as it is; the dated incidents behind a rule are told in
docs/ (docs/evaluation.md, "Why the evaluator is as it is") and in git, never in the source."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "kscience"

# A calendar date standing alone (not part of a model name such as "gpt-4o-2024-08-06").
DATE = re.compile(r"(?<![\w-])20\d\d-\d\d-\d\d(?![\w-])")
ISSUE = re.compile(r"\bissue #?\d+", re.IGNORECASE)


def prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring in `path`."""
    source = path.read_text()
    found = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                found.append((node.body[0].lineno, doc))
    return found


def test_no_comment_or_docstring_narrates_a_dated_incident_or_an_issue():
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for line, text in prose(path):
            for pattern in (DATE, ISSUE):
                hit = pattern.search(text)
                if hit:
                    offenders.append(f"kscience/{rel}:{line}: {hit.group(0)}")
    assert not offenders, "history belongs in docs/ and git, not in comments:\n" + "\n".join(offenders)


def test_the_date_pattern_tells_an_incident_from_a_model_name():
    assert DATE.search("on an H100 (2026-11-25) every region waited")
    assert not DATE.search('bill like the model they pin: "gpt-4o-2024-08-06"')
