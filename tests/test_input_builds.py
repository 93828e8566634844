"""How often one evaluation builds a shape's inputs, on a task whose inputs are slow to build.

GPU MODE's pmpp sort builds its numbers row by row from Python (one generator seeding and one
randn per row: most of a second for its largest shape on an H100), and every build lands in some
phase of the evaluation: the judge's own builds before the import, for its correctness calls, its
timed calls (it stages their inputs itself) and its rechecks, and in the worker the fixed buffers,
the warm-up, the checks and the profiled pass. A copy of that task whose `generate_input` writes
what it builds to stderr shows each build: in the judge's process on this test's stderr, in the
worker on the worker's stderr, which the result's tail carries.
"""

import dataclasses
import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
import torch

from kscience.cli.main import main as cli_main
from kscience.evaluate.judge import drive, input_sets
from kscience.evaluate.judge import session as session_module
from kscience.evaluate.judge.evaluation import evaluate
from kscience.evaluate.result import OK, EvalRequest
from kscience.problems import load_problem

from fake_clock import FakeBuffers, FakeClock, FakeSession

PMPP = Path(__file__).parent / "data" / "gpumode" / "reference-kernels" / "pmpp"
SHAPES = """tests: [{size: 1023, seed: 4242}]
benchmarks: [{size: 100000, seed: 54352}]
cpu_tests: [{size: 1023, seed: 4242}]
cpu_benchmarks: [{size: 20000, seed: 54352}, {size: 30000, seed: 93246}]
"""
BUILT = re.compile(r"<built (\d+) (\d+)>")
SORT = "import torch\n\ndef custom_kernel(data):\n    return torch.sort(data)[0]\n"


@pytest.fixture
def slow_sort(tmp_path):
    """pmpp sort_py with its own shapes for the CPU, its generate_input telling each build."""
    folder = tmp_path / "sort_py"
    folder.mkdir()
    shutil.copy(PMPP / "sort_py" / "task.py", folder)
    shutil.copy(PMPP / "utils.py", folder)
    reference = (PMPP / "sort_py" / "reference.py").read_text()
    marker = "    rows = int(size ** 0.5)"
    assert marker in reference
    (folder / "reference.py").write_text("import sys\n" + reference.replace(
        marker, '    sys.stderr.write(f"<built {seed} {size}>")\n    sys.stderr.flush()\n' + marker))
    (folder / "task.yml").write_text(SHAPES)
    return load_problem(str(folder))


def _builds(text: str) -> list[tuple[int, int]]:
    return [(int(seed), int(size)) for seed, size in BUILT.findall(text)]


@pytest.mark.usefixtures("gpumode_modules")
def test_no_set_of_inputs_is_built_twice_and_the_judges_first_builds_are_all_used(slow_sort, monkeypatch):
    events = []  # ("judge", seed, size) for each build in the judge; (command, seed) for each command
    ask = session_module.Session.ask

    def recording(self, cmd, *a, **k):
        events.append(("import", None) if "source" in cmd else ())
        events.extend((cmd.get("cmd"), s, cmd.get("kind")) for s in [cmd.get("seed")] + list(cmd.get("seeds") or [])
                      if s is not None)
        return ask(self, cmd, *a, **k)

    def generate_input(seed, device, **shape):
        events.append(("judge", seed, shape["size"]))
        return slow_sort.generate_input(seed, device, **shape)

    monkeypatch.setattr(session_module.Session, "ask", recording)
    monkeypatch.setattr(input_sets, "KEEP_BUILD_S", 0.0)  # these builds take milliseconds on a CPU
    problem = dataclasses.replace(slow_sort, generate_input=generate_input)
    result = evaluate(EvalRequest(problem=problem.locator, source=SORT), problem=problem)
    assert result.status == OK, result.message
    assert set(result.phases_s) >= {"inputs", "builds", "import", "check", "time", "recheck"}
    events = [e for e in events if e]
    imported = events.index(("import", None))
    judge_builds = [e[1:] for e in events if e[0] == "judge"]
    before_import = [e[1:] for e in events[:imported] if e[0] == "judge"]
    sent = [e[:2] for e in events if e[0] not in ("judge", "import")]
    worker_builds = _builds(result.stderr_tail)

    # Every seed a command carried is new to the evaluation except the warm-up's (never timed), and a
    # staged shape's timed and null calls carry none: the judge writes their inputs.
    carried = [s for c, s in sent if c != "prepare"]
    assert len(carried) == len(set(carried)) and not [s for c, s in sent if c == "call"]
    # The worker builds each set once: one build per seed it was sent and used.
    assert worker_builds and max(Counter(worker_builds).values()) == 1, Counter(worker_builds).most_common(3)
    # The judge builds each set once (a read call's inputs are held for its recheck where builds are
    # slow), and what it built before the import (each benchmark shape's first builds, session.BUILDS of
    # them) all goes to the shape's correctness call or to its first timed calls.
    assert max(Counter(judge_builds).values()) == 1, Counter(judge_builds).most_common(3)
    sizes = Counter(size for _, size in before_import)
    assert sizes[20000] >= session_module.BUILDS and sizes[30000] >= session_module.BUILDS
    checks = {s for c, s in sent if c == "check"}
    timed_seeds = {e[1] for e in events[imported:] if e[0] == "judge"}
    early = [seed for seed, size in before_import if Counter(s for s, _ in before_import)[seed] == 1]
    assert all(seed in checks or seed not in timed_seeds for seed in early)
    for size in (20000, 30000):
        shape = next(s for s in result.shapes if s.shape.get("size") == size)
        assert shape.ok and shape.n >= 3 and shape.inputs == "staged by the judge"


