"""GPU MODE problem directories as published (tests/data/gpumode/reference-kernels, copied from
gpu-mode/reference-kernels with their licence), evaluated on the CPU with their own solutions.

They ask for tensors and generators on 'cuda' explicitly, which kscience maps to the CPU here;
those that define a check_implementation of their own are judged by it.
"""

import shutil
from pathlib import Path

import pytest
import torch

from kscience.cli import problem_commands
from kscience.cli.main import main
from kscience.evaluate.judge.compare import check_output
from kscience.evaluate.judge.evaluation import evaluate
from kscience.evaluate.result import EvalRequest
from kscience.problems import ProblemError, load_problem
from kscience.problems.device_map import TorchProxy, mapped_device

DATA = Path(__file__).parent / "data" / "gpumode"
PUBLISHED = DATA / "reference-kernels"
pytestmark = pytest.mark.usefixtures("gpumode_modules")  # tests/conftest.py


def judge(problem, source):
    return evaluate(EvalRequest(problem=problem.locator, source=source), problem=problem)


def test_the_copied_directories_keep_their_licence():
    assert (PUBLISHED / "LICENSE").read_text().startswith("June 9 Researcher Reciprocity License")
    assert "f83cb92a534cc67fa98d7e9813e7f8238abdb4e0" in (PUBLISHED / "README.md").read_text()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the mapping is what a machine without a GPU needs")
def test_cuda_tensors_and_generators_are_made_on_the_cpu_only_inside_the_block():
    problem_torch = TorchProxy()  # what a problem module's `torch` becomes
    with mapped_device("cpu"):
        gen = problem_torch.Generator(device="cuda")
        x = torch.randn(3, device="cuda", generator=gen)
        y = torch.zeros(2, device=torch.device("cuda:0")).to("cuda")
        z = torch.ones(2).cuda()
    assert gen.device.type == x.device.type == y.device.type == z.device.type == "cpu"
    assert problem_torch.randn is torch.randn
    with pytest.raises((RuntimeError, AssertionError)):  # outside the block nothing is rewritten
        torch.randn(3, device="cuda")
    with pytest.raises(RuntimeError):
        problem_torch.Generator(device="cuda")


def test_published_vectoradd_with_cuda_inputs_passes_with_its_own_submission():
    problem = load_problem(str(PUBLISHED / "pmpp" / "vectoradd_py"))
    assert problem.check is None  # make_match_reference: kscience's comparison with its tolerances
    a, b = problem.generate_input(7, "cpu", size=33)
    assert a.device.type == "cpu" and a.dtype == torch.float16 and a.shape == (33, 33)
    result = judge(problem, problem.seed_source)
    assert result.status == "ok", result.message
    wrong = problem.seed_source.replace("return A + B", "return A - B")
    assert judge(problem, wrong).status == "wrong_answer"


def test_a_compiled_triton_launch_runs_as_written_under_the_interpreter():
    # Dynamo cannot trace the interpreter's launches: this published submission failed in its fake
    # tensors until interpreted workers ran torch.compile's function as written.
    problem = load_problem(str(PUBLISHED / "pmpp" / "vectorsum_py"))
    assert 'torch.compile(_custom_kernel, mode="reduce-overhead")' in problem.seed_source
    result = judge(problem, problem.seed_source)
    assert result.status == "ok", result.message


# Right only below a million elements, as GPU MODE's published vectorsum cheat is: the CPU sees none
# of the task's benchmark shapes (1.6 to 52 million elements), so the verdict must say so.
RIGHT_ON_SMALL_VECTORS_ONLY = """
def custom_kernel(data):
    return data.sum() * (1.01 if data.numel() >= 1_000_000 else 1.0)
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU interpreter's shape lists")
def test_a_verdict_on_the_cpu_says_how_much_of_the_task_it_checked():
    problem = load_problem(str(PUBLISHED / "pmpp" / "vectorsum_py"))
    result = judge(problem, RIGHT_ON_SMALL_VECTORS_ONLY)
    assert result.status == "ok", result.message
    assert result.message.startswith("1 shape correct; geomean ")  # size=1023, checked and then timed
    assert "us over 1 CPU shape, timed by cpu interpreter" in result.message  # not called a benchmark shape
    assert result.message.endswith("; CPU interpreter: 1 of 5 test shapes checked; none of the 6 benchmark shapes "
                                   "checked or timed (test shape size=1023 timed in their place)"), result.message
    checked = judge(problem, RIGHT_ON_SMALL_VECTORS_ONLY.replace("return", "return 0 *"))
    assert checked.status == "wrong_answer"  # what it does check, it checks


def test_a_check_implementation_of_its_own_is_the_judge_where_allclose_is_wrong():
    """The reference answers +x/|x|; the submission answers -x/|x|, just as right: allclose rejects
    it, the task's own check accepts it, and a vector of the wrong length is still rejected."""
    problem = load_problem(str(DATA / "unit_direction"))
    data = problem.generate_input(3, "cpu", rows=4, cols=16)
    expected = problem.ref_kernel(data)
    assert not check_output(-expected, expected, problem.rtol, problem.atol)[0]
    assert problem.check(data, -expected) is None
    assert judge(problem, problem.seed_source).status == "ok"
    result = judge(problem, problem.seed_source.replace("-x *", "0.5 * x *"))
    assert result.status == "wrong_answer" and result.message.startswith("problem check: row")
    nan = judge(problem, problem.seed_source.replace("return -x", "return float('nan') * x"))
    assert nan.status == "wrong_answer" and "NaN" in nan.message


