"""What every role is told besides its own task: how the numbers were measured, which shapes a
verdict covered, the problem as code and the exact contract of its inputs.

These are plain objects built from the evaluator's results and the Problem; the prompts are
rendered from them, and the offline scientist reads the same objects (see `roles.Brief`).
"""

from __future__ import annotations

import inspect
import math
import statistics
import sys
from dataclasses import dataclass, field

from kscience.evaluate.result import DeviceRecord, EvalResult
from kscience.problems.spec import Problem, geomean, shape_label
from kscience.record.candidate import benchmark_times
from kscience.record.seen import Seen
from kscience.scientist.hardware import Hardware
from kscience.scientist.quoting import quote_inline
from kscience.scientist.rules import Rules

MAX_LABELS = 6  # a verdict over more shapes than this counts them rather than naming each
BASELINE_MESSAGE_CHARS = 1200  # why a baseline has no number: its whole sentences up to this much
INTERPRETER_MEANING = (
    "These are CPU-interpreter host-clock times: Triton's interpreter runs every program instance as "
    "NumPy on the CPU. They can show that a kernel runs, that it is correct on the small interpreter "
    "shapes, and gross waste (work repeated per element); they cannot show GPU speed: tile shapes, "
    "warps, pipeline stages, coalescing, tensor cores, occupancy and launch cost are invisible or "
    "inverted. Two kernels with the same code path can differ by 2x here. Reason about the target GPU; "
    "do not read these times as GPU performance, and do not predict uplifts in them.")
GPU_MEANING = (
    "GPU times: CUDA/HIP events around each call, median over the timed calls, with the L2 cache "
    "flushed before each call and inputs rotated; they are the score.")


@dataclass
class Baseline:
    label: str  # "PyTorch eager", "torch.compile", "physical floor"
    status: str  # an EvalResult status, or "not timed"
    geomean_us: float | None
    shape_times: dict[str, float] = field(default_factory=dict)


@dataclass
class Bench:
    """How the run's numbers come about, for the measurement header of every prompt."""

    device: Hardware  # where the evaluator timed
    target: Hardware  # what the kernels are for
    timing_label: str  # the EvalResult's: "cuda events", "cpu interpreter (host clock)"
    noise_pct: float | None = None  # median relative spread (std/mean) of one shape's timed calls
    repeats: int = 0  # timed calls per shape behind that spread (median)
    baselines: list[Baseline] = field(default_factory=list)
    versions: str = ""  # "torch 2.11.0, Triton 3.6.0, CUDA 12.8" of the evaluating device
    leaders: str = ""  # which kernel is fastest on which shapes (compose.leaders_text), when they differ
    probes: dict = field(default_factory=dict)  # the judging device's probe results (kscience.evaluate.profile.probes)
    rules: Rules | None = None  # what the judge holds kernels to, from the run's settings (rules.py)

    @property
    def interpreted(self) -> bool:
        return self.device.interpreted


def _spreads(result: EvalResult | None) -> list[tuple[float, int]]:
    out = []
    for s in result.shapes if result else []:
        if s.mean_us and s.std_us is not None and s.n >= 2:
            out.append((100.0 * s.std_us / s.mean_us, s.n))
    return out


def versions_text(device: DeviceRecord) -> str:
    """The software versions a verdict's device record names, as one phrase ("" when it names none)."""
    v = device.versions
    parts = [f"{name} {v[key]}" for key, name in (("torch", "torch"), ("triton", "Triton"), ("cuda", "CUDA"),
                                                  ("hip", "ROCm/HIP")) if v.get(key)]
    return ", ".join(parts)


