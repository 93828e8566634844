"""The trusted side of an evaluation: drive a disposable worker, compute the answers, decide.

`evaluate(request, gpu)` never raises for anything a candidate does: every outcome is an
EvalResult with one status. Expected outputs are computed here and never leave this
process; the worker only ever sees inputs. The conversation with the worker (its channel,
limits, checks and timed calls) is `session.Session`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
import secrets
import time
from collections.abc import Callable

import torch

from kscience.device import Device, detect
from kscience.evaluate import kernel_times, library_rule
from kscience.evaluate import result as R
from kscience.evaluate.judge import candidate_output, checking, drive
from kscience.evaluate.judge.session import Session
from kscience.evaluate.judge.verdict import Verdict
from kscience.evaluate.profile import job as profile_job, probes
from kscience.evaluate.sandbox import compile_cache
from kscience.evaluate.sandbox.workers import weak_confinement_allowed, weak_points
from kscience.problems import Problem, ProblemError, geomean, load_problem, probed_facts, shape_label
from kscience.problems.coverage import interpreter_coverage
from kscience.problems import precision as P
from kscience.redact import redact

JUDGE_THREADS = 4  # torch's CPU threads in a process that only judges (see judging_process)


def judging_process(cpu_threads: int | None = None) -> None:
    """Set up a process whose one job is judging (a local slot, a Ray actor, a benchmark): few CPU
    threads for torch. The judge's CPU tensor work is small (byte compares and gathers), and with
    torch's default of a thread per core every small operation waits on all of them. On an H100
    host (16 cores) that made the next evaluation's spare, importing torch beside the judge, cost
    2.7-3.7 s of checking fp8_blockscale_gemm; with 4 threads (or 1) the spare cost nothing
    measurable. Not done for a judge called in a user's own process, whose threads are theirs.
    `cpu_threads`: this slot's share of the cores, when interpreter slots share them."""
    torch.set_num_threads(min(JUDGE_THREADS, cpu_threads or JUDGE_THREADS))


def evaluate(request: R.EvalRequest, gpu: int | None = None, problem: Problem | None = None,
             keep_spare: bool = False, on_phase: Callable[[str], None] | None = None) -> R.EvalResult:
    """Judge one candidate. Problem errors (a broken problem file) raise ProblemError; nothing else does.
    `keep_spare` starts the next evaluation's worker now (see `spares.start_worker`); `on_phase` is told
    what the judge is doing ("checking correctness") whenever that changes."""
    problem = problem or load_problem(request.problem, request.overrides)
    P.check_policy(request.precision)  # before any work: the request's error, as a malformed tolerance is
    if request.tolerance is not None:
        problem = _with_tolerance(problem, request.tolerance)
    if request.profile_shape is not None:
        return profile_job.run(request, problem, gpu)
    t_start = time.monotonic()
    forbidden = () if request.baseline else problem.forbidden_calls
    refused = library_rule.static_violation(request.source, forbidden)
    if refused:  # before any worker exists: the kernel would be the baseline's, not the model's
        return R.EvalResult(status=R.REJECTED, message=refused, device=detect().describe())
    weak, allowed = weak_points(), request.allow_weak_confinement or weak_confinement_allowed()
    device_ctx = torch.cuda.device(gpu) if gpu is not None else contextlib.nullcontext()
    with device_ctx:
        device = detect()
        if weak and not allowed:  # before any worker exists, so no candidate code runs
            return R.EvalResult(status=R.REJECTED, device=device.describe(),
                                confinement={"weak": weak, "allowed_weak": False},
                                message=f"refusing to run unconfined: no {'; no '.join(weak)} on this machine "
                                        "(allow_weak_confinement=True, --unconfined or "
                                        "KSCIENCE_ALLOW_WEAK_CONFINEMENT=1 to run anyway)")
        session = Session(problem, device, gpu, request.timeout_s, keep_spare, request.step_limit_s, on_phase,
                          request.build_limit_s)
        result = R.EvalResult(status=R.OK, message="", device=device.describe(),
                              timing_label=R.timing_label(device.interpreted),
                              confinement=dict(session.worker.confinement(), weak=weak, allowed_weak=allowed))
        try:
            session.worker.use_cache(compile_cache.key(request.source, str(sorted(result.device.items()))))
            _run(session, problem, request, result)
        except Verdict as v:
            result.status, result.message, result.failing_shape = v.status, v.args[0], v.shape
            result.geomean_us = None
            if "landlock" not in result.confinement and "sandbox" in session.last_reply:  # failed on import
                result.confinement["landlock"] = str(session.last_reply["sandbox"])[:200]
        except torch.cuda.OutOfMemoryError:  # the worker shares the GPU and may have taken it all
            result.status, result.geomean_us = R.REJECTED, None
            result.message = "GPU memory exhausted in the judge: the candidate's worker left too little free memory"
        except ProblemError:
            raise
        except Exception as exc:  # a judge bug met by this candidate: a verdict, never an executor's traceback
            result.status, result.geomean_us = R.REJECTED, None
            result.message = R.bounded(redact(f"the judge failed on this candidate's replies: {type(exc).__name__}: {exc}"),
                                       1000)
        finally:
            with session.phase("close"):  # killing the worker, then reading its compile facts
                # a finished build is kept whatever came after it: its entry serves only this very source
                session.close(keep_cache=session.imported)
                # the expected answers' allocator cache, which the next worker needs (docs/evaluation.md)
                session.give_back_memory()
            result.stdout_tail, result.stderr_tail = session.worker.tails()
            result.output = candidate_output.digest(result.stdout_tail, result.stderr_tail)
            result.device.update(session.worker_info)
            # What the knowledge notes' version-dependent claims are on this device (run once per device
            # and Triton version, then read from the cache); after the worker is gone, never during timing
            result.device["probes"] = probes.results(device)
            result.compile_facts = session.worker.compile_facts  # read from its private caches as it closed
            result.wall_s = time.monotonic() - t_start
            result.build_s = round(session.builds.seconds, 3)
            result.phases_s = {k: round(v, 3) for k, v in session.phases.seconds.items()}
    return R.under_policy(request, result)  # the verdict under the request's precision policy


