"""What the command line says, message by message, as a new user reads it (issue 15): limits named
as they were set, a shape that failed not listed as ok, the user's own file named, help for every
flag, a read-only command that leaves a foreign file untouched, and tables without jargon,
scientific notation or numbers without units.
"""

import argparse
import asyncio
import sqlite3
import subprocess
import sys

import pytest

from kscience.cli.main import build_parser, main
from kscience.evaluate.result import EvalResult, ShapeResult
from kscience.run.events import CandidateEvaluated
from kscience.cli.problem_commands import eval_lines
from kscience.scientist.offline.kernel_source import Source
from kscience.scientist.offline.moves import find_knobs, set_knob
from kscience.scientist.strategy import CandidateView, most_different
from kscience.record.text import fmt_x, why_chosen_text
from kscience.record.store import Store
from kscience.record.metrics import RunMetrics, Uplift
from kscience.record.rows import LlmUsage, RunRow
from kscience.record.summary import budget_parts, llm_text, summary_lines
from record_fixtures import metrics_with
from kscience.version import __version__
from test_loop import FakeExecutor, ScriptedScientist, make_run

SLOW_AFTER_ONE_CALL = '''import time
import torch

CALLS = [0]


def custom_kernel(data):
    (x,) = data
    CALLS[0] += 1
    if CALLS[0] > 1:  # correct once, then far too slow to time
        time.sleep(60)
    e = (x.float() - x.float().amax(-1, keepdim=True)).exp()  # from its parts: torch.softmax is forbidden
    return (e / e.sum(-1, keepdim=True)).to(x.dtype)
'''


