"""A profile job: Nsight Compute on one shape of a candidate already judged, run by whatever judges
the request (a local slot, a Ray actor, a `queue:DIR` worker), so the counters are taken where the
GPU is, not where the model runs.

A job is an `EvalRequest` with `profile_shape` set; its `EvalResult` carries `profile` (the counters,
the 'not doing the work' flag and what the profile cost) or, in `profile_said`, why there is none:
no ncu on the judging machine, or an ncu run that failed. It never judges: its status is ok and it
has no time.
"""

from __future__ import annotations

import socket
import time

from kscience.device import detect
from kscience.evaluate import result as R
from kscience.evaluate.profile import ncu
from kscience.problems import Problem
from kscience.problems.roofline import not_doing_the_work

NO_NCU = "no Nsight Compute (ncu) on the judging machine"


def profile(problem: Problem, source: str, shape: dict, *, gpu: int | None = None,
            timeout_s: float = ncu.DEFAULT_TIMEOUT_S, say=print) -> dict | None:
    """Nsight Compute counters of `source` on `shape` with the 'not doing the work' flag and what the
    profile cost, or None without ncu (said once). A failed profile is said through `say` and returns
    None: it never fails anything."""
    try:
        prof = ncu.profile(problem.locator, source, shape, overrides=problem.overrides, gpu=gpu,
                           timeout_s=timeout_s, say=say)
    except (ncu.NcuError, OSError) as exc:  # OSError: ncu or its log could not be run or read
        say(f"profile ncu: {exc}")
        return None
    if prof is None:
        return None
    return {"ncu": prof.to_dict(), "flag": not_doing_the_work(problem, shape, prof.dram_bytes, prof.fp32_flops),
            "profile_s": prof.profile_s}


def run(request: R.EvalRequest, problem: Problem, gpu: int | None = None) -> R.EvalResult:
    t0 = time.monotonic()
    host = socket.gethostname()
    result = R.EvalResult(status=R.OK, message="", device=dict(detect().describe(), host=host),
                          timing_label="none (a profile job, not an evaluation)")
    said: list[str] = []
    if ncu.ncu_path() is None:
        said.append(f"{NO_NCU} ({host})")
    else:
        result.profile = profile(problem, request.source, dict(request.profile_shape or {}), gpu=gpu,
                                 timeout_s=request.timeout_s or ncu.DEFAULT_TIMEOUT_S, say=said.append)
    if result.profile is not None:
        result.message = f"profiled with Nsight Compute on {host} in {result.profile['profile_s']:.1f} s"
    else:
        result.profile_said = result.message = ("; ".join(said) or "profile ncu: no report")[:400] + \
            ("" if host in "".join(said) else f" (on {host})")
    result.wall_s = time.monotonic() - t0
    return result
