"""What an evaluation returns. Plain data: it crosses process, Ray and database boundaries."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from kscience.problems import precision as P

# Every verdict is exactly one of these.
OK = "ok"
COMPILE_ERROR = "compile_error"  # the source does not import: syntax error, missing entry point, import failure
RUNTIME_ERROR = "runtime_error"  # the call raised, or returned something that is not a plain tensor
WRONG_ANSWER = "wrong_answer"  # numbers, shape, dtype, unwritten elements, NaN, mutated inputs
TIMEOUT = "timeout"  # a phase ran past its limit; the whole process group was killed
CRASHED = "crashed"  # the worker died: signal, os._exit, CUDA fault, memory cap
REJECTED = "rejected"  # the harness refuses to believe it: impossible times, cached results, tampering
                       # with the harness or its channel, a GPU left without memory for the reference
STATUSES = (OK, COMPILE_ERROR, RUNTIME_ERROR, WRONG_ANSWER, TIMEOUT, CRASHED, REJECTED)

# The longest a build may run while a compiler runs in the worker (nvcc, ptxas, ninja, c++: a cold
# `load_inline` of torch's headers takes 60-90 s on an H200 host), however short the step limit: the step
# limit bounds running, this bounds building (EvalRequest.build_limit_s; `--build-limit`).
BUILD_LIMIT_S = 300.0


def bounded(text: str, limit: int) -> str:
    """`text` whole where it fits in `limit` characters; else cut at a word and saying so, so that no
    reader (a user, the model) takes a cut message for a whole one. Bounds text a candidate controls."""
    if len(text) <= limit:
        return text
    head = text[:limit - 24].rsplit(" ", 1)[0]
    return f"{head} [… {len(text) - len(head):,} more characters]"


def clock_counts(interpreted: bool) -> str:
    """One line on what a timed call's figure counts, for whoever reads a time (the model included);
    the judge's method (judge/measure.py, docs/evaluation.md "Timing method") keeps it true."""
    if interpreted:
        return ("each timed call is clocked by the judge around the whole call, less what an empty call costs; "
                "under the CPU interpreter that is the interpreter's time, which says nothing about a GPU")
    return ("each timed call is clocked by the judge from the GPU reaching the call (inputs loaded, L2 flushed) to "
            "its last GPU work finishing, less what an empty call costs; the call's host work (launches, "
            "allocations, descriptor set-up) overlaps the cache flush and a short spin queued before it and counts "
            "only where it outlasts them or leaves the GPU waiting between kernels; work on other streams counts "
            "until it is done")


@dataclass(frozen=True)
class KernelTime:
    """One kernel a candidate launched on a timed shape, from the profiled pass after the timed calls
    (kernel_times.parse_reply): how many times per call it launched and its time per call."""

    name: str
    launches: float
    us: float


@dataclass(frozen=True)
class CallBreakdown:
    """What the median profiled call of a timed shape held (kernel_times.parse_calls): its length, the time
    before its first kernel, in kernels, in gaps between them and after the last, how many launches, how
    many calls were profiled, and on a GPU the allocations made inside the call."""

    call_us: float
    before_first_us: float
    kernels_us: float
    gaps_us: float
    after_last_us: float
    launches: int
    calls: int = 1
    allocations: int | None = None  # None: not counted (the CPU interpreter)
    allocated_bytes: int | None = None
    cuda_mallocs: int | None = None

    @classmethod
    def from_dict(cls, d: dict) -> "CallBreakdown":
        """From ShapeResult.call, the dict the judge wrote."""
        return cls(**{k: v for k, v in d.items() if k in _CALL_FIELDS})


