"""Killing kscience on a GPU leaves nothing behind: `eval` and `run` stopped with SIGTERM or SIGKILL
while a kernel spins on the device, while a shape is timed and while a run judges leave no process,
sandbox folder or cgroup, and SIGTERM ends like Ctrl-C (tests/test_lifetime.py on the CPU)."""

import signal
import time

import pytest
import torch
from lifetime import SLOW_AFTER_CHECK, Command

from kscience.problems import load_problem

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

GPU_SPIN = """
import torch

def custom_kernel(data):
    while True:  # the device busy for ever: the judge's phase limit is minutes away
        torch.cuda._sleep(1 << 30)
        torch.cuda.synchronize()
"""


def _clean_stop(rc: int, err: str, hint: str) -> None:
    assert rc == 130 and "Traceback" not in err and hint in err, err[-3000:]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_gpu_eval_killed_while_the_device_spins(tmp_path, sig):
    (tmp_path / "spin.py").write_text(GPU_SPIN)
    cmd = Command(tmp_path, "eval", "softmax", "spin.py")
    cmd.wait_for_worker()
    time.sleep(8.0)  # the worker imports torch, makes its CUDA context and spins in its checked call
    rc, err = cmd.kill(sig)
    if sig == signal.SIGTERM:
        _clean_stop(rc, err, "kscience: interrupted")
    cmd.assert_nothing_left()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_gpu_eval_killed_while_timing(tmp_path, sig):
    (tmp_path / "slow.py").write_text(load_problem("softmax").seed_source + SLOW_AFTER_CHECK)
    cmd = Command(tmp_path, "eval", "softmax", "slow.py", "--shapes", "benchmarks")
    cmd.wait_for_timing(timeout_s=300)
    rc, err = cmd.kill(sig)
    if sig == signal.SIGTERM:
        _clean_stop(rc, err, "kscience: interrupted")
    cmd.assert_nothing_left()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_gpu_run_killed_while_judging(tmp_path, sig):
    cmd = Command(tmp_path, "run", "softmax", "--iterations", "2", "--llm", "offline", "--db", "k.db")
    cmd.wait_for_worker(timeout_s=300)
    rc, err = cmd.kill(sig)
    if sig == signal.SIGTERM:
        _clean_stop(rc, err, "continue with: kscience resume")
    cmd.assert_nothing_left()
