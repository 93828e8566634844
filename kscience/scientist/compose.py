"""Per-shape composition: keep every win when different correct kernels are fastest on different shapes.

From the per-shape times of a run's correct kernels, `plan` learns a small decision list over the
problem's shape sizes (size thresholds and divisibility, never exact shapes) that picks, for each
region of shapes, the kernel fastest there; `source` writes it as an ordinary candidate whose
`custom_kernel(data)` reads the sizes off `data` and calls that kernel. Every part keeps its own
module (its Triton kernels and globals cannot clash), loaded from its embedded source. A shape outside
every rule, including sizes beyond the range any part was timed on, goes to the overall best, so an
unseen shape still gets a kernel that passed every check; the composite is judged like any candidate.

Only `custom_kernel` problems are composed: a KernelBench `ModelNew` holds weights drawn when it is
built, and several parts built in one process would not draw the reference's weights.
"""

from __future__ import annotations

import ast
import keyword
import math
from dataclasses import dataclass, field

from kscience.problems.spec import Problem, geomean, shape_label
from kscience.record.candidate import BENCHMARK, Candidate

KIND = "composite"  # the stored kind of a composite candidate
NOT_PARTS = ("eager", "compiled", "vendor", "vendor_alone", "library", KIND)  # baselines are not kernels to dispatch to; no nesting
MIN_GAIN_PCT = 1.0  # a composite predicted to gain less than this over the best kernel is not worth judging
KEEP_FALLBACK_PCT = 0.5  # a region keeps the overall best unless another kernel is faster by more than this
MAX_DEPTH = 4  # at most 2**4 regions
DIVISORS = (16, 32, 64, 128, 256)
MARKER = "Composite kernel written by kscience"  # how a composite's source begins


def is_composite(source: str) -> bool:
    return source.startswith('"""' + MARKER)


@dataclass
class Rule:
    part: str  # candidate id
    conditions: list[tuple[str, str, int]]  # (size name, op, value); op: ">", "<=", "%0", "%!0"

    def text(self) -> str:
        return " and ".join(_condition_text(c) for c in self.conditions) or "always"


@dataclass
class Composition:
    fallback: str  # the overall best: every shape no rule claims
    rules: list[Rule]  # first match wins
    dims: dict[str, tuple[int, int]]  # size name -> (member of data, dimension) it is read from
    predicted_us: float  # geomean over the timed shapes if each part repeats its time
    best_us: float  # the overall best's geomean over the same shapes
    oracle_us: float  # the fastest part on every shape
    leaders: dict[str, str] = field(default_factory=dict)  # shape label -> fastest candidate id

    @property
    def parts(self) -> list[str]:
        return list(dict.fromkeys([self.fallback] + [r.part for r in self.rules]))

    def to_dict(self) -> dict:
        return {"fallback": self.fallback, "parts": self.parts, "dims": {k: list(v) for k, v in self.dims.items()},
                "rules": [{"part": r.part, "conditions": [list(c) for c in r.conditions], "text": r.text()}
                          for r in self.rules],
                "predicted_us": self.predicted_us, "best_us": self.best_us, "oracle_us": self.oracle_us,
                "leaders": self.leaders}


def _condition_text(c: tuple[str, str, int]) -> str:
    name, op, value = c
    if op == ">":  # sizes are integers: `m >= 1024` reads better than `m > 1023`
        return f"{name} >= {value + 1}"
    return {"%0": f"{name} % {value} == 0", "%!0": f"{name} % {value} != 0"}.get(op, f"{name} {op} {value}")


def _holds(c: tuple[str, str, int], shape: dict) -> bool:
    name, op, value = c
    x = shape[name]
    if op == ">":
        return x > value
    if op == "<=":
        return x <= value
    return (x % value == 0) == (op == "%0")


# --- who wins where ------------------------------------------------------------------------------
def timed_shapes(cand: Candidate) -> dict[str, tuple[dict, float]]:
    """Benchmark shape label -> (shape, median µs) of one judged candidate."""
    shapes = cand.result.shapes if cand.result else []
    return {shape_label(s.shape): (s.shape, s.time_us) for s in shapes if s.phase == BENCHMARK and s.time_us}


def contenders(candidates: list[Candidate]) -> list[Candidate]:
    """Correct, timed kernels of a run that a composite may dispatch to."""
    return [c for c in candidates if c.kind not in NOT_PARTS and c.ok and c.geomean_us and c.times]


def leaders(candidates: list[Candidate]) -> dict[str, tuple[str, float]]:
    """Shape label -> (id, µs) of the fastest correct kernel on it; composites, being made of these
    leaders, are left out."""
    out: dict[str, tuple[str, float]] = {}
    for c in candidates:
        if c.kind in NOT_PARTS or not c.ok:
            continue
        for label, us in c.times.items():
            if label not in out or us < out[label][1]:
                out[label] = (c.id, us)
    return out


