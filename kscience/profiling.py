"""What a profiler sees of a candidate, in the two moments a run can look (issue 17).

* `after_evaluation`: free, for every candidate evaluated on a GPU. The compile facts the judge read
  from the compiled artefacts once the worker was gone (EvalResult.compile_facts), and the speed of
  light per timed shape.
* `profile_with_ncu`: costly, on demand (`--profile ncu`: the seed, and each candidate that beats
  its base). Nsight Compute on the shape with the most headroom, outside the timed evaluation,
  and the 'not doing the work' check against what the problem needs.

Both return keyword arguments for `Store.record_profile`, so the caller stores them as they are.
"""

from __future__ import annotations

from kscience.evaluate import ncu
from kscience.problems import Problem
from kscience.roofline import not_doing_the_work, result_sol, stop_at_sol, summary


PROFILERS = ("ncu",)  # values of the run setting `profile` (None: no profiler)


def after_evaluation(problem: Problem, result: dict) -> dict:
    """Compile facts and speed of light of one evaluation (EvalResult.to_dict())."""
    return {"compile_facts": list(result.get("compile_facts") or []),
            "sol": [s.to_dict() for s in result_sol(problem, result)]}


def worth_profiling(kind: str, result: dict, base_result: dict | None) -> bool:
    """--profile ncu looks at the seed and at each correct candidate that beats its base."""
    if result.get("status") != "ok" or not result.get("geomean_us"):
        return False
    if kind == "seed" or base_result is None:
        return kind == "seed"
    base = base_result.get("geomean_us")
    return base is not None and result["geomean_us"] < base


def reached_sol(problem: Problem, best_result: dict, target: float | None) -> bool:
    """--stop-at-sol: the run's best is within `target` of the roofline bound on every shape."""
    return stop_at_sol(result_sol(problem, best_result), target)


def profile_shape(problem: Problem, result: dict) -> dict | None:
    """The benchmark shape to profile: where the kernel is furthest from its bound, else the first."""
    s = summary(result_sol(problem, result))
    if s is not None:
        return s["worst_shape"]
    timed = [sh["shape"] for sh in result.get("shapes", []) if sh.get("phase") == "benchmark"]
    return timed[0] if timed else (problem.benchmarks[0] if problem.benchmarks else None)


def profile_with_ncu(problem: Problem, source: str, result: dict, *, gpu: int | None = None,
                     timeout_s: float = ncu.DEFAULT_TIMEOUT_S, say=print) -> dict | None:
    """Nsight Compute counters of one candidate, or None without ncu (said once) or without a shape.
    A failed profile is reported through `say` and returns None: it never fails the run."""
    shape = profile_shape(problem, result)
    if shape is None:
        return None
    try:
        prof = ncu.profile(problem.locator, source, shape, overrides=problem.overrides, gpu=gpu,
                           timeout_s=timeout_s, say=say)
    except ncu.NcuError as exc:
        say(f"profile ncu: {exc}")
        return None
    if prof is None:
        return None
    flag = not_doing_the_work(problem, shape, prof.dram_bytes, prof.fp32_flops)
    return {"ncu": prof.to_dict(), "flag": flag, "profile_s": prof.profile_s}
