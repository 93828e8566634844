"""A Triton kernel file as the offline scientist reads and rewrites it: text, lines and syntax tree,
with the few questions its moves ask (which functions are jitted, where a kernel is launched, what
a constant is worth) and text edits that keep everything outside the edited span byte for byte.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass


@dataclass
class Move:
    """One experiment the offline scientist can carry out: a checked rewrite of the base source."""

    title: str
    rationale: str
    changes: list[str]
    predicted_min_pct: float
    predicted_max_pct: float
    innovation: int
    new_source: str


class Source:
    def __init__(self, text: str):
        self.text = text
        self.lines = text.split("\n")
        self.tree = ast.parse(text)  # SyntaxError for a source that is not Python

    def jit_functions(self) -> list[ast.FunctionDef]:
        """Functions decorated with `triton.jit` / `jit` (called or not)."""
        def is_jit(d: ast.expr) -> bool:
            d = d.func if isinstance(d, ast.Call) else d
            return (isinstance(d, ast.Attribute) and d.attr == "jit") or (isinstance(d, ast.Name) and d.id == "jit")

        return [n for n in ast.walk(self.tree) if isinstance(n, ast.FunctionDef) and any(map(is_jit, n.decorator_list))]

    def launches(self, kernel: str) -> list[ast.Call]:
        """Calls of the form `kernel[grid](...)`."""
        return [n for n in ast.walk(self.tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)
                and isinstance(n.func.value, ast.Name) and n.func.value.id == kernel]

    def has_loop(self) -> bool:
        return any(isinstance(n, (ast.For, ast.While)) for fn in self.jit_functions() for n in ast.walk(fn))

    def module_ints(self) -> dict[str, int]:
        return {n.targets[0].id: n.value.value for n in self.tree.body
                if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                and isinstance(n.value, ast.Constant) and type(n.value.value) is int}

    def constant(self, name: str) -> int | None:
        """An integer `name` stands for: a module constant, or a kernel parameter that every launch
        passes as the same constant (`BLOCK_K=SCALE_BLOCK`)."""
        ints = self.module_ints()
        if name in ints:
            return ints[name]
        values = set()
        for fn in self.jit_functions():
            for call in self.launches(fn.name):
                for kw in call.keywords:
                    if kw.arg == name:
                        if isinstance(kw.value, ast.Constant) and type(kw.value.value) is int:
                            values.add(kw.value.value)
                        elif isinstance(kw.value, ast.Name) and kw.value.id in ints:
                            values.add(ints[kw.value.id])
                        else:
                            return None
        return values.pop() if len(values) == 1 else None

    def segment(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.text, node) or ""

    def offset(self, lineno: int, col: int) -> int:
        """Character offset of an ast position (1-based line, UTF-8 byte column)."""
        before = sum(len(line) + 1 for line in self.lines[:lineno - 1])
        return before + len(self.lines[lineno - 1].encode()[:col].decode(errors="ignore"))

    def replace_node(self, node: ast.AST, text: str) -> str:
        start = self.offset(node.lineno, node.col_offset)
        end = self.offset(node.end_lineno, node.end_col_offset)
        return self.text[:start] + text + self.text[end:]

    def insert(self, lineno: int, col: int, text: str) -> str:
        at = self.offset(lineno, col)
        return self.text[:at] + text + self.text[at:]

    def replace_lines(self, first: int, last: int, new_lines: list[str]) -> str:
        """Lines first..last (0-based, inclusive) replaced by `new_lines`."""
        return "\n".join(self.lines[:first] + new_lines + self.lines[last + 1:])

    def add_params(self, fn: ast.FunctionDef, params: list[str]) -> str | None:
        """The source with parameter lines appended to `fn`'s signature, or None when the signature is
        not the one-parameter-per-line form with its closing `):` on a line of its own."""
        close = next((i for i in range(fn.body[0].lineno - 2, fn.lineno - 2, -1)
                      if self.lines[i].strip().startswith("):")), None)
        if close is None or not fn.args.args:
            return None
        last = fn.args.args[-1].end_lineno - 1
        code, hash_, comment = self.lines[last].partition("#")
        lines = list(self.lines)
        if not code.rstrip().endswith(","):
            lines[last] = code.rstrip() + "," + (f"  #{comment}" if hash_ else "")
        indent = self.lines[last][:len(self.lines[last]) - len(self.lines[last].lstrip())]
        return "\n".join(lines[:close] + [indent + p for p in params] + lines[close:])

    def add_launch_keywords(self, call: ast.Call, text: str) -> str | None:
        """`text` (e.g. "GROUP_M=GROUP_M") inserted before the launch's `num_warps=` or its first keyword."""
        if not call.keywords:
            return None
        kw = next((k for k in call.keywords if k.arg == "num_warps"), call.keywords[0])
        return self.insert(kw.lineno, kw.col_offset, f"{text}, ")

    def add_module_constant(self, line: str) -> str:
        """`line` placed after the last module-level integer constant (or after the imports)."""
        anchors = [n for n in self.tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)]
        anchors = anchors or [n for n in self.tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        after = anchors[-1].end_lineno if anchors else 0
        return "\n".join(self.lines[:after] + [line] + self.lines[after:])
