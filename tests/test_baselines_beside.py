"""The lines start once the seed passes: the baselines are judged beside them (issue 39).

The eager baseline and torch.compile's are held back by the executor until the test lets them go, so
the order of designs and verdicts is fixed. The scripted scientist and fake executor of test_loop.py;
`GpuExecutor`-style devices make the run time torch.compile, which a CPU machine would not.
"""

import threading
import time

from kscience.record.snapshot import first_of_kind
from test_loop import REFERENCE_US, FakeExecutor, ScriptedScientist, fake_kernel, make_run

COMPILED_US = 1.0

HELD_S = 5.0  # the longest a held baseline waits for the test to let it go


class HeldBaselines(FakeExecutor):
    """Judges the baselines named in `held` ("eager", "compiled") only once `release` is set or HELD_S passed;
    on a GPU when `gpu`. Notes what it finished, in order, and what ran beside torch.compile's baseline."""

    def __init__(self, held: tuple[str, ...], gpu: bool = False, **kw):
        super().__init__(**kw)
        self.held, self.gpu, self.release = held, gpu, threading.Event()
        self.running: list[str] = []  # being judged now: "compiled", "eager" or "kernel"
        self.overlaps: list[tuple[str, ...]] = []  # what ran together with torch.compile's baseline
        self.finished: list[str] = []

    def _judge(self, request):
        what = ("compiled" if "torch.compile" in request.source else "eager" if "_EAGER(data)" in request.source
                else "kernel")
        with self._lock:
            self.running.append(what)
            if "compiled" in self.running and len(self.running) > 1:
                self.overlaps.append(tuple(self.running))
        try:
            if what in self.held:
                self.release.wait(HELD_S)
            if what == "compiled":
                request.source = fake_kernel(COMPILED_US)
            result = super()._judge(request)
        finally:
            with self._lock:
                self.running.remove(what)
                self.finished.append(what)
        if self.gpu:
            result.device = {"name": "fake GPU", "interpreted": False, "versions": {"torch": "2.11.0"}}
        return result


class Watching(ScriptedScientist):
    """Notes, at each design, the eager baseline's row in the bench it was given and what the executor had
    finished; lets the held baselines go at its first design."""

    def __init__(self, executor: HeldBaselines, **kw):
        super().__init__(**kw)
        self.executor, self.eager_at_design, self.finished_at_design = executor, [], []

    async def design(self, base, reference, findings, done=(), in_flight=(), **asked):
        row = next(b for b in self.bench.baselines if b.label == "PyTorch eager")
        self.eager_at_design.append((row.status, row.geomean_us))
        self.finished_at_design.append(list(self.executor.finished))
        self.executor.release.set()
        return await super().design(base, reference, findings, done, in_flight, **asked)


def judged_before_the_end(run, candidate_id: str) -> bool:
    """Whether the candidate's verdict was announced before the run's end."""
    kinds = [(e["type"], e["payload"].get("candidate_id")) for e in run.store.events(run.id)]
    return kinds.index(("candidate_evaluated", candidate_id)) < kinds.index(("run_finished", None))


def test_the_lines_design_while_the_eager_baseline_is_judged_and_later_prompts_have_it(tmp_path):
    executor = HeldBaselines(("eager",), capacity=1, delay_s=0.05)
    sci = Watching(executor, factors=(1.1, 1.2, 1.3, 1.4, 1.5))
    run = make_run(tmp_path, sci, executor, iterations=3)
    started = time.monotonic()
    assert run.start(background=False).status == "finished", run.error
    assert time.monotonic() - started < HELD_S  # the eager baseline was let go by the first design
    # The first design was asked before the eager baseline had a verdict: its prompt lacks it, a later one has it.
    assert sci.eager_at_design[0] == ("not timed", None)
    assert sci.eager_at_design[-1] == ("ok", REFERENCE_US)
    reference = first_of_kind(run.store.candidates(run.id), "eager")
    assert reference.status == "ok"
    assert judged_before_the_end(run, reference.id)


def test_a_run_with_nothing_left_to_design_still_waits_for_its_baselines(tmp_path):
    executor = HeldBaselines(("eager",), capacity=1, delay_s=0.01)
    run = make_run(tmp_path, ScriptedScientist(), executor, iterations=0)
    threading.Timer(0.5, executor.release.set).start()
    assert run.start(background=False).status == "finished", run.error
    reference = first_of_kind(run.store.candidates(run.id), "eager")
    assert (reference.status, reference.geomean_us) == ("ok", REFERENCE_US)


def test_torch_compile_starts_once_the_seed_passes_on_the_idle_slot_without_holding_the_lines_back(tmp_path):
    executor = HeldBaselines(("compiled",), gpu=True, capacity=1, delay_s=0.05)
    sci = Watching(executor, factors=(1.1, 1.2, 1.3, 1.4, 1.5))
    run = make_run(tmp_path, sci, executor, iterations=2)
    started = time.monotonic()
    assert run.start(background=False).status == "finished", run.error
    assert time.monotonic() - started < HELD_S  # let go by the first design, which it did not hold back
    assert "compiled" not in sci.finished_at_design[0]
    compiled = first_of_kind(run.store.candidates(run.id), "compiled")
    assert (compiled.status, compiled.geomean_us) == ("ok", COMPILED_US)
    assert executor.overlaps == []  # it held the one slot: no child was judged beside it on the GPU
    assert judged_before_the_end(run, compiled.id)
