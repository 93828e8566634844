"""benchmarks/README.md is the index of the benchmarks: every script in it, every gpu_session.sh step
said, every result file it names present in benchmarks/results/."""

import re
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
INDEX = (BENCHMARKS / "README.md").read_text()
SESSION = (BENCHMARKS / "gpu_session.sh").read_text()


def _steps_known() -> list[str]:
    listed = re.search(r'steps_known="([^"]*)"', SESSION).group(1)
    return listed.replace("\\\n", " ").split()


def test_every_benchmark_and_probe_is_indexed_where_it_lives():
    scripts = sorted(BENCHMARKS.glob("*.py")) + sorted((BENCHMARKS / "probes").glob("*.py"))
    assert scripts
    probes_section = INDEX.split("## Probes", 1)[1]
    for script in scripts:
        section = probes_section if script.parent.name == "probes" else INDEX.split("## Probes", 1)[0]
        assert f"`{script.name}`" in section, f"{script.relative_to(BENCHMARKS)} is not indexed where it lives"
        usage = re.findall(r"python3? (benchmarks/\S+\.py)", script.read_text())
        assert all(u == f"benchmarks/{script.relative_to(BENCHMARKS)}" for u in usage), (script.name, usage)


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
