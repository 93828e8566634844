"""Problems travel with their requests (issue 54, item 5): a KernelBench file or a GPU MODE directory is
packed into the request, content-addressed, and the judging side unpacks it into its cache and judges it from
there, so a `kscience worker` on another machine needs no copy at the run's path."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from kscience.evaluate.executors import queue_files as Q
from kscience.evaluate.executors.carried import judged_here
from kscience.evaluate.executors.queue_dir import QueueExecutor
from kscience.evaluate.result import OK, EvalRequest
from kscience.problems import ProblemError, bundle, load_problem
from kscience.record.store import Store
from kscience.run.config import RunConfig
from kscience.run.driver import Run
from kscience.run.events import EvaluationWaiting

ROOT = Path(__file__).resolve().parents[1]
GPUMODE = ROOT / "tests" / "data" / "gpumode" / "reference-kernels"
RELU = ('"""ReLU, as a KernelBench level-1 file."""\nimport torch\nimport torch.nn as nn\n\n\n'
        "class Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n\n\n"
        "batch_size = 4\ndim = 256\n\n\ndef get_inputs():\n    return [torch.randn(batch_size, dim)]\n\n\n"
        "def get_init_inputs():\n    return []\n")
SOLUTION = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
            "    def forward(self, x):\n        return torch.clamp_min(x, 0.0)\n")


def test_a_kernelbench_file_unpacks_under_its_digest_and_loads_with_its_name(tmp_path):
    path = tmp_path / "run side" / "relu_1d.py"
    path.parent.mkdir()
    path.write_text(RELU)
    packed = bundle.pack(str(path))
    assert packed["locator"] == "relu_1d.py" and list(packed["files"]) == ["relu_1d.py"]
    path.unlink()  # from here on only the request holds it
    cache = tmp_path / "judge side"
    where = bundle.unpack(packed, cache)
    assert Path(where) == cache / packed["digest"] / "relu_1d.py"
    problem = load_problem(where, {"dim": "8"})
    assert problem.name == "relu_1d" and problem.constants["dim"] == 8
    assert bundle.unpack(packed, cache) == where  # the same content: the same folder, written once
    assert bundle.pack("softmax") is None  # a built-in travels with the package


def test_a_gpu_mode_directory_brings_the_helpers_its_task_names_from_beside_it(tmp_path):
    packed = bundle.pack(str(GPUMODE / "pmpp" / "sort_py"))
    assert packed["locator"] == "sort_py"
    assert sorted(packed["files"]) == ["sort_py/reference.py", "sort_py/submission.py", "sort_py/task.py",
                                       "sort_py/task.yml", "utils.py"]  # ../utils.py, named in task.yml
    problem = load_problem(bundle.unpack(packed, tmp_path))
    assert problem.name == "sort_py" and problem.seed_source == (GPUMODE / "pmpp" / "sort_py" / "submission.py").read_text()


def test_a_baseline_names_the_runs_path_and_loads_the_copy_its_process_judges(tmp_path):
    """A baseline's source loads the problem by the run's path; where that path does not exist, the copy this
    process loaded from the request's files is the problem (a worker loads it before the candidate)."""
    from kscience.run.baselines import reference_source

    path = tmp_path / "relu_named_once.py"  # a name no other test of this process loads a copy of
    path.write_text(RELU)
    source = reference_source(load_problem(str(path)))
    assert f"load_problem(loaded_copy({str(path)!r}), {{}})" in source
    assert bundle.loaded_copy(str(path)) == str(path)  # only the run's own load so far
    copy = load_problem(bundle.unpack(bundle.pack(str(path)), tmp_path / "cache"))
    path.unlink()
    assert bundle.loaded_copy(str(path)) == copy.locator != str(path)
    assert bundle.loaded_copy(str(tmp_path / "other.py")) == str(tmp_path / "other.py")
    namespace = {}
    exec(compile(source, "baseline.py", "exec"), namespace)  # as the worker imports it
    assert namespace["_PROBLEM"].locator == copy.locator


def test_files_that_do_not_match_their_digest_or_leave_their_folder_are_refused(tmp_path):
    path = tmp_path / "relu_1d.py"
    path.write_text(RELU)
    packed = bundle.pack(str(path))
    changed = dict(packed, files={"relu_1d.py": base64.b64encode(b"import os\n").decode()})
    escaping = {"locator": "../x.py", "files": {"../x.py": ""}, "digest": ""}
    absolute = {"locator": "x.py", "files": {"/etc/x.py": ""}, "digest": ""}
    for bad, words in ((changed, "do not match their digest"), (escaping, "would leave its folder"),
                       (absolute, "would leave its folder"), ({"files": []}, "not a {digest, locator, files}"),
                       (dict(packed, files={"relu_1d.py": "%%%"}), "not base64")):
        with pytest.raises(ProblemError, match=words):
            bundle.unpack(bad, tmp_path / "cache")
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())
    request = EvalRequest(problem=str(path), source=SOLUTION, problem_files=changed)
    with pytest.raises(ProblemError, match="digest"):
        judged_here(request)


