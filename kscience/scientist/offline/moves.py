"""The offline scientist's catalogue: optimisation moves it can carry out on a Triton kernel by itself.

A move is a concrete, checked rewrite of the source with a title, a rationale that cites the
knowledge notes, a predicted uplift range and an innovation score. Two families:

- knob moves: double or halve a tunable literal (BLOCK_*, GROUP_*, NUM_WARPS, ...), or step
  NUM_STAGES, within the rules the notes give: powers of two, tl.dot dimensions of at least 16,
  at most 128 fp32 accumulator values per thread, a tl.dot output tile of 64..256 a side whose
  pipelined operand tiles fit shared memory, and never a literal marked as fixed by the problem
  (the fp8 scale block); or take a knob's value from the reference kernel;
- structural moves, offered only where the source has the pattern they rewrite (several rows per
  program for row kernels, cache hints, contiguity hints, grouped launch order, one combined
  scale per row in the block-scaled fp8 GEMM, accumulating inside tl.dot).

Everything is derived from the source text, so the same base always yields the same moves.
"""

from __future__ import annotations

import ast
import builtins
import re
import symtable
from dataclasses import dataclass

from kscience.scientist.offline.kernel_source import Move, Source
from kscience.scientist.offline.structural import STRUCTURAL_MOVES

KNOB_NAME = re.compile(r"^(?:\w*BLOCK\w*|GROUP\w*|NUM_WARPS|NUM_STAGES|ROWS_PER_PROGRAM|ELEMENTS_PER_THREAD"
                       r"|SPLIT_K)$", re.IGNORECASE)
MAX_ACC_PER_THREAD = 128  # fp32 accumulator values per thread before spills loom (triton note: 255 cap)
THREADS_PER_WARP = 32  # NVIDIA; an AMD wave has 64, so this errs on the side of caution
# A tl.dot tile the notes call sensible. Its M and N sides stay within "typical GEMM tiles: 64-256
# in M/N" (triton note; the hopper note adds that BLOCK_M 16/32 falls back from wgmma to mma.sync),
# so neither side is ever more than 4x the other. The operand tiles of every pipeline stage,
# num_stages x (BLOCK_M + BLOCK_N) x BLOCK_K x bytes (triton and hopper notes), fit the shared memory
# one block may use on an H100, the largest any note gives (232,448 bytes; MI300 has 64 KB): a
# configuration over it cannot compile anywhere.
DOT_TILE_SIDES = (64, 256)
SHARED_MEMORY_BYTES = 232_448
OPERAND_BYTES = 2  # fp16/bf16 operands; 1 where the source speaks of fp8


@dataclass
class Knob:
    name: str  # as written: "BLOCK_M", "num_warps"
    value: int
    line: int  # 0-based
    kind: str  # "tile", "depth", "group", "warps", "stages", "count"
    fixed: bool  # marked as set by the problem: never moved


def _is_pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


def _kind(name: str) -> str:
    upper = name.upper()
    if "WARPS" in upper:
        return "warps"
    if "STAGES" in upper:
        return "stages"
    if upper.startswith("GROUP"):
        return "group"
    if "BLOCK" in upper:
        return "depth" if upper.endswith("K") else "tile"
    return "count"


def find_knobs(src: Source) -> list[Knob]:
    """Tunable integer literals: module-level `NAME = 8`, and launch keywords like `num_warps=4` that
    occur once outside jitted functions."""
    knobs = []
    for node in src.tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant) and type(node.value.value) is int
                and KNOB_NAME.match(node.targets[0].id)):
            name, line = node.targets[0].id, node.lineno - 1
            comment = src.lines[line].partition("#")[2].lower()
            fixed = "fixed" in comment or "scale" in name.lower()
            knobs.append(Knob(name, node.value.value, line, _kind(name), fixed))
    taken = {k.name.lower() for k in knobs}
    inside_jit = {id(n) for fn in src.jit_functions() for n in ast.walk(fn)}
    keywords: dict[str, list[ast.keyword]] = {}
    for node in ast.walk(src.tree):
        if isinstance(node, ast.keyword) and id(node) not in inside_jit and node.arg and KNOB_NAME.match(node.arg) \
                and isinstance(node.value, ast.Constant) and type(node.value.value) is int:
            keywords.setdefault(node.arg, []).append(node)
    for name, nodes in keywords.items():
        if len(nodes) == 1 and name.lower() not in taken:
            knobs.append(Knob(name, nodes[0].value.value, nodes[0].lineno - 1, _kind(name), False))
    return sorted(knobs, key=lambda k: k.line)


