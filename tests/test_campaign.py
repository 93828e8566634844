"""Campaigns: a suite of problems under one id, its report (fast_p as KernelBench and STARK count
it), killing and resuming, and re-timing finished runs.

The end-to-end tests run the real evaluator under the Triton interpreter, with the scripted
loopback model of scripted_kernel_model.py playing every role of the scientist: for the three
KernelBench files written here it answers with a correct ModelNew, for the built-ins with the
base kernel plus a comment.
"""

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kscience.campaigns.campaign import CampaignConfig, overrides_for, suite_locators
from kscience.campaigns.report import (FAST_P, campaign_figure, campaign_report, fast_p, geomean_speedup,
                                      suite_summary)
from kscience.cli.main import main
from kscience.evaluate.result import EvalResult
from kscience.problems import ProblemError
from kscience.campaigns.retime import comparison, kendall_tau
from kscience.record.store import Store
from record_fixtures import problem_row, report_of
from scripted_kernel_model import ScriptedKernelModel

KB_FILES = {
    "relu_1d": ('"""ReLU, as a KernelBench level-1 file."""\nimport torch\nimport torch.nn as nn\n\n\n'
                "class Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n\n\n"
                "batch_size = 4\ndim = 256\n\n\ndef get_inputs():\n    return [torch.randn(batch_size, dim)]\n\n\n"
                "def get_init_inputs():\n    return []\n"),
    "row_sum": ('"""Sum over rows."""\nimport torch\nimport torch.nn as nn\n\n\n'
                "class Model(nn.Module):\n    def __init__(self, dim):\n        super().__init__()\n"
                "        self.dim = dim\n\n    def forward(self, x):\n        return torch.sum(x, dim=self.dim)\n\n\n"
                "batch_size = 8\ndim1 = 128\n\n\ndef get_inputs():\n    return [torch.randn(batch_size, dim1)]\n\n\n"
                "def get_init_inputs():\n    return [1]\n"),
    "scale_add": ('"""y = x * s + b with learnt s and b."""\nimport torch\nimport torch.nn as nn\n\n\n'
                  "class Model(nn.Module):\n    def __init__(self, n):\n        super().__init__()\n"
                  "        self.s = nn.Parameter(torch.randn(n))\n        self.b = nn.Parameter(torch.randn(n))\n\n"
                  "    def forward(self, x):\n        return x * self.s + self.b\n\n\n"
                  "batch_size = 4\nfeatures = 64\n\n\ndef get_inputs():\n    return [torch.randn(batch_size, features)]\n\n\n"
                  "def get_init_inputs():\n    return [features]\n"),
}
SOLUTIONS = {  # a correct ModelNew for each, written differently from its Model
    "relu_1d": "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
               "    def forward(self, x):\n        return torch.clamp_min(x, 0.0)\n",
    "row_sum": "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
               "    def __init__(self, dim):\n        super().__init__()\n        self.dim = dim\n\n"
               "    def forward(self, x):\n        return x.sum(self.dim)\n",
    "scale_add": "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                 "    def __init__(self, n):\n        super().__init__()\n"
                 "        self.s = nn.Parameter(torch.randn(n))\n        self.b = nn.Parameter(torch.randn(n))\n\n"
                 "    def forward(self, x):\n        return torch.addcmul(self.b, x, self.s)\n",
}
BUILTINS = ("rmsnorm", "swiglu")


