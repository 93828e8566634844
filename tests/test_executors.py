"""Executors: local slots (one evaluation per GPU at a time) and capacity rules; Ray tasks under
the Triton interpreter, candidate faults as statuses, and a Ray worker killed mid-evaluation."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import torch

import kscience.evaluate.executors.base as executor_module
from kscience.evaluate.executors.base import LocalExecutor
from kscience.evaluate.executors.factory import make_executor
from kscience.evaluate.result import CRASHED, OK, WRONG_ANSWER, EvalRequest, EvalResult
from kscience.problems import ProblemError, load_problem

SEED = load_problem("softmax").seed_source
# Correct, but the first call in each worker process sleeps: long enough to kill the evaluation mid-way.
SLOW_FIRST_CALL = SEED + """
import time as _time

_calls = []
_fast_kernel = custom_kernel


def custom_kernel(data):
    if not _calls:
        _time.sleep(3)
    _calls.append(1)
    return _fast_kernel(data)
"""
WRONG = SEED.replace("y = numerator / denominator", "y = numerator / (2 * denominator)")


def softmax_request(source: str = SEED) -> EvalRequest:
    return EvalRequest(problem="softmax", source=source, shapes="tests")


# --- local executor -------------------------------------------------------------------------

def test_local_executor_runs_two_evaluations_at_once():
    with LocalExecutor(cpu_workers=2) as ex:
        assert ex.capacity == 2
        t0 = time.monotonic()
        futures = [ex.submit(softmax_request()) for _ in range(2)]
        results = [f.result(timeout=300) for f in futures]
        elapsed = time.monotonic() - t0
    assert [r.status for r in results] == [OK, OK], [r.message for r in results]
    assert all(r.device["interpreted"] for r in results)
    assert elapsed < sum(r.wall_s for r in results), "the two evaluations did not overlap"


def test_interpreter_slots_share_the_cores(monkeypatch):
    # Four slots on a (pretended) twelve-core host: each worker's torch gets three threads, set
    # before the candidate is imported (it reports what it found).
    if torch.get_num_threads() == 3:
        pytest.skip("torch already runs 3 threads here: the share would be indistinguishable")
    monkeypatch.setattr("os.cpu_count", lambda: 12)
    source = "import torch\nprint('threads', torch.get_num_threads())\n" + SEED
    with LocalExecutor(cpu_workers=4) as ex:
        result = ex.submit(softmax_request(source)).result(timeout=300)
    assert result.status == OK, result.message
    assert "threads 3" in result.stdout_tail


def test_local_capacity_on_cpu():
    assert LocalExecutor().capacity == 1  # host-clock timings must not compete for the CPU by default
    assert LocalExecutor(cpu_workers=3).capacity == 3
    assert LocalExecutor(gpus=4).capacity == 1  # no GPU is visible: the cap has nothing to cap
    assert make_executor("local", cpu_workers=2).capacity == 2
    with pytest.raises(ValueError, match="gpus"):
        LocalExecutor(gpus=0)
    with pytest.raises(ValueError, match="cpu_workers"):
        LocalExecutor(cpu_workers=0)
    with pytest.raises(ValueError, match="unknown executor"):
        make_executor("slurm")


def test_local_slots_pin_one_evaluation_per_gpu(monkeypatch):
    """With four GPUs and a cap of three, evaluations use exactly GPUs 0-2, all of them, never one twice at once."""
    monkeypatch.setattr(executor_module, "visible_gpus", lambda: [0, 1, 2, 3])
    lock, busy, used, overlaps = threading.Lock(), set(), Counter(), []

    class FakeJudge:
        def __init__(self, gpu, cpu_threads):
            assert cpu_threads is None  # GPU slots keep the default thread count
            self.gpu = gpu

        def evaluate(self, request):
            with lock:
                if self.gpu in busy:
                    overlaps.append(self.gpu)
                busy.add(self.gpu)
                used[self.gpu] += 1
            time.sleep(0.05)
            with lock:
                busy.discard(self.gpu)
            return EvalResult(status=OK, message="")

        def close(self):
            pass

    monkeypatch.setattr(executor_module, "JudgeProcess", FakeJudge)
    assert LocalExecutor().capacity == 4
    with LocalExecutor(gpus=3) as ex:
        assert ex.capacity == 3
        for f in [ex.submit(softmax_request()) for _ in range(12)]:
            assert f.result(timeout=30).ok
    assert not overlaps
    assert set(used) == {0, 1, 2} and sum(used.values()) == 12


def test_slot_process_gives_the_in_process_verdicts():
    """The same candidates judged in this process and through a slot's own judge process."""
    from kscience.evaluate.executors.slot import JudgeProcess
    from kscience.evaluate.judge.evaluation import evaluate

    requests = [softmax_request(), softmax_request(WRONG),
                EvalRequest(problem="softmax", source="def custom_kernel(data):\n    return data[0]\n",
                            shapes="tests")]
    judge = JudgeProcess(None)
    try:
        remote = [judge.evaluate(r) for r in requests]
        with pytest.raises(ProblemError, match="no_such_problem"):
            judge.evaluate(EvalRequest(problem="no_such_problem", source=SEED, shapes="tests"))
        os.kill(judge._proc.pid, signal.SIGKILL)  # a lost slot process is replaced, the evaluation run again
        again = judge.evaluate(requests[0])
    finally:
        judge.close()
    local = [evaluate(r) for r in requests]
    assert [r.status for r in remote] == [r.status for r in local] == [OK, WRONG_ANSWER, WRONG_ANSWER]
    # each evaluation draws its own shape order, so the shapes are compared as sets
    assert [sorted(map(str, (s.shape for s in r.shapes))) for r in remote] == \
        [sorted(map(str, (s.shape for s in r.shapes))) for r in local]
    assert remote[0].device["name"] == local[0].device["name"] and remote[0].device["interpreted"]
    assert again.status == OK


