"""torch.compile of the reference as a baseline: the candidate's source, when a run times it, and
that it is drawn and reported beside the reference but never competes with the population.

Runs use the scripted scientist and instant executor of jupyter_fakes; `GpuExecutor` reports a
GPU so that the run decides to time the compiled reference, which the CPU test machine cannot.
"""

import dataclasses
import time
from pathlib import Path

import pytest
import torch

from jupyter_fakes import FakeExecutor, FakeScientist, fake_kernel
from kscience.run.baselines import compiled_baseline_wanted, compiled_source
from kscience.record.candidate import Candidate
from kscience.cli.main import build_parser, main
from kscience.evaluate.result import TIMEOUT, EvalResult
from kscience.run import judging
from kscience.run.config import RunConfig
from kscience.jupyter.panels import leaderboard_html
from kscience.jupyter.plots import timeline_figure
from kscience.problems import load_problem
from kscience.run.driver import Run
from kscience.record.snapshot import Snapshot, first_of_kind, run_listing, run_metrics
from kscience.record.store import Store
from kscience.record.summary import summary_lines

KERNELBENCH_FILE = Path(__file__).parent / "data" / "kernelbench_linear_relu.py"
COMPILED_US = 1.0  # faster than every kernel the fake scientist writes: were it a member, it would be best


class GpuExecutor(FakeExecutor):
    """The fake executor as if on a GPU, judging torch.compile of the reference as `compiled_status`."""

    def __init__(self, compiled_status: str = "ok", gpu: str = "fake GPU", versions: dict | None = None):
        super().__init__()
        self.compiled_status, self.sources = compiled_status, []
        self.device = {"name": gpu, "interpreted": False, "versions": versions or {"torch": "2.11.0"}}

    def _judge(self, request):
        self.sources.append(request.source)
        if "torch.compile" in request.source:
            request = dataclasses.replace(request, source=fake_kernel(COMPILED_US, self.compiled_status))
        result = super()._judge(request)
        result.device = dict(self.device)
        return result


class RecordingScientist(FakeScientist):
    def __init__(self):
        self.populations = []

    async def select(self, population, findings=(), taken=()):
        self.populations.append({v.id for v in population})
        return await super().select(population)


def finished_run(tmp_path, executor, iterations=2, **config) -> Run:
    run = Run.create(RunConfig(problem="softmax", iterations=iterations, **config), store=Store(tmp_path / "k.db"),
                     seed_source=fake_kernel(100.0), scientist=RecordingScientist(), executor=executor)
    assert run.start(background=False).status == "finished"
    return run


def legend(snap: Snapshot) -> list[str]:
    return [t.get_text() for t in timeline_figure(snap).axes[0].get_legend().get_texts()]


@pytest.fixture(autouse=True)
def default_recompile_limit():
    """dynamo's default limit, restored after a test whose compiled source raised it."""
    import torch._dynamo
    before = torch._dynamo.config.recompile_limit
    torch._dynamo.config.recompile_limit = 8
    yield
    torch._dynamo.config.recompile_limit = before


def load_source(source: str) -> dict:
    namespace = {}
    exec(compile(source, "compiled.py", "exec"), namespace)
    return namespace


# --- the source ------------------------------------------------------------------------------
def test_the_compiled_custom_kernel_compiles_the_eager_kernel(monkeypatch):
    problem = load_problem("softmax")
    compiled = []
    monkeypatch.setattr(torch, "compile", lambda fn, mode=None, dynamic=None: compiled.append((fn, mode, dynamic)) and fn or fn)  # inductor: GPU run
    namespace = load_source(compiled_source(problem))
    # One graph per shape (dynamic=False), and dynamo may compile as often as there are shapes.
    assert compiled == [(namespace["_PROBLEM"].eager_kernel, "max-autotune-no-cudagraphs", False)]
    assert torch._dynamo.config.recompile_limit >= len(problem.tests) + len(problem.benchmarks)
    data = problem.generate_input(5, "cpu", **problem.cpu_tests[0])
    assert torch.equal(namespace["custom_kernel"](data), problem.eager_kernel(data))


def test_without_an_eager_kernel_the_reference_is_compiled(monkeypatch):
    problem = load_problem("fp8_blockscale_gemm")
    compiled = []
    monkeypatch.setattr(torch, "compile", lambda fn, mode=None, dynamic=None: compiled.append((fn, mode, dynamic)) and fn or fn)
    namespace = load_source(compiled_source(problem))
    assert compiled == [(namespace["_PROBLEM"].ref_kernel, "max-autotune-no-cudagraphs", False)]
    assert torch._dynamo.config.recompile_limit >= 29  # fp8: 11 test and 18 benchmark shapes