def _drive(monkeypatch, build_s, call_s, ready=()):
    """The judge builds each timed call's inputs (`build_s`, outside its clock); a timed call then runs
    `call_s` inside it. Returns the kinds of the calls, the seeds the judge built and those it read."""
    clock = FakeClock()
    monkeypatch.setattr(drive, "time", clock)
    session = FakeSession(clock, lambda n: call_s, build_s)
    plan = drive.Plan(warmup=3, nulls=6, min_n=10, max_n=2000, max_seconds=0.5, target_rse=0.005, checks=3,
                      few_n=3, enough_s=10.0, ready=[(seed, [torch.zeros(4)]) for seed in ready],
                      build_us=build_s * 1e6, built_n=3, built_nulls=3)
    calls, looks = drive.run_calls(session, {"size": 1}, plan, FakeBuffers(), set(ready), 16)
    return Counter(c.kind for c in calls), session.built, [look.seed for look in looks]


def test_calls_that_are_mostly_their_input_build_are_fewer(monkeypatch):
    # pmpp sort's largest shape on an H100: a build of 0.77 s around a sort of 5 ms
    assert _drive(monkeypatch, 0.77, 0.005)[0] == {"timed": 3, "null": 3}
    # a build of microseconds around a call of a millisecond: the usual numbers
    kinds = _drive(monkeypatch, 0.00001, 0.001)[0]
    assert kinds["timed"] >= 10 and kinds["null"] == 6
    # a build of milliseconds around a call of one (built-in SwiGLU's weights) keeps the usual number
    kinds = _drive(monkeypatch, 0.004, 0.001)[0]
    assert kinds["timed"] >= 10 and kinds["null"] == 6
    # a call as long as its build is not mostly the build
    kinds = _drive(monkeypatch, 0.01, 0.03)[0]
    assert kinds["timed"] >= 10 and kinds["null"] == 6


def test_sets_built_before_the_import_go_to_the_first_timed_calls_only(monkeypatch):
    kinds, built, read = _drive(monkeypatch, 0.00001, 0.001, ready=[11, 12])
    assert {11, 12} <= set(read)  # the first timed calls, always read, so rechecked with the inputs kept
    assert 11 not in built and 12 not in built  # not built again
    assert len(built) == len(set(built)) == kinds["timed"] - 2


@pytest.mark.usefixtures("gpumode_modules")
def test_kscience_eval_json_shows_where_the_seconds_went(slow_sort, tmp_path, capsys):
    candidate = tmp_path / "sort.py"
    candidate.write_text(SORT)
    assert cli_main(["eval", slow_sort.locator, str(candidate), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == OK
    # the judge's phases (each phase counts for itself alone: they add up to no more than the wall time)
    assert {"builds", "inputs", "import", "check", "reference", "time", "recheck", "close"} <= set(out["phases_s"])
    assert sum(out["phases_s"].values()) <= out["wall_s"] + 0.01
    # and the worker's own account of its import, beside them
    assert {"device", "problem", "candidate"} <= set(out["device"]["setup_s"])


def test_sets_are_held_only_where_even_the_quickest_build_was_slow_and_only_within_the_budget(monkeypatch):
    one = [torch.zeros(1000, dtype=torch.float32)]  # 4,000 bytes
    sets = input_sets.InputSets()
    # the first build also loaded kernels; the next two were fast: nothing held, the shape not slow
    sets.keep("fast", 1, one, 0.02)
    sets.keep("fast", 2, one, 0.001)
    sets.keep("fast", 3, one, 0.001)
    sets.settle("fast", 0.001)
    assert sets.take("fast") is None and "fast" not in sets.slow and sets.held_bytes() == 0
    monkeypatch.setattr(input_sets, "KEEP_BYTES", 10_000)  # room for two sets
    for seed in (4, 5, 6):
        sets.keep("slow", seed, one, 0.5)
    sets.settle("slow", 0.5)
    assert sets.held_bytes() == 8000 and not sets.room("slow") and not sets.room("fast")
    taken = [sets.take("slow"), sets.take("slow"), sets.take("slow")]
    assert sorted(t[0] for t in taken[:2]) == [4, 5] and taken[2] is None  # each held set goes out once
    assert sets.room("slow")
