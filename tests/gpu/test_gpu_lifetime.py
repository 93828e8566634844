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


def while_the_device_spins(tmp_path):
    (tmp_path / "spin.py").write_text(GPU_SPIN)
    cmd = Command(tmp_path, "eval", "softmax", "spin.py")
    cmd.wait_for_worker()
    time.sleep(8.0)  # the worker imports torch, makes its CUDA context and spins in its checked call
    return cmd, "kscience: interrupted"


def while_timing(tmp_path):
    (tmp_path / "slow.py").write_text(load_problem("softmax").seed_source + SLOW_AFTER_CHECK)
    cmd = Command(tmp_path, "eval", "softmax", "slow.py", "--shapes", "benchmarks")
    cmd.wait_for_timing(timeout_s=300)
    return cmd, "kscience: interrupted"


def while_a_run_judges(tmp_path):
    cmd = Command(tmp_path, "run", "softmax", "--iterations", "2", "--llm", "offline", "--db", "k.db")
    cmd.wait_for_worker(timeout_s=300)
    return cmd, "continue with: kscience resume"


# SIGKILL leaves the most behind, so it is sent at every moment; SIGTERM's clean stop (exit 130, its hint) is
# checked where a run judges, and at every moment by the CPU suite (tests/test_lifetime.py).
@pytest.mark.parametrize("moment,sig", [(while_the_device_spins, signal.SIGKILL), (while_timing, signal.SIGKILL),
                                        (while_a_run_judges, signal.SIGKILL), (while_a_run_judges, signal.SIGTERM)],
                         ids=lambda v: getattr(v, "__name__", None) or str(int(v)))
def test_gpu_command_killed_leaves_nothing(tmp_path, moment, sig):
    cmd, hint = moment(tmp_path)
    rc, err = cmd.kill(sig)
    if sig == signal.SIGTERM:
        assert rc == 130 and "Traceback" not in err and hint in err, err[-3000:]
    cmd.assert_nothing_left()
