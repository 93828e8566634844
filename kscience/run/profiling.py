"""What a profiler sees of a candidate, in the two moments a run can look.

* `after_evaluation`: free, for every candidate evaluated on a GPU. The compile facts the judge read
  from the compiled artefacts once the worker was gone (EvalResult.compile_facts), and the speed of
  light per timed shape. The scientist reads it with what else the evaluation brought back (time per
  launched kernel and the candidate's own output: kscience.record.seen.Seen).
* Nsight Compute: costly, for the seed and each new best (`--profile auto` or `ncu`, `none` turns it off),
  as a profile job judged where the evaluations are (kscience.evaluate.profile.job) on the shape with the
  most headroom, outside the timed evaluation, with the 'not doing the work' check against what the
  problem needs. `profile_with_ncu` does the same in this process (benchmarks).

Both return keyword arguments for `Store.record_profile`, so the caller stores them as they are.
"""

from __future__ import annotations

from kscience.device import detect
from kscience.evaluate.profile import job as profile_job, ncu
from kscience.evaluate.profile.ncu import NcuProfile
from kscience.evaluate.result import EvalResult
from kscience.problems import Problem
from kscience.problems.roofline import result_sol, stop_at_sol, summary
from kscience.record.candidate import Candidate


# Values of the run setting `profile`: "auto" (the default) and "ncu" profile with Nsight Compute where the
# judging machine has it (each says once when it has not), "none" (or None) turns it off.
PROFILERS = ("auto", "ncu", "none")
# A profile job waits for a slot no evaluation is queued for, unless profiling has so far taken less
# than this share of the slots' time: it never delays the search by more than that.
PROFILE_SHARE = 0.10


def after_evaluation(problem: Problem, result: dict) -> dict:
    """Compile facts and speed of light of one evaluation (EvalResult.to_dict())."""
    return {"compile_facts": list(result.get("compile_facts") or []),
            "sol": [s.to_dict() for s in result_sol(problem, result)]}


def resolve_profiler(setting: str | None, judged_here: bool = True) -> tuple[str | None, str | None]:
    """(the profiler a run asks for, None for none; the one line it says about that, or None). Nsight
    Compute runs where the candidates are judged (a profile job through the executor), so with a queue or
    a cluster (`judged_here` False) whether ncu exists is the judging machine's answer, said once when it
    has none; where this machine judges, a missing ncu is said here, before anything runs. Said only where it
    tells the user something: `--profile ncu` asked for it, or `auto` on a machine with a GPU; `auto` under the
    CPU interpreter, where there are no hardware counters to read, is off without a word."""
    if setting in (None, "none"):
        return None, None
    if judged_here and ncu.ncu_path() is None:
        if setting == "ncu":
            return None, "profile ncu: Nsight Compute (ncu) is not on PATH; the run goes on without hardware counters"
        if detect().interpreted:
            return None, None
        return None, ("profile: off (Nsight Compute, ncu, is not on PATH of this machine, which judges the "
                      "candidates); install it for stall reasons and pipe use")
    return setting, (f"profile: Nsight Compute on the seed and each new best where the judging machine has it, "
                     f"outside the timing, after queued evaluations or within {PROFILE_SHARE:.0%} of slot time "
                     "(--profile none turns it off)")


def worth_profiling(kind: str, result: EvalResult | None, best_us: float | None) -> bool:
    """The profiler looks at the seed and at each correct kernel faster than the best before it (`best_us`,
    None where there is none)."""
    if result is None or not result.ok or not result.geomean_us:
        return False
    if kind == "seed" or best_us is None:
        return kind == "seed"
    return result.geomean_us < best_us


def reached_sol(problem: Problem, best_result: dict, target: float | None) -> bool:
    """--stop-at-sol: the run's best is within `target` of the roofline bound on every shape."""
    return stop_at_sol(result_sol(problem, best_result), target)


def stop_message(problem: Problem, best: Candidate | None, target: float | None) -> str | None:
    """The line a run ends with when its best candidate reached --stop-at-sol; else None."""
    if target is None or best is None or not best.result:
        return None
    sols = result_sol(problem, best.stored_result)
    if not stop_at_sol(sols, target):
        return None
    s = summary(sols)
    return (f"best kernel {best.id} reaches {s.worst:.0%} of speed of light or more on every shape "
            f"(median {s.median:.0%}), within the --stop-at-sol {target:g} target: the run ends here")


MEMBERS = ("seed", "child", "repair", "composite")  # kinds that compete; the baselines are timed, not profiled


def candidate_to_profile(cand: Candidate, candidates: list[Candidate]) -> bool:
    """Whether the profiler looks at this stored candidate, given the run's stored candidates: the seed (a
    repaired seed is the seed), and each new best, a member faster than every correct member judged
    before it."""
    kind = "seed" if cand.iteration == 0 and cand.kind in ("seed", "repair") else cand.kind
    if kind not in MEMBERS:
        return False
    judged = cand.evaluated or float("inf")
    earlier = [c for c in candidates if c.id != cand.id and c.kind in MEMBERS and c.ok
               and c.geomean_us and (c.evaluated or float("inf")) <= judged]
    best = min(earlier, key=lambda c: c.geomean_us, default=None)
    return worth_profiling(kind, cand.result, best.geomean_us if best else None)


def profiled_line(cand_id: str, record: dict | None, said: list[str] = (), host: str | None = None) -> str:
    """One line for the progress display: what Nsight Compute cost and what it saw, or what it `said`
    when it gave no profile."""
    if record is None:
        return "; ".join(x for x in said if x) or f"profile ncu: {cand_id} was not profiled (no benchmark shape)"
    prof = NcuProfile.from_dict(record["ncu"])
    text = (f"{cand_id} profiled with Nsight Compute{f' on {host}' if host else ''} in {record['profile_s']:.1f} s "
            "(outside its timing): "
            f"{len(prof.kernels)} launch(es) of {len(prof.kernel_names)} kernel(s)")
    if prof.occupancy_pct is not None:
        text += f", occupancy {prof.occupancy_pct:.0f}%"
    if prof.dram_pct is not None:
        text += f", DRAM {prof.dram_pct:.0f}% of peak"
    return text + (f"; WARNING {record['flag']}" if record.get("flag") else "")


def profile_shape(problem: Problem, result: dict) -> dict | None:
    """The benchmark shape to profile: where the kernel is furthest from its bound, else the first."""
    s = summary(result_sol(problem, result))
    if s is not None:
        return s.worst_shape
    timed = [sh["shape"] for sh in result.get("shapes", []) if sh.get("phase") == "benchmark"]
    return timed[0] if timed else (problem.benchmarks[0] if problem.benchmarks else None)


def profile_with_ncu(problem: Problem, source: str, result: dict, *, gpu: int | None = None,
                     timeout_s: float = ncu.DEFAULT_TIMEOUT_S, say=print) -> dict | None:
    """Nsight Compute on the shape with the most headroom of a judged candidate, in this process (a
    benchmark's; a run sends a profile job to where it judges instead); None without ncu or a shape."""
    shape = profile_shape(problem, result)
    return None if shape is None else profile_job.profile(problem, source, shape, gpu=gpu, timeout_s=timeout_s,
                                                          say=say)
