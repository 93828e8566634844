"""A hung candidate costs seconds, not the judge's full limits: --eval-timeout per step, a default
derived from the seed, --time-limit ending the evaluation in flight (kept for resume), and a line
while an evaluation runs long."""

import subprocess
import sys
import time

import pytest

from kscience.record.store import Store
from kscience.run import limits, waiting
from kscience.run.config import ConfigError, RunConfig
from kscience.run.driver import Run
from kscience.run.events import EvaluationWaiting
from kscience.record.candidate import Candidate

HUNG = "import time\n\ndef custom_kernel(data):\n    while True:\n        time.sleep(1)\n"


def kscience(*args) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "kscience.cli.main", *args], capture_output=True, text=True,
                          timeout=240)
    return done, time.monotonic() - t0


@pytest.fixture
def hung(tmp_path):
    path = tmp_path / "hung.py"
    path.write_text(HUNG)
    return str(path)


def test_eval_timeout_ends_a_hung_seed_within_its_limit(tmp_path, hung):
    done, took = kscience("run", "softmax", "--seed-kernel", hung, "--iterations", "0", "--repairs", "0",
                          "--eval-timeout", "15", "--llm", "offline", "--db", str(tmp_path / "k.db"))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    # (15 s, not less: on a loaded CI machine the worker's import alone can take several seconds)
    assert "timed out: the 15 s limit per step set for this evaluation ran out while checking correctness" in done.stderr
    assert took < 120  # the judge's own limit for a check is 300 s on the CPU


def test_time_limit_ends_the_evaluation_in_flight_and_a_resume_judges_it(tmp_path, hung):
    db = str(tmp_path / "k.db")
    done, took = kscience("run", "softmax", "--seed-kernel", hung, "--iterations", "0", "--repairs", "0",
                          "--time-limit", "6", "--llm", "offline", "--db", db)
    assert done.returncode == 1 and took < 90
    assert "time limit reached: 6s (the evaluation of c-" in done.stderr and "kscience resume r-" in done.stderr
    with Store(db) as store:
        (run,) = store.list_runs()
        (seed,) = [c for c in store.candidates(run.id) if c.kind == "seed"]  # the baselines go beside it
        assert run.status == "stopped" and seed.status == "pending"  # not a verdict: kept for resume
    resumed, _ = kscience("resume", run.id, "--eval-timeout", "15", "--time-limit", "600", "--db", db)
    assert "15 s limit per step" in resumed.stderr
    with Store(db) as store:
        assert [c.status for c in store.candidates(run.id) if c.kind == "seed"] == ["timeout"]


def test_a_long_evaluation_says_how_long_and_under_which_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(waiting, "RUNNING_SAY_S", 1.0)
    said = []
    with Store(tmp_path / "k.db") as store:
        run = Run.create(RunConfig(problem="softmax", iterations=0, repairs=0, llm="offline", eval_timeout_s=15),
                         store=store, seed_source=HUNG)
        run.subscribe(lambda e: said.append(e) if isinstance(e, EvaluationWaiting) else None)
        run.start(background=False)
        (seed,) = [c for c in store.candidates(run.id) if c.kind == "seed"]
    said = [e for e in said if e.candidate_id == seed.id]  # the baselines, judged beside it, keep the judge's limits
    assert said and all(e.state.endswith(" (limit 15 s per step)") for e in said)
    assert "checking correctness (limit 15 s per step)" in [e.state for e in said]  # what the judge is doing
    assert said[0].waited_s >= 1


def test_the_default_step_limit_follows_the_seed():
    def seed(status, **phases):
        return Candidate.from_row({"status": status, "result": {"status": status, "message": "",
                                                                "phases_s": {"start": 50.0, **phases}}})

    assert limits.step_limit(None) is None and limits.step_limit(seed("timeout", check=1.0)) is None
    assert limits.step_limit(seed("ok", import_=0.1, check=0.5)) == limits.STEP_LIMIT_FLOOR_S  # worker start-up is not the candidate's
    assert limits.step_limit(seed("ok", check=2.0, time=9.0)) == 90.0


def test_eval_timeout_must_be_positive():
    with pytest.raises(ConfigError, match="--eval-timeout"):
        RunConfig(problem="softmax", eval_timeout_s=0)
