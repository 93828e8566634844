"""What a new user meets in the first hour (issue 41): problems too big for the machine refused before a
worker starts, a candidate to look at by its id, tables that say what their columns count, a finished
run that names its next step, and messages said once, in one wording."""

import json

from kscience.campaigns.report import report_lines
from kscience.campaigns.report_rows import CampaignReport
from kscience.cli.main import main
from kscience.record.summary import verdict_lines
from record_fixtures import metrics_with, problem_row, report_of
from test_loop import FakeExecutor, ScriptedScientist, fake_kernel, make_run

SOFTMAX_FILE = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
                "        return torch.softmax(x, dim=1)\n\n\nbatch_size = 4096\ndim = 393216\n\n\n"
                "def get_inputs():\n    return [torch.randn(batch_size, dim)]\n\n\ndef get_init_inputs():\n    return []\n")
SOFTMAX_NEW = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
               "        return torch.softmax(x, dim=1)\n")


def run_main(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_eval_refuses_a_problem_too_big_for_the_machine_and_names_the_sizes_to_set(tmp_path, capsys):
    problem, candidate = tmp_path / "softmax_big.py", tmp_path / "mine.py"
    problem.write_text(SOFTMAX_FILE)
    candidate.write_text(SOFTMAX_NEW)
    code, out, err = run_main(capsys, "eval", str(problem), str(candidate), "--set", "dim=10000000000000")
    assert code == 2 and out == "" and "Traceback" not in err
    (line,) = err.splitlines()
    assert line.startswith("kscience: error: softmax_big does not fit: needs about ")
    assert "of host memory free; make it smaller with --set NAME=VALUE (its sizes: batch_size=4096, " \
           "dim=10000000000000)" in line


def test_show_takes_a_candidate_id_and_the_run_table_says_why_each_failure_failed(tmp_path, capsys):
    run = make_run(tmp_path, ScriptedScientist(broken={"x0.8"}, repairs_fail=True), repairs=1)
    assert run.start(background=False).status == "finished"
    db = str(run.store.path)
    cands = run.store.candidates(run.id)
    broken = next(c for c in cands if c.kind == "child" and c.status == "wrong_answer")
    seed = cands[0]

    code, out, _ = run_main(capsys, "show", broken.id, "--db", db)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"candidate {broken.id}: child of run {run.id} (softmax), iteration 1, from {seed.id}"
    assert f"tried:   {broken.hypothesis}" in lines and "verdict: wrong_answer" in lines
    assert "  BAD benchmark m=8" in lines and "wrong_answer: fake wrong_answer" in lines
    assert f"finding: {broken.hypothesis} on {seed.id}: wrong_answer, None" in lines
    assert f"--- diff against its parent {seed.id} ---" in lines and "-TIME_US = 100.0" in lines
    source = broken.source.rstrip("\n").splitlines()
    assert lines[-len(source) - 1:] == ["--- source ---", *source]

    code, out, _ = run_main(capsys, "show", broken.id, "--db", db, "--json")
    shown = json.loads(out)
    assert code == 0 and shown["candidate"]["id"] == broken.id and shown["diff"].startswith("--- parent.py")

    code, out, _ = run_main(capsys, "show", run.id, "--db", db)
    table = out.splitlines()
    row = next(i for i, line in enumerate(table) if f" {broken.id} " in line)
    assert table[row + 1].strip() == "fake wrong_answer"  # the reason, under the failed candidate
    assert f"kscience show CANDIDATE_ID --db {db}" in out

    code, _, err = run_main(capsys, "show", "c-00000000", "--db", db)
    assert code == 2 and "no candidate 'c-00000000'" in err


def _report(interpreted: bool) -> CampaignReport:
    row = problem_row("softmax", eager_us=100.0, seed_us=400.0, best_us=420.0, attempts=3, interpreted=interpreted)
    return report_of([row], suite="softmax")


def test_the_report_names_its_best_column_and_says_loses_only_where_show_would():
    for interpreted in (True, False):
        lines = report_lines(_report(interpreted))
        assert "best child" in lines[2] and "best us" not in lines[2]
        assert any(line.startswith("best child: the fastest correct kernel the scientist wrote") and
                   "the seed is its starting point and not counted" in line for line in lines)
        loses = [line for line in lines if "LOSES" in line]
        # show's rule (record.summary.verdict_lines): interpreter times rank nothing
        assert loses == ([] if interpreted else ["    LOSES: the best kernel is slower than PyTorch eager"])
        metrics = metrics_with(best_us=420.0, eager_us=100.0, device={"interpreted": interpreted})
        assert bool(verdict_lines(metrics)) == bool(loses)


def test_runs_says_its_best_counts_the_seed(tmp_path, capsys):
    run = make_run(tmp_path, ScriptedScientist(factors=(1.5, 1.5, 1.5, 1.5, 1.5)))  # every child slower than the seed
    assert run.start(background=False).status == "finished"
    code, out, _ = run_main(capsys, "runs", "--db", str(run.store.path))
    assert code == 0 and "best us: the fastest correct kernel of the run, the seed included" in out


def test_a_finished_run_names_its_next_step(tmp_path, capsys, monkeypatch):
    import kscience.cli.run_commands as commands

    create, made = commands.Run.create, {}

    def scripted(config, *, store, seed_source=None):  # the CLI's run, with the scripted scientist and judge
        made["run"] = create(config, store=store, seed_source=fake_kernel(100.0), scientist=ScriptedScientist(),
                             executor=FakeExecutor())
        return made["run"]

    monkeypatch.setattr(commands.Run, "create", staticmethod(scripted))
    db = tmp_path / "k.db"
    code, _, err = run_main(capsys, "run", "softmax", "--llm", "offline", "--iterations", "1", "--db", str(db))
    run_id = made["run"].id
    assert code == 0
    assert err.splitlines()[-1] == f"kscience: next: kscience show {run_id} --db {db} / kscience best {run_id} --db {db} > best.py"


def test_set_up_says_each_step_and_shows_pips_progress():
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    plan = subprocess.run(["make", "-n", "-B", "setup"], cwd=root, capture_output=True, text=True, check=True).stdout
    steps = [line for line in plan.splitlines() if line.startswith('echo "kscience set-up [')]
    assert [s.split("]")[0] for s in steps] == [f'echo "kscience set-up [{i}/4' for i in range(1, 5)]
    installs = [line for line in plan.splitlines() if "pip install" in line and "--upgrade pip" not in line]
    assert installs and all("--quiet" not in line and "--progress-bar on" in line for line in installs)


def test_verdicts_carry_their_iteration(capsys):
    from kscience.cli.progress import Progress
    from kscience.run.events import CandidateEvaluated

    progress = Progress(2)
    for cid, kind, iteration in (("c-1", "seed", 0), ("c-2", "eager", 0), ("c-3", "child", 2), ("c-4", "child", 1)):
        progress(CandidateEvaluated(candidate_id=cid, parent_id=None, kind=kind, iteration=iteration, hypothesis="h",
                                    status="ok", geomean_us=10.0, message="", best_us=10.0, seed_us=10.0))
    lines = capsys.readouterr().err.splitlines()
    assert [line.split()[:3] for line in lines] == [["c-1", "seed", "ok"], ["c-2", "PyTorch", "eager"],
                                                     ["it", "2", "c-3"], ["it", "1", "c-4"]]


def test_validation_errors_have_one_wording_and_no_model_line_before_them(tmp_path, capsys, monkeypatch):
    for var in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    db = str(tmp_path / "k.db")
    cases = [(("run", "softmax", "--iterations", "-1"), "--iterations must be at least 0, not -1"),
             (("run", "softmax", "--repairs", "-1"), "--repairs must be at least 0, not -1"),
             (("run", "softmax", "--lines", "0"), "--lines must be at least 1, not 0"),
             (("run", "softmax", "--gpus", "0"), "--gpus must be at least 1, not 0"),
             (("run", "softmax", "--evaluations", "0"), "--evaluations must be at least 1, not 0"),
             (("campaign", "softmax", "--attempts", "0"), "--attempts must be at least 1, not 0")]
    no_problem = "no problem 'nosuch': not a built-in (fp8_blockscale_gemm, matmul, rmsnorm, softmax, swiglu), " \
                 "a KernelBench .py file or a folder"
    cases += [(("run", "nosuch"), no_problem), (("campaign", "nosuch"), no_problem), (("eval", "nosuch", "x.py"), no_problem)]
    for args, message in cases:
        code, out, err = run_main(capsys, *args, *(("--db", db) if args[0] != "eval" else ()))
        assert (code, out, err) == (2, "", f"kscience: error: {message}\n"), args
    code, _, err = run_main(capsys, "run", "softmax", "--iterations", "0", "--db", db)
    assert code == 0 and err.splitlines()[0] == "kscience: no GEMINI_API_KEY/GOOGLE_API_KEY/OPENAI_API_KEY set: " \
                                                "using the offline scientist"
    assert "up to 0 iterations" in err


def test_the_start_line_counts_in_words(tmp_path, capsys, monkeypatch):
    import kscience.cli.run_commands as commands

    create = commands.Run.create
    monkeypatch.setattr(commands.Run, "create", staticmethod(
        lambda config, *, store, seed_source=None: create(config, store=store, seed_source=fake_kernel(100.0),
                                                          scientist=ScriptedScientist(), executor=FakeExecutor())))
    code, _, err = run_main(capsys, "run", "softmax", "--llm", "offline", "--iterations", "1",
                            "--db", str(tmp_path / "k.db"))
    assert code == 0 and "up to 1 iteration, stored in" in err


def test_the_confinement_line_names_landlock_when_the_candidate_fails_on_import(tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text("import a_module_that_is_not_there\n")
    code, out, _ = run_main(capsys, "eval", "softmax", str(bad), "--unconfined")  # a worker starts on any machine
    assert code == 1 and out.startswith("compile_error: import failed: ModuleNotFoundError")
    (line,) = [line for line in out.splitlines() if line.startswith("confinement:")]
    assert line.startswith("confinement: landlock: ")
