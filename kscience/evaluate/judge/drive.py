"""The judge's side of the timed calls (trusted): one command per call, bracketed by its own clock.

Everything that decides what a call is and whether it is checked is drawn here, in the trusted
process, from the OS's randomness, and reaches the worker only when it is needed: the seed of
each call's inputs (a new one for every command, never sent before: no timed call sees content
that any earlier call saw), when a call does nothing at all (`null`), and, only after a call has
returned, whether its output is checked; if it is, the judge reads it then. The worker cannot
learn a seed before the command that uses it, so it cannot have prepared an answer for it;
whatever it does with the seed once it has it (generating the inputs included) happens inside
the judge's window for that command.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import secrets
import time

import numpy
import torch

from kscience.evaluate.judge import peek
from kscience.evaluate.judge.compare import TIMED_CALL_BLOCKS, gather, sample_ranges
from kscience.evaluate.judge.driving import TimedSession
from kscience.evaluate.wire import DTYPES

_random = secrets.SystemRandom()
# An output is taken for unwritten where this many aligned words in a row are the judge's fill (a 31-bit
# random word: an honest output holds it four times in a row with odds of 2^-124). Outputs shorter than
# that prove nothing either way and are judged by their values.
UNWRITTEN_WORDS = 4


@dataclasses.dataclass
class Call:
    kind: str  # timed or null (see timing.py)
    event_us: float  # what the worker reports: CUDA events (GPU) or its host clock (CPU)
    host_us: float  # what the worker reports: its device-synchronised host clock
    window_us: float  # the judge's own clock, from sending the command to reading the reply


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
    # Seeds of inputs the judge built before the import, sent to no worker yet: each goes to one of
    # the first `checks` timed calls, which are always read, so their recheck builds nothing.
    ready: list[int] = dataclasses.field(default_factory=list)
    build_us: float = 0.0  # the judge's own time to build the shape's inputs (session.build_us)
    built_n: int = 0  # where that is most of a timed bracket (BUILT_SHARE): this many timed calls suffice
    built_nulls: int = 0  # and this many null calls


# A round's calls are mostly their input builds where the judge's own build time is at least this
# share of the median bracket of its timed calls so far. The brackets are the judge's own clock and
# the build was measured before the import: a candidate can only make its brackets longer, which
# takes it out of the rule, never into it.
BUILT_SHARE = 0.5
# And only where one build takes at least this long: below it the usual number of calls costs a fraction of a
# second, and fewer would only make the median rougher (built-in SwiGLU builds its weights in milliseconds
# around a GEMM of about one).
BUILT_LEAST_S = 0.05


class Unreadable(Exception):
    """The worker pointed the judge at memory that does not hold a tensor of the promised size."""


class Unstoppable(Exception):
    """Not every process of the worker could be stopped for the judge's read of its memory."""


class Unfinished(Exception):
    """The judge's own read right after a timed call found its output not yet written."""


@dataclasses.dataclass
class Look:
    """What the judge read of one timed call's output, right after the call returned."""
    seed: int  # the inputs the call had
    whole: "torch.Tensor | None" = None  # the whole output, copied out of the worker's memory
    raw: "torch.Tensor | None" = None  # or its bytes at `ranges`, as the worker sent them
    ranges: list = dataclasses.field(default_factory=list)
    shape: list = dataclasses.field(default_factory=list)  # what the worker said the output was
    dtype: str = ""


def new_seed(used: set[int]) -> int:
    """A seed drawn from the OS's randomness in this process, never used before in `used` (and added)."""
    seed = secrets.randbits(31)
    while seed in used:
        seed = secrets.randbits(31)
    used.add(seed)
    return seed