def write_suite(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in KB_FILES.items():
        (folder / f"{name}.py").write_text(text)
    (folder / "notes.txt").write_text("not a problem")
    return folder


def row(name, status="finished", eager=None, compiled=None, best=None, attempts=3, cost=0.0):
    return problem_row(name, status=status, eager_us=eager, compiled_us=compiled, best_us=best, attempts=attempts,
                       cost_usd=cost)


# --------------------------------------------------------------------------- arithmetic, by hand
HAND_TABLE = [
    row("a", eager=100.0, compiled=50.0, best=25.0, cost=0.5),   # 4x eager, 2x compile
    row("b", eager=100.0, compiled=80.0, best=60.0),             # 1.67x eager, 1.33x compile
    row("c", eager=100.0, compiled=100.0, best=100.0),           # 1x: correct, not faster
    row("d", eager=100.0, compiled=90.0, best=None),             # no correct kernel
    row("e", status="failed", eager=100.0, best=None),           # run failed: not correct; no compile time
    row("f", status="skipped", attempts=0),                      # did not fit: not counted
]


def test_fast_p_on_a_hand_made_table():
    assert fast_p(HAND_TABLE, 0.0) == (3 / 5, 5)   # fast_0 is the correctness rate
    assert fast_p(HAND_TABLE, 1.0) == (2 / 5, 5)   # strictly faster than eager: a and b
    assert fast_p(HAND_TABLE, 1.5) == (2 / 5, 5)
    assert fast_p(HAND_TABLE, 2.0) == (1 / 5, 5)   # 4x only
    assert fast_p(HAND_TABLE, 0.0, "compiled") == (3 / 4, 4)  # e has no torch.compile time
    assert fast_p(HAND_TABLE, 1.0, "compiled") == (2 / 4, 4)
    assert fast_p(HAND_TABLE, 1.5, "compiled") == (1 / 4, 4)  # a at 2x
    assert fast_p(HAND_TABLE, 2.0, "compiled") == (0 / 4, 4)  # 2x is not more than 2x
    assert geomean_speedup(HAND_TABLE) == pytest.approx((4 * 100 / 60 * 1) ** (1 / 3))
    assert geomean_speedup(HAND_TABLE, "compiled") == pytest.approx((2 * 80 / 60 * 1) ** (1 / 3))
    s = suite_summary(HAND_TABLE)
    assert (s.n_problems, s.n_evaluated, s.n_skipped, s.n_correct) == (6, 5, 1, 3)
    assert s.success_rate == s.against["eager"].fast[0.0] == 3 / 5 and s.against["compiled"].n == 4
    assert s.attempts == 15 and s.attempts_per_problem == 3 and s.cost_usd == 0.5
    assert [s.against["eager"].fast[p] for p in FAST_P] == [0.6, 0.4, 0.4, 0.2]
    assert fast_p([row("x", status="skipped")], 1.0) == (None, 0)


def test_kendall_tau():
    assert kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert kendall_tau([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
    assert kendall_tau([1, 2, 3], [1, 3, 2]) == pytest.approx(1 / 3)
    assert kendall_tau([1.0], [2.0]) is None


# --------------------------------------------------------------------------- suites and the store
def test_suites_from_folders_and_lists(tmp_path):
    folder = write_suite(tmp_path / "level1")
    found = suite_locators(str(folder))
    assert [Path(p).stem for p in found] == ["relu_1d", "row_sum", "scale_add"]
    mixed = suite_locators(f"softmax, {folder / 'row_sum.py'},softmax")
    assert mixed == ["softmax", str((folder / "row_sum.py").resolve())]
    for bad, words in (("", "empty suite"), ("nosuch", "not a built-in"), (str(tmp_path / "nothing"), "not a built-in")):
        with pytest.raises(ProblemError, match=words):
            suite_locators(bad)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ProblemError, match="no KernelBench files or GPU MODE problem directories"):
        suite_locators(str(tmp_path / "empty"))
    assert overrides_for(str(folder / "row_sum.py"), {"dim1": "4", "dim": "2"}) == {"dim1": "4"}
    assert overrides_for("softmax", {"dim1": "4"}) == {}
    assert CampaignConfig(attempts=7).iterations == 3
    with pytest.raises(ValueError, match="unknown executor"):
        CampaignConfig(executor="nowhere")


def test_a_schema_1_database_is_migrated_in_place(tmp_path):
    from kscience.record import database

    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript((database.SCHEMA_DIR / "v1.sql").read_text())
    db.execute("INSERT INTO runs VALUES ('r-old', 'old', 'softmax', '{}', 'offline', 'tournament', 'finished',"
               " '{}', '{}', NULL, NULL, NULL, 1.0, 1.0)")
    db.execute("PRAGMA user_version=1")
    db.commit()
    db.close()
    with Store(path) as store:
        assert store.run("r-old").campaign_id is None and store.run("r-old").status == "finished"
        assert store.list_campaigns() == [] and store.retimes("r-old") == []
        assert store.list_runs()[0].id == "r-old"
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == database.SCHEMA_VERSION


def test_campaign_usage_errors_are_one_line(tmp_path, capsys):
    db = str(tmp_path / "k.db")
    folder = write_suite(tmp_path / "s")
    for args, words in ((["campaign", "--db", db], "give a SUITE"),
                        (["campaign", str(folder), "--problems", "zzz*", "--llm", "offline", "--db", db], "matches"),
                        (["campaign", str(folder), "--set", "nosuch=3", "--llm", "offline", "--db", db], "nosuch"),
                        (["report", "k-nothere", "--db", db], "no campaign"),
                        (["retime", "r-nothere", "--db", db], "no run or campaign")):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and words in err and err.count("kscience: error:") == 1
    with Store(db) as store:
        assert store.list_campaigns() == [] and store.list_runs() == []


# A value other than the default for every run setting: a setting added to RunConfig without one here
# fails the test below, which checks that `kscience campaign` offers it and hands it to every run.
CAMPAIGN_SAMPLES = {
    "iterations": ("4", 4), "evaluations": ("12", 12), "lines": ("3", 3), "name": ("sweep", None),
    "llm": ("offline", "offline"),
    "base_url": ("http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1"), "strategy": ("tree", "tree"),
    "repairs": ("1", 1), "executor": ("ray", "ray"), "gpus": ("2", 2), "knowledge": ("notes", ["notes"]),
    "seed": ("5", 5), "overrides": ("batch_size=2", {}), "max_cost_usd": ("1.5", 1.5), "max_tokens": ("900", 900),
    "time_limit_s": ("60", 60.0), "eval_timeout_s": ("45", 45.0), "build_limit_s": ("120", 120.0),
    "llm_retries": ("7", 7), "llm_timeout_s": ("600", 600.0),
    "compiled_baseline": (None, False), "target": ("h100", "h100"), "profile": ("ncu", "ncu"),
    "stop_at_sol": ("0.8", 0.8), "chooser": ("loop", "loop"), "precision": ("reference", "reference"),
}


def _command_line_parser():
    from kscience.cli.main import build_parser
    return build_parser()


def _magic_parser():
    from kscience.jupyter.magics import _starting_parser
    return _starting_parser()


@pytest.mark.parametrize("parser", [_command_line_parser, _magic_parser], ids=["kscience", "%kscience"])
def test_every_run_setting_is_a_campaign_flag_and_reaches_each_run(tmp_path, parser):
    from kscience.campaigns.campaign import campaign_from_args
    from kscience.run.config import SETTINGS, RunConfig, setting_of

    assert set(CAMPAIGN_SAMPLES) == set(SETTINGS)
    flags = {f.name: setting_of(f).flag for f in RunConfig.__dataclass_fields__.values()}
    argv = ["campaign", "softmax", "rmsnorm", str(write_suite(tmp_path / "s") / "row_sum.py"), "--db", "-"]
    for name, (text, _) in CAMPAIGN_SAMPLES.items():
        argv += [flags[name]] if text is None else [flags[name], text]
    args = parser().parse_args(argv)
    with Store(str(tmp_path / "k.db")) as store:
        campaign = campaign_from_args(args, store)
        row, problems = store.campaign(campaign.id), campaign.problems()
    assert row.suite.split(",")[:2] == ["softmax", "rmsnorm"] and len(problems) == 3
    stored = CampaignConfig.from_dict(row.config)  # as a resumed campaign reads it
    assert stored.name == "sweep" and stored.overrides == {"batch_size": "2"}
    run = stored.run_config("softmax", {}, "softmax (k-1)")
    for name, (_, value) in CAMPAIGN_SAMPLES.items():
        if value is not None and name != "overrides":  # --set reaches only the files that define the name
            assert getattr(run, name) == value, name
    assert run.name == "softmax (k-1)"


def test_attempts_and_iterations_together_are_a_usage_error(tmp_path):
    assert main(["campaign", "softmax", "--iterations", "1", "--attempts", "3", "--db", str(tmp_path / "k2.db")]) == 2


def test_problems_that_cannot_run_here_are_skipped_with_their_reason(tmp_path, capsys, monkeypatch):
    """Nothing is evaluated: one file too big for the machine (sized on PyTorch's meta device), one
    published GPU MODE directory kscience cannot judge. Both are skipped, not failed."""
    monkeypatch.setenv("KSCIENCE_DEVICE", "cpu")
    folder = write_suite(tmp_path / "level1")
    ranks = several_gpus(tmp_path)
    db = str(tmp_path / "k.db")
    code = main(["campaign", str(folder / "relu_1d.py"), str(ranks), "--set", "dim=10000000000000", "--llm", "offline",
                 "--db", db])
    out, err = capsys.readouterr()
    assert code == 0 and "Traceback" not in err
    assert "relu_1d: skipped: does not fit: needs about" in err and "of host memory free" in err
    assert "vectoradd_py: skipped: vectoradd_py: cannot be evaluated: it runs one process per GPU on several" in err
    assert "0 of 2 problems evaluated (2 skipped)" in out
    with Store(db) as store:
        assert store.list_runs() == []


def several_gpus(tmp_path: Path) -> Path:
    """A published directory marked as GPU MODE marks its eight-GPU tasks: kscience cannot judge it."""
    shutil.copytree(Path(__file__).parent / "data" / "gpumode" / "reference-kernels" / "pmpp", tmp_path / "pmpp")
    folder = tmp_path / "pmpp" / "vectoradd_py"
    (folder / "task.yml").write_text((folder / "task.yml").read_text() + "\nmulti_gpu: true\n")
    return folder


def test_a_folder_of_gpu_mode_directories_is_a_suite():
    pmpp = Path(__file__).parent / "data" / "gpumode" / "reference-kernels" / "pmpp"
    assert [Path(p).name for p in suite_locators(str(pmpp))] == ["histogram_py", "sort_py", "vectoradd_py",
                                                                  "vectorsum_py"]


# --------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def model():
    with ScriptedKernelModel(SOLUTIONS) as server:
        yield server


@pytest.fixture
def model_env(model, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-loopback")
    monkeypatch.setenv("KSCIENCE_DEVICE", "cpu")
    return ["--llm", "openai:scripted", "--base-url", model.base_url]


@pytest.fixture(scope="module")
def finished_campaign(tmp_path_factory, model):
    """The five-problem campaign, run once for the tests that read it."""
    folder = write_suite(tmp_path_factory.mktemp("suite") / "level1")
    db = str(folder.parent / "campaign.db")
    env = {"OPENAI_API_KEY": "scripted-loopback", "KSCIENCE_DEVICE": "cpu"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        code = main(["campaign", f"{folder},{','.join(BUILTINS)}", "--iterations", "1", "--strategy", "tournament",
                     "--set", "dim=512", "--llm", "openai:scripted", "--base-url", model.base_url, "--db", db,
                     "--json"])
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    return code, db


@pytest.mark.slow
def test_a_campaign_over_kernelbench_files_and_builtins(finished_campaign, capsys):
    code, db = finished_campaign
    assert code == 0
    with Store(db) as store:
        (campaign,) = store.list_campaigns()
        report = campaign_report(store, campaign.id)
        runs = store.campaign_runs(campaign.id)
    names = [r.name for r in report.problems]
    assert names == ["relu_1d", "row_sum", "scale_add", *BUILTINS]
    assert len(runs) == 5 and {r.campaign_id for r in runs} == {campaign.id}
    relu = next(r for r in runs if r.problem.endswith("relu_1d.py"))
    assert relu.overrides == {"dim": "512"}  # --set went only to the file that has `dim`
    for r in report.problems:
        assert r.status == "finished" and r.best_us and r.eager_us and r.attempts >= 1, r
        assert r.speedup_eager == pytest.approx(r.eager_us / r.best_us)
    s = report.summary
    assert s.n_evaluated == 5 and s.success_rate == 1.0 and s.against["eager"].fast[0.0] == 1.0
    assert s.against["compiled"].n == 0 and s.against["compiled"].fast[1.0] is None  # not timed on the CPU
    assert s.against["eager"].geomean_speedup > 0 and s.cost_usd == 0.0  # an unpriced local model
    # The KernelBench kernels are the scripted model's ModelNew, not the seed's text.
    with Store(db) as store:
        best = store.candidate(next(r for r in report.problems if r.name == "row_sum").best_id)
    assert best.source.strip() == SOLUTIONS["row_sum"].strip()

    assert main(["report", campaign.id, "--db", db]) == 0
    out = capsys.readouterr().out
    assert "fast_1.5" in out and "rmsnorm" in out and "success rate 100%" in out
    assert main(["report", campaign.id, "--db", db, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["n_correct"] == 5
    assert main(["campaigns", "--db", db]) == 0
    assert "5/5 problems" in capsys.readouterr().out


def _figure_row(name, eager, compiled, best, device, interpreted):
    return problem_row(name, eager_us=eager, compiled_us=compiled, best_us=best,
                       fastest_us=min(x for x in (eager, compiled) if x), device=device, interpreted=interpreted)


def test_the_campaign_figure_draws_what_was_timed_and_says_where():
    """On the CPU torch.compile is never timed: no empty legend entry for it, the fast_p curve of the
    fastest baseline (eager itself there) is drawn over eager's and says so, and the caption names
    the device and says the times are not performance. On a GPU both bar sets are drawn."""
    pytest.importorskip("matplotlib")
    cpu = "cpu (Triton interpreter)"
    report = report_of([_figure_row("softmax", 100.0, None, 50.0, cpu, True),
                        _figure_row("rmsnorm", 100.0, None, 200.0, cpu, True)])
    fig = campaign_figure(report)
    left, right = fig.axes
    assert [t.get_text() for t in left.get_legend().get_texts()] == ["vs PyTorch eager"]
    assert len(left.containers) == 1 and [b.get_height() for b in left.containers[0]] == [2.0, 0.5]
    assert "no bars for torch.compile" in left.get_title()
    assert [t.get_text() for t in right.get_legend().get_texts()] == [
        "vs PyTorch eager", "vs the fastest baseline (same as vs PyTorch eager)"]
    assert [line.get_linestyle() for line in right.get_lines()] == ["-", ":"]  # the second visible over the first
    caption = fig.get_suptitle()
    assert caption.startswith(f"judged on {cpu}") and "CPU interpreter: not performance" in caption

    h100 = "NVIDIA H100 80GB HBM3"
    report = report_of([_figure_row("softmax", 100.0, 80.0, 50.0, h100, False),
                        _figure_row("rmsnorm", 100.0, 120.0, 200.0, h100, False)])
    fig = campaign_figure(report)
    left, right = fig.axes
    assert [t.get_text() for t in left.get_legend().get_texts()] == ["vs PyTorch eager", "vs torch.compile"]
    assert [[b.get_height() for b in c] for c in left.containers] == [[2.0, 0.5], [1.6, 0.6]]
    assert left.get_title() == "campaign k-1"
    assert fig.get_suptitle() == f"judged on {h100}"  # no CPU caveat


@pytest.mark.slow
def test_the_report_figure(finished_campaign, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    code, db = finished_campaign
    with Store(db) as store:
        (campaign,) = store.list_campaigns()
    target = tmp_path / "campaign.png"
    assert main(["report", campaign.id, "--db", db, "--figure", str(target)]) == 0
    assert target.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_retime_of_a_finished_run_lists_new_verdicts_beside_the_old(finished_campaign, capsys):
    _, db = finished_campaign
    with Store(db) as store:
        run = next(r for r in store.list_runs() if r.problem.endswith("row_sum.py"))
        before = store.candidates(run.id)
    assert main(["retime", run.id, "--top", "2", "--db", db]) == 0
    out = capsys.readouterr().out
    assert "carry over" in out and "Kendall tau" in out and "rank before" in out
    with Store(db) as store:
        assert store.candidates(run.id) == before  # the originals are never changed
        (comp,) = comparison(store, run.id)
        kinds = sorted(k.kind for k in comp.kernels)
        assert kinds == ["child", "eager", "seed"]  # one distinct correct child: the ModelNew
        assert all(k.original_status == "ok" and k.status == "ok" and k.us > 0 for k in comp.kernels)
        assert comp.carried_over == 3 and comp.failed_on_new_device == []
        assert comp.device == "cpu (Triton interpreter)"
        n = len(store.retimes(run.id))
    assert main(["retime", run.id, "--db", db]) == 0  # already done on this device: nothing judged again
    with Store(db) as store:
        assert len(store.retimes(run.id)) == n


@pytest.mark.slow
def test_a_kernel_that_fails_on_the_new_device_is_shown_failing(finished_campaign, capsys):
    """A stored kernel that no longer passes (its verdict on the 'new device' is forced here by
    changing its file) is listed with its status, never left out."""
    _, db = finished_campaign
    with Store(db) as store:
        run = next(r for r in store.list_runs() if r.problem.endswith("relu_1d.py"))
        child = next(c for c in store.candidates(run.id) if c.kind == "child" and c.status == "ok")
        store.add_retime(run.id, child.id, "Other GPU", EvalResult("wrong_answer", "mismatch"))
        (comp,) = comparison(store, run.id, "Other GPU")
    assert comp.failed_on_new_device == [child.id] and comp.carried_over == 0
    assert main(["retime", run.id, "--show", "--device", "Other GPU", "--db", db]) == 0
    assert "wrong_answer" in capsys.readouterr().out


@pytest.mark.slow
def test_a_killed_campaign_resumes_without_redoing_finished_problems(tmp_path, model):
    folder = write_suite(tmp_path / "level1")
    db = tmp_path / "k.db"
    env = dict(os.environ, OPENAI_API_KEY="scripted-loopback", KSCIENCE_DEVICE="cpu")
    proc = subprocess.Popen([sys.executable, "-m", "kscience.cli.main", "campaign", str(folder), "--iterations", "1",
                             "--strategy", "tournament", "--llm", "openai:scripted", "--base-url", model.base_url,
                             "--db", str(db)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline, finished_first = time.monotonic() + 300, None
    while time.monotonic() < deadline and proc.poll() is None:
        if db.exists():
            rows = sqlite3.connect(db).execute(
                "SELECT run_id, status FROM campaign_problems ORDER BY position").fetchall() \
                if _has_table(db) else []
            if rows and rows[0][1] == "finished" and rows[1][0]:  # the second problem's run has started
                finished_first = rows[0][0]
                break
        time.sleep(0.2)
    assert finished_first, proc.communicate()[1][-2000:] if proc.poll() is not None else "no progress"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with Store(db) as store:
        (campaign,) = store.list_campaigns()
        first = store.candidates(finished_first)
        second_run = store.campaign_problems(campaign.id)[1].run_id
    done = subprocess.run([sys.executable, "-m", "kscience.cli.main", "campaign", "--resume", campaign.id,
                           "--db", str(db)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    with Store(db) as store:
        problems = store.campaign_problems(campaign.id)
        assert [p.status for p in problems] == ["finished"] * 3
        assert problems[0].run_id == finished_first and store.candidates(finished_first) == first
        assert problems[1].run_id == second_run  # continued, not started again
        assert len(store.campaign_runs(campaign.id)) == 3
        assert store.campaign(campaign.id).status == "finished"


def _has_table(db: Path) -> bool:
    return bool(sqlite3.connect(db).execute(
        "SELECT count(*) FROM sqlite_master WHERE name='campaign_problems'").fetchone()[0])


@pytest.mark.slow
def test_the_campaign_notebook_under_papermill(tmp_path):
    papermill = pytest.importorskip("papermill")
    folder = write_suite(tmp_path / "level1")
    notebook = Path(__file__).resolve().parent.parent / "notebooks" / "campaign.ipynb"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("KSCIENCE_DEVICE", "cpu")
        env.setenv("PYTHONPATH", str(notebook.parent.parent))  # the kernel imports this checkout's kscience
        env.delenv("MPLBACKEND", raising=False)
        nb = papermill.execute_notebook(str(notebook), str(tmp_path / "out.ipynb"), cwd=str(tmp_path),
                                        parameters={"suite": str(folder / "relu_1d.py"), "iterations": 0,
                                                    "llm": "offline", "db": str(tmp_path / "c.db")},
                                        kernel_name="python3", progress_bar=False, log_output=False)
    outputs = [o for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]
    shown = "".join(o.get("text", "") for o in outputs) + "".join(
        "".join(o.get("data", {}).get("text/html", "")) for o in outputs)
    assert "relu_1d" in shown and "finished" in shown and "fast_1.5" in shown
    assert any("image/png" in o.get("data", {}) for o in outputs)
    # the live table as text too (papermill's and a console's view), not an object's repr
    plain = "".join("".join(o.get("data", {}).get("text/plain", "")) for o in outputs)
    assert "IPython.core.display.HTML" not in plain
    view = next(o["data"] for o in outputs if "text/html" in o.get("data", {}))
    assert "campaign k-" in "".join(view["text/plain"]) and "relu_1d" in "".join(view["text/plain"])


def test_the_campaign_magic_returns_the_campaign_under_its_live_view(tmp_path, monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    from kscience.campaigns.campaign import Campaign
    from kscience.jupyter.campaign_view import campaign_html, campaign_text

    monkeypatch.setenv("KSCIENCE_DEVICE", "cpu")
    ip = InteractiveShell.instance()
    ip.run_cell("%load_ext kscience")
    ranks = several_gpus(tmp_path)
    db = tmp_path / "k.db"
    outcome = ip.run_cell(f"campaign = %kscience campaign {ranks} --llm offline --db {db}")
    assert outcome.success
    campaign = ip.user_ns.pop("campaign")
    assert isinstance(campaign, Campaign) and campaign.wait(timeout=60) == "finished"
    shown = campaign_html(campaign.store, campaign.id)
    assert "vectoradd_py" in shown and "skipped" in shown and "1/1 done" in shown and "several GPUs" in shown
    title, head, row, total = campaign_text(campaign.store, campaign.id).splitlines()
    assert title == f"campaign {campaign.id} (finished, 1/1 done)"  # nothing ran: no session, no slots
    assert head.split() == ["problem", "status", "eager", "us", "best", "us", "vs", "eager", "attempts", "wall", "busy",
                            "GPU-h", "tokens", "$", "note"]
    assert row.startswith("vectoradd_py") and row.index("skipped") == head.index("status") and "several GPUs" in row
    assert total.split() == ["total", "0.000", "0", "0.00"]


def test_problems_the_offline_scientist_cannot_start_on_are_skipped_with_the_reason(tmp_path, capsys, monkeypatch):
    """A KernelBench file and a GPU MODE directory have no Triton seed: offline, nothing is tried and nothing
    is reported as evaluated and no resume is suggested."""
    monkeypatch.setenv("KSCIENCE_DEVICE", "cpu")
    folder = write_suite(tmp_path / "level1")
    histogram = Path(__file__).parent / "data" / "gpumode" / "reference-kernels" / "pmpp" / "histogram_py"
    db = str(tmp_path / "k.db")
    code = main(["campaign", str(folder / "relu_1d.py"), str(histogram), "--llm", "offline", "--db", db])
    out, err = capsys.readouterr()
    assert code == 0 and "Traceback" not in err
    for name in ("relu_1d", "histogram_py"):
        assert f"{name}: skipped: needs a model: the offline scientist cannot write kernels from scratch" in err
    assert "0 of 2 problems evaluated (2 skipped)" in out and "campaign --resume" not in err
    with Store(db) as store:
        assert store.list_runs() == []