def test_published_cholesky_check_rejects_what_allclose_would_accept():
    problem = load_problem(str(PUBLISHED / "linalg" / "cholesky_py"))
    assert problem.check is not None
    data = problem.call_data(problem.generate_input(11, "cpu", **problem.cpu_tests[0]))  # one bare tensor
    assert isinstance(data, torch.Tensor) and data.device.type == "cpu"
    factor = problem.ref_kernel(data)
    assert problem.check(data, factor) is None
    # Off by 4e-3 below the diagonal: inside allclose's 1e-2, but L @ L.T no longer rebuilds A.
    nudged = factor + 4e-3 * torch.tril(torch.ones_like(factor), diagonal=-1)
    assert check_output(nudged, factor, problem.rtol, problem.atol)[0]
    assert "does not reconstruct A" in problem.check(data, nudged)


def test_published_histogram_own_check_on_cpu_inputs():
    problem = load_problem(str(PUBLISHED / "pmpp" / "histogram_py"))
    data = problem.call_data(problem.generate_input(5, "cpu", **problem.cpu_tests[0]))  # one bare tensor
    counts = problem.ref_kernel(data)
    assert data.device.type == "cpu" and int(counts.sum()) == data.numel()
    assert problem.check(data, counts) is None
    assert problem.check(data, counts.roll(1)) is not None


def test_a_published_wrong_solution_is_not_ok():
    """reference-kernels publishes wrong solutions beside the right ones, under `solutions/wrong/`:
    histogram's returns an uninitialised tensor of the right size and dtype."""
    folder = PUBLISHED / "pmpp" / "histogram_py"
    problem = load_problem(str(folder))
    result = judge(problem, (folder / "solutions" / "wrong" / "empty.py").read_text())
    assert result.status == "wrong_answer", result.message


def test_published_cholesky_through_the_judge_with_its_own_submission():
    problem = load_problem(str(PUBLISHED / "linalg" / "cholesky_py"))
    assert judge(problem, problem.seed_source).status == "ok"


def test_a_task_with_several_entry_points_says_why_in_one_line(tmp_path):
    folder = tmp_path / "two_entries"
    folder.mkdir()
    (folder / "reference.py").write_text("def generate_input(seed): pass\ndef ref_kernel(data): pass\n")
    (folder / "task.yml").write_text(
        'files:\n  - {"name": "submission.py", "source": "@SUBMISSION@"}\n'
        '  - {"name": "kernel2.py", "source": "@KERNEL2@"}\n  - {"name": "eval.py", "source": "eval.py"}\n'
        'config: {main: "eval.py"}\ntests: [{n: 1}]\nbenchmarks: [{n: 1}]\n')
    with pytest.raises(ProblemError, match=r"^two_entries: cannot be evaluated: it has 2 submission entry points"):
        load_problem(str(folder))


def test_the_tasks_own_time_limits_bound_kscience_eval(tmp_path, monkeypatch):
    # GPU MODE grants eigh 480 s of tests and 900 s of benchmarks; one kscience evaluation does both
    eigh = load_problem(str(PUBLISHED / "linalg" / "eigh_py"))
    assert eigh.time_limit_s == 480 + 900
    own = DATA / "scaled_add"
    assert load_problem(str(own)).time_limit_s is None  # declares none: per-phase limits only

    asked = []

    def fake_evaluate(request, gpu=None, problem=None, on_phase=None):
        asked.append((request.timeout_s, request.step_limit_s))
        return evaluate(EvalRequest(problem=problem.locator, source="x = ", shapes="tests"), problem=problem)

    monkeypatch.setattr(problem_commands, "evaluate", fake_evaluate)
    solution = tmp_path / "solution.py"
    solution.write_text((PUBLISHED / "linalg" / "eigh_py" / "submission.py").read_text())
    main(["eval", str(PUBLISHED / "linalg" / "eigh_py"), str(solution)])
    # --eval-timeout bounds each step, as in `kscience run`; the task's own limit on the whole evaluation stays
    main(["eval", str(PUBLISHED / "linalg" / "eigh_py"), str(solution), "--eval-timeout", "30"])
    main(["eval", str(own), str(solution)])
    assert asked == [(1380.0, None), (1380.0, 30.0), (None, None)]


def test_a_time_limit_that_is_not_a_number_of_seconds_is_refused_in_one_line(tmp_path):
    shutil.copytree(DATA, tmp_path / "gpumode", ignore=shutil.ignore_patterns("reference-kernels"))
    folder = tmp_path / "gpumode" / "scaled_add"
    (folder / "task.yml").write_text((folder / "task.yml").read_text() + "test_timeout: soon\n")
    with pytest.raises(ProblemError, match=r"task.yml: test_timeout and benchmark_timeout must be positive"):
        load_problem(str(folder))


def test_the_scientist_is_shown_the_tasks_reference_not_the_loader():
    from kscience.scientist.briefing import problem_source

    folder = PUBLISHED / "pmpp" / "vectoradd_py"
    shown = problem_source(load_problem(str(folder)))
    assert (folder / "reference.py").read_text() in shown and (folder / "task.py").read_text() in shown
    assert "load_gpumode_dir" not in shown and "check_implementation" not in shown.split("# task.py")[1]
