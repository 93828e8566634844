"""The judge's side of the timed calls (trusted): one command per call, bracketed by its own clock.

Everything that decides what a call is and whether it is checked is drawn here, in the trusted
process, from the OS's randomness, and reaches the worker only when it is needed: which rotated
set comes next, when a call gets inputs from a seed drawn that moment (`fresh`) or regenerated
from a set already used (`again`), when a call does nothing at all (`null`), and, only after a
call has returned, whether its output is kept for the recheck. The worker cannot learn a fresh
seed before the command that uses it, so it cannot have prepared an answer for it; whatever it
does with the seed once it has it happens inside the judge's window for that command.
"""

from __future__ import annotations

import dataclasses
import math
import secrets
import time

from kscience.evaluate import peek

_random = secrets.SystemRandom()


@dataclasses.dataclass
class Call:
    kind: str  # first, repeat, fresh, again or null (see timing.py)
    event_us: float  # what the worker reports: CUDA events (GPU) or its host clock (CPU)
    host_us: float  # what the worker reports: its device-synchronised host clock
    window_us: float  # the judge's own clock, from sending the command to reading the reply


@dataclasses.dataclass
class Plan:
    """How many calls of each kind, and when to stop (GPU or CPU values from judge.py)."""
    warmup: int
    fresh: int
    again: int
    nulls: int
    min_n: int
    max_n: int
    max_seconds: float
    target_rse: float


class Unreadable(Exception):
    """The worker pointed the judge at memory that does not hold a tensor of the promised size."""


def run_calls(session, shape: dict, seeds: list[int], plan: Plan, cap: int) -> tuple[list[Call], list[int], dict]:
    """Drive one shape's timed calls through `session` (judge.py's _Session).

    Returns every call in order, the seeds of the outputs the worker keeps, in the order it holds
    them for `sample`, and the outputs the judge read itself ({seed: tensor}). Kept: one uniformly
    chosen call per rotated set (reservoir sampling), every fresh and every regenerated call.
    Where the judge can read the worker's memory (`session.peek_pid`, host tensors), it copies a
    kept output itself the moment it decides to keep it, and the worker keeps nothing.
    """
    n_sets = len(seeds)
    specials = ["fresh"] * plan.fresh + ["again"] * plan.again + ["null"] * plan.nulls
    _random.shuffle(specials)
    seen = {w % n_sets for w in range(plan.warmup)}
    calls: list[Call] = []
    kept: dict[int, int] = {}  # slot -> seed of an output the worker keeps
    read: dict[int, tuple[int, object]] = {}  # slot -> (seed, tensor) of an output the judge read itself
    per_set = [0] * n_sets
    keep_last, rotation, repeated = None, 0, False
    total = total_sq = special_s = 0.0
    n_rot, t_loop = 0, time.monotonic()
    while True:
        mean = total / n_rot if n_rot else 0.0
        rse = math.sqrt(max(total_sq / n_rot - mean * mean, 0.0) / n_rot) / mean if n_rot > 1 and mean > 0 else 1.0
        spent = time.monotonic() - t_loop - special_s  # making fresh inputs is not timing
        settled = n_rot >= plan.max_n or spent > plan.max_seconds or (n_rot >= plan.min_n and rse < plan.target_rse)
        if settled and not specials and rotation >= n_sets and repeated:
            break
        cmd: dict = {"cmd": "call", "keep_last": keep_last}
        if specials and (settled or (n_rot > 0 and _random.randrange(4) == 0)):
            kind = specials.pop()
            if kind == "fresh":
                seed = secrets.randbits(31)
                while seed in seeds:
                    seed = secrets.randbits(31)
                cmd.update(kind="fresh", seed=seed)
            elif kind == "again":
                seed = seeds[_random.choice(sorted(seen))]
                cmd.update(kind="again", seed=seed)
            else:
                cmd.update(kind="null", set=rotation % n_sets)
        else:
            j = rotation % n_sets
            rotation += 1
            kind = "repeat" if j in seen else "first"
            seen.add(j)
            cmd.update(kind=kind, set=j)
        t0 = time.perf_counter()
        session.ask(cmd, "time", shape)
        reply = session.reply("time", shape)
        window = (time.perf_counter() - t0) * 1e6
        call = Call(kind, _float(reply.get("event_us")), _float(reply.get("host_us")), window)
        calls.append(call)
        # Keep-or-not is drawn only now, after the call returned; the worker hears it with the next
        # command, unless the judge takes the copy itself, now.
        keep_last = None
        if kind in ("fresh", "again"):
            special_s += window / 1e6
            keep_last = n_sets + len(kept) + len(read)
            kept[keep_last] = cmd["seed"]
        elif kind == "null":
            special_s += window / 1e6
        else:
            n_rot += 1
            repeated = repeated or kind == "repeat"
            total, total_sq = total + call.event_us, total_sq + call.event_us ** 2
            per_set[j] += 1
            if _random.randrange(per_set[j]) == 0:
                keep_last, kept[j] = j, seeds[j]
        if keep_last is not None and session.peek_pid is not None:
            look = peek.read_tensor(session.peek_pid, reply.get("out") or {}, cap)
            if look is None:
                raise Unreadable(f"the output of a timed {kind} call could not be read where the worker said it was")
            read[keep_last] = (kept.pop(keep_last), look)
            keep_last = None
    slots = sorted(kept)
    session.ask({"cmd": "finish", "keep_last": keep_last, "slots": slots}, "time", shape)
    session.reply("time", shape)
    return calls, [kept[s] for s in slots], list(read.values())


def _float(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan
