"""`kscience run | resume | runs | show | best` as a user meets them.

The end-to-end runs use the offline scientist and the real evaluator under the Triton
interpreter; the error cases check for one line on stderr, an exit code and no traceback.
"""

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from kscience.cli.main import main
from kscience.record.store import Store

KEY = "sk-test-0123456789abcdef0123"  # looks like a credential, so it must never be stored


def kscience(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kscience.cli.main", *args], capture_output=True, text=True,
                          timeout=400, env=env)


def run_main(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def error_lines(stderr: str) -> list[str]:
    assert "Traceback" not in stderr
    return [line for line in stderr.splitlines() if line.startswith("kscience: error:")]


@pytest.mark.slow
def test_offline_run_end_to_end_then_runs_show_and_best(tmp_path, capsys):
    db = str(tmp_path / "k.db")
    done = kscience("run", "softmax", "--iterations", "1", "--llm", "offline", "--db", db, "--name", "smoke")
    assert done.returncode == 0, done.stderr
    assert error_lines(done.stderr) == []
    for word in ("PyTorch eager", "seed", "best c-", "CPU-interpreter", "repair success", "edit-apply rate",
                 "predicted vs measured", "candidates evaluated"):
        assert word in done.stdout

    code, out, _ = run_main(capsys, "runs", "--db", db, "--json")
    (row,) = json.loads(out)
    assert code == 0 and row["status"] == "finished" and row["problem"] == "softmax" and row["name"] == "smoke"
    assert row["n_candidates"] >= 4 and row["best_us"] <= row["seed_us"] and row["eager_us"] > 0

    code, out, _ = run_main(capsys, "show", row["id"], "--db", db, "--json")
    shown = json.loads(out)
    kinds = [c["kind"] for c in shown["candidates"]]
    assert kinds[:2] == ["seed", "eager"] and kinds.count("child") == 3
    for c in shown["candidates"]:
        assert {"id", "parent_id", "hypothesis", "status", "geomean_us", "source"} <= set(c)
    assert shown["metrics"]["best_us"] == row["best_us"] and len(shown["plans"]) == 3  # the offline designer plans three, all carried out
    assert len(shown["findings"]) == 3 and shown["run"]["environment"]["model"] == "offline"

    code, out, _ = run_main(capsys, "best", row["id"], "--db", db)
    best = next(c for c in shown["candidates"] if c["id"] == shown["metrics"]["best_id"])
    assert code == 0 and out == best["source"] and "def custom_kernel" in out

    code, out, _ = run_main(capsys, "show", row["id"], "--db", db)
    assert code == 0 and "best " + best["id"] in out and "seed kernel" in out


@pytest.mark.slow
def test_a_dead_provider_fails_in_one_line_and_the_run_resumes_offline(tmp_path):
    db = tmp_path / "k.db"
    env = {**os.environ, "OPENAI_API_KEY": KEY}
    failed = kscience("run", "softmax", "--llm", "openai:gpt-4o", "--base-url", "http://127.0.0.1:9/v1",
                      "--llm-retries", "0", "--llm-timeout", "10", "--iterations", "1", "--db", str(db), env=env)
    assert failed.returncode == 1
    (line,) = error_lines(failed.stderr)
    assert "openai:gpt-4o" in line and "kscience resume r-" in line
    with Store(db) as store:
        (run,) = store.list_runs()
        assert run.status == "failed" and run.error in line
        calls = store.llm_calls(run.id)
        assert calls and calls[0]["error"] and calls[0]["model"] == "openai:gpt-4o"
        assert calls[0]["role"] == "preflight" and store.candidates(run.id) == []  # failed before any timing
    assert KEY.encode() not in b"".join(p.read_bytes() for p in tmp_path.iterdir())

    resumed = kscience("resume", run.id, "--llm", "offline", "--db", str(db), env=env)
    assert resumed.returncode == 0, resumed.stderr
    with Store(db) as store:
        row = store.run(run.id)
        assert row.status == "finished" and row.error is None and row.llm == "offline"
        assert sum(c.kind == "child" for c in store.candidates(run.id)) == 3


def test_reading_commands_need_an_existing_kscience_database(tmp_path, capsys):
    code, _, err = run_main(capsys, "runs", "--db", str(tmp_path / "none.db"))
    assert code == 2 and err.startswith("kscience: error: no database at") and not (tmp_path / "none.db").exists()
    junk = tmp_path / "junk.db"
    junk.write_text("not a database " * 200)
    for args in (("runs",), ("show", "r-12345678"), ("best", "r-12345678")):
        code, _, err = run_main(capsys, *args, "--db", str(junk))
        assert code == 2 and len(error_lines(err)) == 1 and err.count("\n") == 1


def test_unknown_runs_and_empty_databases(tmp_path, capsys):
    db = str(tmp_path / "k.db")
    Store(db).close()
    assert run_main(capsys, "runs", "--db", db) == (0, "no runs yet\n", "")
    assert run_main(capsys, "runs", "--db", db, "--json") == (0, "[]\n", "")
    for args in (("show", "r-00000000"), ("best", "r-00000000"), ("resume", "r-00000000")):
        code, _, err = run_main(capsys, *args, "--db", db)
        assert code == 2 and error_lines(err) == [f"kscience: error: no run 'r-00000000' in {db}"]


def test_the_default_database_comes_from_the_environment(tmp_path, capsys, monkeypatch):
    db = tmp_path / "env.db"
    Store(db).close()
    monkeypatch.setenv("KSCIENCE_DB", str(db))
    assert run_main(capsys, "runs")[0] == 0
    monkeypatch.delenv("KSCIENCE_DB")
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(capsys, "runs")
    assert code == 2 and "no database at kscience.db" in err


@pytest.mark.parametrize("args, words", [
    (("nosuchproblem", "--llm", "offline"), "no problem 'nosuchproblem'"),
    (("softmax", "--llm", "nonsense:model"), "unknown LLM 'nonsense:model'"),
    (("softmax", "--llm", "offline", "--seed-kernel", "/nonexistent/k.py"), "cannot read seed kernel"),
    (("softmax", "--llm", "offline", "--knowledge", "/nonexistent/notes"), "knowledge folder not found"),
    (("softmax", "--llm", "offline", "--executor", "cluster"), "unknown executor 'cluster'"),
    (("softmax", "--llm", "offline", "--iterations", "-1"), "--iterations must be at least 0, not -1"),
])
def test_bad_run_arguments_are_usage_errors_and_store_no_run(tmp_path, capsys, args, words):
    db = str(tmp_path / "k.db")
    code, _, err = run_main(capsys, "run", *args, "--db", db)
    assert code == 2 and words in err and len(error_lines(err)) == 1
    if (tmp_path / "k.db").exists():
        assert Store(db).list_runs() == []


def test_best_of_a_run_without_a_correct_kernel_is_an_error(tmp_path, capsys):
    db = str(tmp_path / "k.db")
    with Store(db) as store:
        run_id = store.create_run(name="", problem="softmax", overrides={}, llm="offline", strategy="tournament",
                                  config={}, environment={})
        store.update_run(run_id, status="failed", error="the seed kernel does not pass")
    code, out, err = run_main(capsys, "best", run_id, "--db", db)
    assert code == 1 and out == "" and error_lines(err) == [f"kscience: error: run {run_id} has no correct candidate"]
    code, out, _ = run_main(capsys, "runs", "--db", db)
    assert code == 0 and run_id in out and "failed" in out


def test_the_database_is_plain_sqlite_that_other_tools_can_read(tmp_path, capsys):
    db = tmp_path / "k.db"
    with Store(db) as store:
        store.create_run(name="x", problem="softmax", overrides={}, llm="offline", strategy="tree",
                         config={"iterations": 1}, environment={})
    assert sqlite3.connect(db).execute("SELECT strategy FROM runs").fetchone() == ("tree",)