@dataclass
class ShapeResult:
    shape: dict
    ok: bool
    phase: str  # "test" or "benchmark"
    time_us: float | None = None  # median of the timed calls, by `clock`
    mean_us: float | None = None
    std_us: float | None = None
    n: int = 0
    floor_us: float | None = None  # bytes/peak bandwidth or FLOPs/peak rate, whichever is larger
    judge_us: float | None = None  # the judge's own estimate of the median call, from its clock alone
    judge_se_us: float | None = None  # that estimate's standard error
    # What the figure is: "cuda events" (the worker's, within what the judge's clock allows), "judge's
    # clock" (its estimate), or "judge's clock (whole brackets)" (an upper bound, on the CPU)
    clock: str = ""
    inputs: str = ""  # how the timed calls got their inputs: staged by the judge, or built by the worker (why)
    build_us: float | None = None  # the judge's own time to build the shape's inputs (outside its clock when staged)
    max_abs_err: float | None = None
    # Against a float64 evaluation of the reference on the judge's own inputs of the checked call (all of a
    # test shape's output, a benchmark shape's sampled elements): the candidate's largest error, the
    # reference's own as published, and the largest |float64 answer|; or why they were not measured
    # (kscience.problems.precision reads them)
    err_f64: float | None = None
    ref_err_f64: float | None = None
    scale_f64: float | None = None
    f64_note: str = ""
    message: str = ""
    # Each kernel the candidate launched on this shape, costliest first: {"name", "launches" per call,
    # "us" per call}, from a profiled pass after the timed calls (kernel_times.py); advice, not the time
    kernels: list = field(default_factory=list)
    # What the median profiled call held, from the same pass: call_us, before_first_us, kernels_us, gaps_us,
    # after_last_us, launches, calls (profiled), and on a GPU allocations, allocated_bytes, cuda_mallocs
    # made inside the call (kernel_times.call_breakdown); advice, not the time
    call: dict = field(default_factory=dict)

    @property
    def kernel_times(self) -> list[KernelTime]:
        """`kernels`, typed."""
        return [KernelTime(**k) for k in self.kernels]

    @property
    def breakdown(self) -> CallBreakdown | None:
        """`call`, typed; None where no call was profiled."""
        return CallBreakdown.from_dict(self.call) if self.call else None


@dataclass(frozen=True)
class DeviceRecord:
    """The device a verdict was judged on, as read above the evaluator: `EvalResult.device` is the dict the judge
    wrote (kscience.device.Device.describe, the worker's confinement facts, the probe results), which crosses the
    wire and the store unchanged; this is its typed reading (`EvalResult.judged_on`)."""

    name: str | None = None  # "NVIDIA H200", "cpu (Triton interpreter)"; None where the record has none
    kind: str = ""  # "cuda", "rocm" or "cpu"
    interpreted: bool | None = None  # None where the record does not say (not known to be a GPU)
    versions: dict = field(default_factory=dict)  # torch, triton, cuda, hip (kscience.device.versions)
    host: str | None = None  # the judging host, where recorded
    probes: dict = field(default_factory=dict)  # kscience.evaluate.profile.probes results
    # The record as written, whole (keys beyond these included), for output that shows it as stored
    stored: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: dict | None) -> "DeviceRecord":
        """The record of a device dict as the judge wrote it, or of {} / None (nothing recorded)."""
        d = d or {}
        return cls(name=d.get("name"), kind=d.get("kind") or "", interpreted=d.get("interpreted"),
                   versions=d.get("versions") or {}, host=d.get("host"), probes=d.get("probes") or {}, stored=dict(d))


@dataclass
class EvalResult:
    status: str
    message: str  # one line
    geomean_us: float | None = None  # over benchmark shapes; None unless status is ok
    shapes: list[ShapeResult] = field(default_factory=list)
    device: dict = field(default_factory=dict)
    timing_label: str = ""  # "cuda events" or "cpu interpreter (judge's clock)"
    stdout_tail: str = ""
    stderr_tail: str = ""
    output: str = ""  # the candidate's stdout and stderr, distinct lines, warnings first (candidate_output.py)
    kernel_profiler: str = ""  # what measured ShapeResult.kernels, or one line on why they are missing
    # Nsight Compute, run by the judging machine (profile/job.py): {"ncu": NcuProfile dict, "flag",
    # "profile_s"}, or None; `profile_said` says why there is none when one was asked for
    profile: dict | None = None
    profile_said: str = ""
    wall_s: float = 0.0  # whole evaluation, as the trusted process saw it
    # Seconds a compiler ran in the worker's process tree, as the judge saw it (session.Builds): nvcc,
    # ptxas, ninja, c++ for load_inline, nvcc through subprocess and Triton's ptxas stage
    build_s: float = 0.0
    # Where wall_s went, each phase without those inside it: start, builds, import, pristine (the null
    # calls before the import), check, time,
    # reads (the judge's reads of timed outputs), recheck, inputs and reference (the judge building
    # inputs and computing answers, wherever it does), finish, close
    phases_s: dict = field(default_factory=dict)
    failing_shape: dict | None = None
    compile_facts: list = field(default_factory=list)  # compile_facts.KernelFacts dicts, read after the worker
    # The isolation layers in force (sandbox.workers.Worker.confinement, Landlock as the worker applied it),
    # "weak": required layers this machine lacked, "allowed_weak": whether the run accepted that.
    confinement: dict = field(default_factory=dict)
    # The judge's secret seed of the order it ran the shapes in (judge/evaluation.shape_order reproduces it)
    shape_order_seed: int | None = None
    # kscience.problems.precision.summary of the shapes, with the policy judged under (`under_policy`)
    precision: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def judged_on(self) -> DeviceRecord:
        """`device`, typed."""
        return DeviceRecord.from_dict(self.device)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "EvalResult":
        """A result as to_dict wrote it, by this version or an earlier one (fields since dropped are ignored)."""
        d = {k: v for k, v in d.items() if k in _RESULT_FIELDS}
        d["shapes"] = [ShapeResult(**{k: v for k, v in s.items() if k in _SHAPE_FIELDS}) for s in d.get("shapes", [])]
        return cls(**d)


_CALL_FIELDS = {f.name for f in fields(CallBreakdown)}
_SHAPE_FIELDS = {f.name for f in fields(ShapeResult)}
_RESULT_FIELDS = {f.name for f in fields(EvalResult)}


def timing_label(interpreted: bool) -> str:
    """How an evaluation's times were taken, in a few words (`EvalResult.timing_label`)."""
    return "cpu interpreter (judge's clock)" if interpreted else "judge's clock, refined by cuda events"


def confinement_line(confinement: dict) -> str:
    """One line naming the isolation layers an evaluation ran under, and any that were missing."""
    names = ("landlock", "namespaces", "cgroup", "reaper", "memory_cap", "env_filter", "compile_cache")
    parts = [f"{name.replace('_', ' ')}: {confinement[name]}" for name in names if name in confinement]
    if confinement.get("weak"):
        parts.append("MISSING " + "; ".join(confinement["weak"]) +
                     (" (allowed for this run)" if confinement.get("allowed_weak") else ""))
    return "confinement: " + (" | ".join(parts) if parts else "unknown")


@dataclass
class EvalRequest:
    """Everything a worker needs, as data: the problem is reloaded from its locator, or from the files that
    travel with the request."""

    problem: str  # locator: built-in name, KernelBench file or GPU MODE directory
    source: str  # candidate Python source
    overrides: dict = field(default_factory=dict)
    shapes: str = "all"  # "tests", "benchmarks" or "all"
    timeout_s: float | None = None  # overall cap; phase limits scale from it
    step_limit_s: float | None = None  # the longest one step (import, a check, a timed shape) may wait for the
                                       # candidate; it lowers the judge's own phase limits, never raises them
    # The longest one step may run on while a compiler runs in the worker (BUILD_LIMIT_S when None)
    build_limit_s: float | None = None
    candidate_id: str | None = None  # for bookkeeping by callers only
    # [rtol, atol] to check with instead of the problem's: a run sets it only for the problem's
    # vendor-library baseline (Problem.vendor_tolerance), never for a kernel
    tolerance: list | None = None
    # A baseline (eager, torch.compile, the vendor or an installed library) may call the libraries a
    # problem forbids kernels to call (Problem.forbidden_calls); a run sets it for its baselines alone
    baseline: bool = False
    allow_weak_confinement: bool = False  # run even where Landlock or namespaces are missing (the
                                          # verdict then lists them); also KSCIENCE_ALLOW_WEAK_CONFINEMENT=1
    # What the judge measures beyond the verdict: "kernels" (time per launched kernel on every timed
    # shape of a correct candidate). [] measures nothing more.
    measure: list = field(default_factory=lambda: ["kernels"])
    # Set, the request is a profile job, not an evaluation: Nsight Compute on this shape of a candidate
    # already judged, run where the request is judged (profile/job.py)
    profile_shape: dict | None = None
    # A KernelBench file's or GPU MODE directory's files (kscience.problems.bundle.pack), so a judge on another
    # machine needs no copy at `problem`'s path: it judges the problem as unpacked from these (executors/carried.py)
    problem_files: dict | None = None
    # kscience.problems.precision.POLICIES: "reference" makes a reduced-precision kernel a wrong answer
    # (never a baseline's: those are what a user would run, and are only marked)
    precision: str = P.DEFAULT_POLICY


def under_policy(request: EvalRequest, result: EvalResult) -> EvalResult:
    """The verdict under the request's precision policy (judge/evaluation.evaluate ends with it): its
    precision summary recorded, and under "reference" a correct but reduced-precision kernel turned into a
    wrong answer. A policy it does not know raises ProblemError."""
    P.check_policy(request.precision)
    summary = P.summary(result.shapes)
    policy = P.DEFAULT_POLICY if request.baseline else request.precision
    result.precision = dict(summary, policy=policy) if summary else {}
    if policy == "reference" and result.ok and summary.get("reduced"):
        worst = summary["worst"]
        result.status, result.geomean_us = WRONG_ANSWER, None
        result.message = P.rejection(summary)
        result.failing_shape = worst["shape"]
    return result