def test_the_compiled_model_is_the_reference_model_with_a_compiled_forward(monkeypatch):
    problem = load_problem(str(KERNELBENCH_FILE))
    compiled = []
    monkeypatch.setattr(torch, "compile", lambda fn, mode=None, dynamic=None: compiled.append((fn, mode, dynamic)) and fn or fn)
    namespace = load_source(compiled_source(problem))
    model_new, reference_class = namespace["ModelNew"], namespace["_PROBLEM"].reference_model_class
    assert issubclass(model_new, reference_class)
    model = problem.make_model(model_new, problem.weights_seed, "cpu")
    assert len(compiled) == 1 and compiled[0][0].__func__ is reference_class.forward
    data = problem.generate_input(8, "cpu")
    assert torch.equal(model(*data), problem.ref_kernel(data))


# --- whether a run times it ------------------------------------------------------------------
@pytest.mark.parametrize("setting, device, wanted", [
    (None, {"interpreted": False}, True), (None, {"interpreted": True}, False), (None, None, False),
    (False, {"interpreted": False}, False), (True, {"interpreted": True}, True)])
def test_unset_it_is_timed_only_when_the_seed_was_judged_on_a_gpu(setting, device, wanted):
    seed = Candidate.from_row({"status": "ok", "result": {"status": "ok", "message": "", "device": device}
                                                         if device else None})
    assert compiled_baseline_wanted(setting, seed) is wanted


def test_a_cpu_run_skips_it_and_says_why(tmp_path):
    run = finished_run(tmp_path, FakeExecutor())
    snap = Snapshot.load(run.store, run.id)
    assert snap.compiled is None and "torch.compile: not timed (CPU run)" in legend(snap)
    assert not any("torch.compile" in line for line in summary_lines(snap.run, run_metrics(run.store, run.id)))


def test_the_command_line_can_turn_it_off(tmp_path):
    assert build_parser().parse_args(["run", "softmax"]).compiled_baseline is None
    assert build_parser().parse_args(["run", "softmax", "--no-compiled-baseline"]).compiled_baseline is False
    executor = GpuExecutor()
    run = finished_run(tmp_path, executor, compiled_baseline=False)
    assert not any("torch.compile" in s for s in executor.sources)
    assert "torch.compile: not timed by this run" in legend(Snapshot.load(run.store, run.id))


# --- a timed one -----------------------------------------------------------------------------
def test_on_a_gpu_it_is_a_baseline_never_a_member(tmp_path, capsys):
    executor = GpuExecutor()
    run = finished_run(tmp_path, executor)
    cands = [c for c in run.store.candidates(run.id) if c.kind != "library"]  # softmax's Liger and QuACK rows
    assert [c.kind for c in cands[:3]] == ["seed", "eager", "compiled"]
    compiled = cands[2]
    assert compiled.status == "ok" and compiled.geomean_us == COMPILED_US
    assert sum("torch.compile" in s for s in executor.sources) == 1

    # never selected, never a base, never the best or ranked, nor in the lineage
    assert all(compiled.id not in ids for ids in run._scientist.populations)
    assert compiled.id not in {p.base_id for p in run.store.plans(run.id)}
    m = run_metrics(run.store, run.id)
    assert m.best_us == 64.0 and m.best_id != compiled.id
    assert (m.compiled_us, m.compiled_status) == (COMPILED_US, "ok")
    assert m.speedup_vs_compiled == pytest.approx(COMPILED_US / 64.0)
    snap = Snapshot.load(run.store, run.id)
    assert compiled.id not in {c.id for c in snap.ranked()} | set(snap.children())
    assert snap.best.geomean_us == 64.0
    (row,) = run_listing(run.store)
    assert row.best_us == 64.0 and row.n_candidates == m.n_candidates

    # shown as a baseline: legend line, leaderboard note, summary row, and `kscience best` ignores it
    assert any(label.startswith(f"torch.compile {COMPILED_US:,.1f} us") for label in legend(snap))
    assert not any(label.startswith("torch.compile:") for label in legend(snap))
    assert "torch.compile: 1.0 us" in leaderboard_html(snap)
    table = summary_lines(snap.run, m)
    assert "vs torch.compile" in table[3]
    assert any(line.split()[:2] == ["torch.compile", "1.0"] for line in table)
    assert main(["best", run.id, "--db", str(run.store.path)]) == 0
    assert capsys.readouterr().out == snap.best.source