def leaders_text(candidates: list[Candidate], best_id: str | None) -> str:
    """Lines for the prompts: which kernel leads which shapes, where that is not the overall best."""
    by_id: dict[str, list[str]] = {}
    for label, (cid, _) in leaders(candidates).items():
        by_id.setdefault(cid, []).append(label)
    if len(by_id) <= 1:
        return ""
    lines = ["Per-shape leaders (the fastest correct kernel on each benchmark shape). The run builds and judges "
             "composites that dispatch by shape size to the leaders by itself, so an idea that wins only some "
             "shapes is kept: aim experiments at the shapes where the best kernel is weakest."]
    for cid, labels in sorted(by_id.items(), key=lambda kv: -len(kv[1])):
        tag = " (the best overall)" if cid == best_id else ""
        lines.append(f"- fastest on {len(labels)} shape(s): {cid}{tag}: {'; '.join(labels)}")
    return "\n".join(lines)


# --- reading sizes off the data --------------------------------------------------------------------
def size_dims(problem: Problem) -> dict[str, tuple[int, int]]:
    """Shape keyword -> (member, dimension) of `data` that always equals it, found by building the inputs
    of the problem's small interpreter shapes on the CPU. A size no dimension matches is left out."""
    shapes = [s for s in list(problem.cpu_tests) + list(problem.cpu_benchmarks) if s]
    found: dict[str, set[tuple[int, int]]] = {}
    for shape in shapes:
        try:
            data = problem.call_data(list(problem.generate_input(0, "cpu", **shape)))
        except Exception:  # a problem whose inputs cannot be built on the CPU here: no sizes, no composite
            return {}
        members = data if isinstance(data, (tuple, list)) else (data,)
        for name, value in shape.items():
            if not isinstance(value, int) or isinstance(value, bool) or not name.isidentifier() \
                    or keyword.iskeyword(name) or name in ("data", "members"):
                continue
            here = {(i, d) for i, t in enumerate(members) for d, n in enumerate(getattr(t, "shape", ()))
                    if n == value}
            found[name] = found[name] & here if name in found else here
    return {name: min(places) for name, places in found.items() if places}


# --- the rules -------------------------------------------------------------------------------------
def _splits(shapes: list[dict], idx: list[int], names: list[str]):
    for name in names:
        values = sorted({shapes[i][name] for i in idx})
        for a, b in zip(values, values[1:]):
            t = max(a, int(math.sqrt(a * b)))  # sizes scale multiplicatively: split between them in log space
            yield (name, "<=", t), (name, ">", t)
    for name in names:
        for d in DIVISORS:
            if 0 < sum(shapes[i][name] % d == 0 for i in idx) < len(idx):
                yield (name, "%0", d), (name, "%!0", d)


def plan(problem: Problem, candidates: list[Candidate], *, min_gain_pct: float = MIN_GAIN_PCT) -> Composition | None:
    """The composite worth judging over a run's stored candidates, or None: one kernel wins (nearly)
    everywhere, the problem's candidate is a model (a KernelBench file's one shape), or its sizes cannot be read off its inputs."""
    parts = contenders(candidates)
    if problem.kind.builds_model or len(parts) < 2:
        return None
    times = {c.id: timed_shapes(c) for c in parts}
    labels = sorted(set.intersection(*(set(t) for t in times.values())))
    if not labels:
        return None
    logs = {cid: [math.log(t[label][1]) for label in labels] for cid, t in times.items()}
    fallback = min(logs, key=lambda cid: sum(logs[cid]))
    keep = math.log1p(KEEP_FALLBACK_PCT / 100)
    if all(logs[fallback][i] - min(v[i] for v in logs.values()) <= keep for i in range(len(labels))):
        return None  # the best kernel is (within noise) the fastest on every shape
    dims = size_dims(problem)
    shapes = [times[parts[0].id][label][0] for label in labels]
    names = [n for n in dims if all(n in s for s in shapes)]
    if not names:
        return None

    def choose(idx: list[int]) -> tuple[str, float]:
        cost = {cid: sum(v[i] for i in idx) for cid, v in logs.items()}
        best = min(cost, key=cost.get)
        if cost[fallback] - cost[best] <= keep * len(idx):
            best = fallback
        return best, cost[best]

    def grow(idx: list[int], path: list, depth: int) -> list[Rule]:
        part, cost = choose(idx)
        options = []
        if depth < MAX_DEPTH and len(idx) > 1:
            for yes, no in _splits(shapes, idx, names):
                left = [i for i in idx if _holds(yes, shapes[i])]
                right = [i for i in idx if i not in left]
                if left and right:
                    options.append((choose(left)[1] + choose(right)[1], yes, no, left, right))
        if options:
            split_cost, yes, no, left, right = min(options, key=lambda o: o[0])
            if split_cost < cost - 1e-9:
                return grow(left, path + [yes], depth + 1) + grow(right, path + [no], depth + 1)
        return [] if part == fallback else [Rule(part, _bounded(path, shapes, names))]

    rules = grow(list(range(len(labels))), [], 0)
    composite = [fallback] * len(labels)
    for i, shape in enumerate(shapes):
        rule = next((r for r in rules if all(_holds(c, shape) for c in r.conditions)), None)
        composite[i] = rule.part if rule else fallback
    predicted = math.exp(sum(logs[cid][i] for i, cid in enumerate(composite)) / len(labels))
    best_us = math.exp(sum(logs[fallback]) / len(labels))
    oracle = geomean([min(math.exp(v[i]) for v in logs.values()) for i in range(len(labels))])
    if not rules or predicted > best_us * (1 - min_gain_pct / 100):
        return None
    lead = {label: min(times, key=lambda cid: times[cid][label][1]) for label in labels}
    return Composition(fallback, rules, {n: dims[n] for n in names}, predicted, best_us, oracle, lead)


def _bounded(path: list, shapes: list[dict], names: list[str]) -> list[tuple[str, str, int]]:
    """A region's conditions, each size bounded by the range that was timed: beyond it the overall best
    answers, since nothing measured says another kernel wins there. A size every timed shape shares
    (swiglu's hidden size) says nothing about where a kernel wins, and bounds nothing."""
    names = [n for n in names if len({s[n] for s in shapes}) > 1]
    lower = {n: min(s[n] for s in shapes) - 1 for n in names}  # x > lower
    upper = {n: max(s[n] for s in shapes) for n in names}  # x <= upper
    rest = []
    for name, op, value in path:
        if op == ">":
            lower[name] = max(lower[name], value)
        elif op == "<=":
            upper[name] = min(upper[name], value)
        else:
            rest.append((name, op, value))
    bounds = [c for n in names for c in ((n, ">", lower[n]), (n, "<=", upper[n]))]
    return bounds + rest


# --- the candidate's source ----------------------------------------------------------------------
_TEMPLATE = '''"""{marker}: dispatches each call by its sizes to the fastest of {n} correct
kernels of this run, each loaded as its own module from its source below. First matching rule wins:
{rules}
Every other shape (including sizes beyond those timed) goes to {fallback}, the fastest overall."""

import importlib.util
import os
import sys

_PARTS = {{
{parts}
}}


def _load(cid, source):
    """One part as its own module in a real file beside this one (Triton's @jit reads its source there)."""
    name = "kscience_part_" + cid.replace("-", "_")
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module.custom_kernel


_KERNELS = {{cid: _load(cid, source) for cid, source in _PARTS.items()}}
{bindings}


def custom_kernel(data):
    members = data if isinstance(data, (tuple, list)) else (data,)
{sizes}
{branches}
    return {fallback_var}(data)
'''


def _var(cid: str) -> str:
    return "_kernel_" + cid.replace("-", "_")


def source(comp: Composition, sources: dict[str, str]) -> str:
    """The composite as a candidate: `sources` maps each part's id to its kernel source. The dispatch is
    straight-line code (a few comparisons), so it adds well under a microsecond of host time per call."""
    rules = "\n".join(f"  {r.text()} -> {r.part}" for r in comp.rules)
    parts = "\n".join(f"    {cid!r}: {_literal(sources[cid])}," for cid in comp.parts)
    bindings = "\n".join(f"{_var(cid)} = _KERNELS[{cid!r}]" for cid in comp.parts)
    sizes = "\n".join(f"    {name} = members[{i}].shape[{d}]" for name, (i, d) in comp.dims.items())
    branches = "\n".join(f"    if {' and '.join(_condition_text(c) for c in r.conditions)}:\n        return {_var(r.part)}(data)"
                         for r in comp.rules)
    return _TEMPLATE.format(marker=MARKER, n=len(comp.parts), rules=rules, fallback=comp.fallback, parts=parts, bindings=bindings,
                            sizes=sizes, branches=branches, fallback_var=_var(comp.fallback))


def _literal(text: str) -> str:
    """A part's source as a readable raw triple-quoted string (a model may edit a composite), or its repr
    where no raw string can hold it exactly."""
    raw = "r'''" + text + "'''"
    try:
        if ast.literal_eval(raw) == text:
            return raw
    except (SyntaxError, ValueError):
        pass
    return repr(text)


def summary(comp: Composition) -> str:
    """One line for the run's progress and the candidate's hypothesis."""
    gain = 100 * (1 - comp.predicted_us / comp.best_us)
    rules = "; ".join(f"{r.text()} -> {r.part}" for r in comp.rules)
    return (f"composite of {', '.join(comp.parts)} by shape ({rules}; otherwise {comp.fallback}): predicted "
            f"{comp.predicted_us:,.2f} us, {gain:.1f}% under the best kernel's {comp.best_us:,.2f} us "
            f"(per-shape oracle {comp.oracle_us:,.2f} us)")
