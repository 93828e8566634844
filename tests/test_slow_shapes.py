"""Shapes whose calls take seconds (GPU MODE's linalg tasks: 9.6 s per eigendecomposition of 640
matrices on an H100) are timed as GPU MODE's eval.py times them, and the judge runs no reference
the task's own check does not need, nor the reference twice for one check.
"""

import dataclasses
from pathlib import Path

import pytest
import torch

from kscience.evaluate.judge import drive
from kscience.evaluate.judge.evaluation import evaluate
from kscience.evaluate.result import EvalRequest
from kscience.problems import load_problem, outputs

from fake_clock import FakeBuffers, FakeClock, FakeSession
from gpumode_tasks import task_folder

PUBLISHED = Path(__file__).parent / "data" / "gpumode" / "reference-kernels"


def _timed(monkeypatch, call_s):
    """Timed calls of `call_s` seconds each, with a little noise."""
    clock = FakeClock()
    monkeypatch.setattr(drive, "time", clock)
    session = FakeSession(clock, lambda n: call_s * (1 + 0.05 * (n % 3)))
    plan = drive.Plan(warmup=0, nulls=2, min_n=10, max_n=2000, max_seconds=0.5, target_rse=0.005, checks=0,
                      few_n=3, enough_s=10.0)
    calls, _ = drive.run_calls(session, {"n": 1}, plan, FakeBuffers(), set(), 16)
    return [c for c in calls if c.kind == "timed"]


def test_calls_of_seconds_stop_at_three_once_they_add_up_to_ten_seconds(monkeypatch):
    assert len(_timed(monkeypatch, 4.0)) == 3  # 12 s after three calls, as GPU MODE's eval.py stops
    assert len(_timed(monkeypatch, 2.0)) == 5  # three calls are only 6.3 s: on until 10 s have passed
    assert len(_timed(monkeypatch, 0.001)) >= 10  # fast calls keep the usual least number


@pytest.mark.usefixtures("gpumode_modules")
def test_a_task_with_its_own_check_never_has_its_reference_run_on_real_inputs_by_the_judge():
    problem = load_problem(str(PUBLISHED / "linalg" / "eigh_py"))
    assert problem.checks_alone
    devices = []

    def reference(data):
        devices.append(data.device.type)
        return problem.ref_kernel(data)

    counted = dataclasses.replace(problem, ref_kernel=reference)
    result = evaluate(EvalRequest(problem=problem.locator, source=problem.seed_source, shapes="tests"),
                      problem=counted)
    assert result.status == "ok", result.message
    assert len(devices) == len(problem.cpu_tests) and set(devices) == {"meta"}  # sizes only


@pytest.mark.usefixtures("gpumode_modules")
def test_several_outputs_compared_with_the_reference_run_it_once_per_checked_call(tmp_path):
    log = tmp_path / "reference-calls"
    folder = task_folder(tmp_path / "two", (
        "import torch\nfrom task import output_t\n\n"
        "def generate_input(n, seed):\n    gen = torch.Generator(device='cuda')\n    gen.manual_seed(seed)\n"
        "    return (torch.randn(n, device='cuda', generator=gen),)\n\n"
        "def ref_kernel(data):\n    (x,) = data\n"
        f"    if x.device.type != 'meta':\n        open({str(log)!r}, 'a').write('.')\n"
        "    return x + 1, x * 2\n"))
    (folder / "task.py").write_text("import torch\nfrom typing import TypeVar\n"
                                    "output_t = TypeVar('output_t', bound=tuple[torch.Tensor, torch.Tensor])\n")
    problem = load_problem(str(folder))
    assert problem.several_outputs and not problem.checks_alone
    right = "def custom_kernel(data):\n    (x,) = data\n    return x + 1, x * 2\n"
    result = evaluate(EvalRequest(problem=problem.locator, source=right, shapes="tests"), problem=problem)
    assert result.status == "ok", result.message
    # Once per test shape, by the judge: the check compares with the answer it had already computed.
    assert log.read_text() == "." * len(problem.cpu_tests)
    wrong = evaluate(EvalRequest(problem=problem.locator, source=right.replace("x * 2", "x * 3"), shapes="tests"),
                     problem=problem)
    assert wrong.status == "wrong_answer" and wrong.message.startswith("problem check: member 1: ")


def test_a_packed_answer_with_the_longest_header_unpacks_from_its_header_alone():
    key = "k" * outputs.MAX_KEY
    many = {f"{i:03d}{key}"[:outputs.MAX_KEY]: torch.full((1,) * outputs.MAX_DIMS, float(i))
            for i in range(outputs.MAX_MEMBERS)}
    packed = outputs.pack(many)
    back = outputs.unpack(packed)
    assert isinstance(back, dict) and list(back) == list(many)
    assert all(torch.equal(back[k], v) for k, v in many.items())
    big = outputs.pack((torch.arange(3_000_000, dtype=torch.float32), torch.ones(2, 3)))
    first, second = outputs.unpack(big)
    assert first.untyped_storage().data_ptr() == big.untyped_storage().data_ptr()  # a view: nothing was copied
    assert torch.equal(first, torch.arange(3_000_000, dtype=torch.float32)) and torch.equal(second, torch.ones(2, 3))


@pytest.mark.usefixtures("gpumode_modules")
def test_a_task_whose_inputs_the_meta_device_cannot_build_has_its_answer_computed_instead(tmp_path):
    folder = task_folder(tmp_path / "item", (
        "import torch\n\n"
        "def generate_input(n, seed):\n    gen = torch.Generator(device='cuda')\n    gen.manual_seed(seed)\n"
        "    x = torch.randn(n, device='cuda', generator=gen)\n"
        "    return (x * (1 + int(x.abs().argmax())),)  # .item(): no value on the meta device\n\n"
        "def ref_kernel(data):\n    (x,) = data\n    return x.sort().values\n\n"
        "def check_implementation(data, output):\n    (x,) = data\n"
        "    return '' if torch.equal(output, x.sort().values) else 'not sorted'\n"))
    problem = load_problem(str(folder))
    assert problem.checks_alone
    right = "def custom_kernel(data):\n    (x,) = data\n    return x.sort().values\n"
    assert evaluate(EvalRequest(problem=problem.locator, source=right, shapes="tests"), problem=problem).status == "ok"
    wrong = evaluate(EvalRequest(problem=problem.locator, source=right.replace(".values", ".values.flip(0)"),
                                 shapes="tests"), problem=problem)
    assert wrong.status == "wrong_answer" and "not sorted" in wrong.message
