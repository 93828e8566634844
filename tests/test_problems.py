"""The built-in problems, their seed kernels, and the KernelBench and GPU MODE loaders.

Seeds run under the Triton interpreter on the CPU shapes. Each built-in also gets a few
plausible wrong answers (a dropped K block, a misplaced scale, a padded mean) that must
fail its tolerance, so the tolerances are shown to be tight enough to mean something.
"""

import os

os.environ["TRITON_INTERPRET"] = "1"  # CPU tensors need the interpreter; set before any @triton.jit runs

import shutil
import sys
from pathlib import Path

import pytest
import torch

from kscience.problems import ProblemError, builtin_names, import_file, load_problem, shape_label

DATA = Path(__file__).parent / "data"
KERNELBENCH_FILE = DATA / "kernelbench_linear_relu.py"
GPUMODE_DIR = DATA / "gpumode" / "scaled_add"
BUILTINS = ["fp8_blockscale_gemm", "matmul", "rmsnorm", "softmax", "swiglu"]


def load_seed(problem, tmp_path: Path):
    """Import a problem's seed source from a real file, as a worker would."""
    file = tmp_path / f"{problem.name}_seed.py"
    file.write_text(problem.seed_source)
    return import_file(file, f"test_seed_{problem.name}_{tmp_path.name}")


def clone_all(data):
    return tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in data)


def assert_close(out, expected, problem):
    assert out.shape == expected.shape and out.dtype == expected.dtype
    err = (out.float() - expected.float()).abs().max().item()
    assert torch.allclose(out.float(), expected.float(), rtol=problem.rtol, atol=problem.atol), err


# ---------------------------------------------------------------- built-in problems


def test_every_builtin_is_listed():
    assert sorted(BUILTINS) == builtin_names()


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_fields(name):
    problem = load_problem(name)
    assert problem.name == name and problem.locator == name and problem.entry == "custom_kernel"
    assert problem.description and "\n" not in problem.description
    assert 0 < problem.rtol < 0.1 and 0 < problem.atol < 0.1
    assert problem.precision in ("fp32", "bf16", "fp8")
    assert "def custom_kernel" in problem.seed_source
    for shapes in (problem.tests, problem.benchmarks, problem.cpu_tests, problem.cpu_benchmarks):
        assert shapes and all(isinstance(s, dict) and s for s in shapes)
    for shape in problem.tests + problem.benchmarks + problem.cpu_tests + problem.cpu_benchmarks:
        assert problem.flops(**shape) > 0 and problem.bytes_moved(**shape) > 0
    data = problem.generate_input(0, "cpu", **problem.cpu_tests[0])
    assert all(0 <= i < len(data) for i in problem.output_args)


@pytest.mark.parametrize("name", BUILTINS)
def test_generate_input_is_deterministic_and_seeded(name):
    problem = load_problem(name)
    shape = problem.cpu_tests[-1]
    first = problem.generate_input(11, "cpu", **shape)
    again = problem.generate_input(11, "cpu", **shape)
    other = problem.generate_input(12, "cpu", **shape)
    for i, (a, b, c) in enumerate(zip(first, again, other)):
        assert a.dtype == b.dtype and a.stride() == b.stride()
        assert torch.equal(a.float(), b.float())
        if i not in problem.output_args:
            assert a.float().abs().sum() > 0, f"input {i} is all zeros"
            assert not torch.equal(a.float(), c.float()), f"input {i} ignores the seed"


@pytest.mark.parametrize("name", BUILTINS)
def test_seed_matches_reference_on_cpu_shapes(name, tmp_path):
    problem = load_problem(name)
    seed_module = load_seed(problem, tmp_path)
    shapes = problem.shapes("all", interpreted=True)
    for i, shape in enumerate(shapes):
        data = problem.generate_input(1000 + i, "cpu", **shape)
        pristine = clone_all(data)
        expected = problem.ref_kernel(clone_all(data))
        out = seed_module.custom_kernel(data)
        assert_close(out, expected, problem)
        for j, (before, after) in enumerate(zip(pristine, data)):
            if j not in problem.output_args:
                assert torch.equal(before.float(), after.float()), f"{shape}: input {j} was modified"


@pytest.mark.parametrize("name", BUILTINS)
def test_reference_leaves_its_inputs_alone(name):
    problem = load_problem(name)
    data = problem.generate_input(5, "cpu", **problem.cpu_tests[0])
    pristine = clone_all(data)
    problem.ref_kernel(data)
    for before, after in zip(pristine, data):
        assert torch.equal(before.float(), after.float())


