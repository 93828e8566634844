"""GPU MODE outputs as the tasks hand them out, on directories copied from gpu-mode/reference-kernels
(tests/data/gpumode/reference-kernels, with their licence): a preallocated output in `data`
(pmpp_v2, amd-fp8-mm's zeroed `c`), a tuple output judged by the task's own check (linalg-eigh),
nested inputs drawn from the global generator (bioml-trimul), and the one-line refusals.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kscience.evaluate.judge.evaluation import evaluate
from kscience.evaluate.result import EvalRequest
from kscience.problems import ProblemError, load_problem, probed_facts
from kscience.problems import outputs

from gpumode_tasks import task_folder

PUBLISHED = Path(__file__).parent / "data" / "gpumode" / "reference-kernels"
VECTORADD_V2 = PUBLISHED / "pmpp_v2" / "vectoradd_py"
pytestmark = pytest.mark.usefixtures("gpumode_modules")  # tests/conftest.py


def judge(problem, source, shapes="all"):
    return evaluate(EvalRequest(problem=problem.locator, source=source, shapes=shapes), problem=problem)


def test_a_preallocated_output_is_found_written_and_judged_while_inputs_stay_protected():
    problem = load_problem(str(VECTORADD_V2))
    assert problem.output_args == (2,) and problem.zeroed_outputs == ()  # torch.empty: no content to keep
    assert judge(problem, problem.seed_source).status == "ok"
    view = judge(problem, problem.seed_source.replace("output[...] = A + B\n    return output", "return A"))
    assert view.status == "wrong_answer" and view.message == "returned a view of input 0 instead of a computed output"
    unwritten = judge(problem, problem.seed_source.replace("output[...] = A + B", "pass"))
    assert unwritten.status == "wrong_answer" and "NaN" in unwritten.message
    scribbled = judge(problem, problem.seed_source.replace("output[...] = A + B", "output[...] = A + B; B.zero_()"))
    assert scribbled.status == "wrong_answer" and scribbled.message.startswith("input 1 was modified")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the mapping is what a machine without a GPU needs")
def test_a_published_solution_that_says_cuda_runs_on_the_cpu_without_a_gpu():
    problem = load_problem(str(VECTORADD_V2))
    says_cuda = problem.seed_source.replace("output[...] = A + B", "output[...] = (A.cuda() + B.to('cuda')).to(device='cuda')")
    assert judge(problem, says_cuda, "tests").status == "ok"


def test_a_zeroed_output_keeps_its_zeros_for_a_kernel_that_accumulates():
    problem = load_problem(str(PUBLISHED / "amd" / "fp8-mm"))
    assert problem.output_args == (4,) and problem.zeroed_outputs == (4,)
    assert problem.rtol == 2e-2 and problem.atol == 1e-3  # make_match_reference's own
    assert judge(problem, problem.seed_source).status == "ok"
    # Adding into c is right only if c arrives zeroed, on every call (checked and timed).
    accumulate = problem.seed_source.replace("c[...] = ", "c += ")
    assert "c += " in accumulate
    assert judge(problem, accumulate).status == "ok"


def test_a_tuple_output_is_judged_member_by_member_by_the_task_own_check():
    problem = load_problem(str(PUBLISHED / "linalg" / "eigh_py"))
    assert problem.check is not None
    source = problem.seed_source
    assert judge(problem, source, "tests").status == "ok"  # its check is slow on the CPU: no timing here
    single = judge(problem, source.replace("return vectors, values", "return vectors"), "tests")
    assert single.status == "wrong_answer"
    assert single.message == "problem check: custom_kernel returned a single tensor, expected a tuple of tensors"
    hidden = judge(problem, source.replace("return vectors, values", "return vectors, data"), "tests")
    assert hidden.status == "wrong_answer" and hidden.message == "returned a view of input 0 instead of a computed output"


TWO_OUTPUTS = """import torch
from typing import TypeVar
output_t = TypeVar("output_t", bound=dict[str, torch.Tensor])

def generate_input(n, seed):
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    return torch.randn(n, device="cuda", generator=gen), torch.randn(n, device="cuda", generator=gen)

def ref_kernel(data):
    x, y = data
    return {"sum": x + y, "larger": torch.maximum(x, y) > 0}
"""


def test_several_outputs_without_an_own_check_are_compared_member_by_member_on_every_timed_call(tmp_path):
    folder = task_folder(tmp_path / "two", TWO_OUTPUTS.replace("from typing", "from task import output_t\nfrom typing"),
                   "cpu_benchmarks: [{n: 3000}]\n")
    (folder / "task.py").write_text(TWO_OUTPUTS.split("\n\n")[0])
    problem = load_problem(str(folder))
    assert problem.check is not None and problem.rtol == problem.atol == 1e-2  # no check_implementation at all
    right = "import torch\ndef custom_kernel(data):\n    x, y = data\n    return {'sum': x + y, 'larger': torch.maximum(x, y) > 0}\n"
    assert judge(problem, right).status == "ok"
    off = judge(problem, right.replace("x + y", "x + 1.1 * y"))
    assert off.status == "wrong_answer" and off.message.startswith("problem check: member sum: ")
    odd_key = judge(problem, right.replace("'larger':", "1:"), "tests")
    assert odd_key.status == "wrong_answer" and odd_key.message.endswith("with keys that are not plain strings")
    # Right on the checked call only: the timed calls' packed outputs are judged too.
    flaky = right.replace("    x, y = data\n", "    x, y = data\n    global n\n    n = globals().get('n', 0) + 1\n"
                          "    if n > 2:\n        return {'sum': x - y, 'larger': x > 0}\n")
    late = judge(problem, flaky)
    assert late.status == "wrong_answer" and late.message.startswith("a timed call returned a wrong result")


def test_inputs_drawn_from_the_global_generator_and_nested_in_a_dict_are_the_same_in_judge_and_worker():
    """bioml-trimul draws its weights without its generator and hands them in a dict: the judge and
    the worker must both see the weights of the seed, on checked and on timed calls."""
    problem = load_problem(str(PUBLISHED / "bioml" / "trimul"))
    shape = problem.cpu_tests[0]
    a, b = problem.generate_input(5, "cpu", **shape), problem.generate_input(5, "cpu", **shape)
    assert torch.equal(a[2]["to_out.weight"], b[2]["to_out.weight"])
    assert problem.check is None  # task.py says Tuple[Tensor, Dict]; the reference returns one tensor
    assert judge(problem, problem.seed_source).status == "ok"


def test_a_task_declaring_a_tuple_whose_reference_returns_one_tensor_judges_one_tensor(tmp_path):
    """amd-moe: task.py says Tuple[Tensor, Dict], its reference returns one tensor, and the probe on
    the meta device cannot run it (here: `.item()`), so the declaration stands until the judge sees
    the reference's answer."""
    reference = ("import torch\nfrom task import output_t\n"
                 "def generate_input(n, seed):\n    g = torch.Generator(device='cuda')\n    g.manual_seed(seed)\n"
                 "    return (torch.randn(n, device='cuda', generator=g),)\n"
                 "def ref_kernel(data):\n    (x,) = data\n    return x * 2 + 0 * x.sum().item()\n")
    folder = task_folder(tmp_path / "moe_like", reference)
    (folder / "task.py").write_text("import torch\nfrom typing import TypeVar, Tuple, Dict\n"
                                    "output_t = TypeVar('output_t', bound=Tuple[torch.Tensor, Dict])\n")
    problem = load_problem(str(folder))
    assert problem.several_outputs  # as declared: the probe could not run the reference
    right = "def custom_kernel(data):\n    (x,) = data\n    return x * 2\n"
    assert judge(problem, right).status == "ok"
    wrong = judge(problem, right.replace("x * 2", "x * 3"))
    assert wrong.status == "wrong_answer" and "elements outside" in wrong.message


def test_pack_and_unpack_keep_structure_and_refuse_malformed_bytes():
    q, r = torch.randn(3, 4), torch.arange(5, dtype=torch.int32)
    back = outputs.unpack(outputs.pack((q, r)))
    assert isinstance(back, tuple) and torch.equal(back[0], q) and torch.equal(back[1], r)
    named = outputs.unpack(outputs.pack({"out": q, "lse": torch.zeros(0)}))
    assert list(named) == ["out", "lse"] and torch.equal(named["out"], q) and named["lse"].shape == (0,)
    assert outputs.unpack(torch.zeros(40, dtype=torch.uint8)) == "a single tensor"
    forged = outputs.pack([q]).clone()
    forged[24:32] = torch.tensor([2**40], dtype=torch.int64).view(torch.uint8)  # a dimension far too big
    assert outputs.unpack(forged).startswith("a malformed packed output")


@pytest.mark.parametrize("reference, yml, reason", [
    ("import aiter_not_installed_here\ndef generate_input(n, seed): pass\ndef ref_kernel(d): pass\n", "",
     "cannot be evaluated: its reference needs aiter_not_installed_here, not installed here"),
    ("def generate_input(n, seed): pass\ndef ref_kernel(d): pass\n", "multi_gpu: true\n",
     "cannot be evaluated: it runs one process per GPU on several GPUs at once"),
    ("def ref_kernel(d): pass\n", "", "cannot be evaluated: its reference.py has no generate_input"),
])
def test_what_kscience_cannot_provide_is_refused_in_one_line(tmp_path, reference, yml, reason):
    with pytest.raises(ProblemError) as info:
        load_problem(str(task_folder(tmp_path / "needs", reference, yml)))
    assert reason in str(info.value) and "\n" not in str(info.value)


def test_a_reference_that_fails_on_this_device_is_a_one_line_error_not_a_judge_failure(tmp_path):
    folder = task_folder(tmp_path / "nofp4", "import torch\n"
                   "def generate_input(n, seed):\n    return torch.ones(n), torch.ones(n)\n"
                   "def ref_kernel(d):\n    raise RuntimeError('Invalid scaling configuration\\nmore')\n")
    (tmp_path / "k.py").write_text("def custom_kernel(data):\n    return data[0] + data[1]\n")
    done = subprocess.run([sys.executable, "-m", "kscience", "eval", str(folder), str(tmp_path / "k.py")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    # what it judges comes first, as for every evaluation; then the one error line
    assert error_lines(done) == [
        f"kscience: error: {folder}/reference.py: ref_kernel failed on cpu: RuntimeError: Invalid scaling configuration"]


FP4_TASK = """import torch
def generate_input(n, seed):
    bits = torch.randint(0, 255, (128, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))
    scales = torch.ones(128, 4).to(torch.float8_e4m3fn)
    return bits.view(torch.float4_e2m1fn_x2), bits.clone().view(torch.float4_e2m1fn_x2), scales, scales.clone()
def ref_kernel(d):
    a, b, sa, sb = d
    return torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16)
"""


def test_a_task_whose_inputs_need_a_newer_gpu_says_so(tmp_path):
    """GPU MODE's nvfp4 references call torch._scaled_mm on fp4 inputs, which only Blackwell computes:
    the refusal names the type and the compute capability, not only what torch said."""
    folder = task_folder(tmp_path / "nvfp4", FP4_TASK)
    (tmp_path / "k.py").write_text("def custom_kernel(data):\n    return None\n")
    done = kscience("eval", str(folder), str(tmp_path / "k.py"))
    assert done.returncode == 2 and len(error_lines(done)) == 1, done.stderr
    assert error_lines(done)[0].startswith(
        "kscience: error: nvfp4: cannot be evaluated here: its inputs are float4_e2m1fn_x2, which torch computes "
        "only on NVIDIA GPUs of compute capability 10.0 or newer; this device is the cpu (its reference failed: "
        "ValueError: Invalid scaling configuration."), done.stderr


def error_lines(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("kscience: error:")]


def kscience(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kscience", *args], capture_output=True, text=True, timeout=600)


def test_kscience_eval_judges_a_published_solution_that_fills_the_output_it_was_handed():
    triton_solution = VECTORADD_V2 / "solutions" / "correct" / "submission_triton.py"
    done = kscience("eval", str(VECTORADD_V2), str(triton_solution))
    assert done.returncode == 0 and done.stdout.startswith("ok: "), done.stdout + done.stderr


def test_one_offline_iteration_on_a_published_task_or_a_one_line_refusal(tmp_path):
    db = str(tmp_path / "runs.db")
    # Its submission.py is PyTorch: nothing the offline scientist can tune, and it says so.
    refused = kscience("run", str(VECTORADD_V2), "--iterations", "1", "--llm", "offline", "--db", db)
    errors = error_lines(refused)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr and len(errors) == 1
    assert "cannot write kernels from scratch" in errors[0] and "the seed of vectoradd_py is plain PyTorch" in errors[0]
    # The published Triton solution, its block size lifted to a module-level knob, is tuned.
    published = (VECTORADD_V2 / "solutions" / "correct" / "submission_triton.py").read_text()
    seed = published.replace("    BLOCK_SIZE = 32\n", "").replace("def custom_kernel", "BLOCK_SIZE = 32\n\n\ndef custom_kernel")
    (tmp_path / "seed.py").write_text(seed)
    done = kscience("run", str(VECTORADD_V2), "--iterations", "1", "--llm", "offline", "--db", db,
                    "--seed-kernel", str(tmp_path / "seed.py"), "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["run"]["status"] == "finished" and summary["metrics"]["iterations_done"] == 1
    assert summary["metrics"]["n_ok"] >= 2 and summary["metrics"]["n_failed"] == 0, summary["metrics"]


def test_inputs_are_bit_identical_whatever_the_thread_count_of_the_process():
    """The judge and the worker build the same inputs in two processes with different torch thread
    counts; linalg-eigh's random orthogonal matrices (a CPU QR) rounded differently, and the
    worker's untouched input was judged modified."""
    problem = load_problem(str(PUBLISHED / "linalg" / "eigh_py"))
    shape = {"batch": 16, "n": 512, "cond": 0, "case": "rankdef"}  # the published CPU benchmark shape
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = problem.generate_input(7, "cpu", **shape)
        torch.set_num_threads(max(2, threads))
        many = problem.generate_input(7, "cpu", **shape)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one[0], many[0])


def test_a_worker_takes_the_outputs_the_judge_found_and_runs_no_probe_of_its_own():
    """The probe runs the task on the meta device, whose random draws import Dynamo (3.4 s of every
    evaluation's import on an H100 host): a worker is handed what the judge's load found instead."""
    problem = load_problem(str(VECTORADD_V2))
    facts = probed_facts(problem)
    assert facts == {"output_args": [2], "zeroed_outputs": [], "several_outputs": False}
    code = ("import json, sys\nfrom kscience.problems import load_problem\n"
            f"p = load_problem({problem.locator!r}, None, json.loads({json.dumps(json.dumps(facts))}))\n"
            "print(p.output_args, p.several_outputs, 'torch._dynamo' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["(2,)", "False", "False"]