def order_seed() -> int:
    """The seed of one evaluation's shape order, from the OS's randomness in this process."""
    return secrets.randbits(63)


def shape_order(shapes: list, seed: int, which: str) -> list:
    """`shapes` in the order an evaluation with `seed` (EvalResult.shape_order_seed) runs them:
    fresh for every evaluation, so no kernel can count on having seen one shape before another
    (a table filled by an earlier shape's call), and the same again for the recorded seed."""
    shuffled = list(shapes)
    random.Random(f"{seed}:{which}").shuffle(shuffled)
    return shuffled


def _with_tolerance(problem: Problem, tolerance) -> Problem:
    """The problem checked at the request's (rtol, atol) instead of its own (a vendor baseline's)."""
    try:
        rtol, atol = (float(x) for x in tolerance)
    except (TypeError, ValueError):
        raise ProblemError(f"a tolerance is two numbers (rtol, atol), not {tolerance!r}") from None
    if not all(math.isfinite(x) and x >= 0 for x in (rtol, atol)):
        raise ProblemError(f"a tolerance is two finite numbers >= 0, not {tolerance!r}")
    return dataclasses.replace(problem, rtol=rtol, atol=atol)


def _setup_steps(steps) -> dict[str, float | None]:
    """The worker's own account of its import (device, problem, gpu, integrity, candidate seconds),
    kept short: it comes from the candidate's process."""
    if not isinstance(steps, dict):
        return {}
    return {str(k)[:20]: _shown(v) for k, v in list(steps.items())[:8]}


def _shown(x) -> float | None:
    x = as_float(x)
    return round(x, 3) if math.isfinite(x) else None