def run_calls(session: TimedSession, shape: dict, plan: Plan, cap: int,
              used: set[int]) -> tuple[list[Call], list[Look]]:
    """`_run_calls` with this process's garbage collector paused: a full collection of the judge's
    own objects (a torch process holds hundreds of thousands) inside one bracket would add its
    pause to that call's estimate alone."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _run_calls(session, shape, plan, cap, used)
    finally:
        if collecting:
            gc.enable()


def _run_calls(session: TimedSession, shape: dict, plan: Plan, cap: int,
               used: set[int]) -> tuple[list[Call], list[Look]]:
    """Drive one shape's timed calls through `session` (a `session.Session`), after `prepare`.

    Every command carries a seed new to this evaluation (`used` holds every seed sent so far, and
    every seed the judge drew for inputs it built ahead: `plan.ready`, which the first timed calls carry).
    Returns every call in order and what the judge read of the outputs it chose to check: the
    i-th timed call is read with probability min(1, checks / i) (so about checks * (1 + ln(n /
    checks)) reads for n calls, every call equally likely to be among the last `checks` kept by
    a reservoir, and all of them are rechecked). The choice is drawn once a call has returned, and
    the output is read at once, before the worker is told anything more: on the GPU from the judge's
    own buffer the worker copied it into (`session.keep`, output_buffer.py), on the CPU copied out of
    the worker's memory by the judge itself with the whole worker frozen (`session.peek_pid`), else
    sent by the worker at byte ranges drawn now. Which of these is the judge's choice: an output on
    any device but the evaluation's is no answer. Raises peek.Stuck when the judge's own read did
    not return in time, Unstoppable when the worker could not be stopped for it, Unfinished when
    the output was not written by the time the reply came.
    """
    timed_us: list[float] = []  # event times of the timed calls: the figure is their median
    windows: list[float] = []  # the judge's brackets around them
    nulls_sent = 0
    calls: list[Call] = []
    looks: list[Look] = []
    aside_s = 0.0
    t_loop = time.monotonic()
    while True:
        n = len(timed_us)
        built = (bool(plan.built_n and windows) and plan.build_us >= BUILT_LEAST_S * 1e6
                 and plan.build_us >= BUILT_SHARE * float(numpy.median(windows)))
        min_n = plan.built_n if built else plan.min_n
        nulls = max((plan.built_nulls if built else plan.nulls) - nulls_sent, 0)
        rse = median_rse(timed_us) if n >= min_n else 1.0
        spent = time.monotonic() - t_loop - aside_s  # null calls and reading outputs are not timing
        enough = n >= min_n or (n >= plan.few_n and spent > plan.enough_s)
        settled = enough and (n >= plan.max_n or spent > plan.max_seconds or rse < plan.target_rse)
        if settled and not nulls:
            break
        kind = "null" if nulls and (settled or (n > 0 and _random.randrange(4) == 0)) else "timed"
        nulls_sent += kind == "null"
        ready = kind == "timed" and n < plan.checks and plan.ready
        cmd = {"cmd": "call", "kind": kind, "seed": plan.ready.pop() if ready else new_seed(used)}
        t0 = time.perf_counter()
        session.ask(cmd, "time", shape)
        reply = session.reply("time", shape)
        window = (time.perf_counter() - t0) * 1e6
        call = Call(kind, _float(reply.get("event_us")), _float(reply.get("host_us")), window)
        calls.append(call)
        if kind == "null":
            aside_s += window / 1e6
            continue
        timed_us.append(call.event_us)
        windows.append(window)
        # Check-or-not is drawn only now, after the call returned, and the output is read at once.
        if _random.randrange(len(timed_us)) < plan.checks:
            t_read = time.monotonic()
            with session.phase("reads"):
                looks.append(_read(session, shape, reply.get("out"), cmd["seed"], kind, cap))
            aside_s += time.monotonic() - t_read  # reading is not timing
    session.ask({"cmd": "finish"}, "time", shape)
    session.reply("time", shape)
    return calls, looks


def median_rse(times: list[float]) -> float:
    """The relative standard error of the median of `times`: 1.2533 sigma / sqrt(n) / median, with
    sigma from the median absolute deviation. The figure reported is the median, so its precision
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