def bench_from_results(device: Hardware, target: Hardware, seed: EvalResult | None,
                       baselines: list[tuple[str, EvalResult | None]], floor: dict[str, float] | None = None,
                       leaders: str = "", rules: Rules | None = None) -> Bench:
    """`seed` and the baselines are verdicts (None: not timed); `floor` is the physical floor
    per shape label. The noise is the spread of repeated calls over every timed shape of them all."""
    results = [seed] + [r for _, r in baselines]
    spreads = [x for r in results for x in _spreads(r)]
    rows = []
    for label, result in baselines:
        if result is None:
            rows.append(Baseline(label, "not timed", None))
        elif not result.ok:  # say why there is no number (a vendor path this device lacks), whole
            why = (result.message or "").strip()
            rows.append(Baseline(label, f"{result.status}: "
                                        f"{quote_inline(why, BASELINE_MESSAGE_CHARS) if why else 'no reason given'}",
                                 None))
        else:
            rows.append(Baseline(label, result.status, result.geomean_us, benchmark_times(result.shapes)))
    if floor:
        rows.append(Baseline("physical floor", "bound", geomean(list(floor.values())), dict(floor)))
    timing = (seed.timing_label if seed else "") or ("cpu interpreter (host clock)" if device.interpreted else "")
    judged_on = seed.judged_on if seed else DeviceRecord()
    return Bench(device, target, timing,
                 noise_pct=statistics.median(p for p, _ in spreads) if spreads else None,
                 repeats=int(statistics.median(n for _, n in spreads)) if spreads else 0, baselines=rows,
                 versions=versions_text(judged_on), leaders=leaders, probes=dict(judged_on.probes), rules=rules)


def format_times(times: dict[str, float]) -> str:
    return "; ".join(f"{label}: {us:,.2f} us" for label, us in times.items()) if times else "no per-shape times"


def render_header(bench: Bench | None) -> str:
    """The measurement header every prompt starts with."""
    if bench is None:
        return "# Measurement\nNothing has been measured yet."
    lines = ["# Measurement",
             f"Evaluated on: {bench.device.line()}."
             + (f" Software there: {bench.versions} (write for these versions: APIs such as tensor "
                "descriptors and tl.range options depend on the Triton version)." if bench.versions else ""),
             f"Target hardware the kernel is for: {bench.target.line()}.",
             f"Timing: {bench.timing_label or 'unknown'}. "
             + (INTERPRETER_MEANING if bench.interpreted else GPU_MEANING)]
    if bench.interpreted and not bench.target.interpreted:
        lines.append("So no number below was measured on a GPU: the GPU-only code paths of every kernel are "
                     "unverified until it runs on one.")
    if bench.noise_pct is not None:
        lines.append(f"Noise: repeated calls of one kernel on one shape spread by {bench.noise_pct:.1f}% "
                     f"(median std/mean over {bench.repeats} calls per shape, seed and baselines); treat "
                     f"differences within about {max(2 * bench.noise_pct, 1.0):.0f}% as noise"
                     + (", and much larger ones under the interpreter as well." if bench.interpreted else "."))
    else:
        lines.append("Noise: no repeated timings yet to estimate it from.")
    for b in bench.baselines:
        if b.geomean_us is None:
            lines.append(f"Baseline {b.label}: {b.status}.")
        else:
            lines.append(f"Baseline {b.label}: geomean {b.geomean_us:,.2f} us ({b.status}); per shape: "
                         f"{format_times(b.shape_times)}.")
    if bench.leaders:
        lines.append(bench.leaders)
    return "\n".join(lines)


def coverage(result: EvalResult | None, problem: Problem) -> str:
    """Which shapes a verdict covered, and which shapes of the problem it did not run."""
    shapes = result.shapes if result else []
    device = result.judged_on if result else DeviceRecord()
    if not shapes:
        failed = result.failing_shape if result else None
        return "no shape ran" if failed is None else f"no shape passed: the first one judged, {shape_label(failed)}, failed"
    checked = [s for s in shapes if s.ok]
    failed = [s for s in shapes if not s.ok]
    where = "under the CPU interpreter" if device.interpreted else f"on {device.name or 'the GPU'}"
    labels = list(dict.fromkeys(shape_label(s.shape) for s in checked))  # a shape may be tested and timed
    tests = sum(s.phase == "test" for s in checked)
    text = (f"{len(checked)} of {len(shapes)} shape checks passed {where} ({tests} correctness, "
            f"{len(checked) - tests} benchmark: "
            f"{', '.join(labels) if len(labels) <= MAX_LABELS else f'{len(labels)} distinct shapes'})")
    if failed:
        text += f"; failed: {', '.join(shape_label(s.shape) for s in failed)}"
    if device.interpreted:
        gpu = problem.shapes("all", interpreted=False)
        ran = [s.shape for s in shapes]
        missed = [s for s in gpu if s not in ran]
        if missed:
            text += (f"; the {len(missed)} other GPU shapes did not run, so code paths taken only on a GPU or only at "
                     "GPU sizes (split-K, persistent grids, autotuned configs) are unverified")
    return text


# --- the problem as code ---------------------------------------------------------------------------
def problem_source(problem: Problem) -> str:
    """The reference implementation's source: the KernelBench file (after --set), or the module
    that defines ref_kernel and generate_input."""
    if problem.source_text:
        return problem.source_text
    module = sys.modules.get(getattr(problem.ref_kernel, "__module__", ""), None)
    try:
        return inspect.getsource(module) if module is not None else inspect.getsource(problem.ref_kernel)
    except (OSError, TypeError):
        return "(the reference source is not available)"


def _layout(t) -> str:
    if t.dim() == 0:
        return "scalar tensor"
    if t.is_contiguous():
        return "contiguous (row-major)"
    if t.dim() == 2 and t.t().is_contiguous():
        return "column-major (the transpose of a contiguous tensor)"
    return "not contiguous"


@dataclass
class Member:
    index: int
    text: str  # one line describing it


def input_contract(problem: Problem, device_name: str = "cuda") -> tuple[dict, list[Member]]:
    """(the shape used, one line per member of `data`) derived by generating the inputs on the CPU for the
    problem's largest interpreter test shape (small, yet wide enough for layouts to show). `device_name` is
    where the kernel will receive them."""
    shape = max(problem.cpu_tests or problem.tests or [{}], key=lambda s: math.prod(
        v for v in s.values() if isinstance(v, int)) if s else 0)
    try:
        data = problem.generate_input(0, "cpu", **shape)
    except Exception as exc:  # a contract we cannot derive is said, not guessed
        return shape, [Member(-1, f"(could not generate the inputs: {type(exc).__name__}: {exc})")]
    if not isinstance(data, (tuple, list)):
        data = (data,)
    members = []
    for i, value in enumerate(data):
        writes = "OUTPUT: preallocated, the kernel writes its result here" if i in problem.output_args \
            else "input: read only, must come back unchanged"
        if hasattr(value, "dtype") and hasattr(value, "stride"):
            members.append(Member(i, f"data[{i}]: shape {tuple(value.shape)}, {value.dtype}, strides "
                                     f"{tuple(value.stride())}, {_layout(value)}, on {device_name}; {writes}"))
        else:
            members.append(Member(i, f"data[{i}]: {type(value).__name__} {value!r}; {writes}"))
    return shape, members


def render_contract(problem: Problem, device_name: str) -> str:
    shape, members = input_contract(problem, device_name)
    others = ("the one shape there is" if problem.kind.one_shape else
              "other shapes change the sizes as the task's shape list gives them; dtypes, layouts and roles stay")
    head = (f"The kernel is called as {problem.kind.call}. Members of `data` for the shape {shape_label(shape)} "
            f"({others}):")
    return "\n".join([head] + [f"- {m.text}" for m in members])