def test_ray_missing_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` fail as if not installed
    with pytest.raises(ImportError, match=r"pip install kscience\[ray\]"):
        make_executor("ray")


# --- Ray ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False)
    yield ray
    ray.shutdown()


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _ray_worker_judging(timeout_s: float = 60) -> int:
    """The Ray worker of this test's cluster whose judge is running an evaluation worker right now.

    The chain is: evaluation worker <- [unshare] <- Ray worker (the judge) <- raylet <- this process;
    requiring that last link means a process of anything else on the machine is never chosen.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or "-m kscience.evaluate.worker" not in _cmdline(int(entry)):
                continue
            judge = _parent(int(entry))
            while _cmdline(judge).startswith("unshare"):
                judge = _parent(judge)
            if _parent(_parent(judge)) == os.getpid() and _cmdline(judge).startswith("ray::"):
                return judge
        time.sleep(0.05)
    raise AssertionError("no evaluation worker under a Ray worker of this cluster appeared")


def _kill_when_judging() -> int:
    judge = _ray_worker_judging()
    os.kill(judge, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while not _gone(judge) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(judge)
    return judge


def test_ray_runs_evaluations_under_the_interpreter(ray_cluster):
    from kscience.evaluate.executors.ray_cluster import RayExecutor

    with RayExecutor(cpu_workers=2) as ex:
        assert ex.capacity == 2 and not ex.on_gpu
        futures = [ex.submit(softmax_request()) for _ in range(2)]
        results = [f.result(timeout=300) for f in futures]
    assert [r.status for r in results] == [OK, OK], [r.message for r in results]
    assert all(r.device["interpreted"] and len(r.shapes) == 3 for r in results)
    assert ray_cluster.is_initialized()  # a session the executor did not open is left running


def test_ray_judges_a_kernelbench_file_from_the_files_its_request_carries(ray_cluster, tmp_path):
    """The node needs no copy of the file at the driver's path: it judges the copy unpacked from the request."""
    from kscience.evaluate.executors.ray_cluster import RayExecutor
    from kscience.problems import bundle

    path = tmp_path / "relu_on_ray.py"
    path.write_text('"""ReLU."""\nimport torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n'
                    "    def forward(self, x):\n        return torch.relu(x)\n\n\ndef get_inputs():\n"
                    "    return [torch.randn(4, 256)]\n\n\ndef get_init_inputs():\n    return []\n")
    files = bundle.pack(str(path))
    path.unlink()
    solution = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                "    def forward(self, x):\n        return torch.clamp_min(x, 0.0)\n")
    with RayExecutor(cpu_workers=1) as ex:
        result = ex.submit(EvalRequest(problem=str(path), source=solution, shapes="tests",
                                       problem_files=files)).result(timeout=300)
    assert result.status == OK, result.message


def test_ray_capacity_follows_the_cluster(ray_cluster):
    from kscience.evaluate.executors.ray_cluster import RayExecutor

    assert RayExecutor().capacity == 2  # two CPUs, no GPUs
    assert RayExecutor(cpu_workers=1).capacity == 1
    assert RayExecutor(cpu_workers=8).capacity == 2
    assert make_executor("ray", cpu_workers=1).capacity == 1


def test_ray_candidate_faults_are_statuses_and_problem_errors_raise(ray_cluster):
    from kscience.evaluate.executors.ray_cluster import RayExecutor

    with RayExecutor(max_retries=0) as ex:
        wrong = ex.submit(softmax_request(WRONG))
        missing = ex.submit(EvalRequest(problem="no_such_problem", source=SEED, shapes="tests"))
        assert wrong.result(timeout=300).status == WRONG_ANSWER
        with pytest.raises(ProblemError, match="no_such_problem"):
            missing.result(timeout=300)


def test_ray_worker_killed_mid_evaluation_is_retried(ray_cluster):
    from kscience.evaluate.executors.ray_cluster import RayExecutor

    with RayExecutor(cpu_workers=1, max_retries=2) as ex:
        future = ex.submit(softmax_request(SLOW_FIRST_CALL))
        killed = _kill_when_judging()
        assert not future.done()
        retried_on = _ray_worker_judging()
        result = future.result(timeout=300)
    assert retried_on != killed
    assert result.status == OK, result.message


def test_ray_evaluation_lost_on_every_attempt_is_a_crashed_result(ray_cluster):
    from kscience.evaluate.executors.ray_cluster import RayExecutor

    with RayExecutor(cpu_workers=1, max_retries=0) as ex:
        future = ex.submit(softmax_request(SLOW_FIRST_CALL))
        _kill_when_judging()
        result = future.result(timeout=120)
    assert result.status == CRASHED
    assert result.message.startswith("evaluation lost: ") and "\n" not in result.message


def test_worker_is_pinned_to_the_physical_gpu_an_inherited_visibility_list_names(monkeypatch, tmp_path):
    from kscience.evaluate.sandbox.workers import worker_env

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    monkeypatch.setattr("torch.version.hip", None)
    env = worker_env(tmp_path, 1, False, "token")
    assert env["CUDA_VISIBLE_DEVICES"] == "6"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert worker_env(tmp_path, 1, False, "token")["CUDA_VISIBLE_DEVICES"] == "1"


def test_a_worker_compiles_in_its_own_process_not_in_a_pool_beside_the_timed_calls(tmp_path):
    import subprocess
    import sys

    from kscience.evaluate.sandbox.workers import worker_env

    env = worker_env(tmp_path, None, False, "token")
    probe = "import torch._inductor.config as c; print(c.compile_threads)"
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"  # inductor's own default here would be one per core
