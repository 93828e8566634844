"""Structural moves of the offline scientist: rewrites it offers only where it recognises the pattern.

Each builder takes the parsed base source and the problem's shapes and returns zero or one Move.
They stay deliberately small (a split-K or persistent rewrite is beyond what can be synthesised
honestly from text patterns); each is correct on every shape or is not offered.
"""

from __future__ import annotations

import ast
import re

from kscience.scientist.offline.kernel_source import Move, Source

HINT = 16  # contiguity/alignment promised by tl.multiple_of hints: 16 elements, a 16-byte fp8 vector


def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


def _fn_lines(src: Source, fn: ast.FunctionDef) -> range:
    return range(fn.body[0].lineno - 1, fn.end_lineno)


def _find(src: Source, fn: ast.FunctionDef, pattern: str) -> tuple[int, re.Match] | None:
    regex = re.compile(pattern)
    for i in _fn_lines(src, fn):
        m = regex.match(src.lines[i])
        if m:
            return i, m
    return None


def _row_kernel(src: Source, plain: bool):
    """(kernel, line index, row variable, launch) for a kernel that takes its row from program id 0 and
    is launched on a one-dimensional grid, else None. `plain` asks for the one-row-per-program form:
    `row = tl.program_id(0)` as a top-level statement and a grid of `(M,)`."""
    pattern = (r"^\s*(\w*row\w*)\s*=\s*tl\.program_id\((?:axis\s*=\s*)?0\)\s*(#.*)?$" if plain
               else r"^\s*(\w*row\w*)\s*=.*\btl\.program_id\((?:axis\s*=\s*)?0\)")
    for fn in src.jit_functions():
        hit, calls = _find(src, fn, pattern), src.launches(fn.name)
        if hit is None or len(calls) != 1:
            continue
        grid = calls[0].func.slice
        if not (isinstance(grid, ast.Tuple) and len(grid.elts) == 1):
            continue
        top_level = _indent(src.lines[hit[0]]) == _indent(src.lines[fn.body[0].lineno - 1])
        if plain and not (top_level and isinstance(grid.elts[0], ast.Name)):
            continue
        return fn, hit[0], hit[1].group(1), calls[0]
    return None


def _fn(src: Source, name: str) -> ast.FunctionDef:
    return next(f for f in src.jit_functions() if f.name == name)


def rows_per_program(src: Source, shapes: list[dict]) -> list[Move]:
    found = _row_kernel(src, plain=True)
    if found is None or "ROWS_PER_PROGRAM" in src.text or "import triton\n" not in src.text + "\n":
        return []
    fn, i, row, call = found
    grid = call.func.slice.elts[0].id
    fn_text = "\n".join(src.lines[fn.lineno - 1:fn.end_lineno])
    if re.search(r"\b(sub_row|n_rows)\b", fn_text) or any(isinstance(n, ast.Return) for n in ast.walk(fn)):
        return []
    ind = _indent(src.lines[i])
    body = [("    " + line) if line.strip() else line for line in src.lines[i + 1:fn.end_lineno]]
    text = src.replace_lines(i, fn.end_lineno - 1, [
        f"{ind}for sub_row in tl.static_range(ROWS_PER_PROGRAM):",
        f"{ind}    # Rows past the end repeat the last row: the same values are written again, so no mask.",
        f"{ind}    {row} = tl.minimum(tl.program_id(0) * ROWS_PER_PROGRAM + sub_row, n_rows - 1)",
    ] + body)
    step = Source(text)
    text = step.add_launch_keywords(step.launches(fn.name)[0], f"n_rows={grid}, ROWS_PER_PROGRAM=ROWS_PER_PROGRAM")
    if text is None:
        return []
    step = Source(text)
    text = step.replace_node(step.launches(fn.name)[0].func.slice.elts[0], f"triton.cdiv({grid}, ROWS_PER_PROGRAM)")
    step = Source(text)
    text = step.add_params(_fn(step, fn.name), [
        "n_rows,  # rows of the input: a program's rows past the end clamp to the last one",
        "ROWS_PER_PROGRAM: tl.constexpr,  # rows one program handles, unrolled",
    ])
    if text is None:
        return []
    text = Source(text).add_module_constant("ROWS_PER_PROGRAM = 4  # rows per program: more loads in flight")
    return [Move(
        "Four rows per program", "A row kernel's program moves one row and ends, which leaves little memory "
        "traffic in flight to hide latency on short rows. Unrolling ROWS_PER_PROGRAM = 4 rows per program "
        "(tl.static_range) keeps four independent row loads in flight and launches a quarter of the programs "
        "(triton note: program shape; memory-bound kernels live on outstanding loads).",
        ["add the knob ROWS_PER_PROGRAM = 4",
         f"wrap the body after `{row} = tl.program_id(0)` in `for sub_row in tl.static_range(ROWS_PER_PROGRAM)`, "
         f"with {row} = min(program_id * ROWS_PER_PROGRAM + sub_row, n_rows - 1)",
         "add the parameters `n_rows` and `ROWS_PER_PROGRAM: tl.constexpr`",
         f"launch triton.cdiv({grid}, ROWS_PER_PROGRAM) programs and pass n_rows={grid}"],
        -3, 12, 6, text)]


