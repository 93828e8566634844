"""Every notebook in notebooks/ executed by papermill, on CPU, with small parameters.

These are real runs: the offline scientist and the evaluator under the Triton interpreter, one
iteration on softmax. Papermill renders no widgets, so the magic and `evolve` show their text
summary; that it was updated in place to the final table is checked too. No notebook writes
into files git tracks unless told to: what each writes by default is ignored by git.
"""

import logging
import shutil
import subprocess
from pathlib import Path

import pytest

papermill = pytest.importorskip("papermill")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
WRITTEN = ("db", "figures_dir")  # the parameters that name what a notebook writes


def execute(notebook: str, tmp: Path, cwd: Path | None = None, **parameters) -> dict:
    """Run `notebook` in `cwd` (default `tmp`), its executed copy written to `tmp`."""
    out = tmp / f"out-{notebook}"
    with pytest.MonkeyPatch.context() as env:
        env.delenv("MPLBACKEND", raising=False)  # the kernel draws inline, as it would for a user
        return papermill.execute_notebook(str(NOTEBOOKS / notebook), str(out), parameters=parameters,
                                          cwd=str(cwd or tmp), kernel_name="python3", progress_bar=False,
                                          log_output=False)


def outputs(nb) -> list[dict]:
    return [o for cell in nb["cells"] if cell["cell_type"] == "code" for o in cell.get("outputs", [])]


def texts(nb, mime: str = "text/plain") -> str:
    parts = []
    for o in outputs(nb):
        if o.get("output_type") == "stream":
            parts.append(o["text"] if mime == "text/plain" else "")
        elif mime in o.get("data", {}):
            parts.append(o["data"][mime] if isinstance(o["data"][mime], str) else "".join(o["data"][mime]))
    return "\n".join(parts)


def test_every_notebook_has_a_parameters_cell_and_no_stored_outputs():
    import nbformat

    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, path.name
        assert all(not c.get("outputs") and c.get("execution_count") is None for c in nb.cells if c.cell_type == "code")


def test_papermill_reads_every_parameters_cell_without_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="papermill"):
        found = {path.name: papermill.inspect_notebook(str(path)) for path in sorted(NOTEBOOKS.glob("*.ipynb"))}
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    assert set(found["campaign.ipynb"]) >= {"suite", "sets", "db", "resume"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          capture_output=True, text=True, check=True).stdout


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and a checkout")
def test_what_every_notebook_writes_by_default_is_ignored_by_git():
    """Run from the repository's root (papermill, `make run` beside it) or from notebooks/
    (JupyterLab's working folder), a notebook's default outputs never show in `git status`."""
    checked = 0
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        for name, parameter in papermill.inspect_notebook(str(path)).items():
            if name in WRITTEN:
                default = parameter["default"].strip("\"'")
                for cwd in (ROOT, NOTEBOOKS):
                    target = (cwd / default / "a.png") if name == "figures_dir" else cwd / default
                    ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", str(target)])
                    assert ignored.returncode == 0, f"{path.name}: {name} = {default!r} in {cwd} is not ignored by git"
                checked += 1
    assert checked == 5  # four databases and the report's figures


@pytest.fixture(scope="module")
def evolved(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("evolve")
    seed = tmp / "seed.py"
    from kscience.problems import load_problem

    seed.write_text(load_problem("softmax").seed_source)
    nb = execute("evolve.ipynb", tmp, problem="softmax", iterations=1, llm="offline", db=str(tmp / "runs.db"),
                 seed_kernel=str(seed), name="ci", max_tokens=10_000_000)
    return nb, tmp


@pytest.mark.slow
def test_evolve_notebook_drives_a_full_run(evolved):
    nb, tmp = evolved
    from kscience.record.snapshot import run_listing
    from kscience.record.store import Store

    with Store(tmp / "runs.db") as store:
        (listed,) = run_listing(store)
        run = listed.run
        assert run.status == "finished" and run.name == "ci" and listed.n_candidates >= 4
        assert run.config["max_tokens"] == 10_000_000
    plain = texts(nb)
    # The live text summary ends as the command line's table (replaced in place, not appended).
    assert f"run {run.id} (softmax, offline, tournament): finished" in plain
    assert plain.count("predicted vs measured") == 1
    assert "kscience-leaderboard" in texts(nb, "text/html")
    assert texts(nb, "image/png")  # the plot
    assert f"run {run.id}: finished" in plain


@pytest.mark.slow
def test_report_notebook_writes_the_figures_of_that_run(evolved):
    _, tmp = evolved
    nb = execute("report.ipynb", tmp, db=str(tmp / "runs.db"), figures_dir=str(tmp / "figures"))
    written = sorted(p.name for p in (tmp / "figures").iterdir())
    assert written == sorted(f"softmax-{s}.png" for s in ("timing", "shapes", "lineage", "uplift"))
    assert len([o for o in outputs(nb) if "image/png" in o.get("data", {})]) == 4
    assert "kscience-leaderboard" in texts(nb, "text/html")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_report_notebook_with_its_defaults_leaves_git_status_clean(evolved):
    """In a checkout holding committed figures, the report with its defaults writes to an ignored
    folder; pointed at the committed ones, it refuses in one line and changes nothing."""
    _, tmp = evolved
    repo = tmp / "checkout"
    (repo / "figures").mkdir(parents=True)
    git(repo, "init", "-q")
    shutil.copy(ROOT / ".gitignore", repo / ".gitignore")
    for figure in (ROOT / "figures").glob("softmax-*.png"):
        shutil.copy(figure, repo / "figures" / figure.name)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "the committed figures")
    committed = {p.name: p.read_bytes() for p in (repo / "figures").iterdir()}
    shutil.copy(tmp / "runs.db", repo / "kscience.db")  # where `make run` leaves its run

    nb = execute("report.ipynb", tmp, cwd=repo)
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""
    written = sorted(p.name for p in (repo / "kscience-figures").iterdir())
    assert written == sorted(f"softmax-{s}.png" for s in ("timing", "shapes", "lineage", "uplift"))
    assert f"written to {repo / 'kscience-figures'}" in texts(nb)

    with pytest.raises(papermill.PapermillExecutionError, match="would replace files git tracks"):
        execute("report.ipynb", tmp, cwd=repo, figures_dir="figures")
    assert {p.name: p.read_bytes() for p in (repo / "figures").iterdir()} == committed
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""


@pytest.mark.slow
def test_quickstart_runs_the_magic_from_top_to_bottom(tmp_path):
    nb = execute("quickstart.ipynb", tmp_path, iterations=1, llm="offline", db=str(tmp_path / "quick.db"))
    plain = texts(nb)
    assert "'finished'" in plain  # run.wait()
    assert "candidates evaluated" in plain and "def custom_kernel" in plain
    assert "kscience-leaderboard" in texts(nb, "text/html") and texts(nb, "image/png")
    assert (tmp_path / "quick.db").is_file()