def test_one_that_fails_is_stored_with_its_status_and_the_run_goes_on(tmp_path):
    run = finished_run(tmp_path, GpuExecutor(compiled_status="compile_error"), iterations=1)
    cands = run.store.candidates(run.id)
    compiled = next(c for c in cands if c.kind == "compiled")
    assert compiled.status == "compile_error"
    assert not any(c.parent_id == compiled.id for c in cands)  # baselines are not repaired
    snap = Snapshot.load(run.store, run.id)
    assert "torch.compile: compile error" in legend(snap)
    m = run_metrics(run.store, run.id)
    assert m.compiled_us is None and m.best_us == 80.0
    row = next(line for line in summary_lines(snap.run, m) if "torch.compile" in line)
    assert row.split()[1:] == ["-", "-", "-", "compile_error", "[fake", "compile_error]"]


class SlowToCompile(GpuExecutor):
    """torch.compile's baseline takes longer than any limit it is given: it ends as the judge ends one that runs
    out of its evaluation's limit. Notes each request's limit, and when each verdict was given."""

    def __init__(self):
        super().__init__()
        self.limits, self.verdict_at = {}, []

    def _judge(self, request):
        if "torch.compile" not in request.source:
            self.verdict_at.append(time.monotonic())
            return super()._judge(request)
        self.limits["compiled"] = request.timeout_s
        time.sleep(request.timeout_s)
        return EvalResult(status=TIMEOUT, message=f"timed out: the evaluation's {request.timeout_s:g} s limit ran out "
                                                  "while checking correctness", device=dict(self.device))


def test_one_slower_than_its_limit_is_recorded_as_timed_out_and_the_children_go_on(tmp_path, monkeypatch):
    monkeypatch.setattr(judging, "IDLE_SLOT_LIMIT_S", 0.5)
    executor = SlowToCompile()
    started = time.monotonic()
    run = finished_run(tmp_path, executor, iterations=2)
    assert executor.limits["compiled"] == 0.5  # a run without --time-limit still gives it one
    compiled = first_of_kind(run.store.candidates(run.id), "compiled")
    assert compiled.status == TIMEOUT and "0.5 s limit" in compiled.message
    assert time.monotonic() - started < 5  # nothing waited longer than the limit for it
    m = run_metrics(run.store, run.id)
    row = next(line for line in summary_lines(Snapshot.load(run.store, run.id).run, m) if "torch.compile" in line)
    assert "timeout [timed out: the evaluation's 0.5 s limit" in row

    again = SlowToCompile()  # a resume leaves the verdict as it is
    resumed = Run.resume(run.id, store=run.store, iterations=1, scientist=RecordingScientist(), executor=again)
    assert resumed.start(background=False).status == "finished"
    assert "compiled" not in again.limits and again.verdict_at


def test_a_resumed_run_does_not_time_it_again(tmp_path):
    run = finished_run(tmp_path, GpuExecutor(), iterations=1)
    again = GpuExecutor()
    resumed = Run.resume(run.id, store=run.store, iterations=1, scientist=RecordingScientist(), executor=again)
    assert resumed.start(background=False).status == "finished"
    assert again.sources and not any("torch.compile" in s for s in again.sources)
    assert [c.kind for c in run.store.candidates(run.id)].count("compiled") == 1


def test_a_later_run_on_the_same_gpu_and_versions_takes_it_from_the_store(tmp_path):
    # max-autotune took 325 s of a 400 s fp8 run on an H100: a second run of the same store must not pay again
    first = finished_run(tmp_path, GpuExecutor(), iterations=1)
    timed = first_of_kind(first.store.candidates(first.id), "compiled")
    again = GpuExecutor()
    second = finished_run(tmp_path, again, iterations=1)
    assert again.sources and not any("torch.compile" in s for s in again.sources)
    reused = first_of_kind(second.store.candidates(second.id), "compiled")
    assert (reused.status, reused.geomean_us) == ("ok", COMPILED_US)
    assert reused.message.startswith(f"timed by run {first.id} ({timed.id}) on ")
    assert reused.message.endswith(timed.message)
    assert run_metrics(second.store, second.id).compiled_us == COMPILED_US

    # another GPU, or other versions: timed again
    for executor in (GpuExecutor(gpu="other GPU"), GpuExecutor(versions={"torch": "2.12.0"})):
        run = finished_run(tmp_path, executor, iterations=1)
        assert sum("torch.compile" in s for s in executor.sources) == 1, executor.device
        assert "timed by run" not in first_of_kind(run.store.candidates(run.id), "compiled").message


def test_a_failed_timing_is_not_reused(tmp_path):
    finished_run(tmp_path, GpuExecutor(compiled_status="compile_error"), iterations=1)
    again = GpuExecutor()
    run = finished_run(tmp_path, again, iterations=1)
    assert sum("torch.compile" in s for s in again.sources) == 1
    assert first_of_kind(run.store.candidates(run.id), "compiled").status == "ok"