def warps_from_row_length(src: Source, shapes: list[dict]) -> list[Move]:
    found = _row_kernel(src, plain=False)
    if found is None or "ELEMENTS_PER_THREAD" in src.text:
        return []
    call = found[3]
    warps = next((k for k in call.keywords if k.arg == "num_warps"), None)
    block = next((k for k in call.keywords if isinstance(k.value, ast.Call)
                  and src.segment(k.value.func) == "triton.next_power_of_2"), None)
    if warps is None or block is None or not isinstance(warps.value, ast.Name):
        return []
    knob = warps.value.id
    uses = [n for n in ast.walk(src.tree) if isinstance(n, ast.Name) and n.id == knob and isinstance(n.ctx, ast.Load)]
    assign = next((n for n in src.tree.body if isinstance(n, ast.Assign) and len(n.targets) == 1
                   and isinstance(n.targets[0], ast.Name) and n.targets[0].id == knob), None)
    if len(uses) != 1 or assign is None:
        return []
    launch_line = src.lines[call.lineno - 1]
    if not launch_line.lstrip().startswith(src.segment(call.func)) or any(
            isinstance(n, ast.Name) and n.id == "warps" for n in ast.walk(src.tree)):
        return []  # the launch must open its own statement, where the warp count can be computed first
    renamed = Source(src.replace_node(warps.value, "warps"))  # same lines: `num_warps=` may be on the launch's first
    text = renamed.replace_lines(call.lineno - 1, call.lineno - 1, [
        f"{_indent(launch_line)}warps = max(1, min(16, {src.segment(block.value)} // (32 * ELEMENTS_PER_THREAD)))",
        renamed.lines[call.lineno - 1]])
    text = Source(text).replace_lines(assign.lineno - 1, assign.lineno - 1, [
        "ELEMENTS_PER_THREAD = 8  # row elements per thread: num_warps follows the row length"])
    return [Move(
        "Warps from row length", f"One {knob} for every row length is wrong at both ends: short rows leave "
        "most threads idle and long rows give each thread dozens of elements. Choosing num_warps so each "
        "thread handles about 8 elements, as Triton tutorial 02 scales warps with the row, fits both "
        "(triton note: 8-16 elements per thread).",
        [f"replace the knob {knob} with ELEMENTS_PER_THREAD = 8",
         f"launch with num_warps = clamp({src.segment(block.value)} // (32 * ELEMENTS_PER_THREAD), 1, 16)"],
        -4, 15, 5, text)]


def cache_hints(src: Source, shapes: list[dict]) -> list[Move]:
    found = _row_kernel(src, plain=False)
    if found is None:
        return []
    fn, _, row = found[:3]
    loads = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr == "load" and src.segment(n.func.value) == "tl" and n.args
             and not any(k.arg == "eviction_policy" for k in n.keywords)]
    policy = {id(n): "evict_first" if re.search(rf"\b{row}\b", src.segment(n.args[0])) else "evict_last"
              for n in loads}
    if "evict_first" not in policy.values():
        return []
    text = src.text
    for n in sorted(loads, key=lambda n: (n.end_lineno, n.end_col_offset), reverse=True):
        at = src.offset(n.end_lineno, n.end_col_offset) - 1  # the closing parenthesis
        text = text[:at] + f', eviction_policy="{policy[id(n)]}"' + text[at:]
    reused = " and evict_last on loads shared by every row, which should stay cached" \
        if "evict_last" in policy.values() else ""
    return [Move(
        "Cache hints for streamed rows", "Each row is read exactly once, so its loads can tell the cache to "
        f"drop it first (evict_first){reused}; the triton note lists eviction_policy for streamed versus "
        "reused data, to be measured.",
        [f"add eviction_policy=\"{p}\" to the tl.load of `{src.segment(n.args[0])}`" for n in loads
         for p in [policy[id(n)]]], -2, 6, 4, text)]