def _run(session: Session, problem: Problem, request: R.EvalRequest, result: R.EvalResult) -> None:
    weight_seed = secrets.randbits(31)
    if problem.kind.builds_model:  # KernelBench: both models are built from the same secret weight seed
        session.problem = problem = _with_reference_weights(problem, weight_seed, session.device)
    interpreted = session.device.interpreted
    result.shape_order_seed = order_seed()
    tests = problem.shapes("tests", interpreted) if request.shapes in ("tests", "all") else []
    benches = problem.shapes("benchmarks", interpreted) if request.shapes in ("benchmarks", "all") else []
    tests = shape_order(tests, result.shape_order_seed, "tests")
    benches = shape_order(benches, result.shape_order_seed, "benchmarks")
    with session.phase("start"):  # what is left of the worker's own start (a spare has started already)
        session.echo()
    with session.phase("builds"):  # before any candidate code exists in the worker
        for shape in benches:
            session.build_us(shape)
        session.give_back_memory()
    with session.phase("start"):  # the job: the worker loads the problem, no candidate code yet
        session.ask({"problem": problem.locator, "overrides": problem.overrides, "source": request.source,
                     "weight_seed": weight_seed, "probed": probed_facts(problem),
                     "forbidden": [] if request.baseline else list(problem.forbidden_calls)}, "start")
        loaded = session.reply("start", expect="loaded")
    session.worker_info = {"sandbox": str(loaded.get("sandbox", "unknown")), "namespaces": session.worker.namespaced,
                           "waiting": str(loaded.get("waiting", "unknown"))[:20]}
    result.confinement["landlock"] = session.worker_info["sandbox"]
    if not session.worker_info["sandbox"].startswith("landlock v") and not result.confinement["allowed_weak"]:
        raise Verdict(R.REJECTED, f"the worker could not confine itself ({session.worker_info['sandbox'][:200]})")
    with session.phase("pristine"):  # what an empty call costs, on a worker that holds no candidate code yet
        for shape in benches:
            session.pristine_nulls(shape)
    with session.phase("import"):
        session.ask({"cmd": "import"}, "import")
        ready = session.reply("import", expect="ready")
        session.imported = True
    # the worker's own account of its import, sent after it: shown, never weighed
    session.worker_info["setup_s"] = _setup_steps(ready.get("setup_s"))
    for shape in tests:
        with session.phase("check"):
            result.shapes.append(checking.check(session, shape, "test")[0])
    timed = []
    for shape in benches:
        with session.phase("check"):
            res, cap = checking.check(session, shape, "benchmark")
        result.shapes.append(res)
        try:
            session.time(res, cap)
        except Verdict:
            res.ok = False  # correct, but its timing failed: the shape is not an ok one
            raise
        timed.append((res, cap))
    if _kernel_times(session, request, result, timed):  # else the worker is gone or out of step: no handshake
        with session.phase("finish"):
            session.finish()
    cap = session.worker.memory_cap_hit()  # a process killed for memory may not have been the worker
    if cap:
        raise Verdict(R.CRASHED, cap)
    times = [s.time_us for s in result.shapes if s.time_us]
    result.geomean_us = geomean(times) if times else None
    n_ok = len({shape_label(s.shape) for s in result.shapes})  # a shape checked as a test and again timed is one
    coverage = interpreter_coverage(problem, request.shapes) if interpreted else None
    said = [plural(n_ok, "shape") + " correct"]
    if times:
        over = plural(len(times), coverage.timed_noun if coverage else "benchmark shape")
        said.append(f"geomean {result.geomean_us:,.2f} us over {over}, timed by {result.timing_label}")
    if coverage and coverage.said:  # how much of the problem's own lists the interpreter's covered
        said.append(coverage.said)
    result.message = "; ".join(said)


def _kernel_times(session: Session, request: R.EvalRequest, result: R.EvalResult, timed: list) -> bool:
    """Time per launched kernel on every timed shape, after the timed calls (kernel_times.py). Advice:
    a candidate that fails under the profiler keeps the verdict its checked and timed calls earned,
    and the pass says why it has no kernels. False when the worker can no longer be spoken to."""
    if "kernels" not in request.measure or not timed:
        return True
    try:
        with session.phase("kernels"):
            result.kernel_profiler = kernel_times.measure(session, timed, lambda: drive.new_seed(session.used_seeds))
    except Verdict as v:
        for res, _ in timed:
            res.kernels = []
        result.kernel_profiler = R.bounded(f"per-kernel times not taken: the profiled calls ended in {v.status}: {v}", 1000)
        return False
    return True


def _with_reference_weights(problem: Problem, seed: int, device: Device) -> Problem:
    model = problem.make_model(problem.reference_model_class, seed).to(device.torch_device)

    def reference(data):
        with torch.no_grad():
            return model(*data)

    return dataclasses.replace(problem, ref_kernel=reference)


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def as_float(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan

