"""A run learns between iterations, and ends on its own, when the evaluator is slow (issue 54, item 4).

With one line and an evaluator slower than the model, iteration 2 is designed only once iteration 1's
verdicts and findings are in, so its designer prompt holds them. Through a queue served by batch jobs
(Executor.batches), profiles and same-host pairs go out with the next evaluation, never alone, and a run whose
iterations are spent ends without sending them (they are recorded as skipped). A line whose verdicts are all in
finishes with what came back with them before its next design.
"""

import dataclasses
import threading

from kscience.evaluate.result import EvalResult
from kscience.record.snapshot import Snapshot
from kscience.record.store import Store
from kscience.run.config import RunConfig
from kscience.run.driver import Run
from quiet_batches import QuietBatches
from test_loop import FakeExecutor, ScriptedScientist, fake_kernel


def test_one_line_with_a_slow_evaluator_designs_iteration_2_from_iteration_1s_verdicts(tmp_path):
    # The offline scientist answers like a model of 1-2 s a design (its first answer also imports Optuna);
    # each verdict takes 3 s on one of four slots, as a queue's round trip does: the three children of
    # iteration 1 come back together after 3 s, so the evaluator is the slower side. (Spread over the four
    # slots, the evaluator's backlog once looked shorter than two model answers, and iteration 2 was designed
    # from the seed before any verdict came back.)
    run = Run.create(RunConfig(problem="matmul", llm="offline@0.6", iterations=2, lines=1),
                     store=Store(tmp_path / "k.db"), executor=FakeExecutor(capacity=4, delay_s=3.0))
    assert run.start(background=False).status == "finished", run.error
    designs = [c["prompt"] for c in run.store.llm_calls(run.id) if c["role"] == "designer"]
    assert len(designs) == 2
    second = designs[1]
    first_children = [c for c in run.store.candidates(run.id) if c.kind == "child" and c.iteration == 1]
    assert len(first_children) == 3 and all(c.status == "ok" for c in first_children)
    findings = [f for f in run.store.findings(run.id) if f.iteration == 1]
    assert len(findings) == 3
    for finding in findings:  # each names its measured time: "+20.6% measured (129.00 -> 107.00 us)"
        assert " ".join(finding.text.split()) in second
        assert "measured (" in finding.text
    assert "Under way on this base in another line" not in second  # nothing of iteration 1 was still out
    base = next(p.base_id for p in run.store.plans(run.id) if p.iteration == 2)
    assert base in {c.id for c in first_children}  # built on a verdict of iteration 1, not on the seed
    fastest = min(first_children, key=lambda c: c.geomean_us)
    assert f"# Base kernel `{base}`" in second and base == fastest.id


def is_optional(request) -> bool:
    """A profile job, or half of a same-host pair (kscience.run.judging tags those requests)."""
    return request.profile_shape is not None or "(confirm " in (request.candidate_id or "")


class BatchJobs(QuietBatches):
    """A queue served by batch jobs, each batch on a host of its own. Profile jobs answer with a small
    Nsight Compute record. `batches_seen` records what each batch held."""

    batches = True
    judges_elsewhere = True

    def __init__(self):
        self.batches_seen: list[list] = []
        super().__init__()

    def judge_batch(self, batch):
        host = f"fresh-{len(self.batches_seen)}"
        self.batches_seen.append([request for request, _ in batch])
        for request, future in batch:
            if request.profile_shape is not None:
                result = EvalResult(status="ok", message="profiled", device={"host": host},
                                    profile={"ncu": {"kernels": [{"name": "k"}]}, "profile_s": 0.1})
            else:
                result = self.inner._judge(request)
                result.device = dict(result.device, host=host)
            future.set_result(dataclasses.replace(result))


def test_through_batch_jobs_optional_work_goes_out_with_an_evaluation_and_a_spent_run_ends_without_it(tmp_path):
    executor = BatchJobs()
    sci = ScriptedScientist(factors=(0.9, 0.8, 0.7, 0.95, 0.85))  # every round has a new best
    run = Run.create(RunConfig(problem="softmax", iterations=2, lines=1, profile="auto"),
                     store=Store(tmp_path / "k.db"), seed_source=fake_kernel(100.0), scientist=sci, executor=executor)
    try:
        assert run.start(background=False).status == "finished", run.error
    finally:
        executor.shutdown()
    batches = executor.batches_seen
    assert any(is_optional(r) for batch in batches for r in batch)  # profiles and pairs did go out
    # ... but never alone: every batch holding optional work holds an evaluation too, and the run's end did
    # not wait on a batch of its own for them.
    assert all(any(not is_optional(r) for r in batch) for batch in batches), [
        [r.candidate_id for r in batch] for batch in batches]
    profiled = {p.candidate_id for p in run.store.profiles(run.id) if p.ncu}
    snap = Snapshot.load(run.store, run.id)
    assert snap.seed.id in profiled  # the seed's profile, and earlier bests', travelled with later evaluations
    events = [e["payload"] for e in run.store.events(run.id) if e["type"] == "candidate_profiled"]
    skipped = {e["candidate_id"] for e in events
               if "not profiled: the run's work ended before it could go out" in e["message"]}
    # the bests judged after the last evaluation went out, the final best among them, were held to the end
    assert snap.best.id in skipped and not skipped & profiled
    # Verdicts came from a fresh host per batch: the last best had no same-host pair sent, and says so.
    assert snap.best.notes.get("unconfirmed") and "the run's work ended" in snap.best.message
    assert any("judged back to back with" in c.message for c in snap.candidates)
    pairs = {}  # each pair's tag -> the batches its two requests went out in
    for number, batch in enumerate(batches):
        for r in batch:
            if "(confirm " in (r.candidate_id or ""):
                pairs.setdefault(r.candidate_id.split("(")[1], []).append(number)
    assert pairs and all(len(set(found)) == 1 and len(found) == 2 for found in pairs.values())


class SlowProfiles(BatchJobs):
    """Profiles come back a second after the evaluations they went out with, as Nsight Compute's replays
    outlast a timing."""

    def judge_batch(self, batch):
        later = [(request, future) for request, future in batch if request.profile_shape is not None]
        super().judge_batch([(request, future) for request, future in batch if request.profile_shape is None])
        if later:
            threading.Timer(1.0, super().judge_batch, [later]).start()


class Watching(ScriptedScientist):
    """Notes, at each design, whether the seed's profile is stored (`profiled`, set once the run exists)."""

    def __init__(self):
        super().__init__()
        self.profiled, self.seen = (lambda: False), []

    async def design(self, base, reference, findings, done=(), in_flight=(), **asked):
        self.seen.append(self.profiled())
        return await super().design(base, reference, findings, done, in_flight, **asked)


def test_a_line_whose_verdicts_are_in_waits_for_what_came_back_with_them_before_its_next_design(tmp_path):
    # The model answers at once, so the line could design ahead while verdicts are awaited; once they are all
    # in, it finishes with them (the seed's profile went out with its first child and comes back after it)
    # and its next design sees that profile.
    executor, sci = SlowProfiles(), Watching()
    store = Store(tmp_path / "k.db")
    run = Run.create(RunConfig(problem="softmax", iterations=2, lines=1, profile="auto"), store=store,
                     seed_source=fake_kernel(100.0), scientist=sci, executor=executor)
    sci.profiled = lambda: any(p.ncu and p.candidate_id == Snapshot.load(store, run.id).seed.id
                               for p in store.profiles(run.id))
    try:
        assert run.start(background=False).status == "finished", run.error
    finally:
        executor.shutdown()
    assert sci.seen == [False, True]