def combined_scale(src: Source, shapes: list[dict]) -> list[Move]:
    """Block-scaled GEMM: one B scale per tile and K block, combined with A's scale once per row."""
    for fn in src.jit_functions():
        ptr = _find(src, fn, r"^(\s*)(\w+) = (\w+) \+ \((\w+) // (\w+)\) \* (\w+)\s*(#.*)?$")
        if ptr is None:
            continue
        i, m = ptr
        ind, ptrs, base, cols, depth, stride = m.groups()[:6]
        wrap = _find(src, fn, rf"^\s*{cols}\s*=\s*(\w+)\s*%\s*\w+\s*(#.*)?$")
        offs = wrap[1].group(1) if wrap else cols
        start = _find(src, fn, rf"^\s*{offs}\s*=\s*(\w+)\s*\*\s*(\w+)\s*\+\s*tl\.arange\(0,\s*\2\)")
        load = _find(src, fn, rf"^(\s*)(\w+)\s*=\s*tl\.load\({ptrs}\b[^#]*?(#.*)?$")
        if start is None or load is None:
            continue
        pid, tile = start[1].groups()
        scale = load[1].group(2)
        acc = _find(src, fn, rf"^(\s*)(\w+) \+= (\w+) \* (\w+)\[:, None\] \* {scale}\[None, :\]\s*(#.*)?$")
        width, block = src.constant(tile), src.constant(depth)
        if acc is None or width is None or block is None or width > block or block % width:
            continue
        lines = list(src.lines)
        a_ind, total, partial, a_scale = acc[1].groups()[:4]
        lines[acc[0]] = (f"{a_ind}{total} += {partial} * ({a_scale} * {scale})[:, None]"
                         "  # scales combined once per row: one FMA per element")
        if load[1].group(3):
            lines[load[0]] = lines[load[0]].partition("#")[0].rstrip() + "  # fp32 scalar"
        first = i
        while first > 0 and lines[first - 1].strip().startswith("#"):  # comments about the per-column lookup
            first -= 1
        lines[first:i + 1] = [
            f"{ind}# A tile of {tile} <= {depth} columns that starts at a multiple of {tile} lies inside one",
            f"{ind}# scale block, so its B scale is a single value per K block.",
            f'{ind}tl.static_assert({tile} <= {depth}, "a tile must lie inside one scale block")',
            f"{ind}{ptrs} = {base} + ({pid} * {tile} // {depth}) * {stride}"]
        return [Move(
            "One B scale per tile, combined per row",
            f"With {tile}={width} <= {depth}, every tile lies inside one B scale block, so B's scale is one "
            "scalar per K block instead of a gathered vector, and multiplying it into A's row scales first "
            "turns two vector multiplies per accumulator element into one FMA (fp8 note: core loop step 3; "
            "the scale epilogue runs on the slow vector units).",
            [f"load B's scale through the scalar pointer {base} + ({pid} * {tile} // {depth}) * {stride}",
             f"guard the assumption with tl.static_assert({tile} <= {depth})",
             f"accumulate {partial} * ({a_scale} * {scale})[:, None]"],
            2, 12, 6, "\n".join(lines))]
    return []


def contiguity_hints(src: Source, shapes: list[dict]) -> list[Move]:
    """Wrapped offsets (`offs_m % M`) are contiguous in aligned runs of 16 when every shape's M is a
    multiple of 16; saying so lets the compiler vectorise loads along that dimension again."""
    if not shapes:
        return []
    regex = re.compile(r"^(\s*)(\w+)\s*=\s*(offs\w*)\s*%\s*([A-Za-z]\w*)\s*(#.*)?$")
    lines, hinted = list(src.lines), []
    for fn in src.jit_functions():
        for i in _fn_lines(src, fn):
            m = regex.match(lines[i])
            if not m:
                continue
            ind, var, offs, dim = m.groups()[:4]
            if all(isinstance(s.get(dim.lower()), int) and s[dim.lower()] % HINT == 0 for s in shapes):
                lines[i] = (f"{ind}{var} = tl.max_contiguous(tl.multiple_of({offs} % {dim}, {HINT}), {HINT})"
                            f"  # {dim} % {HINT} == 0 on every shape")
                hinted.append((var, dim))
    if not hinted:
        return []
    names = ", ".join(v for v, _ in hinted)
    dims = ", ".join(sorted({d for _, d in hinted}))
    return [Move(
        f"Contiguity hints on {names}",
        f"Wrapping offsets with `%` hides from the compiler that they run contiguously, so loads along that "
        f"dimension shrink from 16-byte vectors to single elements. Every problem shape has {dims} divisible "
        f"by {HINT}, so wrapped runs of {HINT} stay contiguous and aligned, and tl.max_contiguous(tl.multiple_of"
        f"(..., {HINT}), {HINT}) restores vector loads (triton note on hints; fp8 note: its operands are "
        "contiguous along M and N).",
        [f"wrap `{v}` in tl.max_contiguous(tl.multiple_of(..., {HINT}), {HINT})" for v, _ in hinted],
        0, 25, 5, "\n".join(lines))]


