"""A fresh user's first day on the command line, friction by friction: one limit flag and one progress line
for `eval` and `run`, a mistyped flag answered by its command, `--version` without torch, refusals that store
nothing and name what is missing, the scripted model for a dry run, timings that say what they are, failed
writes and repairs in the log, a timed-out seed judged again under a raised limit, shapes listed, one name
for PyTorch eager and one format per unit, no repeated noise, and runs browsed, deleted and drawn outside a
notebook (`show --html`, `serve`, `delete`, `prune`, `figures`)."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from argparse import Namespace
from pathlib import Path

import pytest

from jupyter_fakes import FakeScientist
from kscience.campaigns.retime import KernelRetime, RunComparison, comparison_lines
from kscience.cli import run_commands
from kscience.cli.browse_commands import server
from kscience.cli.main import build_parser, main
from kscience.cli.problem_commands import eval_lines
from kscience.cli.progress import Progress
from kscience.evaluate.result import EvalResult
from kscience.record.snapshot import Snapshot
from kscience.record.store import Store
from kscience.record.summary import summary_lines
from kscience.record.text import fmt_timing, fmt_us, fmt_x
from kscience.run.config import RunConfig
from kscience.run.driver import Run
from kscience.run.events import CandidateEvaluated, CandidateWritten, Notice, StageChanged
from kscience.run.log import WIDTH, event_lines
from test_loop import FakeExecutor, ScriptedScientist, fake_kernel

DATA = Path(__file__).parent / "data"
KERNELBENCH = DATA / "kernelbench_gemm_multiply_leakyrelu.py"
VECTORADD = DATA / "gpumode" / "reference-kernels" / "pmpp" / "vectoradd_py"  # its submission is plain PyTorch
SCALED_ADD = DATA / "gpumode" / "scaled_add"  # its submission is Triton with a BLOCK knob
HUNG = "import time\n\ndef custom_kernel(data):\n    while True:\n        time.sleep(1)\n"


def run_main(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def usage_error(capsys, *args) -> str:
    with pytest.raises(SystemExit) as stopped:
        main(list(args))
    assert stopped.value.code == 2
    return capsys.readouterr().err


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def finished_run(tmp_path, **config) -> Run:
    store = Store(tmp_path / "k.db")
    run = Run.create(RunConfig(problem="softmax", iterations=config.pop("iterations", 1), **config), store=store,
                     seed_source=fake_kernel(100.0), scientist=ScriptedScientist(), executor=FakeExecutor())
    assert run.start(background=False).status == "finished"
    return run


# --- one limit flag, one progress line; a wrong flag answered by its command ----------------------
def test_eval_and_run_take_the_same_limit_flag_with_the_same_meaning():
    parser = build_parser()
    ran = parser.parse_args(["run", "softmax", "--eval-timeout", "5"])
    judged = parser.parse_args(["eval", "softmax", "k.py", "--eval-timeout", "5"])
    assert ran.eval_timeout_s == judged.eval_timeout_s == 5.0
    helps = {name: next(a.help for a in sub._actions if "--eval-timeout" in a.option_strings)
             for name, sub in parser._subparsers._group_actions[0].choices.items() if name in ("run", "eval")}
    assert helps["run"].split(";")[0] == helps["eval"].split(";")[0]  # one meaning, each with its own default


def test_a_flag_a_command_does_not_take_gets_its_usage_and_the_nearest_flag(capsys):
    err = usage_error(capsys, "eval", "softmax", "k.py", "--timeout", "5")
    assert err.startswith("usage: kscience eval ") and "--timeout (did you mean --eval-timeout?)" in err
    err = usage_error(capsys, "show", "r-1", "--jsn")
    assert err.startswith("usage: kscience show ") and "--jsn (did you mean --json?)" in err
    err = usage_error(capsys, "evl", "softmax")
    assert "invalid choice: 'evl'" in err and "(did you mean eval?)" in err


def test_eval_of_a_hung_kernel_ends_at_its_limit_per_step_and_says_so_while_it_waits(tmp_path, capsys):
    hung = tmp_path / "hung.py"
    hung.write_text(HUNG)
    started = time.monotonic()
    code, out, err = run_main(capsys, "eval", "softmax", str(hung), "--eval-timeout", "5")
    took = time.monotonic() - started
    assert code == 1
    # (the step it ends in depends on the machine's load: on a busy one the worker's import alone takes 5 s)
    assert out.startswith("timeout: timed out: the 5 s limit per step set for this evaluation ran out while ")
    assert f"kscience: judging {hung} against softmax on cpu (Triton interpreter), at most 5 s per step" in err
    # the run's own progress line: the same event and words, said once the limit per step has passed
    assert any(line.startswith(f"  {hung} waiting ") and line.endswith("(limit 5 s per step)")
               for line in err.splitlines()), err
    assert took < 60  # the judge's own limit for a check is 300 s on the CPU


def test_version_does_not_load_torch():
    code = ("import runpy, sys\nsys.argv = ['kscience', '--version']\ntry:\n"
            "    runpy.run_module('kscience', run_name='__main__')\nexcept SystemExit as done:\n"
            "    print('exit', done.code)\nprint('torch loaded' if 'torch' in sys.modules else 'no torch')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[1:] == ["exit 0", "no torch"] and done.stdout.startswith("kscience ")


# --- without a key ------------------------------------------------------------------------------
@pytest.mark.parametrize("problem", [KERNELBENCH, VECTORADD], ids=["kernelbench", "gpumode"])
def test_a_seed_without_knobs_is_refused_in_one_line_and_no_run_is_stored(tmp_path, capsys, problem):
    db = tmp_path / "k.db"
    code, out, err = run_main(capsys, "run", str(problem), "--llm", "offline", "--iterations", "1", "--db", str(db))
    assert code == 2 and out == ""
    (line,) = err.splitlines()
    assert line.startswith("kscience: error: the offline scientist cannot write kernels from scratch")
    assert "BLOCK_SIZE" in line and "--seed-kernel FILE" in line and "--llm scripted" in line
    assert "resume" not in line  # nothing was stored, so there is nothing to resume
    with Store(db) as store:
        assert store.list_runs() == []


def test_the_offline_scientist_evolves_a_gpumode_folder_whose_seed_has_a_knob(tmp_path):
    run = Run.create(RunConfig(problem=str(SCALED_ADD), llm="offline", iterations=1), store=Store(tmp_path / "k.db"),
                     executor=FakeExecutor())
    assert run.start(background=False).status == "finished", run.error
    children = [c for c in run.store.candidates(run.id) if c.kind == "child"]
    assert children and any(re.search(r"^BLOCK = (?!256\b)\d+", c.source, re.M) for c in children)  # knob tuned


def test_the_scripted_model_drives_the_model_path_on_a_kernelbench_file(tmp_path):
    assert "scripted" in next(a.help for a in build_parser()._subparsers._group_actions[0].choices["run"]._actions
                              if "--llm" in a.option_strings)
    run = Run.create(RunConfig(problem=str(KERNELBENCH), llm="scripted", iterations=1),
                     store=Store(tmp_path / "k.db"), executor=FakeExecutor())
    assert run.start(background=False).status == "finished", run.error
    roles = [c["role"] for c in run.store.llm_calls(run.id)]
    assert roles[0] == "preflight" and {"designer", "writer", "finding"} <= set(roles)
    (child,) = [c for c in run.store.candidates(run.id) if c.kind == "child"]
    assert child.ok and "# scripted variant" in child.source and "class ModelNew(Model)" in child.source


# --- timings that say what they are ---------------------------------------------------------------
def test_a_shapes_time_names_its_median_spread_and_count():
    assert fmt_timing(16.8, 90.72, 20) == "median 16.8 us, sd 90.7 us, n=20 calls"
    assert fmt_timing(1144.62, None, 1) == "median 1,144.6 us, n=1 call"


def test_after_a_resume_ratios_against_an_earlier_seed_are_marked_and_retime_is_named(tmp_path, capsys):
    store = Store(tmp_path / "k.db")
    first = Run.create(RunConfig(problem="softmax", iterations=2), store=store, seed_source=fake_kernel(100.0),
                       scientist=ScriptedScientist(), executor=FakeExecutor())
    first.subscribe(lambda e: first.stop() if e.type == "candidate_evaluated" and e.kind == "child" else None)
    assert first.start(background=False).status == "stopped"
    time.sleep(0.01)  # the resumed session starts after every verdict of the first
    resumed = Run.resume(first.id, store=store, scientist=ScriptedScientist(), executor=FakeExecutor())
    said = []
    resumed.subscribe(said.append)
    assert resumed.start(background=False).status == "finished"
    children = [e for e in said if isinstance(e, CandidateEvaluated) and e.kind == "child"]
    assert children and all(e.seed_earlier for e in children)
    (notice,) = [e for e in said if isinstance(e, Notice) and "vs seed" in e.text]
    assert notice.text.startswith("* vs seed: the seed was timed by an earlier session")
    assert f"kscience retime {first.id} --db {store.path}" in notice.text
    assert " vs seed*" in event_lines(children[0])[0]
    metrics = Snapshot.load(store, first.id).metrics()
    assert metrics.seed_best_sessions_differ
    assert any("the seed and the best were timed by different sessions" in line
               for line in summary_lines(store.run(first.id), metrics))


# --- the live log -------------------------------------------------------------------------------
def test_failed_writes_and_repairs_are_lines_of_the_terminals_log(tmp_path, capsys):
    run = Run.create(RunConfig(problem="softmax", iterations=1), store=Store(tmp_path / "k.db"),
                     seed_source=fake_kernel(100.0), scientist=FakeScientist(), executor=FakeExecutor())
    run.subscribe(Progress(1))
    assert run.start(background=False).status == "finished"
    err = capsys.readouterr().err
    assert "repairing c-" in err and "(wrong_answer), attempt 1 of 2" in err
    assert "write_failed" in err and "repair 2: broken" in err and "no fix found" in err


def test_a_failure_message_is_given_whole_never_cut():
    message = ("the candidate wrote outside its output buffer on shape m=8,n=4099 at element 4,096 of 32,792, "
               "which the judge saw in its own copy after the call returned; " * 3).strip()
    for event in (CandidateEvaluated(candidate_id="c-1", parent_id=None, kind="child", iteration=1, hypothesis="h",
                                     status="wrong_answer", geomean_us=None, message=message, best_us=None,
                                     seed_us=10.0),
                  CandidateWritten(candidate_id="c-2", parent_id="c-1", kind="repair", iteration=1, plan_title="h",
                                   status="write_failed", message=message)):
        head, *rest = event_lines(event)
        assert " ".join(line.strip() for line in rest) == message
        assert all(len(line) <= WIDTH for line in rest)


# --- a seed that timed out under too small a limit ----------------------------------------------------
class NeedsSeconds(FakeExecutor):
    """A kernel marked NEEDS_S = 5 times out under any limit per step below 5 s."""

    def _judge(self, request):
        if "NEEDS_S = 5" in request.source and request.step_limit_s is not None and request.step_limit_s < 5:
            return EvalResult(status="timeout", message=f"timed out: the {request.step_limit_s:g} s limit per step "
                                                        "set for this evaluation ran out while checking correctness",
                              device={"name": "fake device", "interpreted": True}, failing_shape={"m": 8})
        return super()._judge(request)


def test_a_seed_that_timed_out_under_a_small_limit_is_judged_again_under_a_larger_one(tmp_path, capsys):
    store = Store(tmp_path / "k.db")
    run = Run.create(RunConfig(problem="softmax", iterations=1, repairs=0, eval_timeout_s=1), store=store,
                     seed_source=fake_kernel(100.0) + "NEEDS_S = 5\n", scientist=ScriptedScientist(),
                     executor=NeedsSeconds())
    assert run_commands._drive(run, Namespace(json=False)) == 1
    err = capsys.readouterr().err
    assert run.status == "failed" and run.advised
    assert f"resume with a larger one, e.g. kscience resume {run.id} --eval-timeout 60 --db {store.path}" in err
    assert "continue with" not in err  # the advice is the larger limit, not a plain resume that fails again
    resumed = Run.resume(run.id, store=store, eval_timeout_s=10, scientist=ScriptedScientist(),
                         executor=NeedsSeconds())
    said = []
    resumed.subscribe(said.append)
    assert resumed.start(background=False).status == "finished", resumed.error
    seed = next(c for c in store.candidates(run.id) if c.kind == "seed")
    assert seed.ok and seed.notes["step_limit_s"] == 10
    assert any(isinstance(e, Notice) and e.text.startswith(f"judging {seed.id} (seed) again: it timed out under "
                                                          "the 1 s limit per step") for e in said)
    # the first verdict is still told by the events it was announced in
    verdicts = [e["payload"] for e in store.events(run.id) if e["type"] == "candidate_evaluated"
                and e["payload"]["candidate_id"] == seed.id]
    assert [v["status"] for v in verdicts] == ["timeout", "ok"]


def test_a_seed_that_fails_otherwise_is_never_advised_a_plain_resume(tmp_path, capsys):
    store = Store(tmp_path / "k.db")
    run = Run.create(RunConfig(problem="softmax", iterations=1, repairs=0), store=store,
                     seed_source=fake_kernel(100.0, "wrong_answer"), scientist=ScriptedScientist(),
                     executor=FakeExecutor())
    assert run_commands._drive(run, Namespace(json=False)) == 1
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("kscience: error:")]
    assert "check a fixed seed with `kscience eval softmax FILE`" in line and "continue with" not in line
    assert f"give the model more attempts: kscience resume {run.id} --repairs 2" in line


# --- shapes ----------------------------------------------------------------------------------------
def test_problems_list_their_shapes_and_kernelbench_names_its_by_their_sizes(capsys):
    code, out, _ = run_main(capsys, "problems", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert code == 0 and set(rows) == {"fp8_blockscale_gemm", "matmul", "rmsnorm", "softmax", "swiglu"}
    softmax = rows["softmax"]
    assert softmax["benchmarks"][0] == {"label": "m=4096,n=4096", "sizes": {"m": 4096, "n": 4096}}
    assert len(softmax["tests"]) == softmax["n_tests"] and softmax["cpu_benchmarks"][0]["label"] == "m=256,n=2048"
    code, out, _ = run_main(capsys, "problems")
    assert "  benchmark shapes on a GPU (4): m=4096,n=4096; m=8192,n=8192;" in out
    code, out, _ = run_main(capsys, "problems", str(KERNELBENCH), "--json")
    (row,) = json.loads(out)
    assert row["tests"] == row["benchmarks"] == [
        {"label": "batch_size=8,in_features=32,out_features=16",
         "sizes": {"batch_size": 8, "in_features": 32, "out_features": 16}}]


# --- one name, one format --------------------------------------------------------------------------
def test_an_eager_baseline_stored_as_reference_reads_back_as_eager(tmp_path):
    store = Store(tmp_path / "k.db")
    run_id = store.create_run(name="", problem="softmax", overrides={}, llm="offline", strategy="tournament",
                              config={}, environment={})
    old = store.add_candidate(run_id, kind="reference", source="x", hypothesis="PyTorch eager", iteration=0)
    store.record_result(old.id, EvalResult(status="ok", message="", geomean_us=40.0))
    assert store.candidate(old.id).kind == "eager" and store.candidate(old.id).to_row()["kind"] == "eager"
    snap = Snapshot.load(store, run_id)
    assert snap.eager.id == old.id and snap.metrics().eager_us == 40.0


def test_times_and_ratios_have_one_format_wherever_they_are_shown(tmp_path):
    assert fmt_us(548324.104) == "548,324.1" and fmt_us(1144.6, " us") == "1,144.6 us"
    assert fmt_x(2.9134) == "2.91x" and fmt_x(0.00587) == "0.00587x" and fmt_x(1690.2) == "1,690x"
    run = finished_run(tmp_path)
    eager = next(c for c in run.store.candidates(run.id) if c.kind == "eager")
    kernel = KernelRetime(candidate_id=eager.id, kind="eager", hypothesis=eager.hypothesis,
                          original_device="fake device", original_status="ok", original_us=1144.62,
                          device="another device", status="ok", us=6.7, message="", carries_over=True,
                          ratio=6.7 / 1144.62)
    comp = RunComparison(run_id=run.id, device="another device", kernels=[kernel], carried_over=1,
                         originally_correct=1, failed_on_new_device=[], rank_original=[], rank_new=[],
                         kendall_tau=None)
    text = "\n".join(comparison_lines(run.store, [comp]))
    assert "PyTorch eager" in text and "1,144.6 us" in text and "0.00585x" in text and "reference" not in text


# --- no repeated noise ------------------------------------------------------------------------------
def test_the_confinement_line_is_short_unless_a_layer_is_missing():
    full = {"landlock": "landlock v7 (files, reads, tcp, scopes), seccomp", "namespaces": "user, net, pid",
            "cgroup": "v1 (memory, pids, freezer)", "reaper": "pid 1 of the namespace", "memory_cap": "cgroup",
            "env_filter": "allow-list", "compile_cache": "private per evaluation"}
    line = next(x for x in eval_lines(EvalResult(status="ok", message="m", confinement=full))
                if x.startswith("confinement:"))
    assert line == ("confinement: landlock, namespaces, cgroup, reaper, memory cap, env filter, compile cache "
                    "(--json gives each layer in full)")
    weak = dict(full, weak=["no Landlock"], allowed_weak=True)
    line = next(x for x in eval_lines(EvalResult(status="ok", message="m", confinement=weak))
                if x.startswith("confinement:"))
    assert "MISSING no Landlock" in line and "landlock v7" in line


def test_notices_and_stages_that_are_status_not_news_add_no_line():
    assert event_lines(StageChanged(stage="evaluate", iteration=1, detail="c-1")) == []
    assert event_lines(Notice("baselines skipped, not installed here")) == ["baselines skipped, not installed here"]


# --- runs outside a notebook ------------------------------------------------------------------------
def test_show_html_writes_the_run_as_one_page_and_changes_nothing(tmp_path, capsys):
    run = finished_run(tmp_path)
    db, page = run.store.path, tmp_path / "run.html"
    run.store.close()
    before = digest(db)
    code, out, err = run_main(capsys, "show", run.id, "--db", str(db), "--html", str(page))
    text = page.read_text()
    assert code == 0 and out == "" and f"run {run.id} written to {page}" in err
    assert text.startswith("<!DOCTYPE html>") and run.id in text and 'src="data:image/png;base64,' in text
    assert "log (" in text and "iteration 1: from c-" in text  # the run's log, as the terminal printed it
    assert digest(db) == before and not Path(str(db) + "-wal").exists()
    code, _, err = run_main(capsys, "show", "c-1", "--db", str(db), "--html", str(page))
    assert code == 2 and "--html writes a run's page: give a run id" in err


def test_serve_answers_every_page_read_only(tmp_path):
    run = finished_run(tmp_path)
    db = run.store.path
    child = next(c for c in run.store.candidates(run.id) if c.kind == "child")
    run.store.close()
    before = digest(db)
    httpd = server(db, port=0)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        index = urllib.request.urlopen(f"{base}/").read().decode()
        assert f'href="/run/{run.id}"' in index
        page = urllib.request.urlopen(f"{base}/run/{run.id}").read().decode()
        assert f'href="/candidate/{child.id}"' in page and "every candidate" in page
        assert "TIME_US" in urllib.request.urlopen(f"{base}/candidate/{child.id}").read().decode()
        for missing in ("/run/r-nosuch", "/nowhere/x", "/run"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(base + missing)
            assert refused.value.code == 404
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert digest(db) == before


def test_delete_says_what_would_go_and_removes_it_only_when_told(tmp_path, capsys):
    run = finished_run(tmp_path)
    db = run.store.path
    kept = Run.create(RunConfig(problem="softmax", iterations=0), store=run.store, seed_source=fake_kernel(90.0),
                      scientist=ScriptedScientist(), executor=FakeExecutor())
    assert kept.start(background=False).status == "finished"
    run.store.close()
    before = digest(db)
    code, out, _ = run_main(capsys, "delete", run.id, "--db", str(db))
    assert code == 0 and out.startswith(f"would delete run {run.id} (softmax, finished,")
    assert "nothing deleted: add --yes" in out and digest(db) == before
    code, out, _ = run_main(capsys, "delete", run.id, "--db", str(db), "--yes")
    assert code == 0 and out.startswith(f"deleting run {run.id}")
    with Store(db) as store:
        assert [r.id for r in store.list_runs()] == [kept.id]
        for table in ("candidates", "plans", "findings", "llm_calls", "events", "slot_times", "profiles"):
            assert not store._query(f"SELECT 1 FROM {table} WHERE run_id=?", (run.id,)), table
        assert store.candidates(kept.id)
    code, _, err = run_main(capsys, "delete", "r-nosuch", "--db", str(db), "--yes")
    assert code == 2 and "no run 'r-nosuch'" in err


def test_a_running_run_or_a_campaigns_run_is_not_deleted_alone(tmp_path, capsys):
    run = finished_run(tmp_path)
    store = run.store
    campaign = store.create_campaign(name="", suite="softmax", config={}, problems=[{"locator": "softmax",
                                                                                     "name": "softmax"}])
    store.update_run(run.id, campaign_id=campaign)
    store.update_campaign_problem(campaign, 0, status="finished", run_id=run.id)
    db = str(store.path)
    code, _, err = run_main(capsys, "delete", run.id, "--db", db, "--yes")
    assert code == 2 and f"belongs to campaign {campaign}" in err and f"kscience delete {campaign}" in err
    code, out, _ = run_main(capsys, "delete", campaign, "--db", db, "--yes")
    assert code == 0 and out.startswith(f"deleting campaign {campaign} (softmax) with its 1 run")
    assert store.list_runs() == [] and store.list_campaigns() == []
    alive = Run.create(RunConfig(problem="softmax", iterations=0), store=store, seed_source=fake_kernel(90.0),
                       scientist=ScriptedScientist(), executor=FakeExecutor())  # marked running by this process
    code, _, err = run_main(capsys, "delete", alive.id, "--db", db, "--yes")
    assert code == 2 and "is still running" in err


def test_prune_picks_runs_that_judged_nothing_by_default(tmp_path, capsys):
    run = finished_run(tmp_path)
    store = run.store
    empty = store.create_run(name="", problem="softmax", overrides={}, llm="offline", strategy="tournament",
                             config={}, environment={})
    store.update_run(empty, status="failed", error="refused", pid=None)
    db = str(store.path)
    code, out, _ = run_main(capsys, "prune", "--db", db)
    assert code == 0 and out.splitlines()[0].startswith(f"would delete run {empty} (softmax, failed, 0 candidates")
    assert run.id not in out
    code, out, _ = run_main(capsys, "prune", "--db", db, "--status", "finished", "--no-correct")
    assert "nothing to prune" in out
    code, out, _ = run_main(capsys, "prune", "--db", db, "--yes")
    assert [r.id for r in store.list_runs()] == [run.id]


def test_figures_draws_a_runs_and_a_campaigns_report_figures(tmp_path, capsys):
    run = finished_run(tmp_path, iterations=2)
    store = run.store
    campaign = store.create_campaign(name="", suite="softmax", config={}, problems=[{"locator": "softmax",
                                                                                     "name": "softmax"}])
    store.update_run(run.id, campaign_id=campaign)
    store.update_campaign_problem(campaign, 0, status="finished", run_id=run.id)
    store.update_campaign(campaign, status="finished")
    db = str(store.path)
    code, out, _ = run_main(capsys, "figures", run.id, "-o", str(tmp_path / "figs"), "--db", db)
    written = [Path(p) for p in out.split()]
    assert code == 0 and {p.name for p in written} >= {"softmax-timing.png", "softmax-lineage.png"}
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in written)
    code, out, _ = run_main(capsys, "figures", campaign, "-o", str(tmp_path / "suite"), "--db", db)
    assert code == 0 and f"campaign-{campaign}.png" in out and "softmax-timing.png" in out
    code, _, err = run_main(capsys, "figures", "r-nosuch", "-o", str(tmp_path / "x"), "--db", db)
    assert code == 2 and "no run 'r-nosuch'" in err


def test_a_campaign_names_missing_library_packages_once_for_all_its_problems(capsys):
    from kscience.cli.campaign_commands import _status_lines

    say = _status_lines()
    for missing in (["liger-kernel", "quack-kernels"], ["liger-kernel", "quack-kernels"], ["liger-kernel"]):
        say(None, {"name": "p", "position": 0, "status": "running"}, Notice("each run's own line", missing=missing))
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["kscience: baselines skipped where they need liger-kernel, quack-kernels, not installed here "
                     "(pip install 'kscience[baselines]')"]


def test_figures_refuse_to_replace_committed_figures_unless_told(tmp_path, capsys):
    run = finished_run(tmp_path)
    committed = Path(__file__).resolve().parents[1] / "figures"
    assert (committed / "softmax-timing.png").is_file()  # a figure git tracks, which this run would replace
    before = digest(committed / "softmax-timing.png")
    code, out, err = run_main(capsys, "figures", run.id, "-o", str(committed), "--db", str(run.store.path))
    assert code == 2 and out == "" and "git tracks" in err and "--overwrite" in err
    assert digest(committed / "softmax-timing.png") == before
