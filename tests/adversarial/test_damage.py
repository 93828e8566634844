"""Damaging the caller: inputs, the result channel, files outside the sandbox, leftover processes.

Inputs come back and are compared bit for bit. The channel lives on unpredictable descriptor
numbers, every reply must carry its command's sequence number, and the evaluation ends with a
handshake, so bytes written to it by the candidate are a rejection rather than a result.
Landlock keeps writes inside the sandbox folder, and a process group kill, a token scan and
the worker's PID namespace leave no process behind.
"""

import os
import secrets
import time
from pathlib import Path

import pytest

from kscience.evaluate.result import OK, REJECTED, RUNTIME_ERROR, WRONG_ANSWER

_OK_CALL = """
def custom_kernel(data):
    return honest(data[0])
"""


def test_mutating_an_input_in_place_is_a_wrong_answer(judge):
    result = judge("""
        def custom_kernel(data):
            (x,) = data
            y = honest(x)
            x.zero_()
            return y
        """)
    assert result.status == WRONG_ANSWER, result.message
    assert "input 0 was modified" in result.message


# Finds every pipe the worker can write to, other than its own stdout and stderr.
_CHANNEL_WRITERS = """
import os
import struct
import json

def channel_fds():
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if int(name) > 2 and os.readlink(f"/proc/self/fd/{name}").startswith("pipe:"):
                found.append(int(name))
        except OSError:  # the descriptor listdir itself used is gone by now
            continue
    return found

def write_everywhere(payload):
    for fd in channel_fds():
        try:
            os.write(fd, payload)
        except OSError:
            pass
"""


def test_garbage_on_the_result_channel_is_rejected(judge):
    result = judge(_CHANNEL_WRITERS, """
        def custom_kernel(data):
            write_everywhere(b"\\xff" * 64)
            return honest(data[0])
        """)
    assert result.status == REJECTED, result.message
    assert "protocol" in result.message


def test_a_forged_reply_is_rejected(judge):
    result = judge(_CHANNEL_WRITERS, """
        def custom_kernel(data):
            body = json.dumps({"status": "ok", "seq": 10**6, "inputs": [0]}).encode()
            write_everywhere(struct.pack("<Q", len(body)) + body)
            return honest(data[0])
        """)
    assert result.status == REJECTED, result.message
    assert "out-of-order" in result.message


def test_a_reply_forged_with_the_right_sequence_number_is_rejected(judge):
    # Reads the sequence number of the command it is serving off the worker's stack and answers
    # the last check itself; the worker's own reply then arrives where none is expected.
    result = judge(_CHANNEL_WRITERS, """
        import sys

        def frame(body):
            return struct.pack("<Q", len(body)) + body

        def custom_kernel(data):
            (x,) = data
            y = honest(x)
            if x.shape[0] == 8:  # the last test shape
                f = sys._getframe(1)
                while "cmd" not in f.f_locals:
                    f = f.f_back
                seq = f.f_locals["cmd"]["seq"]
                raw = y.view(torch.uint8).numpy().tobytes()
                head = json.dumps({"dtype": "bfloat16", "shape": list(y.shape), "seq": seq}).encode()
                xraw = x.view(torch.uint8).numpy().tobytes()
                xhead = json.dumps({"dtype": "bfloat16", "shape": list(x.shape), "seq": seq}).encode()
                reply = json.dumps({"status": "ok", "seq": seq, "inputs": [0]}).encode()
                write_everywhere(frame(reply) + frame(head) + frame(raw) + frame(head) + frame(raw)
                                 + frame(xhead) + frame(xraw))
            return y
        """)
    assert result.status == REJECTED, result.message
    assert "out-of-order" in result.message


def _refused_as_unconfined(result, layer: str) -> bool:
    """Whether the evaluator refused to run because this machine lacks `layer` (never a pass)."""
    if result.status == REJECTED and "refusing to run unconfined" in result.message:
        assert any(layer in weak for weak in result.confinement["weak"]), result.confinement
        return True
    return False


@pytest.mark.parametrize("allow_weak", [False, True])
@pytest.mark.parametrize("where", ["home", "project", "tmp"])
def test_writing_outside_the_sandbox_is_refused(judge, where, allow_weak):
    # Never a skip: without Landlock the evaluator must refuse to run, or, where the run asked to
    # go on regardless, its verdict must say Landlock was missing.
    target = {"home": Path.home(), "project": Path(__file__).resolve().parents[2], "tmp": Path("/tmp")}[where]
    victim = target / f"kscience-escape-{secrets.token_hex(4)}"
    result = judge(f"""
        def custom_kernel(data):
            with open({str(victim)!r}, "w") as f:
                f.write("escaped")
            return honest(data[0])
        """, allow_weak_confinement=allow_weak)
    written = victim.exists()
    victim.unlink(missing_ok=True)
    if written:
        assert allow_weak and any("Landlock" in w for w in result.confinement["weak"]), result.confinement
        assert not result.confinement["landlock"].startswith("landlock v"), result.confinement
        return
    if _refused_as_unconfined(result, "Landlock"):
        return
    assert result.status == RUNTIME_ERROR, result.message
    assert "PermissionError" in result.message


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                found.append(int(entry))
        except OSError:
            continue
    return found


def _gone_soon(marker: str, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while _processes_with(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_forked_child_does_not_outlive_the_evaluation(judge):
    marker = f"{secrets.randbelow(10**6) + 10**6}.25"
    result = judge(f"""
        import os

        if os.fork() == 0:
            os.execv("/bin/sleep", ["sleep", "{marker}"])
        """, _OK_CALL)
    assert result.status == OK, result.message
    assert _gone_soon(marker)


def test_a_child_that_leaves_the_session_and_sheds_its_environment_does_not_survive(judge):
    # Double fork, a new session and an empty environment: out of the process group and free of
    # the evaluation token. The worker's reaper (PID 1 of its namespace, or a child subreaper)
    # still holds it; test_host.py runs this without the namespace as well.
    marker = f"{secrets.randbelow(10**6) + 10**6}.75"
    result = judge(f"""
        import os

        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execve("/bin/sleep", ["sleep", "{marker}"], {{}})
            os._exit(0)
        """, _OK_CALL)
    assert result.status == OK, result.message
    assert _gone_soon(marker)


def test_signals_cannot_reach_the_judge(judge):
    # Signal 0 only asks whether the target can be signalled; it changes nothing either way.
    result = judge(f"""
        import os

        try:
            os.kill({os.getpid()}, 0)
            print("reached the judge")
        except (PermissionError, ProcessLookupError) as exc:
            print("blocked:", type(exc).__name__)
        """, _OK_CALL)
    if _refused_as_unconfined(result, "namespaces"):
        return
    assert result.status == OK, result.message
    assert "scopes" in result.confinement["landlock"] or result.confinement["namespaces"] != "off"
    assert "blocked" in result.stdout_tail and "reached" not in result.stdout_tail
