"""`%load_ext kscience`, `%%kernel_evolve` and `%kscience` through IPython's InteractiveShell.

Runs use a scripted scientist and an instant executor (jupyter_fakes) in place of the model and
the Triton interpreter, so what is tested is the magic: argument parsing, problem lookup, the
cell body as the seed, the returned run object, -o, --resume, and errors in one line.
The notebooks (test_notebooks.py) run the same magic with the real evaluator.
"""

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import kscience
from jupyter_fakes import fake_kernel, fake_run_class
from kscience.jupyter import RunResult, launch
from kscience.problems import load_problem
from kscience.record.store import Store


@pytest.fixture(scope="module")
def shell():
    ip = InteractiveShell.instance()
    ip.run_cell("%load_ext kscience")
    return ip


@pytest.fixture
def ip(shell, monkeypatch, tmp_path):
    monkeypatch.setattr(launch, "Run", fake_run_class())
    monkeypatch.setenv("KSCIENCE_DB", str(tmp_path / "default.db"))
    monkeypatch.delenv("KSCIENCE_VIEW", raising=False)
    yield shell
    for name in ("evolved", "again", "my_problem", "problem_name"):
        shell.user_ns.pop(name, None)


def evolve_cell(args: str, body: str = fake_kernel(100.0)) -> str:
    return f"%%kernel_evolve {args}\n{body}"


