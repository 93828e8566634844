"""`kscience eval`'s baselines: the candidate's speed-up against PyTorch eager and torch.compile, as
KernelBench's own scripts print it, and against the faster of the two (the baseline that counts).

Both are judged here by the same judge as the candidate, on its benchmark shapes, as a run judges them
(kscience.run.baselines). torch.compile is timed on a GPU only, as a run times it, and taken from an earlier
timing of the same problem on this GPU with these versions where one was kept (kscience.run.baseline_cache);
one it times itself is kept for the next. Under the CPU interpreter the eager figure is an interpreter
timing, which says so.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from kscience.evaluate.judge.evaluation import evaluate
from kscience.evaluate.result import DeviceRecord, EvalRequest, EvalResult
from kscience.problems import Problem
from kscience.record.summary import CPU_NOTE
from kscience.record.text import EAGER, FASTER, fmt_us, fmt_x
from kscience.run import baseline_cache
from kscience.run.baselines import compiled_source, reference_source
from kscience.run.judging import IDLE_SLOT_LIMIT_S
from kscience.record.candidate import EAGER_KIND, faster_of_eager_and_compile, speedup


def _judged(problem: Problem, kind: str, source: str, gpu: int | None, unconfined: bool,
            timeout_s: float | None = None) -> EvalResult:
    request = EvalRequest(problem=problem.locator, source=source, overrides=problem.overrides_for(kind),
                          shapes="benchmarks", tolerance=problem.tolerance_for(kind), baseline=True,
                          timeout_s=timeout_s, allow_weak_confinement=unconfined)
    return evaluate(request, gpu=gpu, problem=problem)


@dataclass(frozen=True)
class BaselineFigure:
    """One baseline as `kscience eval` judged it (or recalled it): its verdict, its time, and a note on where the
    figure came from ("" for none)."""

    status: str | None  # None: not timed (torch.compile under the CPU interpreter)
    geomean_us: float | None
    message: str
    note: str = ""

    @classmethod
    def of(cls, result: EvalResult, note: str = "") -> "BaselineFigure":
        return cls(status=result.status, geomean_us=result.geomean_us, message=result.message, note=note)

    @property
    def us(self) -> float | None:
        """Its time where it passed."""
        return self.geomean_us if self.status == "ok" else None

    def to_dict(self) -> dict:
        out = {"status": self.status, "geomean_us": self.geomean_us, "message": self.message}
        return {**out, "note": self.note} if self.note else out


@dataclass(frozen=True)
class Against:
    """The candidate against PyTorch eager, torch.compile and the faster of the two; `to_dict()` is the
    `baselines` object of `kscience eval --json`."""

    eager: BaselineFigure
    compiled: BaselineFigure
    faster_us: float | None
    interpreted: bool
    speedup_eager: float | None
    speedup_compiled: float | None
    speedup_faster: float | None

    def to_dict(self) -> dict:
        return {"eager": self.eager.to_dict(), "compiled": self.compiled.to_dict(), "faster_us": self.faster_us,
                "interpreted": self.interpreted, "speedup_eager": self.speedup_eager,
                "speedup_compiled": self.speedup_compiled, "speedup_faster": self.speedup_faster}


def judge_baselines(problem: Problem, candidate: EvalResult, gpu: int | None, unconfined: bool,
                    say=print) -> Against:
    """The baselines of a timed candidate, judged here; `say` tells what is judged."""
    interpreted = bool(candidate.judged_on.interpreted)
    say(f"judging {EAGER} beside it" + (" (under the CPU interpreter, as the candidate was)" if interpreted else ""))
    eager = BaselineFigure.of(_judged(problem, EAGER_KIND, reference_source(problem), gpu, unconfined))
    if interpreted:
        compiled = BaselineFigure(status=None, geomean_us=None, message="",
                                  note="not timed under the CPU interpreter; a run times it on a GPU only")
    else:
        compiled = _compiled(problem, candidate.judged_on, gpu, unconfined, say)
    faster = faster_of_eager_and_compile(eager.us, compiled.us, compiled.status is not None)
    return Against(eager=eager, compiled=compiled, faster_us=faster, interpreted=interpreted,
                   speedup_eager=speedup(eager.us, candidate.geomean_us),
                   speedup_compiled=speedup(compiled.us, candidate.geomean_us),
                   speedup_faster=speedup(faster, candidate.geomean_us))


def _compiled(problem: Problem, device: DeviceRecord, gpu: int | None, unconfined: bool, say) -> BaselineFigure:
    source = compiled_source(problem)
    kept = baseline_cache.recall(problem, "compiled", source, device)
    if kept is not None:
        result = EvalResult.from_dict(kept.result)
        return BaselineFigure.of(result, kept.message(result.message))
    say(f"judging torch.compile beside it (max-autotune, at most {IDLE_SLOT_LIMIT_S:g} s; kept for the next time)")
    result = _judged(problem, "compiled", source, gpu, unconfined, IDLE_SLOT_LIMIT_S)
    baseline_cache.keep(problem, "compiled", source, result, result.to_dict(),
                        f"kscience eval on {socket.gethostname()}")
    return BaselineFigure.of(result)


def baseline_lines(against: Against) -> list[str]:
    """What `kscience eval` prints after the verdict: each baseline's time and the candidate's speed-up."""
    lines = ["speed-up of the candidate (its geomean against each baseline's, both judged here):"]
    for name, row, gain in ((EAGER, against.eager, against.speedup_eager),
                            ("torch.compile", against.compiled, against.speedup_compiled)):
        if row.status == "ok":
            text = f"{fmt_us(row.geomean_us, ' us'):>14}  {fmt_x(gain)}" + (f"  [{row.note}]" if row.note else "")
        elif row.status is None:
            text = f"{'-':>14}  {row.note or 'not timed'}"
        else:
            text = f"{'-':>14}  {row.status}: {row.message[:120]}"
        lines.append(f"  {name:<18}{text}")
    faster = against.faster_us
    lines.append(f"  {'faster of the two':<18}{fmt_us(faster, ' us'):>14}  {fmt_x(against.speedup_faster)}"
                 if faster else f"  {'faster of the two':<18}{'-':>14}  unknown, torch.compile was not timed")
    lines.append(f"  ({FASTER}: the baseline papers now report against)")
    if against.interpreted:
        lines.append(f"  ({CPU_NOTE})")
    return lines
