"""The baseline that counts (issue 54, item 2): the faster of PyTorch eager and torch.compile, beside each of
them, in `show`, the report (text, JSON, figure) and `kscience eval`; and torch.compile timed once per problem,
GPU and versions, whichever database, path or command asks (kscience.run.baseline_cache).

Runs use the fake GPU executor of test_compiled_baseline, whose torch.compile baseline takes 1 us.
"""

import json
import shutil
from dataclasses import replace
from pathlib import Path

from kscience.campaigns.report import campaign_figure, report_json, report_lines, speedup, suite_summary
from kscience.campaigns.report_rows import CampaignReport, ProblemRow
from kscience.campaigns.usage import CampaignUsage
from kscience.cli import eval_baselines
from kscience.cli.main import main
from kscience.evaluate.result import DeviceRecord, EvalResult
from kscience.problems import load_problem
from kscience.record.snapshot import Snapshot, first_of_kind
from kscience.record.summary import summary_lines
from kscience.record.text import FASTER
from kscience.run import baseline_cache
from kscience.run.baselines import compiled_source
from kscience.record.candidate import faster_of_eager_and_compile
from kscience.record.rows import CampaignRow
from test_compiled_baseline import COMPILED_US, GpuExecutor, finished_run

KERNELBENCH_FILE = Path(__file__).parent / "data" / "kernelbench_linear_relu.py"
GPU = {"name": "fake GPU", "interpreted": False, "versions": {"torch": "2.11.0"}}
ON_GPU = DeviceRecord.from_dict(GPU)


