"""benchmarks/README.md is the index of the standing questions: every script in it, every gpu_session.sh
step said, every result file it names present in benchmarks/results/, every probe that answered once out
of the tree with its answer said; benchmarks/results/README.md opens with the current figure of each."""

import re
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
INDEX = (BENCHMARKS / "README.md").read_text()
RESULTS = BENCHMARKS / "results"
MAINTAINED = INDEX.split("## Maintained", 1)[1].split("\n## ", 1)[0]
ANSWERED = INDEX.split("## Answered once", 1)[1].split("\n## ", 1)[0]
CURRENT = (RESULTS / "README.md").read_text().split("## Current figures", 1)[1].split("\n## ", 1)[0]
SESSION = (BENCHMARKS / "gpu_session.sh").read_text()


def _steps_known() -> list[str]:
    listed = re.search(r'steps_known="([^"]*)"', SESSION).group(1)
    return listed.replace("\\\n", " ").split()


def _rows(table: str) -> list[list[str]]:
    """The body rows of the markdown table(s) in `table`, as cells."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in table.splitlines()
            if line.startswith("| ") and not line.startswith("|---")]
    return rows[1:] if rows else rows


def test_every_benchmark_is_indexed_and_no_probe_is_left_in_the_tree():
    scripts = sorted(BENCHMARKS.glob("*.py"))
    assert scripts
    for script in scripts:
        assert f"`{script.name}`" in MAINTAINED, f"{script.name} is not indexed"
        usage = re.findall(r"python3? (benchmarks/\S+\.py)", script.read_text())
        assert all(u == f"benchmarks/{script.name}" for u in usage), (script.name, usage)
    left = sorted(p.relative_to(BENCHMARKS).as_posix() for p in BENCHMARKS.glob("*/*.py")
                  if p.parent.name not in ("cuda_kernels", "kernelbench"))
    assert not left, f"scripts outside the index's places (a probe that answered belongs in the history): {left}"


def test_every_probe_that_answered_says_its_answer_and_keeps_its_results():
    rows = [r for r in _rows(ANSWERED) if r[0].startswith("`")]
    assert rows
    for probe, question, answer, result in rows:
        assert not (BENCHMARKS / probe.strip("`")).exists() and not (BENCHMARKS / "probes" / probe.strip("`")).exists()
        assert question and answer, probe
        for name in re.findall(r"`([^`]+\.(?:json|md|log))`", result):
            assert (RESULTS / name).is_file(), f"{probe}: {name} is not in benchmarks/results/"


def test_the_results_open_with_the_current_figure_of_every_maintained_benchmark():
    rows = _rows(CURRENT)
    assert [len(r) for r in rows] == [6] * len(rows), "each row: benchmark, figure, device, date, commit, file"
    named = {n for r in rows for n in re.findall(r"`([^`]+)`", r[0])}
    scripts = {n for r in _rows(MAINTAINED) for n in re.findall(r"`([^`]+)`", r[0])}
    assert scripts <= named, f"maintained benchmarks without a current figure: {sorted(scripts - named)}"
    for benchmark, figure, device, date, commit, file in rows:
        if figure in ("not yet run on a GPU", "no result kept"):
            continue
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", date) and device and figure, benchmark
        assert re.search(r"`[0-9a-f]{7}`", commit), f"{benchmark}: no commit"
        name = file.strip("`")
        assert (RESULTS / name).is_file(), f"{benchmark}: {name} is not in benchmarks/results/"
        assert date in name, f"{benchmark}: the file {name} is not of {date}"


def test_every_gpu_session_step_is_handled_and_said():
    handled = set()
    for labels in re.findall(r"^\s{4}([a-z|-]+)\)", SESSION, flags=re.MULTILINE):
        handled.update(labels.split("|"))
    assert set(_steps_known()) == handled
    steps_table = INDEX.split("## `gpu_session.sh` steps", 1)[1].split("\n## ", 1)[0]
    for step in _steps_known():
        assert re.search(rf"^\| [^|]*`{re.escape(step)}`", steps_table, flags=re.MULTILINE), step


def test_every_result_file_the_index_names_exists():
    named = re.findall(r"`([A-Za-z0-9_.+*-]+\.(?:json|md|db|log|txt))`", INDEX)
    results = BENCHMARKS / "results"
    for name in named:
        if name == "README.md" or "-" not in name:
            continue
        assert list(results.glob(name)), f"benchmarks/README.md names {name}, not in benchmarks/results/"


def test_the_two_halves_of_the_tests_step_run_every_gpu_test_file_once():
    halves = re.findall(r'^\s+[12]\) files="([^"]*)"', SESSION, flags=re.MULTILINE)
    named = [f"test_gpu_{name}.py" for half in halves for name in half.split()]
    gpu_tests = sorted(p.name for p in (BENCHMARKS.parent / "tests" / "gpu").glob("test_gpu_*.py"))
    assert len(halves) == 2 and sorted(named) == [f for f in gpu_tests if f != "test_gpu_gpumode_sort.py"]