def test_a_queue_worker_judges_a_kernelbench_file_that_exists_only_on_the_runs_side(tmp_path):
    """The run loads the file and asks for its seed and its eager baseline; the file is then moved away, and a
    `kscience worker` in another folder judges both from the files its requests carry."""
    suite = tmp_path / "run-machine"
    suite.mkdir()
    path = suite / "relu_1d.py"
    path.write_text(RELU)
    queue, store = tmp_path / "queue", Store(str(tmp_path / "runs.db"))
    run = Run.create(RunConfig(problem=str(path), iterations=0, executor=f"queue:{queue}", compiled_baseline=False,
                               profile="none"), store=store)
    waiting = threading.Event()
    run.subscribe(lambda e: waiting.set() if isinstance(e, EvaluationWaiting) else None)
    run.start(background=True)
    try:
        assert waiting.wait(120), "the run never asked for an evaluation"
        asked = [Q.read_json(p)["request"] for p in Q.queue_files(queue / "requests")]
        assert asked and all(r["problem"] == str(path) and r["problem_files"]["locator"] == "relu_1d.py"
                             for r in asked)
        path.rename(tmp_path / "elsewhere.py")  # the worker's machine has no such file
        worker_machine = tmp_path / "worker-machine"
        worker_machine.mkdir()
        env = dict(os.environ, KSCIENCE_CACHE=str(worker_machine / "cache"), KSCIENCE_DEVICE="cpu",
                   PYTHONPATH=str(ROOT))
        done = subprocess.run([sys.executable, "-m", "kscience.cli.main", "worker", str(queue), "--once", "--poll",
                               "0.1"], cwd=worker_machine, env=env, capture_output=True, text=True, timeout=600)
        assert "2 evaluation(s) done" in done.stderr, done.stderr
        assert run.wait(120) == "finished", run.error
    finally:
        run.stop()
        run.wait(60)
    judged = {c.kind: c for c in store.candidates(run.id)}
    assert judged["seed"].status == OK and judged["eager"].status == OK, judged["eager"].message
    unpacked = list((worker_machine / "cache" / "problems").glob("*/relu_1d.py"))
    assert len(unpacked) == 1 and unpacked[0].read_text() == RELU


def test_a_spare_worker_started_before_a_problem_was_unpacked_reads_it(tmp_path, monkeypatch):
    """A slot keeps its next worker started, confined to what could be read then: a problem unpacked after it
    (here, after a built-in's evaluation started the spare) must still be readable by it."""
    from kscience.evaluate.executors.base import LocalExecutor
    from kscience.run.baselines import reference_source

    monkeypatch.setenv("KSCIENCE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("KSCIENCE_DEVICE", "cpu")
    path = tmp_path / "relu_1d.py"
    path.write_text(RELU)
    problem = load_problem(str(path))
    softmax = load_problem("softmax")
    with LocalExecutor() as executor:
        first = executor.submit(EvalRequest(problem="softmax", source=softmax.seed_source, shapes="tests")).result()
        assert first.status == OK, first.message
        baseline = executor.submit(EvalRequest(problem=str(path), source=reference_source(problem), shapes="tests",
                                               baseline=True, problem_files=bundle.pack(str(path)))).result()
    assert baseline.status == OK, baseline.message


def test_without_its_files_the_worker_cannot_find_the_problem(tmp_path):
    """What the files in the request spare: the same request naming only the run's path fails on a machine
    without the file, as a problem error the run is told about."""
    path = tmp_path / "relu_1d.py"
    path.write_text(RELU)
    request = EvalRequest(problem=str(path), source=SOLUTION, shapes="tests")
    path.unlink()
    with QueueExecutor(tmp_path / "queue", poll_s=0.1) as ex:
        future = ex.submit(request)
        done = subprocess.run([sys.executable, "-m", "kscience.cli.main", "worker", str(tmp_path / "queue"),
                               "--once", "--poll", "0.1"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                              env=dict(os.environ, KSCIENCE_DEVICE="cpu", PYTHONPATH=str(ROOT)))
        with pytest.raises(ProblemError, match="no problem"):
            future.result(timeout=30)
    assert "problem error" in done.stderr
