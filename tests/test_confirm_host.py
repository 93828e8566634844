"""A best that holds on one machine: once verdicts come from several hosts, a would-be best (and every
composite) is judged again beside the current best, both submitted at once so one host takes them."""

import dataclasses

from kscience.record.snapshot import Snapshot
from kscience.record.store import Store
from kscience.record.summary import summary_lines
from kscience.run.config import RunConfig
from kscience.run.driver import Run
from quiet_batches import QuietBatches
from test_loop import FakeExecutor, ScriptedScientist, fake_kernel, kernel_time

HOSTS = {"gpu-a": 1.0, "gpu-b": 0.85}  # gpu-b times everything 15% faster


class TwoHosts(QuietBatches):
    """Each batch goes to the next host in turn; a host's clock scales every time it reports."""

    def __init__(self):
        self.turn = 0
        self.confirmations: dict[str, list[str]] = {}  # pair -> hosts its two requests went to
        super().__init__()

    def judge_batch(self, batch):
        host = list(HOSTS)[self.turn % len(HOSTS)]
        self.turn += 1
        for request, _ in batch:
            if "(confirm " in (request.candidate_id or ""):
                self.confirmations.setdefault(request.candidate_id.split("(")[1], []).append(host)
        for request, future in batch:
            result = self.inner._judge(request)
            if result.geomean_us:
                result = dataclasses.replace(result, geomean_us=round(result.geomean_us * HOSTS[host], 3))
            result.device = dict(result.device, host=host)
            future.set_result(result)


def test_a_new_best_from_another_host_is_confirmed_beside_the_best_on_one_host(tmp_path):
    executor = TwoHosts()
    sci = ScriptedScientist(factors=(0.95, 1.1, 1.15, 1.12, 1.14))  # only x0.95 is truly faster
    run = Run.create(RunConfig(problem="softmax", iterations=2, lines=1), store=Store(tmp_path / "k.db"),
                     seed_source=fake_kernel(100.0), scientist=sci, executor=executor)
    try:
        assert run.start(background=False).status == "finished", run.error
    finally:
        executor.shutdown()
    cands = run.store.candidates(run.id)
    assert {c.host for c in cands} == set(HOSTS)
    members = [c for c in cands if c.kind in ("seed", "child") and c.status == "ok"]
    snap = Snapshot.load(run.store, run.id)
    best = snap.best
    # The truly fastest kernel is the best, though slower kernels were timed on the faster host.
    assert kernel_time(best.source) == min(kernel_time(c.source) for c in members)
    assert "judged back to back with" in best.message and best.notes["replaced"]
    assert executor.confirmations and all(len(set(hosts)) == 1 for hosts in executor.confirmations.values())
    text = "\n".join(summary_lines(snap.run, snap.metrics()))
    assert "judged on hosts        gpu-a, gpu-b" in text and "  on gpu-" in text


def test_one_host_confirms_nothing(tmp_path):
    executor = FakeExecutor(capacity=2, delay_s=0.01)
    run = Run.create(RunConfig(problem="softmax", iterations=1), store=Store(tmp_path / "k.db"),
                     seed_source=fake_kernel(100.0), scientist=ScriptedScientist(), executor=executor)
    assert run.start(background=False).status == "finished", run.error
    assert not [c for c in run.store.candidates(run.id) if "back to back" in c.message]
    assert len(executor.requests) == len(run.store.candidates(run.id))
