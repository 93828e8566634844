"""Secrets: API keys and tokens in the caller's environment never reach the candidate.

The worker's environment is built from an allow-list, and names that look like credentials
are dropped even when allowed; whatever the candidate prints or raises passes through a
redaction of every credential-like value the caller holds; and in the worker's PID namespace
no other process's environment can be read.
"""

import pytest

from kscience.evaluate.result import OK, REJECTED, RUNTIME_ERROR
from kscience.evaluate.sandbox.spares import SPARES_PER_SLOT, _spares, close_spares, start_worker
from kscience.evaluate.sandbox.workers import default_rss_limit

SECRETS = {"OPENAI_API_KEY": "sk-test-4f9a1c2e7b3d5f60a1b2c3d4",
           "GEMINI_API_KEY": "gem-test-0123456789abcdef",
           "HF_TOKEN": "hf_testtoken0123456789abcd",
           "AWS_SECRET_ACCESS_KEY": "aws-test-secret-9876543210",
           "DATABASE_PASSWORD": "pw-test-hunter2-hunter2"}


@pytest.fixture
def secret_env(monkeypatch):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)


# Searches what it can read for the secret values (the test hands it the values to look for)
# and reports the names of those it finds, which no redaction would hide.
_SEARCH = f"""
import os

SECRETS = {SECRETS!r}

def report(where, text):
    print("scanned", where, "HOME=" in text)
    for name, value in SECRETS.items():
        if value in text or name in text:
            print("FOUND", name.lower(), "in", where)
"""


def test_the_environment_holds_no_credentials(judge, secret_env):
    # A spare worker started before the secrets were set would prove nothing: start afresh.
    close_spares()
    result = judge(_SEARCH, """
        report("environ", "\\n".join(f"{k}={v}" for k, v in os.environ.items()))

        def custom_kernel(data):
            return honest(data[0])
        """)
    assert result.status == OK, result.message
    assert "scanned environ True" in result.stdout_tail  # it really looked at the worker's environment
    assert "FOUND" not in result.stdout_tail


def test_a_spare_started_under_another_environment_is_not_used(monkeypatch):
    close_spares()
    first = start_worker(None, True, default_rss_limit(), keep_spare=True)
    first.close()
    spare = next(iter(_spares.values()))[0][1]
    monkeypatch.setenv("OPENAI_API_KEY", SECRETS["OPENAI_API_KEY"])  # filtered: the spare still fits
    same = start_worker(None, True, default_rss_limit(), keep_spare=True)
    assert same is spare
    same.close()
    spare = next(iter(_spares.values()))[0][1]
    monkeypatch.setenv("LC_MEASUREMENT", "C")  # inherited: the spare no longer fits
    other = start_worker(None, True, default_rss_limit())
    assert other is not spare and not spare.alive()
    other.close()


def test_each_slot_keeps_two_spares_and_hands_out_the_oldest():
    close_spares()
    first = start_worker(None, True, default_rss_limit(), keep_spare=True)
    first.close()
    (queue,) = _spares.values()
    assert len(queue) == SPARES_PER_SLOT and all(w.alive() for _, w in queue)
    oldest = queue[0][1]
    taken = start_worker(None, True, default_rss_limit(), keep_spare=True)
    assert taken is oldest and len(queue) == SPARES_PER_SLOT
    taken.close()
    close_spares()


def test_no_other_process_environment_is_readable(judge, secret_env):
    result = judge(_SEARCH, """
        def custom_kernel(data):
            for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
                try:
                    report(f"pid {pid}", open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace"))
                except OSError:
                    continue
            return honest(data[0])
        """)
    if result.status == REJECTED and "refusing to run unconfined" in result.message:
        assert any("namespaces" in weak for weak in result.confinement["weak"])
        return
    assert result.status == OK, result.message
    assert result.confinement["namespaces"] != "off"
    assert "scanned pid" in result.stdout_tail
    assert "FOUND" not in result.stdout_tail


def test_a_leaked_secret_is_redacted_from_output_and_messages(judge, secret_env):
    # Stands for a credential obtained some other way: printed, written to stderr and raised.
    leaked = SECRETS["OPENAI_API_KEY"]
    result = judge(f"""
        import sys

        print("key is {leaked}")
        print("key is {leaked}", file=sys.stderr)

        def custom_kernel(data):
            raise RuntimeError("key is {leaked}")
        """)
    assert result.status == RUNTIME_ERROR, result.message
    for text in (result.message, result.stdout_tail, result.stderr_tail):
        assert leaked not in text and "[redacted]" in text
