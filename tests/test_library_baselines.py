"""Libraries a user would install instead of writing a kernel (Liger-Kernel, QuACK...): found, timed by the same
judge as every kernel, stored as baseline rows and reported; a missing one said in one line; their Triton source
shown to the model where a problem names it; and a candidate that only calls them refused where the problem
forbids it."""

import dataclasses
import os

import pytest
import torch

from jupyter_fakes import FakeExecutor, FakeScientist, fake_kernel
from record_fixtures import problem_row, report_of
from kscience.campaigns.report import beats_line, report_lines
from kscience.cli.main import main as cli_main
from kscience.cli.progress import Progress
from kscience.evaluate.judge.evaluation import evaluate
from kscience.evaluate.library_rule import static_violation
from kscience.evaluate.result import EvalRequest
from kscience.problems import Library, builtin_names, load_problem
from kscience.problems.libraries import GEMM_CALLS, library_notes, missing_line, skipped_line
from kscience.record.snapshot import Snapshot, run_metrics
from kscience.record.store import Store
from kscience.record.summary import summary_lines
from kscience.run import driver
from kscience.run.baselines import library_candidate, vendor_alone_source
from kscience.run.config import RunConfig
from kscience.run.driver import Run
from kscience.run.events import Notice
from kscience.scientist.roles import Scientist

FAKE_NORM = '''"""A stand-in for an installed RMSNorm library, written for this test."""
import torch


def rmsnorm(data):
    x, weight = data
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)
'''


@pytest.fixture
def fake_library(tmp_path, monkeypatch):
    """A package `fakenorm` 1.2.3 installed in a folder of its own, seen by this process and by workers."""
    site = tmp_path / "site"
    (site / "fakenorm").mkdir(parents=True)
    (site / "fakenorm" / "__init__.py").write_text(FAKE_NORM)
    (site / "fakenorm-1.2.3.dist-info").mkdir()
    (site / "fakenorm-1.2.3.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: fakenorm\nVersion: 1.2.3\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p))
    return Library(name="FakeNorm RMSNorm", distribution="fakenorm", module="fakenorm", call="fakenorm:rmsnorm",
                   why="a stand-in installed for this test", entry_points=("fakenorm",), source_module="fakenorm",
                   licence="MIT")


MISSING = Library(name="Absent RMSNorm", distribution="absent-norm-kernels", module="absent_norm_kernels",
                  call="absent_norm_kernels:rmsnorm", why="never installed", entry_points=("absent_norm_kernels",))


def _rmsnorm_with(monkeypatch, *libraries):
    """rmsnorm as the run's controller loads it, naming `libraries` instead of its own."""
    problem = dataclasses.replace(load_problem("rmsnorm"), libraries=libraries,
                                  forbidden_calls=tuple(n for lib in libraries for n in lib.entry_points))
    monkeypatch.setattr(driver, "load_problem", lambda *a, **k: problem)
    return problem


class JudgesLibraries(FakeExecutor):
    """Fake verdicts for the scripted kernels; the real judge (a sandboxed worker) for a library baseline."""

    def __init__(self):
        super().__init__()
        self.libraries: list[EvalRequest] = []

    def _judge(self, request):
        if "_library_call" not in request.source:
            return super()._judge(request)
        self.libraries.append(request)
        return evaluate(dataclasses.replace(request, shapes="all"))


def test_an_installed_library_is_found_timed_and_reported(tmp_path, monkeypatch, fake_library):
    _rmsnorm_with(monkeypatch, fake_library, MISSING)
    executor, scientist = JudgesLibraries(), FakeScientist()
    run = Run.create(RunConfig(problem="rmsnorm", iterations=1), store=Store(tmp_path / "k.db"),
                     seed_source=fake_kernel(1000.0), scientist=scientist, executor=executor)
    assert run.start(background=False).status == "finished"
    assert len(executor.libraries) == 1 and executor.libraries[0].baseline  # the missing one was not sent
    rows = [c for c in run.store.candidates(run.id) if c.kind == "library"]
    found = next(c for c in rows if c.hypothesis.startswith("FakeNorm"))
    assert found.status == "ok", found.message
    assert found.geomean_us > 0 and "fakenorm 1.2.3" in found.hypothesis
    m = run_metrics(run.store, run.id)
    assert m.best_id != found.id  # a baseline, never the run's best kernel
    assert [lib.label for lib in m.libraries] == [found.hypothesis]  # the missing one has no row
    text = "\n".join(summary_lines(Snapshot.load(run.store, run.id).run, m))
    assert "FakeNorm RMSNorm (fakenorm 1.2.3)" in text
    # the measurement header every prompt carries from its verdict on names it with its version and time
    shown = {b.label: b for b in scientist.bench.baselines}
    assert shown["installed library: FakeNorm RMSNorm (fakenorm 1.2.3)"].geomean_us == found.geomean_us


def test_a_missing_package_gives_its_one_line_and_the_run_goes_on(tmp_path, monkeypatch, capsys):
    assert missing_line(MISSING) == ("Absent RMSNorm: absent-norm-kernels is not installed "
                                     "(pip install 'kscience[baselines]'); its baseline is skipped")
    _rmsnorm_with(monkeypatch, MISSING)
    run = Run.create(RunConfig(problem="rmsnorm", iterations=1), store=Store(tmp_path / "k.db"),
                     seed_source=fake_kernel(100.0), scientist=FakeScientist(), executor=FakeExecutor())
    said = []
    run.subscribe(said.append)
    assert run.start(background=False).status == "finished"
    assert not [c for c in run.store.candidates(run.id) if c.kind == "library"]
    # One notice for every library not installed here (one line per run, not one per library).
    notices = [e for e in said if isinstance(e, Notice)]
    assert [e.text for e in notices] == [skipped_line([MISSING])]
    assert notices[0].text == ("baselines skipped, not installed here (pip install 'kscience[baselines]'): "
                               "Absent RMSNorm (absent-norm-kernels)")
    capsys.readouterr()
    Progress(total=1)(notices[0])  # the terminal's line
    assert capsys.readouterr().err == notices[0].text + "\n"


def test_the_builtins_name_liger_and_quack_and_forbid_calling_them():
    rmsnorm, softmax, swiglu = (load_problem(n) for n in ("rmsnorm", "softmax", "swiglu"))
    assert [lib.distribution for lib in rmsnorm.libraries] == ["liger-kernel", "quack-kernels"]
    assert [lib.distribution for lib in softmax.libraries] == ["liger-kernel", "quack-kernels"]
    assert [lib.distribution for lib in swiglu.libraries] == ["liger-kernel"]
    assert {"liger_kernel", "quack", "torch.nn.functional.rms_norm"} <= set(rmsnorm.forbidden_calls)
    assert {"liger_kernel", "quack", "torch.softmax", "torch.Tensor.softmax"} <= set(softmax.forbidden_calls)
    for gemm in ("matmul", "swiglu", "fp8_blockscale_gemm"):  # each measured against cuBLAS under any of its names
        assert set(GEMM_CALLS) <= set(load_problem(gemm).forbidden_calls)
    assert load_problem("fp8_blockscale_gemm").forbidden_calls[0] == "torch._scaled_mm"
    # a library's baseline calls exactly the function its declaration names
    assert "from kscience.problems.rmsnorm.reference import liger_rmsnorm as _library_call" in \
        library_candidate(rmsnorm.libraries[0])


def test_the_prompt_carries_the_library_source_where_a_problem_names_it(monkeypatch, fake_library):
    problem = _rmsnorm_with(monkeypatch, fake_library)
    scientist = Scientist(llm=None, problem=problem, knowledge="")
    designer_view = scientist.problem_code(library_sources=True)
    assert "Third-party library kernel to learn from, not to call: FakeNorm RMSNorm" in designer_view
    assert "(licence: MIT)" in designer_view and "def rmsnorm(data):" in designer_view
    assert "FORBIDDEN" in designer_view and "fakenorm" in designer_view
    assert "def rmsnorm(data):" not in scientist.problem_code()  # the repair prompt: the rule, not the source
    allowed = dataclasses.replace(problem, forbidden_calls=())
    assert "may call the libraries" in library_notes(allowed)


CALLS_THE_LIBRARY = '''
import fakenorm


def custom_kernel(data):
    return fakenorm.rmsnorm(data)
'''

CALLS_IT_BY_A_BUILT_NAME = '''
import importlib


def custom_kernel(data):
    return importlib.import_module("fake" + "norm").rmsnorm(data)
'''


def test_a_candidate_that_calls_a_forbidden_library_is_refused(monkeypatch, fake_library):
    problem = _rmsnorm_with(monkeypatch, fake_library)
    request = EvalRequest(problem="rmsnorm", source=CALLS_THE_LIBRARY, shapes="tests")
    refused = evaluate(request, problem=problem)
    assert refused.status == "rejected" and "fakenorm" in refused.message and "forbids" in refused.message
    # the same source as the library's own baseline is judged, and passes
    assert evaluate(dataclasses.replace(request, baseline=True), problem=problem).status == "ok"
    # a name built at run time escapes the static look; the worker's trap refuses the import
    trapped = evaluate(EvalRequest(problem="rmsnorm", source=CALLS_IT_BY_A_BUILT_NAME, shapes="tests"),
                       problem=problem)
    assert trapped.status != "ok" and "forbidden" in trapped.message
    # where the problem allows calling it, the candidate is judged like any other
    allowed = dataclasses.replace(problem, forbidden_calls=())
    assert evaluate(request, problem=allowed).status == "ok"


def test_a_kernel_that_calls_a_builtins_own_library_adapter_is_refused_by_the_trap():
    """The adapter's module names no library a static look could see; the worker refuses the import it makes."""
    lib = load_problem("rmsnorm").libraries[0]
    as_kernel = evaluate(EvalRequest(problem="rmsnorm", source=library_candidate(lib), shapes="tests"))
    assert as_kernel.status != "ok" and "importing liger_kernel is forbidden" in as_kernel.message
    as_baseline = evaluate(EvalRequest(problem="rmsnorm", source=library_candidate(lib), shapes="tests", baseline=True))
    assert "forbidden" not in as_baseline.message  # here: not installed, or correct where it is


def test_the_static_look_sees_aliases_imports_and_strings():
    forbidden = ("torch.mm", "torch._scaled_mm", "liger_kernel")
    assert static_violation("import torch as T\ndef custom_kernel(d):\n    return T.mm(*d)\n", forbidden)
    assert static_violation("from torch import mm\n", forbidden)
    assert static_violation("from liger_kernel.ops.rms_norm import LigerRMSNormFunction\n", forbidden)
    assert static_violation("import torch\nf = getattr(torch, '_scaled_mm')\n", forbidden)
    assert static_violation("import torch\ndef custom_kernel(d):\n    return torch.exp(d[0])\n",
                            forbidden) is None
    assert static_violation("not python (", forbidden) is None  # left to the worker's syntax error


@pytest.mark.parametrize("name", builtin_names())
def test_every_builtin_refuses_its_own_eager_baseline_as_a_kernel(name):
    """A candidate that is the PyTorch code it is measured against (eager_kernel, or the reference where that is
    the eager baseline) is refused: the op it calls is the problem's own (torch.softmax, F.rms_norm, a cuBLAS
    GEMM), trapped in the worker, so no such kernel is reported as the model's. As a baseline it is judged."""
    problem = load_problem(name)
    eager = "eager_kernel" if problem.eager_kernel else "ref_kernel"
    source = f"from kscience.problems.{name}.reference import {eager} as custom_kernel\n"
    refused = evaluate(EvalRequest(problem=name, source=source, shapes="tests"), problem=problem)
    assert refused.status != "ok" and "this problem forbids candidates to call" in refused.message, refused.message
    as_baseline = evaluate(EvalRequest(problem=name, source=source, shapes="tests", baseline=True), problem=problem)
    assert as_baseline.status == "ok", as_baseline.message


@pytest.mark.parametrize("name, call", [
    ("softmax", "import torch\ndef custom_kernel(d):\n    return torch.softmax(d[0].float(), -1).bfloat16()\n"),
    ("softmax", "import torch.nn.functional as F\ndef custom_kernel(d):\n    return F.softmax(d[0], -1)\n"),
    ("softmax", "from torch.nn.functional import softmax\ndef custom_kernel(d):\n    return softmax(d[0], -1)\n"),
    ("softmax", "import torch\nSM = torch.nn.Softmax(dim=-1)\ndef custom_kernel(d):\n    return SM(d[0])\n"),
    ("softmax", "import torch\ndef custom_kernel(d):\n    return torch.log_softmax(d[0].float(), -1).exp()\n"),
    ("rmsnorm", "import torch.nn.functional as F\ndef custom_kernel(d):\n"
                "    return F.rms_norm(d[0], (d[0].shape[-1],), d[1], 1e-6)\n"),
    ("rmsnorm", "import torch\ndef custom_kernel(d):\n    return torch.rms_norm(d[0], (d[0].shape[-1],), d[1])\n"),
    ("matmul", "import torch\ndef custom_kernel(d):\n    return torch.nn.functional.linear(d[0], d[1].T)\n"),
    ("matmul", "import torch\ndef custom_kernel(d):\n    return torch.einsum('mk,kn->mn', *d)\n"),
    ("swiglu", "import torch\ndef custom_kernel(d):\n    x, g, u = d\n    return torch.addmm(x[:, :1], x, g)\n"),
    ("fp8_blockscale_gemm", "import torch\ndef custom_kernel(d):\n    return torch.mm(d[0].float(), d[1].float().T)\n"),
])
def test_the_static_look_refuses_each_builtins_own_op_under_its_names(name, call):
    said = static_violation(call, load_problem(name).forbidden_calls)
    assert said and said.startswith("the source calls torch."), said


def test_a_softmax_candidate_that_calls_torch_softmax_is_refused(tmp_path, capsys):
    """Before any worker starts, in one line; a method call no static look can see is the worker's trap's."""
    candidate = tmp_path / "calls_softmax.py"
    candidate.write_text("import torch\n\ndef custom_kernel(data):\n"
                         "    return torch.softmax(data[0].float(), dim=-1).to(torch.bfloat16)\n")
    assert cli_main(["eval", "softmax", str(candidate)]) == 1
    assert capsys.readouterr().out.startswith("rejected: the source calls torch.softmax, a baseline's library this "
                                              "problem forbids candidates to call")
    as_method = "def custom_kernel(data):\n    return data[0].softmax(-1)\n"
    method = evaluate(EvalRequest(problem="softmax", source=as_method, shapes="tests"))
    assert method.status != "ok" and "the candidate called torch.Tensor.softmax" in method.message, method.message


def test_matmul_forbids_cublas_in_the_worker_too():
    """`a @ b` names nothing a static look can refuse: the worker's trap on torch.Tensor.__matmul__ does."""
    result = evaluate(EvalRequest(problem="matmul", source="def custom_kernel(data):\n    a, b = data\n"
                                  "    return a @ b\n", shapes="tests"))
    assert result.status != "ok" and "torch.Tensor.__matmul__" in result.message


def _row(name, eager, compiled, vendor, library, best):
    fastest = min(x for x in (eager, compiled, vendor, library) if x)
    return problem_row(name, eager_us=eager, compiled_us=compiled, vendor_us=vendor, library_us=library,
                       library_label=library and "Liger-Kernel RMSNorm (liger-kernel 0.8.5)", fastest_us=fastest,
                       seed_us=200.0, best_us=best, attempts=3, beats_all=best < fastest)


def test_the_report_says_which_problems_beat_every_baseline():
    rows = [_row("rmsnorm", 100.0, 80.0, None, 70.0, 60.0), _row("softmax", 100.0, 50.0, None, 40.0, 45.0),
            _row("matmul", 300.0, 260.0, 250.0, None, 240.0)]
    assert beats_line(rows) == ("the best kernel beats PyTorch eager on 3 of 3, torch.compile on 3 of 3, the vendor "
                                "library on 1 of 1, the best installed library on 1 of 2 problems; every baseline "
                                "on 2 of 3")
    text = "\n".join(report_lines(report_of(rows, "c-1", "builtins")))
    assert "beats every baseline: no (fastest baseline 40.0 us, 0.889x)" in text
    assert "best installed library: Liger-Kernel RMSNorm (liger-kernel 0.8.5), 40.0 us" in text
    assert "vs fastest base" in text and "vs installed lib" in text


def test_the_k_major_inputs_have_the_same_answer_and_the_judge_builds_them():
    problem, k_major = load_problem("fp8_blockscale_gemm"), load_problem("fp8_blockscale_gemm", {"OPERANDS": "k-major"})
    shape = {"m": 32, "n": 192, "k": 256}  # k/128 = 2: K is zero-padded to 512 for cuBLAS
    a, b, a_scale, b_scale, c = k_major.generate_input(1, "cpu", **shape)
    assert a.shape == (32, 512) and a.stride() == (512, 1) and b.stride() == (512, 1)
    expected = problem.ref_kernel(problem.generate_input(1, "cpu", **shape)).float()
    assert (k_major.ref_kernel((a, b, a_scale, b_scale, c)).float() - expected).abs().max() <= 0.02 * expected.abs().max()
    alone = vendor_alone_source(k_major)
    result = evaluate(EvalRequest(problem="fp8_blockscale_gemm", source=alone, overrides={"OPERANDS": "k-major"},
                                  shapes="tests", baseline=True))
    assert result.status == "runtime_error" and "needs an NVIDIA GPU" in result.message  # the CPU says why


def test_quack_softmax_rows_that_are_not_whole_vectors_are_padded_and_cut_back():
    """QuACK's softmax refuses a row length that is not a whole number of 16-byte vectors (softmax's test
    shape n=4099); the baseline pads with -inf, which changes no probability, and cuts back."""
    from kscience.problems.softmax.reference import padded_to_vectors

    def vector_softmax(x):  # QuACK's own refusal, then the same arithmetic
        assert x.shape[-1] % (16 // x.element_size()) == 0, "Input N is not divisible by vector size"
        return torch.softmax(x.float(), dim=-1).to(x.dtype)

    for n in (4099, 4096):
        x = torch.randn(3, n, dtype=torch.bfloat16)
        y = padded_to_vectors(vector_softmax, x)
        assert y.shape == x.shape and y.is_contiguous()
        torch.testing.assert_close(y, torch.softmax(x.float(), dim=-1).to(x.dtype), rtol=1e-2, atol=1e-6)