def set_knob(src: Source, knob: Knob, value: int) -> str:
    """The source with one knob's literal changed on its own line. A comment on that line that
    names the old value follows it; one with other numbers too (derived from it, perhaps) is
    dropped rather than left wrong."""
    code, sep, comment = src.lines[knob.line].partition("#")
    pattern = re.compile(rf"\b({re.escape(knob.name)}\s*=\s*){knob.value}\b")
    code = pattern.sub(lambda m: f"{m.group(1)}{value}", code, count=1)
    numbers = set(re.findall(r"\b\d+\b", comment))
    if numbers == {str(knob.value)}:
        comment = re.sub(rf"\b{knob.value}\b", str(value), comment)
    elif str(knob.value) in numbers:
        code, sep, comment = code.rstrip(), "", ""
    lines = list(src.lines)
    lines[knob.line] = code + sep + comment
    return "\n".join(lines)


def caps(src: Source) -> dict[str, int]:
    """Upper bounds the kernel asserts itself: `tl.static_assert(BLOCK_N <= BLOCK_K)` and the like."""
    caps = {}
    for name, bound in re.findall(r"tl\.static_assert\(\s*(\w+)\s*<=\s*(\w+)", src.text):
        value = int(bound) if bound.isdigit() else src.constant(bound)
        if value is not None:
            caps[name] = value
    return caps


def allowed(src: Source, knob: Knob, value: int, values: dict[str, int]) -> bool:
    """Whether `knob` may move to `value` (a different one) given the other knobs' `values` (by upper-case name)."""
    return value != knob.value and legal(src, knob, value, values)


def legal(src: Source, knob: Knob, value: int, values: dict[str, int]) -> bool:
    """Whether `knob` may hold `value` given the other knobs' `values` (by upper-case name): the rules of
    the knowledge notes and the kernel's own static asserts."""
    if knob.fixed:
        return value == knob.value
    if knob.kind == "stages":
        return 1 <= value <= 5 and src.has_loop()
    if not _is_pow2(value):
        return False
    upper = knob.name.upper()
    if value > caps(src).get(upper, value):
        return False
    if knob.kind == "warps":
        if not 1 <= value <= 16:
            return False
    elif knob.kind in ("tile", "depth"):
        uses_dot = "tl.dot(" in src.text
        if value < 16 or (uses_dot and value > 256) or value > 65536:
            return False
    elif knob.kind == "group" and not 1 <= value <= 32:
        return False
    elif knob.kind == "count" and not 1 <= value <= 64:
        return False
    trial = dict(values, **{upper: value})
    tile = trial.get("BLOCK_M", trial.get("BLOCK_SIZE_M")), trial.get("BLOCK_N", trial.get("BLOCK_SIZE_N"))
    if None in tile or "tl.dot(" not in src.text:
        return True
    accumulators = max(1, src.text.count("tl.zeros(("))  # one B operand tile per accumulator (SwiGLU: 2)
    warps = trial.get("NUM_WARPS")
    if warps and tile[0] * tile[1] * accumulators / (THREADS_PER_WARP * warps) > MAX_ACC_PER_THREAD:
        return False
    return _sensible_dot_tile(src, tile, trial, accumulators)


def _sensible_dot_tile(src: Source, tile: tuple[int, int], knobs: dict[str, int], accumulators: int) -> bool:
    """Whether a tl.dot output `tile` (BLOCK_M, BLOCK_N) and the depth and stages among `knobs` are
    what the notes recommend (see DOT_TILE_SIDES)."""
    low, high = DOT_TILE_SIDES
    if not all(low <= side <= high for side in tile):
        return False
    depth = next((v for name, v in knobs.items() if _kind(name) == "depth"), None)
    if depth is None:
        return True
    element_bytes = 1 if re.search(r"fp8|float8", src.text, re.IGNORECASE) else OPERAND_BYTES
    stages = knobs.get("NUM_STAGES", 1)  # without the knob, at least one stage is resident
    per_stage = (tile[0] + accumulators * tile[1]) * depth * element_bytes
    return stages * per_stage <= SHARED_MEMORY_BYTES