@pytest.mark.parametrize("name", builtin_names())
def test_eager_baseline_agrees_with_the_reference(name):
    """The eager kernel is a baseline, so it must be right: within tolerance on every CPU shape.
    Problems whose reference is already plain PyTorch in their own dtypes need none."""
    from kscience.evaluate.judge.compare import check_output

    problem = load_problem(name)
    if problem.eager_kernel is None:
        assert name == "fp8_blockscale_gemm", f"{name} times an fp32 reference as its eager baseline"
        return
    for shape in problem.cpu_tests + problem.cpu_benchmarks:
        data = problem.generate_input(11, "cpu", **shape)
        ok, why, _ = check_output(problem.eager_kernel(data), problem.ref_kernel(data), problem.rtol, problem.atol)
        assert ok, f"{shape}: {why}"


def test_fp8_layout_and_dtypes():
    problem = load_problem("fp8_blockscale_gemm")
    m, n, k = 96, 192, 384
    a, b, a_scale, b_scale, c = problem.generate_input(3, "cpu", m=m, n=n, k=k)
    assert a.dtype == b.dtype == torch.float8_e4m3fn
    assert a.shape == (m, k) and a.stride() == (1, m)  # column-major
    assert b.shape == (n, k) and b.stride() == (1, n)
    assert a_scale.dtype == b_scale.dtype == torch.float32
    assert a_scale.shape == (m, k // 128) and b_scale.shape == (2, k // 128)
    assert c.dtype == torch.bfloat16 and c.shape == (m, n) and c.stride() == (n, 1)
    assert (a_scale < 0).any() and (a_scale > 0).any()
    assert problem.output_args == (4,) and problem.precision == "fp8"


def test_fp8_dtype_follows_the_target_device(monkeypatch):
    fp8_dtype = load_problem("fp8_blockscale_gemm").generate_input.__globals__["fp8_dtype"]
    monkeypatch.setattr(torch.version, "hip", "6.2")
    assert fp8_dtype("cuda") == torch.float8_e4m3fnuz
    assert fp8_dtype("cpu") == torch.float8_e4m3fn
    monkeypatch.setattr(torch.version, "hip", None)
    assert fp8_dtype("cuda") == torch.float8_e4m3fn


def test_fp8_rejects_k_off_the_scale_block():
    with pytest.raises(ProblemError, match="multiple of the 128"):
        load_problem("fp8_blockscale_gemm").generate_input(0, "cpu", m=64, n=64, k=200)


def test_fp8_benchmarks_are_the_gpu_mode_shapes():
    benchmarks = load_problem("fp8_blockscale_gemm").benchmarks
    assert len(benchmarks) == 18
    assert {"m": 6144, "n": 576, "k": 7168} in benchmarks and {"m": 1024, "n": 4096, "k": 512} in benchmarks


# Plausible wrong answers, in plain PyTorch. Each must fail the problem's tolerance.

def _fp8_parts(data):
    a, b, a_scale, b_scale, _ = data
    n = b.shape[0]
    a_s = a_scale.repeat_interleave(128, dim=1)  # [m, k]
    b_s = b_scale.repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)[:n]  # [n, k]
    return a.float(), b.float(), a_s, b_s


def fp8_drops_last_k_block(data):
    a, b, a_s, b_s = _fp8_parts(data)
    keep = a.shape[1] - 128
    return ((a * a_s)[:, :keep] @ (b * b_s)[:, :keep].T).bfloat16()


def fp8_one_b_scale_per_tile(data):
    a, b, a_s, b_s = _fp8_parts(data)
    b_s = b_s[:1].expand_as(b_s)  # every column uses the first N-block's scale
    return ((a * a_s) @ (b * b_s).T).bfloat16()


def fp8_scales_lose_their_sign(data):
    a, b, a_s, b_s = _fp8_parts(data)
    return ((a * a_s.abs()) @ (b * b_s).T).bfloat16()


def softmax_first_block_denominator(data):
    x = data[0].float()
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return (e / e[:, :512].sum(dim=-1, keepdim=True)).bfloat16()


def softmax_two_percent_temperature(data):
    return torch.softmax(data[0].float() * 1.02, dim=-1).bfloat16()


def rmsnorm_mean_over_padded_row(data):
    x, w = data[0].float(), data[1].float()
    padded = 1 << (x.shape[1] - 1).bit_length()
    return (x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) / padded + 1e-6) * w).bfloat16()


def rmsnorm_ignores_weight(data):
    x = data[0].float()
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)).bfloat16()


def matmul_drops_k_tail(data):
    a, b = data
    keep = (a.shape[1] - 1) // 64 * 64  # the last 64-wide K block, full or partial, is lost
    return (a.float()[:, :keep] @ b.float()[:keep]).bfloat16()


def matmul_three_percent_scale(data):
    a, b = data
    return (1.03 * (a.float() @ b.float())).bfloat16()


def swiglu_swaps_gate_and_up(data):
    x, wg, wu = (t.float() for t in data)
    return (torch.nn.functional.silu(x @ wu) * (x @ wg)).bfloat16()


def swiglu_drops_k_tail(data):
    x, wg, wu = (t.float() for t in data)
    keep = x.shape[1] - 64
    x, wg, wu = x[:, :keep], wg[:keep], wu[:keep]
    return (torch.nn.functional.silu(x @ wg) * (x @ wu)).bfloat16()


WRONG_ANSWERS = [
    ("fp8_blockscale_gemm", {"m": 96, "n": 192, "k": 384}, fp8_drops_last_k_block),
    ("fp8_blockscale_gemm", {"m": 96, "n": 192, "k": 384}, fp8_one_b_scale_per_tile),
    ("fp8_blockscale_gemm", {"m": 64, "n": 64, "k": 128}, fp8_scales_lose_their_sign),
    ("softmax", {"m": 33, "n": 1000}, softmax_first_block_denominator),
    ("softmax", {"m": 33, "n": 1000}, softmax_two_percent_temperature),
    ("rmsnorm", {"m": 17, "n": 1000}, rmsnorm_mean_over_padded_row),
    ("rmsnorm", {"m": 17, "n": 1000}, rmsnorm_ignores_weight),
    ("matmul", {"m": 129, "n": 257, "k": 320}, matmul_drops_k_tail),
    ("matmul", {"m": 100, "n": 300, "k": 72}, matmul_drops_k_tail),
    ("matmul", {"m": 129, "n": 257, "k": 320}, matmul_three_percent_scale),
    ("swiglu", {"m": 129, "k": 320, "n": 257}, swiglu_swaps_gate_and_up),
    ("swiglu", {"m": 129, "k": 320, "n": 257}, swiglu_drops_k_tail),
]


@pytest.mark.parametrize("name,shape,wrong", WRONG_ANSWERS, ids=lambda v: getattr(v, "__name__", None))
def test_wrong_answers_fail_the_tolerance(name, shape, wrong):
    problem = load_problem(name)
    data = problem.generate_input(77, "cpu", **shape)
    expected = problem.ref_kernel(data)
    out = wrong(data)
    assert out.shape == expected.shape
    assert not torch.allclose(out.float(), expected.float(), rtol=problem.rtol, atol=problem.atol)


def test_builtins_take_no_overrides():
    with pytest.raises(ProblemError, match="--set"):
        load_problem("matmul", {"m": "4"})


# ---------------------------------------------------------------- KernelBench files


class LinearReluNew(torch.nn.Module):
    """A stand-in candidate: same constructor and layers as the file's Model."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = torch.nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.clamp_min(x @ self.linear.weight.T + self.linear.bias, 0.0)


def test_kernelbench_file_loads():
    problem = load_problem(str(KERNELBENCH_FILE))
    assert problem.name == "kernelbench_linear_relu" and problem.entry == "ModelNew"
    assert problem.locator == str(KERNELBENCH_FILE.resolve())
    assert problem.description == "Linear layer followed by ReLU, written as a KernelBench level-2 problem file."
    assert problem.rtol == problem.atol == 1e-2
    # One shape, named by the module's sizes (not "default"), which the inputs are built from.
    sizes = {"batch_size": 16, "in_features": 64, "out_features": 32}
    assert problem.tests == problem.benchmarks == problem.cpu_tests == problem.cpu_benchmarks == [sizes]
    assert shape_label(problem.tests[0]) == "batch_size=16,in_features=64,out_features=32"
    assert problem.overrides == {} and problem.source_text == KERNELBENCH_FILE.read_text()
    # The run starts from the reference itself, as a self-contained file a model can rewrite.
    assert problem.seed_source.startswith(problem.source_text.rstrip("\n"))
    assert "\nclass ModelNew(Model):\n" in problem.seed_source
    assert problem.constants == {"batch_size": 16, "in_features": 64, "out_features": 32}
    (x,) = problem.generate_input(3, "cpu")
    assert x.shape == (16, 64)
    assert torch.equal(x, problem.generate_input(3, "cpu")[0])
    assert not torch.equal(x, problem.generate_input(4, "cpu")[0])


def test_kernelbench_candidate_built_with_the_same_seed_matches():
    problem = load_problem(str(KERNELBENCH_FILE))
    data = problem.generate_input(8, "cpu")
    expected = problem.ref_kernel(data)
    assert expected.shape == (16, 32) and (expected > 0).any()
    candidate = problem.make_model(LinearReluNew, problem.weights_seed, "cpu")
    assert torch.allclose(candidate(*data), expected, rtol=problem.rtol, atol=problem.atol)
    reference = problem.make_model(problem.reference_model_class, problem.weights_seed, "cpu")
    assert torch.equal(reference.linear.weight, candidate.linear.weight)
    reseeded = problem.make_model(LinearReluNew, problem.weights_seed + 1, "cpu")
    assert not torch.allclose(reseeded(*data), expected, rtol=problem.rtol, atol=problem.atol)


def test_kernelbench_keeps_the_callers_rng():
    problem = load_problem(str(KERNELBENCH_FILE))
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    problem.generate_input(1, "cpu")
    problem.make_model(LinearReluNew, 0)
    assert torch.equal(torch.rand(3), expected)


def test_kernelbench_overrides_rewrite_constants():
    problem = load_problem(str(KERNELBENCH_FILE), {"batch_size": "4", "in_features": "8"})
    assert problem.overrides == {"batch_size": "4", "in_features": "8"}
    (x,) = problem.generate_input(0, "cpu")
    assert x.shape == (4, 8)
    assert problem.ref_kernel((x,)).shape == (4, 32)  # get_init_inputs saw in_features=8 too


def test_kernelbench_override_of_unknown_constant():
    with pytest.raises(ProblemError, match="--set batch: no module-level constant") as info:
        load_problem(str(KERNELBENCH_FILE), {"batch": "4"})
    assert "batch_size" in str(info.value) and "\n" not in str(info.value)


def test_kernelbench_override_values_parse_as_literals():
    from kscience.problems.kernelbench import parse_override_value

    assert parse_override_value("4") == 4
    assert parse_override_value("(2, 3)") == (2, 3)
    assert parse_override_value("1e-3") == 1e-3
    assert parse_override_value("mean") == "mean"


@pytest.mark.parametrize("source,message", [
    ("class Model(nn.Module:\n    pass\n", "SyntaxError"),
    ("import torch\nbatch_size = 1 / 0\n", "ZeroDivisionError"),
    ("def get_inputs():\n    return []\n", "lacks Model, get_init_inputs"),
])
def test_kernelbench_broken_files(tmp_path, source, message):
    broken = tmp_path / "broken.py"
    broken.write_text(source)
    with pytest.raises(ProblemError, match=message) as info:
        load_problem(str(broken))
    assert "\n" not in str(info.value)


# ---------------------------------------------------------------- GPU MODE directories


def test_gpumode_dir_loads(gpumode_modules):
    problem = load_problem(str(GPUMODE_DIR))
    assert problem.name == "scaled_add" and problem.entry == "custom_kernel"
    assert problem.description == "Compute out = 2 * x + y for fp32 vectors x and y, writing into the given out buffer."
    assert problem.tests == [{"size": 1000}, {"size": 127}, {"size": 65536}]
    assert problem.benchmarks == [{"size": 1048576}, {"size": 16777216}]
    assert problem.cpu_tests == problem.cpu_benchmarks == [{"size": 127}]
    assert (problem.rtol, problem.atol) == (1e-4, 1e-5)  # from check_implementation
    assert problem.output_args == (2,)
    assert "def custom_kernel" in problem.seed_source


def test_gpumode_seed_runs_and_matches(gpumode_modules, tmp_path):
    problem = load_problem(str(GPUMODE_DIR))
    seed_module = load_seed(problem, tmp_path)
    for i, shape in enumerate(problem.shapes("all", interpreted=True) + [{"size": 1000}]):
        data = problem.generate_input(40 + i, "cpu", **shape)
        expected = problem.ref_kernel(data)
        assert not torch.equal(data[2], expected)  # the reference filled a copy, not the buffer
        assert_close(seed_module.custom_kernel(data), expected, problem)


def test_gpumode_generate_input_takes_the_seed(gpumode_modules):
    problem = load_problem(str(GPUMODE_DIR))
    x1, y1, _ = problem.generate_input(1, "cpu", size=100)
    x2, _, _ = problem.generate_input(1, "cpu", size=100)
    x3, _, _ = problem.generate_input(2, "cpu", size=100)
    assert x1.shape == (100,) and torch.equal(x1, x2) and not torch.equal(x1, x3)


def copy_of_example(tmp_path: Path) -> Path:
    target = tmp_path / "gpumode"
    shutil.copytree(GPUMODE_DIR.parent, target)
    return target / "scaled_add"


def test_gpumode_reference_that_asks_for_cuda_builds_its_inputs_on_the_cpu(gpumode_modules, tmp_path):
    folder = copy_of_example(tmp_path)
    reference = folder / "reference.py"
    reference.write_text(reference.read_text().replace(
        'device = "cuda" if torch.cuda.is_available() else "cpu"', 'device = "cuda"'))
    problem = load_problem(str(folder))
    x, y, out = problem.generate_input(0, "cpu", size=10)
    assert x.device.type == y.device.type == out.device.type == "cpu" and x.shape == (10,)


def test_gpumode_config_tolerances_and_cpu_shapes(gpumode_modules, tmp_path):
    folder = copy_of_example(tmp_path)
    task = folder / "task.yml"
    task.write_text(task.read_text().replace('main: "eval.py"', 'main: "eval.py"\n  rtol: 0.05\n  atol: 0.001')
                    + "cpu_tests:\n  - {size: 33}\n")
    problem = load_problem(str(folder))
    assert (problem.rtol, problem.atol) == (0.05, 0.001)
    assert problem.cpu_tests == [{"size": 33}] and problem.cpu_benchmarks == [{"size": 127}]


def test_gpumode_bad_directories(gpumode_modules, tmp_path):
    with pytest.raises(ProblemError, match="needs task.yml and reference.py"):
        load_problem(str(tmp_path))
    with pytest.raises(ProblemError, match="--set applies to KernelBench"):
        load_problem(str(GPUMODE_DIR), {"size": "4"})
    folder = copy_of_example(tmp_path)
    (folder.parent / "utils.py").unlink()
    with pytest.raises(ProblemError, match="lists utils.py from ../utils.py, which does not exist"):
        load_problem(str(folder))
    (folder / "task.yml").write_text("tests: [unclosed\n")
    with pytest.raises(ProblemError, match="not valid YAML"):
        load_problem(str(folder))


def test_gpumode_without_pyyaml(gpumode_modules, monkeypatch):
    monkeypatch.setitem(sys.modules, "yaml", None)  # makes `import yaml` fail
    with pytest.raises(ProblemError, match="need PyYAML: pip install pyyaml"):
        load_problem(str(GPUMODE_DIR))


def test_the_interpreter_coverage_of_a_problem_in_words():
    """What a verdict under the Triton interpreter adds: how many of the problem's own shapes its
    CPU lists hold, and which shapes were timed in place of the benchmarks."""
    import dataclasses

    from kscience.problems.coverage import interpreter_coverage

    problem = load_problem("softmax")
    tests = [{"n": n} for n in (1, 2, 3, 4, 5)]
    benches = [{"n": n} for n in (100, 200)]
    own = dataclasses.replace(problem, tests=tests, benchmarks=benches, cpu_tests=tests, cpu_benchmarks=benches)
    assert interpreter_coverage(own, "all").said == ""  # the GPU's lists whole: nothing to say
    assert interpreter_coverage(own, "all").timed_noun == "benchmark shape"
    gpumode_default = dataclasses.replace(own, cpu_tests=tests[:1], cpu_benchmarks=tests[:1])
    said = interpreter_coverage(gpumode_default, "all")
    assert said.said == ("CPU interpreter: 1 of 5 test shapes checked; none of the 2 benchmark shapes checked "
                         "or timed (test shape n=1 timed in their place)")
    assert said.timed_noun == "CPU shape"
    assert interpreter_coverage(gpumode_default, "tests").said == "CPU interpreter: 1 of 5 test shapes checked"
    assert interpreter_coverage(gpumode_default, "benchmarks").said.startswith("CPU interpreter: none of the 2 ")
    small = [{"n": 7}, {"n": 8}, {"n": 9}, {"n": 10}]
    own_small = dataclasses.replace(own, cpu_tests=tests[:2] + small[:1], cpu_benchmarks=benches[:1] + small)
    assert interpreter_coverage(own_small, "all").said == (
        "CPU interpreter: 2 of 5 test shapes checked (and 1 CPU-only shape); 1 of 2 benchmark shapes timed "
        "(4 CPU-only shapes timed in their place)")
    one_bench = dataclasses.replace(own, benchmarks=benches[:1], cpu_benchmarks=small[:2])
    assert interpreter_coverage(one_bench, "benchmarks").said == (
        "CPU interpreter: the benchmark shape not checked or timed (CPU-only shapes n=7, n=8 timed in their place)")
    kernelbench = load_problem(str(KERNELBENCH_FILE))
    assert interpreter_coverage(kernelbench, "all").said == ""  # the file's own sizes, on every device
