"""The controller with a scripted scientist and an instant executor, so the loop's own logic is
what is tested: ordering, repair, concurrency, events, findings and the metrics it stores.

A fake kernel is a few lines of text (`TIME_US = 80.0`, `STATUS = "ok"`); the fake executor
reads them back as the evaluation's verdict. End-to-end runs with the real offline scientist
and the real evaluator are in test_run_cli.py and test_resume.py.
"""

import asyncio
import hashlib
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from kscience.evaluate.executors.base import Executor
from kscience.evaluate.result import EvalResult, ShapeResult
from kscience.run.events import CandidateEvaluated, RunFailed, RunFinished
from kscience.run.config import RunConfig
from kscience.run.driver import Run
from kscience.record.snapshot import run_metrics
from kscience.scientist.llm import BudgetExceeded, LLMError, NothingToPropose
from kscience.scientist.roles import Draft, Plan, Selection
from kscience.record.store import Store


def fake_kernel(time_us: float, status: str = "ok") -> str:
    return f'"""fake kernel"""\nTIME_US = {time_us!r}\nSTATUS = {status!r}\n'


def kernel_time(source: str) -> float:
    return float(re.search(r"TIME_US = ([0-9.]+)", source).group(1))


REFERENCE_US = 40.0


class FakeExecutor(Executor):
    """Judges fake kernels after `delay_s`, counting how many evaluations of kernels overlap. Any other source
    passes with a time between 50 and 150 us derived from its text."""

    def __init__(self, capacity: int = 1, delay_s: float = 0.02):
        self._capacity, self.delay_s = capacity, delay_s
        self._pool = ThreadPoolExecutor(max_workers=8)
        self._lock = threading.Lock()
        self.in_flight = self.max_in_flight = 0
        self.requests = []

    @property
    def capacity(self) -> int:
        return self._capacity

    def _judge(self, request) -> EvalResult:
        if "_EAGER(data)" in request.source:  # the eager PyTorch baseline the run times
            request.source = fake_kernel(REFERENCE_US)
        kernel = not request.baseline  # baselines are asked for together with the seed, beyond the capacity
        with self._lock:
            self.in_flight += kernel
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        time.sleep(self.delay_s)
        with self._lock:
            self.in_flight -= kernel
        marked = re.search(r"STATUS = '(\w+)'", request.source)
        if marked:
            status, us = marked.group(1), kernel_time(request.source)
        else:  # a real kernel (from the offline scientist): correct, with a time fixed by its text
            status, us = "ok", 50.0 + int(hashlib.sha256(request.source.encode()).hexdigest()[:6], 16) % 100
        ok = status == "ok"
        shape = ShapeResult(shape={"m": 8}, ok=ok, phase="benchmark", time_us=us if ok else None)
        return EvalResult(status=status, message=f"fake {status}", geomean_us=us if ok else None,
                          shapes=[shape], device={"name": "fake device", "interpreted": True},
                          timing_label="fake clock", failing_shape=None if ok else {"m": 8})

    def submit(self, request):
        self.requests.append(request)
        return self._pool.submit(self._judge, request)

    def shutdown(self):
        self._pool.shutdown(wait=True)


class ScriptedScientist:
    """Five plans per round, the first three chosen; plan i multiplies the base's time by factors[i].
    Plans whose title is in `broken` produce a wrong answer; repairs fix it unless `repairs_fail`."""

    model_name = "scripted"
    target = None  # the evaluation device is the target
    bench = None

    async def preflight(self, kernels):
        pass

    def observe(self, bench):
        self.bench = bench

    def __init__(self, factors=(0.9, 0.8, 1.1, 0.5, 0.5), broken=(), repairs_fail=False, fail=None,
                 writers_must_overlap=0):
        self.factors, self.broken, self.repairs_fail = factors, set(broken), repairs_fail
        self.fail = fail or {}  # role -> exception raised by that role's next call
        self.calls: list[tuple] = []
        self.design_findings: list[list[str]] = []
        self.design_done: list[tuple[str, list[str]]] = []
        self._overlap = writers_must_overlap
        self._writers_waiting = 0
        self._all_writing: asyncio.Event | None = None

    def _enter(self, role, *detail):
        self.calls.append((role, *detail))
        if role in self.fail:
            raise self.fail.pop(role)

    async def select(self, population, findings=(), taken=()):
        self._enter("select", tuple(v.id for v in population))
        best = min((v for v in population if v.status == "ok"), key=lambda v: v.geomean_us)
        return Selection(base_id=best.id, reference_id=None, justification="fastest correct")

    async def design(self, base, reference, findings, done=(), in_flight=(), **asked):
        self._enter("design", base.id)
        self.design_findings.append(list(findings))
        self.design_done.append((base.id, list(done)))
        factors = [self.factors[i % len(self.factors)] for i in range(asked.get("wanted", len(self.factors)))]
        return [Plan(title=f"x{f} #{len(self.design_findings)}.{i}", rationale="scripted", changes=[f"scale {f}"],
                     predicted_min_pct=0.0, predicted_max_pct=20.0, innovation=1, chosen=i < 3,
                     why_chosen="first three" if i < 3 else "")
                for i, f in enumerate(factors)]

    async def write(self, plan, base, reference):
        self._enter("write", plan.title)
        if self._overlap:  # every writer of the round must be waiting here before any goes on
            self._all_writing = self._all_writing or asyncio.Event()
            self._writers_waiting += 1
            if self._writers_waiting == self._overlap:
                self._all_writing.set()
            await asyncio.wait_for(self._all_writing.wait(), 5)
        factor = float(plan.title[1:].split()[0])
        status = "wrong_answer" if plan.title.split(" #")[0] in self.broken else "ok"
        return Draft(source=fake_kernel(round(kernel_time(base.source) * factor, 3), status), mode="edit",
                     edits_total=2, edits_applied=2 if status == "ok" else 1)

    async def repair(self, source, status, message, failing_shape, attempt, coverage="", profile=None):
        self._enter("repair", status, message, failing_shape, attempt)
        fixed = source if self.repairs_fail else source.replace("'wrong_answer'", "'ok'")
        return Draft(source=fixed + f"# attempt {attempt}\n", mode="edit", edits_total=1, edits_applied=1)

    async def finding(self, plan, base, child_status, child_geomean_us, child=None, neighbourhood=None):
        self._enter("finding", plan.title)
        return f"{plan.title} on {base.id}: {child_status}, {child_geomean_us}"


def make_run(tmp_path, scientist, executor=None, **config) -> Run:
    store = Store(tmp_path / "k.db")
    config.setdefault("iterations", 1)
    return Run.create(RunConfig(problem="softmax", **config), store=store, seed_source=fake_kernel(100.0),
                      scientist=scientist, executor=executor or FakeExecutor())


def test_the_designer_is_told_which_experiments_its_base_has_already_had(tmp_path):
    sci = ScriptedScientist(factors=(1.1, 1.2, 1.3, 1.4, 1.5))  # every child slower: the seed stays the base
    run = make_run(tmp_path, sci, iterations=2)
    assert run.start(background=False).status == "finished"
    seed_id = run.store.candidates(run.id)[0].id
    first_round = [p.title for p in run.store.plans(run.id) if p.iteration == 1 and p.chosen]
    assert len(first_round) == 3
    assert sci.design_done == [(seed_id, []), (seed_id, first_round)]


def test_a_run_evaluates_seed_reference_and_three_children_per_iteration(tmp_path):
    run = make_run(tmp_path, ScriptedScientist(), iterations=2)
    assert run.start(background=False).status == "finished"
    cands = run.store.candidates(run.id)
    assert [c.kind for c in cands[:2]] == ["seed", "eager"]
    assert [c.kind for c in cands[2:]] == ["child"] * 6
    assert all(c.status == "ok" for c in cands)
    assert "_EAGER(data)" in cands[1].source
    plans = run.store.plans(run.id)
    assert len(plans) == 10 and sum(p.chosen for p in plans) == 6
    assert len(run.store.findings(run.id)) == 6
    m = run_metrics(run.store, run.id)
    # the second round builds on the first round's best (80 us): 0.8 * 80 = 64 us
    assert (m.seed_us, m.best_us, m.n_candidates) == (100.0, 64.0, 7)
    assert m.best_us <= m.seed_us and m.speedup_vs_seed == pytest.approx(100 / 64)
    assert m.edit_apply_rate == 1.0 and m.repair_success_rate is None
    # predicted 0..20 %: x0.9 measures +11.1 % (inside), x0.8 +25 % and x1.1 -9.1 % (outside)
    assert len(m.uplift) == 6 and m.uplift_in_range == 2


def test_each_event_is_committed_before_a_subscriber_sees_it(tmp_path):
    run = make_run(tmp_path, ScriptedScientist())
    seen = []

    def check(event):
        stored = run.store.events(run.id)
        assert stored and stored[-1]["type"] == event.type and stored[-1]["payload"] == event.to_dict()
        seen.append(event.type)

    run.subscribe(check)
    run.start(background=False)
    assert seen == [e["type"] for e in run.store.events(run.id)]
    assert seen[-1] == "run_finished" and seen.count("candidate_evaluated") == 5
    assert {"stage_changed", "hypotheses_proposed", "candidate_written", "finding_recorded"} <= set(seen)


def test_a_subscriber_that_raises_does_not_end_the_run(tmp_path, caplog):
    run = make_run(tmp_path, ScriptedScientist())
    run.subscribe(lambda event: 1 / 0)
    seen = []
    run.subscribe(seen.append)  # later subscribers still get every event
    assert run.start(background=False).status == "finished"
    assert len(seen) == len(run.store.events(run.id))
    warnings = [r for r in caplog.records if "event subscriber" in r.getMessage()]
    assert len(warnings) == 1 and "ZeroDivisionError" in warnings[0].getMessage()


def test_broken_candidates_get_repairs_with_status_message_and_shape(tmp_path):
    scientist = ScriptedScientist(broken={"x0.8"})
    run = make_run(tmp_path, scientist)
    run.start(background=False)
    repairs = [c for c in scientist.calls if c[0] == "repair"]
    assert repairs == [("repair", "wrong_answer", "fake wrong_answer", {"m": 8}, 1)]
    cands = run.store.candidates(run.id)
    broken = next(c for c in cands if c.status == "wrong_answer")
    fixed = next(c for c in cands if c.kind == "repair")
    assert fixed.parent_id == broken.id and fixed.status == "ok" and fixed.plan_id == broken.plan_id
    m = run_metrics(run.store, run.id)
    assert (m.repairs_tried, m.repairs_succeeded, m.repair_success_rate) == (1, 1, 1.0)
    assert (m.edits_applied, m.edits_total) == (2 + 2 + 1 + 1, 2 + 2 + 2 + 1)


@pytest.mark.parametrize("k", [0, 2])
def test_repairs_stop_after_k_attempts(tmp_path, k):
    scientist = ScriptedScientist(broken={"x0.8"}, repairs_fail=True)
    run = make_run(tmp_path, scientist, repairs=k)
    assert run.start(background=False).status == "finished"
    assert [c[-1] for c in scientist.calls if c[0] == "repair"] == list(range(1, k + 1))
    m = run_metrics(run.store, run.id)
    assert (m.repair_attempts, m.repairs_succeeded) == (k, 0)
    assert m.repair_success_rate == (0.0 if k else None)


def test_a_broken_seed_is_repaired_and_one_that_stays_broken_fails_the_run(tmp_path):
    store = Store(tmp_path / "k.db")
    good = Run.create(RunConfig(problem="softmax", iterations=1), store=store, executor=FakeExecutor(),
                      seed_source=fake_kernel(100.0, "wrong_answer"), scientist=ScriptedScientist())
    assert good.start(background=False).status == "finished"
    root = [c for c in store.candidates(good.id) if c.iteration == 0 and c.kind != "eager"]
    assert [(c.kind, c.status) for c in root] == [("seed", "wrong_answer"), ("repair", "ok")]

    bad = Run.create(RunConfig(problem="softmax", iterations=1, repairs=1), store=store, executor=FakeExecutor(),
                     seed_source=fake_kernel(100.0, "compile_error"), scientist=ScriptedScientist(repairs_fail=True))
    assert bad.start(background=False).status == "failed"
    assert bad.error.startswith("the seed kernel does not pass (compile_error: fake compile_error)")


def test_llm_calls_of_one_round_overlap_while_evaluations_stay_within_capacity(tmp_path):
    executor = FakeExecutor(capacity=1, delay_s=0.05)
    run = make_run(tmp_path, ScriptedScientist(writers_must_overlap=3), executor)
    assert run.start(background=False).status == "finished"  # the writers' barrier would time out if serial
    assert executor.max_in_flight == 1

    executor = FakeExecutor(capacity=2, delay_s=0.2)
    run = make_run(tmp_path / "..", ScriptedScientist(), executor)
    run.start(background=False)
    assert executor.max_in_flight == 2


def test_every_earlier_finding_reaches_the_designer_oldest_first(tmp_path):
    scientist = ScriptedScientist()
    run = make_run(tmp_path, scientist, iterations=3)
    run.start(background=False)
    stored = [f.text for f in run.store.findings(run.id)]
    assert len(stored) == 9
    assert scientist.design_findings == [[], stored[:3], stored[:6]]


def test_identical_sources_are_judged_once(tmp_path):
    executor = FakeExecutor()
    run = make_run(tmp_path, ScriptedScientist(factors=(1.0, 1.0, 0.5, 0.5, 0.5)), executor)
    run.start(background=False)
    cands = run.store.candidates(run.id)
    assert len(cands) == 5 and len(executor.requests) == 3  # seed, reference, one child; two reuse the seed's
    reused = [c for c in cands if c.message.startswith("same source as")]
    assert len(reused) == 2 and all(c.geomean_us == 100.0 for c in reused)


def test_llm_failure_ends_the_run_failed_and_budget_stops_it(tmp_path):
    run = make_run(tmp_path, ScriptedScientist(fail={"design": LLMError("openai:gpt-x: connection refused")}))
    assert run.start(background=False).status == "failed"
    assert run.error == "openai:gpt-x: connection refused"
    assert run.store.events(run.id)[-1]["type"] == RunFailed.type

    run = make_run(tmp_path / "..", ScriptedScientist(fail={"select": BudgetExceeded("budget spent: $1.00")}))
    assert run.start(background=False).status == "stopped"
    assert run.error == "budget spent: $1.00"


def test_a_failing_experiment_stops_its_siblings_at_their_next_step(tmp_path):
    executor = FakeExecutor(capacity=3, delay_s=0.2)
    run = make_run(tmp_path, ScriptedScientist(fail={"finding": LLMError("model down")}), executor)
    assert run.start(background=False).status == "failed" and run.error == "model down"
    children = [c for c in run.store.candidates(run.id) if c.kind == "child"]
    # all three were evaluating together when the first finding failed: each evaluation was committed
    assert len(children) == 3 and all(c.status == "ok" for c in children)
    assert len(executor.requests) == 5 and run.store.findings(run.id) == []


def test_unexpected_errors_are_one_line_with_the_traceback_kept_in_the_event(tmp_path):
    run = make_run(tmp_path, ScriptedScientist(fail={"select": KeyError("base")}))
    assert run.start(background=False).status == "failed"
    assert run.error == "KeyError: 'base'"
    payload = run.store.events(run.id)[-1]["payload"]
    assert "Traceback" in payload["detail"] and "KeyError" in payload["detail"]


def test_inside_a_running_event_loop_the_run_goes_to_a_thread(tmp_path):
    run = make_run(tmp_path, ScriptedScientist(), FakeExecutor(delay_s=0.1))
    events = []
    run.subscribe(events.append)

    async def notebook_cell():
        run.start()  # a loop is running here, as in Jupyter: must not block or call asyncio.run
        assert run.running  # on a thread of its own, already going
        await asyncio.sleep(0)
        return await asyncio.get_running_loop().run_in_executor(None, run.wait, 30)

    assert asyncio.run(notebook_cell()) == "finished"
    assert isinstance(events[-1], RunFinished) and any(isinstance(e, CandidateEvaluated) for e in events)


def test_stop_ends_after_the_evaluation_in_flight(tmp_path):
    run = make_run(tmp_path, ScriptedScientist(), FakeExecutor(delay_s=0.1), iterations=5)
    after_stop = []

    def watch(event):
        if run._stop.is_set():
            after_stop.append(event)
        elif isinstance(event, CandidateEvaluated) and event.kind == "child":
            run.stop()

    run.subscribe(watch)
    run.start(background=True)
    assert run.wait(30) == "stopped" and run.error is None
    assert [e.type for e in after_stop] == [RunFinished.type]  # nothing new was started
    children = [c for c in run.store.candidates(run.id) if c.kind == "child"]
    assert [c.status for c in children] == ["ok", "pending", "pending"]  # written, left for a resume
    assert run_metrics(run.store, run.id).iterations_done == 1


@pytest.mark.parametrize("strategy", ["tournament", "tree", "llm"])
def test_the_offline_scientist_drives_the_loop_with_every_strategy(tmp_path, strategy):
    store = Store(tmp_path / "k.db")
    # Three iterations: the second may be designed ahead, before any child has a verdict (nothing to select
    # from); the third is designed once the first has ended, with its children in the population.
    run = Run.create(RunConfig(problem="softmax", iterations=3, strategy=strategy, seed=3), store=store,
                     executor=FakeExecutor(delay_s=0))
    assert run.start(background=False).status == "finished", run.error
    plans = store.plans(run.id)
    assert {p.iteration for p in plans} == {1, 2, 3} and len(plans) <= 15
    chosen = [p.id for p in plans if p.chosen]
    assert sorted(f.plan_id for f in store.findings(run.id)) == sorted(chosen)  # every experiment finished
    roles = {c["role"] for c in store.llm_calls(run.id)}
    assert {"designer", "writer", "finding"} <= roles and ("selector" in roles) == (strategy == "llm")
    assert store.run(run.id).environment["model"] == "offline"


class ExhaustedScientist(ScriptedScientist):
    """Proposes only experiments already carried out on the base: the rules choose none of them."""

    async def design(self, base, reference, findings, done=(), in_flight=(), **asked):
        plans = await super().design(base, reference, findings, done, in_flight)
        for p in plans:
            p.chosen, p.why_chosen = False, ""
        return plans


def test_an_iteration_with_nothing_left_to_try_ends_the_run_and_says_so(tmp_path):
    sci = ExhaustedScientist()
    run = make_run(tmp_path, sci, iterations=3)
    assert run.start(background=False).status == "finished"
    assert run.store.plans(run.id) == []  # no empty round was recorded
    assert [c[0] for c in sci.calls] == ["select", "design"]  # the seed is the only correct member to try
    said = [e["payload"]["detail"] for e in run.store.events(run.id) if e["payload"].get("stage") == "done"]
    assert said and "nothing left to try" in said[0]


class SeedOnlyScientist(ScriptedScientist):
    """Has no experiment for any kernel but the seed, as the offline scientist has none for a per-shape
    composite: an offline softmax run on an H200 ended in error when a composite became its best member."""

    async def design(self, base, reference, findings, done=(), in_flight=(), **asked):
        if base.parent_id is not None:
            self._enter("design", base.id)
            raise NothingToPropose(f"no catalogue move applies to {base.id}")
        return await super().design(base, reference, findings, done, in_flight, **asked)


def test_a_base_the_scientist_has_nothing_for_gives_way_to_the_next(tmp_path):
    sci = SeedOnlyScientist()  # children at 0.9, 0.8 and 1.1 of the seed: the fastest child is chosen next
    run = make_run(tmp_path, sci, iterations=2)
    assert run.start(background=False).status == "finished"
    designs = [c[1] for c in sci.calls if c[0] == "design"]
    seed = designs[0]
    assert len(designs) == 4 and designs[-1] == seed and seed not in designs[1:3]  # two children, then the seed
    assert len({p.base_id for p in run.store.plans(run.id)}) == 1  # both rounds built on the seed
    said = [e["payload"]["detail"] for e in run.store.events(run.id) if e["payload"].get("stage") == "no plan"]
    assert len(said) == 2 and all("no catalogue move applies" in d for d in said)