KNOB_NOTES = {  # (kind, direction) -> (rationale, predicted min %, predicted max %)
    ("tile", "up"): ("A larger tile reuses every loaded operand for more outputs, cutting global traffic per "
                     "FLOP; the triton note sizes GEMM tiles at 64-256 with the accumulator kept in registers.",
                     -8, 15),
    ("tile", "down"): ("A smaller tile launches more programs, which fills more SMs/CUs on the small shapes "
                       "(wave quantisation and grid sizing in the device notes) at the cost of operand reuse.",
                       -10, 12),
    ("depth", "up"): ("A deeper K step halves the loop trips and their overhead, at twice the shared memory "
                      "per pipeline stage (triton note on num_stages cost).", -6, 8),
    ("depth", "down"): ("A shallower K step halves shared memory per stage, leaving room for more stages or "
                        "programs per SM/CU (triton note on num_stages cost).", -8, 5),
    ("group", "up"): ("More row tiles per launch group share B column panels while they are in L2 (Triton "
                      "tutorial 03; the triton note suggests GROUP_M 4-16, measured).", -3, 5),
    ("group", "down"): ("Smaller launch groups spread consecutive programs over more of B, which can balance L2 "
                        "use on wide outputs (Triton tutorial 03 grouping; measure).", -4, 4),
    ("warps", "up"): ("More warps per program split the tile over more threads: fewer registers per thread "
                      "and more memory parallelism (triton note: 8 warps for 128x128 tiles).", -8, 10),
    ("warps", "down"): ("Fewer warps per program give each thread more work and let more programs share an "
                        "SM/CU (triton note: 4 warps for tiles up to about 64x128).", -8, 10),
    ("stages", "up"): ("One more pipeline stage prefetches another K slice ahead and hides more load latency "
                       "(hopper note: GEMMs like 3-5 stages), for more shared memory.", -4, 10),
    ("stages", "down"): ("One stage fewer frees shared memory and registers (cdna3 note: 2 stages suit a "
                         "single GEMM loop on MI300), at the cost of less prefetching.", -6, 6),
    ("count", "up"): ("Doubling this work-per-program knob keeps more independent work in flight in each "
                      "program and halves the launch count.", -5, 8),
    ("count", "down"): ("Halving this work-per-program knob spreads the work over more programs, which "
                        "helps when the grid is too small to fill the device.", -5, 6),
}


def knob_moves(src: Source) -> list[Move]:
    knobs = find_knobs(src)
    values = {k.name.upper(): k.value for k in knobs}
    moves = []
    for knob in knobs:
        steps = (knob.value + 1, knob.value - 1) if knob.kind == "stages" else (knob.value * 2, knob.value // 2)
        for value in steps:
            if not allowed(src, knob, value, values):
                continue
            direction = "up" if value > knob.value else "down"
            why, low, high = KNOB_NOTES[(knob.kind, direction)]
            moves.append(Move(f"{knob.name} {knob.value} -> {value}", why,
                              [f"change `{src.lines[knob.line].strip()}` so that {knob.name} is {value}"],
                              low, high, 2, set_knob(src, knob, value)))
    return moves


def crossover_moves(src: Source, reference: Source | None, reference_id: str) -> list[Move]:
    """Adopt one knob value from the reference kernel, which is better than the base somewhere."""
    if reference is None:
        return []
    theirs = {k.name.upper(): k.value for k in find_knobs(reference)}
    knobs = find_knobs(src)
    values = {k.name.upper(): k.value for k in knobs}
    moves = []
    for knob in knobs:
        value = theirs.get(knob.name.upper())
        if value is None or not allowed(src, knob, value, values):
            continue
        moves.append(Move(
            f"{knob.name} {knob.value} -> {value} (from {reference_id})",
            f"The reference {reference_id} runs with {knob.name}={value} and is faster than the base on some "
            f"shapes; taking its value isolates how much of that comes from this knob.",
            [f"change `{src.lines[knob.line].strip()}` so that {knob.name} is {value}, as in {reference_id}"],
            -4, 8, 3, set_knob(src, knob, value)))
    return moves


def undefined_names(source: str) -> set[str]:
    """Global names the functions of `source` read that the module never binds (nor the builtins): a
    rewrite that removed an assignment but kept a use. Empty for a module with a star import."""
    top = symtable.symtable(source, "<kernel>", "exec")
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    if "*" in bound or any(isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)
                           for n in ast.walk(ast.parse(source))):
        return set()
    missing, tables = set(), list(top.get_children())
    while tables:
        table = tables.pop()
        tables.extend(table.get_children())
        missing |= {s.get_name() for s in table.get_symbols() if s.is_global() and s.is_referenced()
                    and s.get_name() not in bound and not hasattr(builtins, s.get_name())}
    return missing


def catalogue(source: str, shapes: list[dict], reference: str | None = None,
              reference_id: str = "the reference") -> list[Move]:
    """Every move that applies to `source`, each producing a distinct source that still parses and defines
    every global name it reads (that `source` itself defines)."""
    try:
        src = Source(source)
    except SyntaxError:
        return []
    ref = None
    if reference:
        try:
            ref = Source(reference)
        except SyntaxError:
            ref = None
    found = [m for build in STRUCTURAL_MOVES for m in build(src, shapes)]
    found += crossover_moves(src, ref, reference_id) + knob_moves(src)
    moves, seen, unknown = [], {source.strip()}, undefined_names(source)
    for move in found:
        key = move.new_source.strip()
        if key in seen:
            continue
        try:
            if undefined_names(move.new_source) - unknown:
                continue
        except SyntaxError:
            continue
        seen.add(key)
        moves.append(move)
    return moves