def database(tmp_path, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    return folder


# --- the faster of the two ----------------------------------------------------------------------
def test_the_faster_of_eager_and_torch_compile_and_when_it_is_not_known():
    assert faster_of_eager_and_compile(100.0, 80.0, True) == 80.0
    assert faster_of_eager_and_compile(100.0, 120.0, True) == 100.0
    assert faster_of_eager_and_compile(100.0, None, True) == 100.0  # judged and failed: no user can pick it
    assert faster_of_eager_and_compile(100.0, None, False) is None  # never judged: which is faster is unknown
    assert faster_of_eager_and_compile(None, 80.0, True) is None


def test_show_sets_the_best_against_the_faster_of_the_two(tmp_path):
    run = finished_run(tmp_path, GpuExecutor(), iterations=1)
    snap = Snapshot.load(run.store, run.id)
    m = snap.metrics()
    assert m.faster_us == COMPILED_US == m.compiled_us  # 1 us: torch.compile is the faster one
    assert m.speedup_vs_faster == COMPILED_US / m.best_us
    text = "\n".join(summary_lines(snap.run, m))
    assert f"  {FASTER}: torch.compile, 1.0 us; the best kernel is " in text


def test_a_gpu_run_without_torch_compile_says_the_faster_is_unknown(tmp_path):
    run = finished_run(tmp_path, GpuExecutor(), iterations=1, compiled_baseline=False)
    snap = Snapshot.load(run.store, run.id)
    assert f"  {FASTER}: unknown, torch.compile was not timed" in summary_lines(snap.run, snap.metrics())


def _row(name, eager, compiled, best, compiled_status="ok"):
    row = ProblemRow(position=0, name=name, locator=name, status="finished", reason=None, run_id="r-1",
                     eager_us=eager, compiled_us=compiled,
                     faster_us=faster_of_eager_and_compile(eager, compiled, compiled_status is not None),
                     seed_us=400.0, best_us=best, attempts=3, precision={}, reduced_precision=name == "gelu")
    return replace(row, **{f"speedup_{b}": speedup(row, b) for b in ("eager", "compiled", "faster", "vendor",
                                                                       "library", "fastest")})


def test_the_report_counts_fast_p_against_eager_torch_compile_and_the_faster_of_the_two(tmp_path):
    # The trial's figures on an H200: gelu's best loses to torch.compile; cross-entropy beats both.
    rows = [_row("gelu", 1150.4, 131.6, 136.8), _row("cross_entropy", 413.7, 178.7, 141.9),
            _row("gemm", 2821.6, None, 389.7, compiled_status=None)]
    summary = suite_summary(rows)
    eager, compiled, faster = (summary.against[b] for b in ("eager", "compiled", "faster"))
    assert eager.fast[1.0] == 1.0 and eager.n == 3
    assert compiled.fast[1.0] == 0.5 and compiled.n == 2
    assert faster.fast[1.0] == 0.5 and faster.n == 2  # gemm: torch.compile never judged
    assert round(faster.geomean_speedup, 3) == round((131.6 / 136.8 * 178.7 / 141.9) ** 0.5, 3)
    assert summary.n_reduced_precision == 1
    campaign = CampaignRow(id="k-1", name="", suite="trial", config={}, status="finished", pid=None, host=None,
                           created=0, updated=0)
    usage = CampaignUsage(sessions=0, wall_s=None, slots=None, problems_at_once=None, slot_busy_s=None, busy=None,
                          idle_waiting_s=None, gpu_hours=0.0, tokens=0, cost_usd=0.0)
    report = CampaignReport(campaign=campaign, problems=rows, summary=summary, usage=usage)
    lines = report_lines(report)
    head = lines[2]
    assert "vs eager" in head and "vs compile" in head and "vs faster" in head
    names = ("gelu", "cross_entropy", "gemm")  # each row: vs eager, vs compile, vs faster
    table = lines[:next(i for i, line in enumerate(lines) if line.startswith("best child:"))]  # not the usage one
    columns = {line.split()[0]: line.split()[7:10] for line in table if line.split()[:1] and line.split()[0] in names}
    assert "    LOSES: the best kernel is slower than torch.compile" in lines  # gelu's, as show would say
    assert columns == {"gelu": ["8.41x", "0.962x", "0.962x"], "cross_entropy": ["2.92x", "1.26x", "1.26x"],
                       "gemm": ["7.24x", "-", "-"]}
    assert any(line.startswith("faster: the faster of PyTorch eager and torch.compile") for line in lines)
    assert any(line.startswith("vs faster of two  (n=2): fast_0 100%  fast_1 50%") for line in lines)
    assert any(line.startswith("reduced precision: the best child of 1 of 3 problems") for line in lines)
    assert json.loads(report_json(report))["summary"]["fast_1_faster"] == 0.5
    fig = campaign_figure(report)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["vs PyTorch eager", "vs torch.compile", f"vs {FASTER}"]
    fig.savefig(tmp_path / "report.png")


# --- torch.compile timed once --------------------------------------------------------------------
def test_a_run_of_another_database_takes_torch_compile_from_the_cache(tmp_path):
    first = finished_run(database(tmp_path, "a"), GpuExecutor(), iterations=1)
    timed = first_of_kind(first.store.candidates(first.id), "compiled")
    again = GpuExecutor()
    second = finished_run(database(tmp_path, "b"), again, iterations=1)
    assert again.sources and not any("torch.compile" in s for s in again.sources)
    reused = first_of_kind(second.store.candidates(second.id), "compiled")
    assert (reused.status, reused.geomean_us) == ("ok", COMPILED_US)
    assert reused.message.startswith(f"timed by run {first.id} ({timed.id}) of {first.store.path} on ")
    other = GpuExecutor(versions={"torch": "2.12.0"})  # other versions: timed again, in any database
    finished_run(database(tmp_path, "c"), other, iterations=1)
    assert sum("torch.compile" in s for s in other.sources) == 1


def test_the_same_problem_file_elsewhere_reuses_it_and_an_edited_one_does_not(tmp_path):
    here, there = tmp_path / "here.py", tmp_path / "there.py"
    shutil.copy(KERNELBENCH_FILE, here)
    shutil.copy(KERNELBENCH_FILE, there)
    result = EvalResult("ok", "timed", geomean_us=5.0, device=GPU)
    problem = load_problem(str(here))
    assert baseline_cache.keep(problem, "compiled", compiled_source(problem), result, result.to_dict(),
                               "a test") is not None
    elsewhere = load_problem(str(there))
    kept = baseline_cache.recall(elsewhere, "compiled", compiled_source(elsewhere), ON_GPU)
    assert kept.result["geomean_us"] == 5.0 and kept.where == "a test"
    there.write_text(KERNELBENCH_FILE.read_text().replace("out_features = 32", "out_features = 48"))
    edited = load_problem(str(there))
    assert baseline_cache.recall(edited, "compiled", compiled_source(edited), ON_GPU) is None
    # --set changes the problem as run, and the interpreter keeps nothing
    smaller = load_problem(str(here), {"batch_size": "4"})
    assert baseline_cache.recall(smaller, "compiled", compiled_source(smaller), ON_GPU) is None
    on_cpu = replace(result, device={"name": "cpu", "interpreted": True})
    assert baseline_cache.keep(problem, "compiled", compiled_source(problem), on_cpu, on_cpu.to_dict(),
                               "a test") is None


def test_a_cache_file_that_cannot_be_read_is_a_miss(tmp_path):
    problem = load_problem("softmax")
    source = compiled_source(problem)
    path = baseline_cache.cache_dir() / f"{baseline_cache.cache_key(problem, 'compiled', source, ON_GPU)}.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert baseline_cache.recall(problem, "compiled", source, ON_GPU) is None
    path.write_text(json.dumps({"result": {"status": "timeout"}, "where": "x", "when": 0}))
    assert baseline_cache.recall(problem, "compiled", source, ON_GPU) is None  # only passing verdicts are kept


# --- kscience eval ---------------------------------------------------------------------------------
class FakeJudge:
    """`kscience eval`'s judge on a GPU: eager 100 us, torch.compile 40 us; counts what it was asked."""

    def __init__(self):
        self.asked = []

    def __call__(self, request, gpu=None, problem=None):
        kind = "compiled" if "torch.compile" in request.source else "eager"
        self.asked.append(kind)
        us = 40.0 if kind == "compiled" else 100.0
        return EvalResult(status="ok", message=f"{kind} ok", geomean_us=us, device=dict(GPU))


def test_eval_sets_the_candidate_against_eager_torch_compile_and_the_faster_and_times_compile_once(monkeypatch):
    judge = FakeJudge()
    monkeypatch.setattr(eval_baselines, "evaluate", judge)
    problem = load_problem("softmax")
    candidate = EvalResult(status="ok", message="", geomean_us=50.0, device=dict(GPU))
    said = []
    against = eval_baselines.judge_baselines(problem, candidate, 0, False, say=said.append)
    assert judge.asked == ["eager", "compiled"] and len(said) == 2
    assert (against.speedup_eager, against.speedup_compiled, against.speedup_faster) == (2.0, 0.8, 0.8)
    text = [" ".join(line.split()) for line in eval_baselines.baseline_lines(against)]
    assert text[1:4] == ["PyTorch eager 100.0 us 2.00x", "torch.compile 40.0 us 0.800x",
                         "faster of the two 40.0 us 0.800x"]
    assert not any("CPU" in line for line in text)
    again = eval_baselines.judge_baselines(problem, candidate, 0, False, say=said.append)
    assert judge.asked == ["eager", "compiled", "eager"]  # torch.compile from the cache the first call kept
    assert again.compiled.note.startswith("timed by kscience eval on ")
    assert "[timed by kscience eval on " in "\n".join(eval_baselines.baseline_lines(again))


def test_eval_on_the_cpu_times_eager_under_the_interpreter_and_skips_torch_compile(tmp_path, capsys):
    cand = tmp_path / "plain.py"
    cand.write_text("import torch\n\ndef custom_kernel(data):\n    (x,) = data\n"  # from its parts: softmax
                    "    e = (x.float() - x.float().amax(-1, keepdim=True)).exp()\n"  # forbids torch.softmax
                    "    return (e / e.sum(-1, keepdim=True)).to(x.dtype)\n")
    assert main(["eval", "softmax", str(cand), "--shapes", "benchmarks", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "ok" and out["baselines"]["eager"]["status"] == "ok"
    assert out["baselines"]["compiled"]["status"] is None and out["baselines"]["speedup_faster"] is None
    assert out["baselines"]["speedup_eager"] > 0 and out["baselines"]["interpreted"]
    assert main(["eval", "softmax", str(cand), "--shapes", "benchmarks"]) == 0
    text = capsys.readouterr().out
    assert "torch.compile - not timed under the CPU interpreter; a run times it on a GPU only" in " ".join(text.split())
    assert "(CPU-interpreter timings check the machinery, not GPU performance)" in text
