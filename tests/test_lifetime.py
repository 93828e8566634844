"""Killing kscience leaves nothing behind: every command stopped with SIGTERM or SIGKILL at several
moments leaves no process, sandbox folder or cgroup; SIGTERM ends like Ctrl-C (one line that says
how to continue, no traceback); a judge killed while it holds a worker frozen leaves nothing
frozen; a command started as a background job keeps SIGINT ignored, as its shell asked, and stops
on SIGTERM the same way; and a command removes what a killed one left. What a candidate can reach:
test_reach.py."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from kscience.evaluate import lifeline
from kscience.evaluate.sandbox import leftovers, workers
from lifetime import HANGING, ROOT, SLOW_AFTER_CHECK, Command, signal_mask

pytestmark = pytest.mark.skipif(not workers.namespaces_available() or not shutil.which("unshare"),
                                reason="needs unprivileged user/PID namespaces (unshare) for the sandboxed worker")


def _name(sig: int) -> str:
    return signal.Signals(sig).name


def _assert_clean_stop(rc: int, err: str, hint: str) -> None:
    assert rc == 130, err[-2000:]
    assert "Traceback" not in err, err[-3000:]
    assert hint in err, err[-2000:]


def while_checking(tmp_path) -> Command:
    (tmp_path / "hang.py").write_text(HANGING)
    cmd = Command(tmp_path, "eval", "softmax", "hang.py")
    cmd.wait_for_worker()
    time.sleep(1.0)  # the worker imports the candidate and spins in its checked call
    return cmd


def while_timing(tmp_path) -> Command:
    from kscience.problems import load_problem

    (tmp_path / "slow.py").write_text(load_problem("softmax").seed_source + SLOW_AFTER_CHECK)
    cmd = Command(tmp_path, "eval", "softmax", "slow.py", "--shapes", "benchmarks")
    cmd.wait_for_timing()
    return cmd


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=_name)
@pytest.mark.parametrize("moment", [while_checking, while_timing], ids=lambda f: f.__name__)
def test_eval_stopped_mid_evaluation_leaves_nothing(tmp_path, moment, sig):
    cmd = moment(tmp_path)
    rc, err = cmd.kill(sig)
    if sig != signal.SIGKILL:
        _assert_clean_stop(rc, err, "kscience: interrupted")
    cmd.assert_nothing_left()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=_name)
def test_eval_stopped_while_importing_leaves_nothing(tmp_path, sig):
    (tmp_path / "hang.py").write_text(HANGING)
    cmd = Command(tmp_path, "eval", "softmax", "hang.py")
    time.sleep(0.5)  # Python and torch are still importing
    rc, err = cmd.kill(sig)
    assert "Traceback" not in err, err[-3000:]
    cmd.assert_nothing_left()


SEARCHES = {"run": (["run", "softmax", "--iterations", "3"], "continue with: kscience resume"),
            "campaign": (["campaign", "softmax", "--iterations", "1"], "continue with: kscience campaign --resume")}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=_name)
@pytest.mark.parametrize("command", sorted(SEARCHES))
def test_search_killed_while_judging_leaves_nothing(tmp_path, command, sig):
    args, hint = SEARCHES[command]
    cmd = Command(tmp_path, *args, "--llm", "offline", "--db", "k.db")
    cmd.wait_for_worker()
    rc, err = cmd.kill(sig)
    if sig != signal.SIGKILL:
        _assert_clean_stop(rc, err, hint)
        stored = subprocess.run([sys.executable, "-m", "kscience", "runs", "--db", "k.db"], cwd=tmp_path,
                                capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        assert "stopped" in stored.stdout, stored.stdout  # kept for a resume
    cmd.assert_nothing_left()


def test_a_background_run_keeps_sigint_ignored_and_stops_on_sigterm(tmp_path):
    """`kscience run ... &` in a script starts with SIGINT ignored, so that a Ctrl-C at the script's
    terminal leaves the background job running; the command keeps it so (as Python itself and make
    do), and `kill PID` (SIGTERM) stops it as Ctrl-C does in a terminal, kept for a resume."""
    args, hint = SEARCHES["run"]
    cmd = Command(tmp_path, *args, "--llm", "offline", "--db", "k.db", sigint=signal.SIG_IGN)
    cmd.wait_for_worker()
    assert signal.SIGINT in signal_mask(cmd.proc.pid, "SigIgn")
    assert signal.SIGTERM in signal_mask(cmd.proc.pid, "SigCgt")
    rc, err = cmd.kill(signal.SIGTERM)
    _assert_clean_stop(rc, err, hint)
    cmd.assert_nothing_left()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=_name)
def test_worker_killed_between_evaluations_leaves_nothing(tmp_path, sig):
    cmd = Command(tmp_path, "worker", str(tmp_path / "queue"), "--poll", "0.1")
    cmd.wait_for(lambda: (tmp_path / "queue" / "requests").is_dir(), what="the queue folder")
    time.sleep(0.5)  # watching an empty queue
    rc, err = cmd.kill(sig)
    if sig == signal.SIGTERM:
        _assert_clean_stop(rc, err, f"continue with: kscience worker {tmp_path / 'queue'}")
    cmd.assert_nothing_left()


def test_worker_stopped_mid_evaluation_hands_the_request_back(tmp_path):
    from kscience.evaluate.executors import queue_files
    from kscience.evaluate.executors.queue_dir import QueueExecutor
    from kscience.evaluate.result import EvalRequest

    queue = tmp_path / "queue"
    with QueueExecutor(queue, poll_s=3600) as executor:
        executor.submit(EvalRequest(problem="softmax", source=HANGING, shapes="tests", candidate_id="c-hang"))
        cmd = Command(tmp_path, "worker", str(queue), "--poll", "0.1")
        cmd.wait_for_worker()
        time.sleep(1.0)  # the candidate spins in its checked call
        rc, err = cmd.kill(signal.SIGTERM)
        _assert_clean_stop(rc, err, f"continue with: kscience worker {queue}")
        assert "handed back to the queue" in err, err[-2000:]
        assert len(queue_files.queue_files(queue / "requests")) == 1 and not queue_files.queue_files(queue / "claims")
        cmd.assert_nothing_left()


FROZEN_JUDGE = """
import sys, time
from kscience.evaluate.sandbox.workers import Worker
w = Worker(None, True, 2 << 30)
time.sleep(3)  # the worker imports torch
assert w.freeze(), "not frozen"
print("frozen", flush=True)
time.sleep(600)
"""


def test_judge_killed_while_holding_a_worker_frozen_leaves_nothing_frozen(tmp_path):
    """The guardian thaws and kills what the judge froze, removes its cgroup and its folder."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", FROZEN_JUDGE], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=str(ROOT)))
    assert proc.stdout.readline().strip() == "frozen"
    cmd = Command.__new__(Command)
    cmd.tmp, cmd.owners, cmd.proc = tmp, set(), proc
    assert cmd.sandboxes()
    proc.kill()
    proc.wait()
    cmd.assert_nothing_left()


def test_a_command_removes_what_a_killed_one_left(tmp_path, monkeypatch):
    """Folders of an owner that no longer runs go (and are named); a live owner's stay, and so do
    those of another PID namespace's owner (whether it runs cannot be told from here)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    tag_of_a_process = "from kscience.evaluate.lifeline import owner_tag; print(owner_tag())"
    dead = subprocess.run([sys.executable, "-c", tag_of_a_process], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    pid, start, namespace = dead.stdout.strip().split(".")
    left = leftovers.sandbox_root() / f"{leftovers.FOLDER_PREFIX}{dead.stdout.strip()}-abc"
    mine = leftovers.sandbox_root() / f"{leftovers.FOLDER_PREFIX}{lifeline.owner_tag()}-def"
    elsewhere = leftovers.sandbox_root() / f"{leftovers.FOLDER_PREFIX}{pid}.{start}.{int(namespace) + 1}-ghi"
    for d in (left, mine, elsewhere):
        d.mkdir()
        (d / "candidate.py").write_text("x = 1\n")
    said = []
    leftovers.reclaim_and_say(said.append)
    assert not left.exists() and mine.exists() and elsewhere.exists()
    assert len(said) == 1 and str(left) in said[0], said