def run_main(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


# --- eval ---------------------------------------------------------------------------------------
def test_an_evaluation_limit_is_named_as_set_with_its_phase_and_the_shape_is_not_ok(tmp_path, capsys):
    cand = tmp_path / "slow.py"
    cand.write_text(SLOW_AFTER_ONE_CALL)
    code, out, _ = run_main(capsys, "eval", "softmax", str(cand), "--shapes", "benchmarks", "--eval-timeout", "10")
    lines = out.splitlines()
    assert code == 1
    assert lines[0] == "timeout: timed out: the 10 s limit per step set for this evaluation ran out while timing"
    (shape_line,) = [line for line in lines if line.startswith("  BAD") or line.startswith("  ok")]
    assert shape_line.startswith("  BAD benchmark")  # correct once, but its timing failed
    assert lines[-1].startswith("  failing shape: ")


def test_a_limit_under_a_second_is_not_rounded_to_zero(tmp_path, capsys):
    cand = tmp_path / "mine.py"
    cand.write_text(SLOW_AFTER_ONE_CALL)
    code, out, _ = run_main(capsys, "eval", "softmax", str(cand), "--eval-timeout", "0.5")
    assert code == 1
    # Which step the half second runs out in depends on the machine's speed; the limit reads as set.
    assert out.splitlines()[0].startswith("timeout: timed out: the 0.5 s limit per step set for this evaluation "
                                          "ran out while ")


def test_eval_checks_the_problem_before_the_candidate_file(capsys):
    code, _, err = run_main(capsys, "eval", "no_such_problem", "no_such_file.py")
    assert code == 2 and "no problem 'no_such_problem'" in err and "no_such_file.py" not in err


def test_eval_errors_name_the_users_file_not_the_sandboxs(tmp_path, capsys):
    cand = tmp_path / "my_kernel.py"
    cand.write_text("def custom_kernel(data):\n    return (\n")
    code, out, _ = run_main(capsys, "eval", "softmax", str(cand), "--shapes", "tests")
    assert code == 1 and out.startswith("compile_error: ")
    assert f"({cand} line 2)" in out.splitlines()[0] and "candidate.py" not in out


def test_eval_lines_label_every_number_and_nest_no_parentheses():
    result = EvalResult(status="ok", message="1 shape correct; geomean 1,234.50 us over 1 benchmark shape, "
                                             "timed by cpu interpreter (judge's clock)",
                        geomean_us=1234.5, device={"name": "cpu (Triton interpreter)", "interpreted": True},
                        timing_label="cpu interpreter (judge's clock)", wall_s=4.04,
                        shapes=[ShapeResult(shape={"m": 256, "n": 2048}, ok=True, phase="benchmark",
                                            time_us=1234.5, std_us=3.0, n=3)])
    text = "\n".join(eval_lines(result))
    assert "((" not in text and "))" not in text
    assert "evaluated in 4.0s" in text and "timing: cpu interpreter (judge's clock)" in text
    assert "median 1,234.5 us, sd 3.0 us, n=3 calls" in text


def test_the_judges_own_message_counts_in_words(tmp_path, capsys):
    cand = tmp_path / "plain.py"
    cand.write_text("import torch\n\ndef custom_kernel(data):\n    (x,) = data\n"
                    "    e = (x.float() - x.float().amax(-1, keepdim=True)).exp()\n"
                    "    return (e / e.sum(-1, keepdim=True)).to(x.dtype)\n")
    code, out, _ = run_main(capsys, "eval", "softmax", str(cand), "--shapes", "benchmarks")
    first = out.splitlines()[0]
    assert code == 0, out
    assert first.startswith("ok: 1 shape correct; geomean ") and "over 1 CPU shape, timed by" in first


# --- help ---------------------------------------------------------------------------------------
def _actions(parser, path=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _actions(sub, (*path, name))
        elif action.dest != "help":
            yield path, action


def test_every_argument_of_every_command_has_help():
    missing = [(" ".join(path), action.option_strings or action.dest)
               for path, action in _actions(build_parser()) if not action.help]
    assert missing == []


def test_top_level_help_names_environment_exit_codes_and_examples(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for part in ("environment:", "KSCIENCE_DB", "GEMINI_API_KEY", "exit codes:", "130", "examples:",
                 "kscience eval softmax my_softmax.py"):
        assert part in out


def test_seed_seed_kernel_and_the_scientists_seed_are_told_apart(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--seed N random seed of the scientist's choices" in out
    assert "--seed-kernel FILE starting kernel file" in out
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "print a problem's starting kernel" in " ".join(capsys.readouterr().out.split())


def test_version_and_python_dash_m_exit_codes():
    done = subprocess.run([sys.executable, "-m", "kscience", "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == f"kscience {__version__}"
    bad = subprocess.run([sys.executable, "-m", "kscience", "eval", "no_such_problem", "x.py"],
                         capture_output=True, text=True)
    # A line may come before the error (a command first removes what a killed one left, and says so).
    errors = [line for line in bad.stderr.splitlines() if line.startswith("kscience: error:")]
    assert bad.returncode == 2 and len(errors) == 1 and errors[0].startswith("kscience: error: no problem"), bad.stderr


# --- a foreign database -------------------------------------------------------------------------
@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_a_refused_foreign_sqlite_file_is_left_byte_identical(tmp_path, capsys, journal):
    path = tmp_path / "foreign.sqlite"
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA journal_mode={journal}")
    db.execute("CREATE TABLE notes (body TEXT)")
    db.execute("INSERT INTO notes VALUES ('mine')")
    db.commit()
    db.close()
    before, names = path.read_bytes(), sorted(p.name for p in tmp_path.iterdir())
    for command in ("runs", "campaigns"):
        code, _, err = run_main(capsys, command, "--db", str(path))
        assert code == 2 and "is an SQLite database but not a kscience one" in err
    code, _, err = run_main(capsys, "run", "softmax", "--llm", "offline", "--db", str(path))
    assert code == 2 and "not a kscience one" in err
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == names


def test_reading_commands_open_the_store_read_only(tmp_path, capsys):
    path = tmp_path / "k.db"
    Store(path).close()
    with Store(path, readonly=True) as store:
        assert store.readonly and store.list_runs() == []
        with pytest.raises(Exception):
            store.create_run(name="", problem="softmax", overrides={}, llm="offline", strategy="llm",
                             config={}, environment={})
    code, out, _ = run_main(capsys, "runs", "--db", str(path))
    assert code == 0 and out == "no runs yet\n"


def test_reading_a_finished_database_leaves_no_file_beside_it(tmp_path, capsys):
    # A database copied or kept as a result (no writer has it open, so no -wal file): reading it
    # changes no byte and adds no -wal or -shm file to its folder.
    path = tmp_path / "k.db"
    Store(path).close()
    before, names = path.read_bytes(), sorted(p.name for p in tmp_path.iterdir())
    assert names == ["k.db"]
    code, _, _ = run_main(capsys, "runs", "--db", str(path))
    assert code == 0
    with Store(path, readonly=True) as store:
        assert store.list_runs() == []
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == names


# --- Ctrl-C -------------------------------------------------------------------------------------
def test_the_verdict_in_flight_at_ctrl_c_is_stored_announced_and_shown(tmp_path, capsys):
    executor = FakeExecutor(delay_s=0.5)
    run = make_run(tmp_path, ScriptedScientist(), executor)
    seen = []
    run.subscribe(seen.append)

    async def interrupt_during_the_first_evaluation():
        task = asyncio.create_task(run.run_async())
        for _ in range(1000):
            if executor.in_flight or task.done():
                break
            await asyncio.sleep(0.01)
        assert executor.in_flight, "no evaluation started"
        task.cancel()  # what Ctrl-C does to a run in a shell
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(interrupt_during_the_first_evaluation())
    # the seed, and the eager baseline asked for with it: both were in flight
    done = {c.kind: c for c in run.store.candidates(run.id) if c.status != "pending"}
    assert sorted(done) == ["eager", "seed"]
    judged = done["seed"]
    assert judged.status == "ok"
    assert sorted(e.candidate_id for e in seen if isinstance(e, CandidateEvaluated)) == sorted(c.id for c in done.values())
    logged = [e for e in run.store.events(run.id) if e["type"] == CandidateEvaluated.type]
    assert sorted(e["payload"]["candidate_id"] for e in logged) == sorted(c.id for c in done.values())
    code, out, _ = run_main(capsys, "show", run.id, "--db", str(run.store.path))
    assert code == 0 and "stopped" in out and f"{judged.id}" in out and "candidates evaluated   1 " in out


# --- numbers as text ----------------------------------------------------------------------------
def test_ratios_never_use_scientific_notation_and_stay_narrow():
    for ratio, text in ((1690.2, "1,690x"), (12.34, "12.3x"), (1.234, "1.23x"), (0.0591, "0.0591x"),
                        (0.000591, "0.000591x")):
        assert fmt_x(ratio) == text
    assert all("e" not in fmt_x(r) and len(fmt_x(r)) <= 10 for r in (1e-5, 3e-7, 1e5, 98765.4))


def _metrics(**changes) -> RunMetrics:
    uplift = Uplift(plan_id="p-1", candidate_id="c-1", iteration=1, predicted_min_pct=0.0, predicted_max_pct=10.0,
                    measured_pct=22.0)
    return metrics_with(**{
        "seed_us": 20000.0, "eager_us": 11.8, "best_us": 11.8 * 1690, "best_id": "c-1", "iterations_done": 1,
        "n_candidates": 5, "n_ok": 4, "evaluated_to_best": 5, "edits_applied": 3, "edits_total": 3,
        "uplift": [uplift], "uplift_mean_abs_error_pct": 17.0,
        "llm": LlmUsage(calls=0, tokens=0, cost_usd=0.0, errors=0, unpriced=0, offline_calls=9),
        "timing_label": "cpu interpreter (judge's clock)",
        "device": {"name": "cpu (Triton interpreter)", "interpreted": True}, **changes})


def test_the_summary_says_units_and_one_name_for_pytorch_eager():
    row = RunRow(id="r-1", name="r-1", problem="softmax", overrides={}, llm="offline", strategy="tournament",
                 status="finished", config={}, environment={}, error=None, pid=None, host=None, created=0.0,
                 updated=0.0)
    text = "\n".join(summary_lines(row, _metrics()))
    assert "PyTorch eager" in text and "reference" not in text and " ref " not in text
    assert "e+" not in text and "0.000592x" in text
    assert "mean error 17.0 percentage points" in text and "the best was the 5th evaluated" in text
    assert text.splitlines()[0].endswith("finished after 1 iteration")
    assert "none: the offline scientist answered 9 prompts" in text and "tokens" not in text
    assert "((" not in text and "CPU-interpreter timings" in text


def test_llm_and_budget_lines_say_what_they_cover():
    usage = LlmUsage(calls=3, tokens=12345, cost_usd=0.5, errors=0, unpriced=0, offline_calls=0)
    assert llm_text(usage) == "3 calls, 12,345 tokens, $0.5000 (all sessions)"
    parts = budget_parts({"max_tokens": 100000, "time_limit_s": 600}, usage, elapsed_s=4000, session_s=65)
    assert parts == ["12,345 tokens of 100,000, all sessions", "$0.5000, all sessions",
                     "1m05s this session (limit 10m00s per session)"]


def test_runs_labels_cpu_interpreter_times(tmp_path, capsys):
    run = make_run(tmp_path, ScriptedScientist(), FakeExecutor(delay_s=0))
    run.start(background=False)
    code, out, _ = run_main(capsys, "runs", "--db", str(run.store.path))
    assert code == 0 and "timed on" in out.splitlines()[0] and "CPU interpreter" in out.splitlines()[1]
    assert out.splitlines()[-1].startswith("(CPU interpreter: CPU-interpreter timings check the machinery")


# --- the scientist's own words --------------------------------------------------------------------
def test_a_knob_edit_keeps_its_comment_true():
    src = Source("BLOCK_M = 64  # 64 rows per program\nBLOCK_N = 32  # 32 x 4 = 128 lanes\nNUM_WARPS = 4\n")
    block_m, block_n, _ = find_knobs(src)
    assert set_knob(src, block_m, 128).splitlines()[0] == "BLOCK_M = 128  # 128 rows per program"
    assert set_knob(src, block_n, 64).splitlines()[1] == "BLOCK_N = 64"  # derived numbers: dropped


def _member(id_: str, times: dict[str, float]) -> CandidateView:
    us = sum(times.values()) / len(times)
    return CandidateView(id=id_, parent_id=None, hypothesis="h", status="ok", geomean_us=us, shape_times=times,
                         source="", message="")


def test_the_selectors_reason_needs_no_log_time_jargon():
    base = _member("c-1", {"m=8": 10.0})
    _, why = most_different(base, [_member("c-2", {"m=8": 12.0})])
    assert "one benchmark shape" in why and "log time" not in why and "spread" not in why
    base = _member("c-1", {"m=8": 10.0, "m=16": 20.0})
    _, why = most_different(base, [_member("c-2", {"m=8": 20.0, "m=16": 20.0})])
    assert "differ by 41% on average beyond a uniform speed-up" in why and "log time" not in why


def test_why_a_plan_was_chosen_reads_as_words():
    assert why_chosen_text("highest max") == "the largest predicted gain"
    assert why_chosen_text("highest min") == "the safest predicted gain"
    assert why_chosen_text("most innovative") == "the most novel idea"
