"""An evaluation that has not started says it is queued and behind what, never the phase of the evaluation
ahead of it; one in flight says its own phase. One GPU: one slot, and an executor that runs one request at
a time, as the local executor does, saying what its judge does only for the request it runs."""

import time
from concurrent.futures import ThreadPoolExecutor

from kscience.record.store import Store
from kscience.run import waiting
from kscience.run.config import RunConfig
from kscience.run.driver import Run
from kscience.run.events import EvaluationWaiting
from test_loop import FakeExecutor, ScriptedScientist, fake_kernel

HELD_S = 1.5  # the seed's and torch.compile's evaluations
SAY_S = 0.3
SLOW = "# judged slowly\n"
PHASE = "checking correctness (the judge's limits, 60 s to 300 s per step)"  # what an evaluation in flight says


class OneGpu(FakeExecutor):
    def __init__(self):
        super().__init__(capacity=1, delay_s=0.01)
        self._pool = ThreadPoolExecutor(max_workers=1)

    def _judge(self, request):
        slow = SLOW in request.source or "torch.compile" in request.source
        time.sleep(HELD_S if slow else 0)
        result = super()._judge(request)
        result.device = {"name": "fake GPU", "interpreted": False}  # where torch.compile's baseline is timed
        return result

    def doing(self, future):
        return "checking correctness" if future.running() else None


def test_a_queued_evaluation_says_what_it_waits_behind_and_one_in_flight_its_phase(tmp_path, monkeypatch):
    monkeypatch.setattr(waiting, "RUNNING_SAY_S", SAY_S)
    said: list[EvaluationWaiting] = []
    with Store(tmp_path / "k.db") as store:
        run = Run.create(RunConfig(problem="softmax", iterations=1, compiled_baseline=True), store=store,
                         seed_source=SLOW + fake_kernel(100.0), scientist=ScriptedScientist(), executor=OneGpu())
        run.subscribe(lambda e: said.append(e) if isinstance(e, EvaluationWaiting) else None)
        assert run.start(background=False).status == "finished"
        kinds = {c.id: c.kind for c in store.candidates(run.id)}
    first = {kind: next(i for i, k in kinds.items() if k == kind) for kind in ("seed", "compiled")}
    states = {kind: [e.state for e in said if kinds[e.candidate_id] == kind] for kind in set(kinds.values())}

    # In flight, the seed and torch.compile's baseline say what their judge is doing.
    assert PHASE in states["seed"] and PHASE in states["compiled"]
    # The eager baseline, asked for beside the seed's slot, waits in the executor behind the seed. Once its own
    # evaluation runs it may say its own phase, if a report falls in the milliseconds it takes (a loaded machine).
    assert states["eager"] and states["eager"][0].startswith("queued ")
    assert all(s.startswith("queued ") or s == PHASE for s in states["eager"])
    assert any(s.startswith(f"queued behind seed {first['seed']} (checking correctness, in flight ")
               for s in states["eager"])
    # The children wait for the slot torch.compile's baseline holds, queued until they start.
    assert states["child"] and states["child"][0].startswith("queued ")
    assert all(s.startswith("queued ") or s == PHASE for s in states["child"])
    assert any(s.startswith(f"queued behind torch.compile of PyTorch eager {first['compiled']} "
                            "(checking correctness, in flight ") for s in states["child"])