def grouped_order(src: Source, shapes: list[dict]) -> list[Move]:
    """Row-major tile order (`pid_m = pid // n`, `pid_n = pid % n`) to Triton tutorial 03's grouped order."""
    if "GROUP_M" in src.text:
        return []
    for fn in src.jit_functions():
        first = _find(src, fn, r"^(\s*)(\w+)\s*=\s*(\w+)\s*//\s*(\w+)\s*(#.*)?$")
        if first is None:
            continue
        i, m = first
        ind, pid_m, pid, n_cols = m.groups()[:4]
        second = _find(src, fn, rf"^\s*(\w+)\s*=\s*{pid}\s*%\s*{n_cols}\s*(#.*)?$")
        params = {a.arg for a in fn.args.args}
        fn_text = "\n".join(src.lines[fn.lineno - 1:fn.end_lineno])
        if second is None or second[0] != i + 1 or re.search(r"\b(num_pid_in_group|first_pid_m|group_size_m)\b",
                                                             fn_text):
            continue
        rows = [] if re.search(r"\bnum_pid_m\b", fn_text) else [f"{ind}num_pid_m = tl.cdiv(M, BLOCK_M)"]
        if rows and not {"M", "BLOCK_M"} <= params:
            continue
        pid_n = second[1].group(1)
        text = src.replace_lines(i, i + 1, [
            f"{ind}# Grouped order (Triton tutorial 03): GROUP_M row tiles in turn share B's column panels in L2.",
            *rows,
            f"{ind}num_pid_in_group = GROUP_M * {n_cols}",
            f"{ind}first_pid_m = ({pid} // num_pid_in_group) * GROUP_M",
            f"{ind}group_size_m = min(num_pid_m - first_pid_m, GROUP_M)",
            f"{ind}{pid_m} = first_pid_m + (({pid} % num_pid_in_group) % group_size_m)",
            f"{ind}{pid_n} = ({pid} % num_pid_in_group) // group_size_m"])
        step = Source(text)
        text = step.add_params(_fn(step, fn.name), ["GROUP_M: tl.constexpr,  # row tiles walked together"])
        step = Source(text) if text else None
        calls = step.launches(fn.name) if step else []
        if len(calls) != 1:
            continue
        text = step.add_launch_keywords(calls[0], "GROUP_M=GROUP_M")
        if text is None:
            continue
        text = Source(text).add_module_constant("GROUP_M = 8  # row tiles per launch group, for L2 reuse")
        return [Move(
            "Grouped tile order", "Row-major launch order walks a whole row of output tiles, re-reading all of B "
            "for every row; grouping GROUP_M = 8 row tiles lets consecutive programs share B's column panels "
            "while they are still in L2 (Triton tutorial 03, about 10% on large matmuls; triton note).",
            ["add the knob GROUP_M = 8 and pass it as a constexpr",
             f"map {pid} to ({pid_m}, {pid_n}) through groups of GROUP_M row tiles"], 0, 10, 4, text)]
    return []


def fused_accumulate(src: Source, shapes: list[dict]) -> list[Move]:
    """`acc += tl.dot(a, b)` to `acc = tl.dot(a, b, acc)`: the add happens inside the MMA."""
    regex = re.compile(r"^(\s*)(\w+)\s*\+=\s*tl\.dot\(([^(),]+),\s*([^(),]+)\)\s*(#.*)?$")
    lines, changed = list(src.lines), []
    for fn in src.jit_functions():
        for i in _fn_lines(src, fn):
            m = regex.match(lines[i])
            if m:
                ind, acc, a, b, comment = m.groups()
                lines[i] = f"{ind}{acc} = tl.dot({a.strip()}, {b.strip()}, {acc})" + (f"  {comment}" if comment else "")
                changed.append(acc)
    if not changed:
        return []
    return [Move(
        "Accumulate inside tl.dot", "`acc += tl.dot(a, b)` materialises the product and adds it in a second "
        "pass over the registers; `acc = tl.dot(a, b, acc)` fuses the add into the MMA (triton note on tl.dot).",
        [f"rewrite `{acc} += tl.dot(a, b)` as `{acc} = tl.dot(a, b, {acc})`" for acc in changed], 0, 4, 3,
        "\n".join(lines))]


STRUCTURAL_MOVES = (rows_per_program, warps_from_row_length, cache_hints, combined_scale, contiguity_hints,
                    grouped_order, fused_accumulate)