# --- every shape with its sizes ------------------------------------------------------------------
def member_sizes(problem: Problem, shape: dict) -> str:
    """The sizes and dtypes of `data` at `shape` ("data[0] 64x128 float8_e4m3fn, ..."), from fake tensors
    that hold no memory; "" where the inputs cannot be built that way."""
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode():
            data = problem.generate_input(0, "cpu", **shape)
            data = data if isinstance(data, (tuple, list)) else (data,)
            parts = [f"data[{i}] {'x'.join(map(str, v.shape)) or 'scalar'} {str(v.dtype).removeprefix('torch.')}"
                     if hasattr(v, "shape") and hasattr(v, "dtype") else f"data[{i}] {type(v).__name__}"
                     for i, v in enumerate(data)]
    except Exception:  # a generator fake tensors cannot run: the shape's own sizes say enough
        return ""
    return ", ".join(parts)


def shape_sizes(problem: Problem, shape: dict) -> str:
    """One shape as the model reads it: its label and what its inputs are ("m=64,n=128: data[0] 64x128
    bfloat16"); a KernelBench file's one shape names the module constants it comes from."""
    label = shape_label(shape)
    if problem.kind.one_shape and not shape:
        values = ", ".join(f"{k}={v!r}" for k, v in problem.constants.items())
        label = f"default (the module constants as run: {values})" if values else label
    sizes = member_sizes(problem, shape)
    return f"{label}: {sizes}" if sizes else label


def shapes_text(problem: Problem, interpreted: bool, judged_on: str) -> str:
    """Every shape of the problem with its sizes, by where it runs, and which of them this run judges on
    (`judged_on`: the evaluating device in words)."""
    where = ("This run is judged under the CPU interpreter, on the interpreter shapes: Triton kernels run as "
             "NumPy on the host CPU, and load_inline or nvcc code cannot run there." if interpreted else
             f"This run is judged on {judged_on}, on the GPU shapes: every check and every timed call runs your "
             "kernel on the GPU, and the interpreter shapes are not used, so no CPU fallback is ever judged.")
    if problem.kind.one_shape:
        return ("Shapes: one shape everywhere, checked for correctness and then timed: "
                f"{shape_sizes(problem, {})}.\n{where}")
    lists = (("On a GPU", problem.tests, problem.benchmarks),
             ("Under the CPU interpreter (only where the judge has no GPU)", problem.cpu_tests, problem.cpu_benchmarks))
    lines = ["Shapes, each with the sizes and dtypes of the `data` it builds:"]
    for heading, tests, benches in lists:
        lines.append(f"{heading}:")
        lines += [f"- correctness check: {shape_sizes(problem, s)}" for s in tests]
        lines += [f"- benchmark (checked, then timed): {shape_sizes(problem, s)}" for s in benches]
    return "\n".join(lines + [where])


@dataclass
class Brief:
    """Everything one role's prompt is rendered from; the offline scientist answers from this object."""

    role: str
    bench: Bench | None = None
    shapes: list[dict] = field(default_factory=list)  # every shape of the problem, GPU and interpreter
    population: list = field(default_factory=list)  # CandidateView, for the selector
    base: object = None  # CandidateView
    reference: object = None  # CandidateView
    findings: list[str] = field(default_factory=list)  # oldest first
    done: list[str] = field(default_factory=list)  # experiments already carried out on the base
    wanted: int = 5  # plans the designer is asked for
    avenue: str = ""  # the direction the designer's line favours (one of plans.AVENUES)
    others: list[str] = field(default_factory=list)  # designs other lines have under way, in words
    taken: list[str] = field(default_factory=list)  # bases other lines are designing on now, for the selector
    plan: object = None  # roles.Plan, for the writer and the finding
    source: str | None = None  # the kernel the answer is to change (repair, or a writer's retry)
    status: str = ""
    message: str = ""
    child: object = None  # CandidateView of the experiment's result, for the finding
    measured_pct: float | None = None
    # What a profiler saw of the kernel the role works on (the base, or the kernel to repair); each
    # CandidateView carries its own as well.
    profile: Seen | None = None