def one_line_usage_error(ip, capsys, cell: str) -> str:
    """Run a cell that must fail with a single UsageError line and no traceback; return that line."""
    outcome = ip.run_cell(cell)
    assert isinstance(outcome.error_in_exec or outcome.error_before_exec, UsageError)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    lines = [line for line in (out + err).splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("UsageError: "), lines
    return lines[0]


def test_loading_the_extension_twice_or_reloading_it_is_harmless(shell, capsys):
    for line in ("%load_ext kscience", "%load_ext kscience", "%reload_ext kscience"):
        assert shell.run_cell(line).success
    kscience.load_ipython_extension(shell)  # a direct second registration replaces, never duplicates
    assert shell.find_cell_magic("kernel_evolve") is not None
    assert shell.find_line_magic("kscience") is not None
    capsys.readouterr()


def test_help_is_built_from_magic_arguments(ip, capsys):
    assert ip.run_cell("%%kernel_evolve?").success
    out = capsys.readouterr().out
    assert "%kernel_evolve [--iterations N]" in out.replace("%%", "%")
    for option in ("--llm ID", "--db PATH", "-o NAME", "--resume RUN_ID", "--max-cost-usd USD", "--time-limit"):
        assert option in out
    assert "starting kernel" in out


def test_the_cell_body_seeds_a_run_returned_as_an_object_and_stored_under_o(ip, tmp_path, capsys):
    db = tmp_path / "k.db"
    outcome = ip.run_cell(evolve_cell(f"softmax --iterations 2 --llm offline --db {db} -o evolved --name tour"))
    assert outcome.success, outcome.error_in_exec
    run = outcome.result
    assert isinstance(run, RunResult) and ip.user_ns["evolved"] is run
    assert run.status == "finished" and run.problem == "softmax"
    assert run.seed.source == fake_kernel(100.0)  # the cell body, verbatim
    assert run.best.geomean_us == pytest.approx(64.0) and set(run.best.times) == {"m=8", "m=16"}
    assert run.eager.geomean_us == 40.0
    kinds = [c.kind for c in run.candidates]
    assert kinds[:2] == ["seed", "eager"] and kinds.count("child") == 4
    frame = run.to_dataframe()
    assert frame.loc[run.best.id, "speedup_vs_seed"] == pytest.approx(100 / 64)
    assert frame.loc[run.best.id, "speedup_vs_eager"] == pytest.approx(40 / 64)
    out = capsys.readouterr().out
    assert f"kscience run {run.id} (softmax)" in out  # the text view (no widget frontend here)
    assert f"best {run.best.id}" in out and "predicted vs measured" in out  # its final table
    with Store(db) as store:
        assert store.run(run.id).name == "tour"


def test_problem_may_be_a_notebook_variable(ip, tmp_path):
    ip.user_ns["my_problem"] = load_problem("softmax")
    run = ip.run_cell(evolve_cell(f"my_problem --iterations 1 --llm offline --db {tmp_path / 'k.db'}")).result
    assert run.problem == "softmax" and run.status == "finished"
    ip.user_ns["problem_name"] = "softmax"
    run = ip.run_cell(evolve_cell(f"problem_name --iterations 1 --llm offline --db {tmp_path / 'k.db'}")).result
    assert run.problem == "softmax"


def test_braces_expand_notebook_variables_in_the_magic_line(ip, tmp_path):
    ip.user_ns["problem_name"] = "softmax"
    run = ip.run_cell(evolve_cell("{problem_name} --iterations {1 + 0} --llm offline "
                                  f"--db {tmp_path / 'k.db'}")).result
    assert run.metrics.iterations_done == 1


def test_resume_continues_the_stored_run(ip, tmp_path):
    db = tmp_path / "k.db"
    first = ip.run_cell(evolve_cell(f"softmax --iterations 1 --llm offline --db {db}")).result
    again = ip.run_cell(f"%kernel_evolve softmax --resume {first.id} --iterations 1 --db {db} -o again").result
    assert again.id == first.id and ip.user_ns["again"] is again
    assert again.metrics.iterations_done == 2 and again.status == "finished"
    assert again.best.geomean_us == pytest.approx(64.0)


@pytest.mark.parametrize("args, body, expected", [
    ("softmax --iterationz 2", fake_kernel(100.0), "unrecognized arguments: --iterationz"),
    ("softmax --iterations two", fake_kernel(100.0), "invalid int value"),
    ("", fake_kernel(100.0), "the following arguments are required: problem"),
    ("no_such_problem", fake_kernel(100.0), "no problem 'no_such_problem'"),
    ("softmax", "def custom_kernel(data):\n    return (\n", "not valid Python"),
    ("softmax", "def kernel(data):\n    return data\n", "must define custom_kernel"),
    ("softmax", "\n", "the cell body is the starting kernel"),
    ("softmax --view pretty", fake_kernel(100.0), "invalid choice: 'pretty'"),
    ("softmax --strategy guess", fake_kernel(100.0), "invalid choice: 'guess'"),
])
def test_bad_arguments_or_a_broken_body_end_in_one_line_and_store_nothing(ip, tmp_path, capsys, args, body,
                                                                          expected):
    db = tmp_path / "k.db"
    line = one_line_usage_error(ip, capsys, evolve_cell(f"{args} --db {db}".strip(), body))
    assert expected in line
    if db.exists():
        with Store(db) as store:
            assert store.list_runs() == []


def test_an_unknown_model_is_one_line_before_anything_runs(shell, tmp_path, capsys):
    db = tmp_path / "k.db"  # the real Run: the model is checked when the run is created
    line = one_line_usage_error(shell, capsys, evolve_cell(f"softmax --llm nonsense --db {db}"))
    assert "unknown LLM 'nonsense'" in line
    with Store(db) as store:
        assert store.list_runs() == []


def test_a_database_in_a_missing_folder_or_an_unknown_run_is_one_line(ip, tmp_path, capsys):
    line = one_line_usage_error(ip, capsys, evolve_cell(f"softmax --db {tmp_path / 'nowhere' / 'k.db'}"))
    assert "does not exist" in line
    first = ip.run_cell(evolve_cell(f"softmax --iterations 1 --llm offline --db {tmp_path / 'k.db'}")).result
    capsys.readouterr()
    line = one_line_usage_error(ip, capsys, f"%kernel_evolve softmax --resume r-nothere --db {tmp_path / 'k.db'}")
    assert "no run 'r-nothere'" in line
    line = one_line_usage_error(ip, capsys, f"%kernel_evolve matmul --resume {first.id} --db {tmp_path / 'k.db'}")
    assert f"run {first.id} evolves softmax, not matmul" in line


def test_line_magics_are_the_command_line(ip, tmp_path, capsys):
    db = tmp_path / "k.db"
    run = ip.run_cell(evolve_cell(f"softmax --iterations 1 --llm offline --db {db}")).result
    capsys.readouterr()
    assert ip.run_cell(f"%kscience runs --db {db}").success
    assert run.id in capsys.readouterr().out
    assert ip.run_cell(f"%kscience show {run.id} --db {db}").success
    out = capsys.readouterr().out
    assert f"best {run.best.id}" in out and "seed kernel" in out
    assert ip.run_cell(f"%kscience best {run.id} --db {db}").success
    assert capsys.readouterr().out == run.best.source
    assert "softmax" in (ip.run_cell("%kscience problems").success and capsys.readouterr().out)
    assert "no run 'r-nothere'" in one_line_usage_error(ip, capsys, f"%kscience show r-nothere --db {db}")
    assert "invalid choice: 'fly'" in one_line_usage_error(ip, capsys, "%kscience fly")
    assert "no database at" in one_line_usage_error(ip, capsys, f"%kscience runs --db {tmp_path / 'none.db'}")


def test_line_magic_run_and_resume_return_run_objects(ip, tmp_path, capsys):
    db = tmp_path / "k.db"
    seed = tmp_path / "seed.py"
    seed.write_text(fake_kernel(50.0))
    run = ip.run_cell(f"%kscience run softmax --seed-kernel {seed} --iterations 1 --llm offline --db {db}").result
    assert isinstance(run, RunResult) and run.seed.geomean_us == 50.0 and run.status == "finished"
    again = ip.run_cell(f"%kscience resume {run.id} --iterations 1 --db {db}").result
    assert again.id == run.id and again.metrics.iterations_done == 2


def test_open_run_reopens_a_stored_run_with_its_html(ip, tmp_path, capsys):
    db = tmp_path / "k.db"
    made = ip.run_cell(evolve_cell(f"softmax --iterations 1 --llm offline --db {db}")).result
    run = kscience.open_run(made.id, db=db)
    assert not run.driven_here and not run.live and run.status == "finished"
    assert run.best.id == made.best.id and run.best.source == made.best.source
    assert run.candidate(made.best.id).times == made.best.times
    html = run._repr_html_()
    for part in ("kscience-leaderboard", "data:image/png;base64,", made.best.id, "best kernel", "fake device"):
        assert part in html
    assert repr(run).startswith(f"<kscience run {made.id} (softmax): finished, best {made.best.id}")
    run.watch(view="text")  # an ended run's live view is its final table at once
    assert f"best {made.best.id}" in capsys.readouterr().out
    ax = run.plot()
    assert ax.get_ylabel() == "geomean time over shapes (us)" and len(ax.collections) >= 2
    with pytest.raises(Exception, match="no run 'r-nothere'"):
        kscience.open_run("r-nothere", db=db)
    with pytest.raises(Exception, match="no database at"):
        kscience.open_run(made.id, db=tmp_path / "none.db")


def test_every_run_setting_reaches_the_stored_config_from_both_magics(ip, tmp_path):
    """--no-compiled-baseline was once parsed by `%kscience run` and then dropped."""
    db = tmp_path / "k.db"
    cell = ip.run_cell(evolve_cell(f"softmax --iterations 0 --llm offline --db {db} --no-compiled-baseline "
                                   "--repairs 1 --seed 5 --llm-timeout 30")).result
    line = ip.run_cell(f"%kscience run softmax --iterations 0 --llm offline --db {db} --no-compiled-baseline "
                       "--repairs 1 --seed 5 --llm-timeout 30").result
    for run in (cell, line):
        config = run.row.config
        assert (config["compiled_baseline"], config["repairs"], config["seed"], config["llm_timeout_s"]) == \
            (False, 1, 5, 30.0)


def test_resume_takes_force_and_refuses_settings_fixed_at_creation(ip, tmp_path, capsys):
    db = tmp_path / "k.db"
    first = ip.run_cell(evolve_cell(f"softmax --iterations 1 --llm offline --db {db}")).result
    capsys.readouterr()
    line = one_line_usage_error(ip, capsys, f"%kernel_evolve softmax --resume {first.id} --seed 3 --db {db}")
    assert "keeps its seed" in line
    again = ip.run_cell(f"%kernel_evolve softmax --resume {first.id} --iterations 1 --force --repairs 0 "
                        f"--db {db}").result
    assert again.id == first.id and again.row.config["repairs"] == 0 and again.metrics.iterations_done == 2
    capsys.readouterr()
    assert "--force applies to --resume only" in one_line_usage_error(
        ip, capsys, evolve_cell(f"softmax --force --llm offline --db {db}"))
