"""A scripted scientist and an instant executor for the Jupyter tests, so views and magics are
tested against real runs, stores and events without waiting for the Triton interpreter.

A fake kernel is a module with `TIME_US` and `STATUS` constants; the executor reads them back as
the verdict. Each design round proposes three plans: "faster" (0.8x, chosen), "broken" (a wrong
answer, chosen) and "untried" (not chosen).
"""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor

from kscience.evaluate.executors.base import Executor
from kscience.evaluate.result import EvalResult, ShapeResult
from kscience.run.driver import Run
from kscience.scientist.roles import Draft, Plan, Selection

REFERENCE_US = 40.0


def fake_kernel(time_us: float, status: str = "ok") -> str:
    return (f'"""fake kernel"""\nTIME_US = {time_us!r}\nSTATUS = {status!r}\n\n\n'
            "def custom_kernel(data):\n    return data[0]\n")


def _time(source: str) -> float:
    return float(re.search(r"TIME_US = ([0-9.]+)", source).group(1))


class FakeExecutor(Executor):
    def __init__(self, delay_s: float = 0.0):
        self.delay_s = delay_s
        self._pool = ThreadPoolExecutor(max_workers=2)

    @property
    def capacity(self) -> int:
        return 1

    def _judge(self, request) -> EvalResult:
        time.sleep(self.delay_s)
        source = fake_kernel(REFERENCE_US) if "_PROBLEM.ref_kernel" in request.source else request.source
        status = re.search(r"STATUS = '(\w+)'", source).group(1)
        us = _time(source) if status == "ok" else None
        shapes = [ShapeResult(shape={"m": m}, ok=status == "ok", phase="benchmark", time_us=us and us * f,
                              floor_us=1.0) for m, f in ((8, 0.5), (16, 2.0))]
        return EvalResult(status=status, message=f"fake {status}", geomean_us=us, shapes=shapes,
                          device={"name": "fake device", "interpreted": True}, timing_label="fake clock",
                          failing_shape=None if status == "ok" else {"m": 8},
                          stderr_tail="" if status == "ok" else "AssertionError: mismatch at [3, 1]")

    def submit(self, request):
        return self._pool.submit(self._judge, request)

    def shutdown(self):
        self._pool.shutdown(wait=True)


class FakeScientist:
    model_name = "scripted"
    target = None  # the evaluation device is the target
    bench = None

    async def preflight(self, kernels):
        pass

    def observe(self, bench):
        self.bench = bench

    async def select(self, population, findings=(), taken=()):
        best = min((v for v in population if v.status == "ok"), key=lambda v: v.geomean_us)
        return Selection(base_id=best.id, reference_id=None, justification="the fastest correct kernel")

    async def design(self, base, reference, findings, done=(), in_flight=(), **asked):
        def plan(title, chosen):
            return Plan(title=title, rationale=f"{title} because the profile says so", changes=[title],
                        predicted_min_pct=5.0, predicted_max_pct=30.0, innovation=3, chosen=chosen,
                        why_chosen="scripted" if chosen else "")

        return [plan("faster", True), plan("broken", True), plan("untried", False)]

    async def write(self, plan, base, reference):
        us = _time(base.source)
        source = fake_kernel(round(us * 0.8, 3)) if plan.title == "faster" else fake_kernel(us, "wrong_answer")
        return Draft(source=source, mode="edits", edits_total=1, edits_applied=1)

    async def repair(self, source, status, message, failing_shape, attempt, coverage="", profile=None):
        return Draft(source=None, mode="edits", edits_total=1, edits_applied=0, error="no fix found")

    async def finding(self, plan, base, child_status, child_geomean_us, child=None, neighbourhood=None):
        return f"{plan.title}: {child_status}"


def fake_run_class(delay_s: float = 0.0):
    """A Run whose create/resume use the fakes, to put in place of kscience.jupyter.launch.Run."""

    class FakeRun(Run):
        @classmethod
        def create(cls, config, *, store, seed_source=None, scientist=None, executor=None):
            return super().create(config, store=store, seed_source=seed_source, scientist=FakeScientist(),
                                  executor=FakeExecutor(delay_s))

        @classmethod
        def resume(cls, run_id, *, store, iterations=None, force=False, scientist=None, executor=None, **changes):
            return super().resume(run_id, store=store, iterations=iterations, force=force,
                                  scientist=FakeScientist(), executor=FakeExecutor(delay_s), **changes)

    return FakeRun