def _read(session: TimedSession, shape: dict, where, seed: int, kind: str, cap: int) -> Look:
    if not isinstance(where, dict) or str(where.get("dtype")) not in DTYPES or not _dims(where.get("shape")):
        raise Unreadable(f"the worker did not say where the output of a timed {kind} call was")
    out_shape, dtype = where["shape"], DTYPES[str(where["dtype"])]
    nbytes = math.prod(out_shape) * torch.empty((), dtype=dtype).element_size()
    if nbytes > cap:
        raise Unreadable(f"the output of a timed {kind} call is far larger than the answer")
    if where.get("device") != session.device.torch_device:  # the judge, not the worker, picks how to read
        raise Unreadable(f"the worker said the output of a timed {kind} call lies on {str(where.get('device'))[:20]}, "
                         f"not on {session.device.torch_device}")
    if session.keep is not None:
        return _read_own_buffer(session, out_shape, dtype, nbytes, seed, kind)
    if session.peek_pid is not None:
        # The whole worker stopped: no candidate code runs until the bytes are copied.
        with session.worker.frozen() as stopped:
            if not stopped:
                raise Unstoppable("the worker's processes could not all be stopped to read the output "
                                  f"of a timed {kind} call")
            whole = peek.read_tensor(session.peek_pid, where, cap)
        if whole is None:
            raise Unreadable(f"the output of a timed {kind} call could not be read where the worker said it was")
        return Look(seed, whole=whole)
    # A problem's own check needs the whole output; closeness to the reference can be sampled.
    (raw,) = session.sample("time", shape, [torch.empty(out_shape, dtype=dtype, device="meta")],
                            whole=session.problem.check is not None, blocks=TIMED_CALL_BLOCKS)
    if raw is None:
        raise Unreadable(f"the worker sent the output of a timed {kind} call in the wrong shape or size")
    return Look(seed, raw=raw, ranges=session.ranges[0], shape=out_shape, dtype=str(where["dtype"]))


def _read_own_buffer(session: TimedSession, out_shape: list, dtype, nbytes: int, seed: int, kind: str) -> Look:
    """The output as the worker copied it into the judge's buffer (output_buffer.py), read in the judge's
    own CUDA context, which waits for none of the worker's work: bytes still holding the word the
    buffer was filled with as the call's inputs were loaded were not written when the reply came. A
    worker that skips that fill leaves the previous call's output there, wrong for these inputs."""
    if nbytes > session.keep.nbytes:
        raise Unreadable(f"the output of a timed {kind} call is larger than the checked output")
    whole = session.problem.check is not None  # a problem's own check needs all of it
    ranges = [[0, nbytes]] if whole or not nbytes else sample_ranges(nbytes, TIMED_CALL_BLOCKS)
    raw = gather(session.keep.tensor[:nbytes], ranges).cpu()
    if unwritten(raw, ranges, session.fill_word):
        raise Unfinished(f"the output of a timed {kind} call was not yet written when its reply came: the judge's "
                         "own read found the fill its buffer had before the call (the call's work was left "
                         "running on the GPU, outside every timed bracket)")
    return Look(seed, raw=raw, ranges=ranges, shape=out_shape, dtype=str(dtype).removeprefix("torch."))


def unwritten(raw: torch.Tensor, ranges: list[list[int]], word: int) -> bool:
    """Whether any UNWRITTEN_WORDS aligned words of the read ranges still hold only `word` (int32)."""
    offset = 0
    for _, n in ranges:
        words = n // 4 // UNWRITTEN_WORDS * UNWRITTEN_WORDS
        if words:
            rows = raw[offset:offset + words * 4].view(torch.int32).view(-1, UNWRITTEN_WORDS)
            if bool((rows == word).all(1).any()):
                return True
        offset += n
    return False


def _dims(shape) -> bool:
    return isinstance(shape, list) and all(type(n) is int and n >= 0 for n in shape)


def _float(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan
