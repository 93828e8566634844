"""The judge's side of the timed calls (trusted): one command per call, inside the judge's own clock.

For each call the judge decides, from the OS's randomness in its own process, whether it does nothing
(`null`), builds a timed call's inputs from a seed new to the evaluation, then starts its clock, writes
the inputs into its staging buffer (or, where the shape cannot be staged, sends the seed for the worker
to build them), fills its output buffer, flushes the L2 and sends the command; it stops the clock when
the worker answers `done`, which the worker sends only once the call's output is in the judge's
buffer. So every input a timed call sees is new content, reaching the worker only inside the clock,
and everything the worker does for the call, the candidate's launches, host work and side streams
included, is inside it too. Only after `done` does the judge decide whether to check the call's
output, and it reads it then, from its own memory; the worker's own account of the call (its CUDA
events, what it returned) comes after, and is weighed against the judge's clock (measure.py).
"""

from __future__ import annotations

import dataclasses
import gc
import math
import secrets
import time

import numpy
import torch

from kscience.evaluate import staging
from kscience.evaluate.clocks import spinning
from kscience.evaluate.judge.buffers import ShapeBuffers
from kscience.evaluate.judge.compare import TIMED_CALL_BLOCKS, sample_ranges
from kscience.evaluate.judge.driving import Look, TimedSession
from kscience.evaluate.wire import DTYPES

_random = secrets.SystemRandom()


@dataclasses.dataclass
class Call:
    kind: str  # timed or null (see timing.py)
    event_us: float  # what the worker reports: CUDA events (GPU) or its host clock (CPU)
    host_us: float  # what the worker reports: its device-synchronised host clock
    window_us: float  # the judge's own clock, from starting the call's load to reading `done`


@dataclasses.dataclass
class Plan:
    """How many calls of each kind, and when to stop (GPU or CPU values from session.py)."""
    warmup: int
    nulls: int
    min_n: int
    max_n: int
    max_seconds: float
    target_rse: float
    checks: int  # timed calls read and rechecked: call i is read with probability checks / i
    few_n: int  # fewer calls than min_n suffice once the timed calls have taken enough_s seconds
    enough_s: float
    # Input sets the judge built before the import, whose seeds no command carried yet: (seed, data),
    # each for one of the first `checks` timed calls, which are always read.
    ready: list = dataclasses.field(default_factory=list)
    build_us: float = 0.0  # the judge's own time to build the shape's inputs (session.build_us)
    built_n: int = 0  # where that is most of a timed bracket (BUILT_SHARE): this many timed calls suffice
    built_nulls: int = 0  # and this many null calls


# A round's calls are mostly their input builds where the judge's own build time is at least this
# share of the median bracket of its timed calls so far, and at least BUILT_LEAST_S: each timed call
# costs a build, so fewer of them are made (session.BUILT_N). The brackets are the judge's own clock and
# the build was measured before the import: a candidate can only make its brackets longer, which takes
# it out of the rule, never into it.
BUILT_SHARE = 0.5
BUILT_LEAST_S = 0.05


class Unreadable(Exception):
    """The worker said its output is not what the judge's buffer can hold."""


class Unfinished(Exception):
    """The judge's own read right after `done` found the output not yet written."""


class Restage(Exception):
    """A call's inputs had another form than the shape's first set: its calls are built by the worker."""


def new_seed(used: set[int]) -> int:
    """A seed drawn from the OS's randomness in this process, never used before in `used` (and added)."""
    seed = secrets.randbits(31)
    while seed in used:
        seed = secrets.randbits(31)
    used.add(seed)
    return seed


def run_calls(session: TimedSession, shape: dict, plan: Plan, buffers: ShapeBuffers, used: set[int],
              out_bytes: int, phase: str = "time") -> tuple[list[Call], list[Look]]:
    """`_run_calls` with this process's garbage collector paused (a full collection of the judge's own
    objects inside one bracket would add its pause to that call alone) and its waits for the GPU spinning.
    `phase`: whose limits the commands run under ("pristine" before the import)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        with spinning():
            return _run_calls(session, shape, plan, buffers, used, out_bytes, phase)
    finally:
        if collecting:
            gc.enable()


def _run_calls(session: TimedSession, shape: dict, plan: Plan, buffers: ShapeBuffers, used: set[int],
               out_bytes: int, phase: str) -> tuple[list[Call], list[Look]]:
    """Drive one shape's calls after `prepare`: `plan.min_n` and more timed calls (none before the
    import), and `plan.nulls` null calls among them at moments drawn here. `out_bytes`: the size of the
    checked output, which a timed call's output must have.

    Returns every call in order and what the judge read of the outputs it chose to check: the i-th
    timed call is read with probability min(1, checks / i) (about checks * (1 + ln(n / checks)) reads
    for n calls, every call equally likely to be among them), all of them rechecked later. Raises
    Unfinished when an output read was not written by `done`, Unreadable when the worker said its
    output is not the checked one's size, Restage when a call's inputs cannot be staged like the first.
    """
    timed_us: list[float] = []  # event times of the timed calls
    windows: list[float] = []  # the judge's brackets around them
    nulls_sent = 0
    calls: list[Call] = []
    looks: list[Look] = []
    aside_s = 0.0  # the judge's own building, reading and null calls: not timing
    outputs = staging.poisoned(session.problem)
    t_loop = time.monotonic()
    while True:
        n = len(timed_us)
        built = (bool(plan.built_n and windows) and plan.build_us >= BUILT_LEAST_S * 1e6
                 and plan.build_us >= BUILT_SHARE * float(numpy.median(windows)))
        min_n = plan.built_n if built else plan.min_n
        nulls = max((plan.built_nulls if built else plan.nulls) - nulls_sent, 0)
        rse = median_rse(timed_us) if n >= min_n else 1.0
        spent = time.monotonic() - t_loop - aside_s
        enough = n >= min_n or (n >= plan.few_n and spent > plan.enough_s)
        settled = enough and (n >= plan.max_n or spent > plan.max_seconds or rse < plan.target_rse)
        if settled and not nulls:
            break
        kind = "null" if nulls and (settled or min_n == 0 or (n > 0 and _random.randrange(4) == 0)) else "timed"
        nulls_sent += kind == "null"
        t_aside = time.monotonic()
        seed, data = _inputs(session, shape, plan, buffers, used, kind)
        sources = staging.leaves(data, outputs) if data is not None else buffers.template if buffers.staged else None
        cmd = {"cmd": "call", "kind": kind} if buffers.staged else {"cmd": "call", "kind": kind, "seed": seed}
        aside_s += time.monotonic() - t_aside
        t0 = time.perf_counter()
        buffers.load(sources)
        session.ask(cmd, phase, shape)
        session.reply(phase, shape, expect="done")
        window = (time.perf_counter() - t0) * 1e6
        # Check-or-not is drawn only now, once the call is done, and the output read at once.
        read = kind == "timed" and _random.randrange(len(timed_us) + 1) < plan.checks
        if read:
            t_read = time.monotonic()
            with session.phase("reads"):
                ranges = _ranges(session, out_bytes)
                raw = buffers.read(ranges)
            aside_s += time.monotonic() - t_read
        said = session.reply(phase, shape)
        call = Call(kind, _float(said.get("event_us")), _float(said.get("host_us")), window)
        calls.append(call)
        if kind == "null":
            aside_s += window / 1e6
            continue
        timed_us.append(call.event_us)
        windows.append(window)
        if read:
            looks.append(_look(said.get("out"), seed, raw, ranges, buffers, out_bytes))
            if data is not None:
                session.hold_for_recheck(shape, seed, data)
    session.ask({"cmd": "finish"}, phase, shape)
    session.reply(phase, shape)
    return calls, looks


def _inputs(session: TimedSession, shape: dict, plan: Plan, buffers: ShapeBuffers, used: set[int],
            kind: str) -> tuple[int, list | None]:
    """(seed, the data the judge writes before the call): a timed call's inputs, built here from a new seed
    (or a set built before the import). A null call calls nothing, so the shape's first set is written
    again (None here). Where the shape is not staged only the seed goes, and the worker builds the inputs."""
    if not buffers.staged:
        return new_seed(used), None
    if kind == "null":
        return 0, None
    seed, data = plan.ready.pop() if plan.ready else (new_seed(used), None)
    if data is None:
        data = session.inputs(seed, shape)
    if staging.stageable(data, session.device.torch_device)[0] != buffers.form:
        raise Restage(f"a set of inputs of seed {seed} has another form than the shape's first")
    return seed, data


def _ranges(session: TimedSession, out_bytes: int) -> list[list[int]]:
    """The bytes of an output to read: all of them where the problem checks outputs itself, else
    blocks drawn now (compare.sample_ranges)."""
    if session.problem.check is not None or not out_bytes:
        return [[0, out_bytes]] if out_bytes else []
    return sample_ranges(out_bytes, TIMED_CALL_BLOCKS)


def _look(where, seed: int, raw: torch.Tensor, ranges: list, buffers: ShapeBuffers, out_bytes: int) -> Look:
    """What was read, once the worker said what the call returned: an output of another size than the
    checked one is no answer, and bytes still holding the judge's fill were not written by `done`."""
    if not isinstance(where, dict) or str(where.get("dtype")) not in DTYPES or not _dims(where.get("shape")):
        raise Unreadable("the worker did not say what a timed call returned")
    nbytes = math.prod(where["shape"]) * torch.empty((), dtype=DTYPES[str(where["dtype"])]).element_size()
    if nbytes != out_bytes:
        raise Unreadable(f"a timed call returned {where['dtype']} {where['shape']} ({nbytes:,} bytes), where the "
                         f"checked output had {out_bytes:,} bytes")
    if buffers.unwritten(raw, ranges):
        raise Unfinished("the output of a timed call was not yet written when the worker said it was done: the "
                         "judge's own read found the fill its buffer had before the call (the call's work was left "
                         "running, outside the judge's clock)")
    return Look(seed, raw, ranges, list(where["shape"]), str(where["dtype"]))


def median_rse(times: list[float]) -> float:
    """The relative standard error of the median of `times`: 1.2533 sigma / sqrt(n) / median, with
    sigma from the median absolute deviation. The figure reported is a median, so its precision
    decides when to stop; a mean's standard error, swollen by the rare call an interrupt or a clock
    change slowed, kept an H100 timing some shapes 900 calls for no change in their median."""
    if len(times) < 2:
        return 1.0
    x = numpy.asarray(times, dtype=numpy.float64)
    median = float(numpy.median(x))
    if not median > 0:
        return 1.0
    sigma = 1.4826 * float(numpy.median(numpy.abs(x - median)))
    return 1.2533 * sigma / math.sqrt(len(x)) / median


def _dims(shape) -> bool:
    return isinstance(shape, list) and all(type(n) is int and n >= 0 for n in shape)


def _float(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan
