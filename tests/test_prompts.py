"""What each role's prompt carries: the measurement header, target hardware, the problem as code, the
input contract, whole knowledge notes and whole findings; on the CPU, on a simulated H100 and for a
KernelBench level-2 file."""

import asyncio
import json
import re
from pathlib import Path

import pytest
import torch

from kscience.device import Device, Peaks
from kscience.evaluate.result import EvalResult
from kscience.problems import load_problem, shape_label
from kscience.scientist.briefing import bench_from_results, coverage, render_header
from kscience.scientist.hardware import describe, describe_device, run_target
from kscience.scientist.knowledge import knowledge_for, load_knowledge
from kscience.scientist.llm.base import LLM
from kscience.scientist.roles import CandidateView, Plan, Scientist

DATA = Path(__file__).parent / "data"
LEVEL2 = DATA / "kernelbench_gemm_multiply_leakyrelu.py"
H100 = Device("cuda", "NVIDIA H100 80GB HBM3", 50 * 2**20, Peaks(3.35e12, {"fp8": 1979e12}))
CPU = Device("cpu", "cpu (Triton interpreter)", 0, None)
PLAN = Plan("BLOCK_N 128 -> 256", "wider tiles", ["set BLOCK_N = 256"], 5.0, 20.0, 3)
DESIGN = json.dumps({"avenues": ["a"], "plans": [{"title": "t", "rationale": "r", "changes": ["c"],
                                                  "predicted_min_pct": 1, "predicted_max_pct": 2, "innovation": 3}]})


class Capture(LLM):
    """Answers every role with something usable and keeps each prompt by role."""

    name = "capture"

    def __init__(self):
        self.prompts: dict[str, str] = {}

    async def complete(self, prompt, *, role, system=None, schema=None, context=None):
        self.prompts[role] = prompt
        answers = {"selector": json.dumps({"base_id": "c-1", "reference_id": "", "justification": "j"}),
                   "designer": DESIGN, "finding": "A lesson."}
        if role in answers:
            return answers[role], None
        source = (context.source or context.base.source) + "\n# changed\n"
        return f"```python\n{source}```", None


def result(problem, device: Device, us: float) -> dict:
    """An EvalResult dict as the evaluator would give for `problem` on `device`."""
    interpreted = device.interpreted
    tests = problem.shapes("tests", interpreted)
    benches = problem.shapes("benchmarks", interpreted)
    shapes = [{"shape": s, "ok": True, "phase": "test", "n": 0} for s in tests]
    shapes += [{"shape": s, "ok": True, "phase": "benchmark", "time_us": us * (1 + i / 10), "mean_us": us,
                "std_us": us * 0.03, "n": 20, "floor_us": us / 50} for i, s in enumerate(benches)]
    return {"status": "ok", "message": "", "geomean_us": us, "shapes": shapes, "device": device.describe(),
            "timing_label": "cpu interpreter (host clock)" if interpreted else "cuda events"}


def view(id, problem, res, parent=None, source=None) -> CandidateView:
    return CandidateView(id, parent, "seed" if parent is None else PLAN.title, "ok", res["geomean_us"],
                         {shape_label(s["shape"]): s["time_us"] for s in res["shapes"] if s.get("time_us")},
                         source or problem.seed_source, "ok", coverage=coverage(EvalResult.from_dict(res), problem))


def render_all(problem, device: Device, target_setting=None, findings=()):
    """Every role's prompt for `problem` evaluated on `device`, with the notes a run would choose."""
    hw = describe_device(device)
    target = run_target(target_setting, hw)
    designer_notes, writer_notes = knowledge_for([], target.topics, problem.name)
    llm = Capture()
    sci = Scientist(llm, problem, designer_notes, code_knowledge=writer_notes, strategy="llm", target=target)
    seed_res, child_res = result(problem, device, 1000.0), result(problem, device, 900.0)
    sci.observe(bench_from_results(hw, target, EvalResult.from_dict(seed_res),
                                   [("PyTorch eager", EvalResult.from_dict(result(problem, device, 5000.0))),
                                    ("torch.compile", None)],
                                   {shape_label(s["shape"]): s["floor_us"] for s in seed_res["shapes"]
                                    if s.get("floor_us")}))
    base, child = view("c-1", problem, seed_res), view("c-2", problem, child_res, parent="c-1")

    async def go():
        await sci.select([base, child], list(findings))
        await sci.design(base, None, list(findings), done=["GROUP_M 8 -> 16"])
        await sci.write(PLAN, base, None)
        await sci.repair(base.source, "wrong_answer", "mismatch at [3, 5]", {"m": 64}, 1, coverage=base.coverage)
        await sci.finding(PLAN, base, "ok", 900.0, child=child)

    asyncio.run(go())
    return llm.prompts, designer_notes, writer_notes


def notes_in(prompt: str) -> dict[str, str]:
    """The knowledge notes a prompt holds, by name, each up to the next top-level section."""
    parts = re.split(r"^## (\S+\.md)$", prompt, flags=re.M)
    out = {}
    for name, body in zip(parts[1::2], parts[2::2]):
        out[name] = re.split(r"^\[knowledge:|^# ", body, flags=re.M)[0].strip()
    return out


PROBED = re.compile(r"\{\{probe:\w+\}\}|\[(?:checked on the judging device|version-dependent, not checked here)[^\]]*\]")


def assert_notes_whole(prompt: str):
    """Every note in the prompt whole, its version-dependent claims filled in (by a probe's result or
    the reason there is none)."""
    full = {name: PROBED.sub("<probe>", body.strip()) for name, body in
            zip(*[iter(re.split(r"^## (\S+\.md)$", load_knowledge(budget_chars=10**7), flags=re.M)[1:])] * 2)}
    for name, body in notes_in(prompt).items():
        assert "{{probe:" not in body, f"{name} shows an unfilled probe marker"
        assert PROBED.sub("<probe>", body) == full[name], f"{name} is cut"


ROLES = ("selector", "designer", "writer", "repair", "finding")


def test_fp8_on_the_cpu_says_what_interpreter_times_can_and_cannot_show():
    problem = load_problem("fp8_blockscale_gemm")
    prompts, _, _ = render_all(problem, CPU)
    assert set(prompts) == set(ROLES)
    for role in ROLES:
        p = prompts[role]
        assert p.startswith("# Measurement\nEvaluated on: cpu (Triton interpreter)"), role
        assert "CPU-interpreter host-clock times" in p and "cannot show GPU speed" in p, role
        assert "Noise: repeated calls of one kernel on one shape spread by 3.0%" in p, role
        assert "Baseline PyTorch eager: geomean 5,000.00 us" in p and "Baseline torch.compile: not timed" in p
        assert "physical floor" in p and "no number below was measured on a GPU" in p, role
    for role in ("designer", "writer", "repair", "selector"):
        assert "Target hardware: not named" in prompts[role]
    # The verdict's coverage: only the interpreter shapes ran, so GPU-only paths are unverified.
    for role in ("designer", "writer", "finding", "repair"):
        assert "4 of 4 shape checks passed under the CPU interpreter (3 correctness, 1 benchmark: m=64,n=64,k=128, " in prompts[role], role
        assert "the 28 other GPU shapes did not run" in prompts[role] and "unverified" in prompts[role], role
    # Per-shape times wherever a kernel's time is shown.
    assert "m=128,n=320,k=512: 1,000.00 us" in prompts["designer"]
    assert "Per-shape times of the new kernel: m=128,n=320,k=512: 900.00 us" in prompts["finding"]
    assert '"shape_us"' in prompts["selector"] and '"covered"' in prompts["selector"]
    # The problem as code and the contract, in the designer's, writer's and repairer's prompts.
    for role in ("designer", "writer", "repair"):
        p = prompts[role]
        assert "def ref_kernel(data):" in p and "def generate_input(seed" in p, role
        assert ("data[0]: shape (96, 384), torch.float8_e4m3fn, strides (1, 96), column-major" in p
                and "data[2]: shape (96, 3), torch.float32, strides (1, 96), column-major" in p), role
        assert "data[4]: shape (96, 192), torch.bfloat16, strides (192, 1), contiguous (row-major), on cpu; " \
               "OUTPUT" in p, role
        assert_notes_whole(p)
    assert "Already carried out on this base (will not be run again): GROUP_M 8 -> 16" in prompts["designer"]


def test_fp8_on_a_simulated_h100_names_hopper_and_gives_its_notes_whole():
    problem = load_problem("fp8_blockscale_gemm")
    prompts, designer_notes, writer_notes = render_all(problem, H100)
    for role in ROLES:
        p = prompts[role]
        assert "Evaluated on: NVIDIA H100 80GB HBM3 (NVIDIA Hopper, sm_90" in p, role
        assert "Timing: cuda events. GPU times: CUDA/HIP events" in p and "CPU-interpreter" not in p, role
    assert "Target hardware: NVIDIA H100 80GB HBM3 (NVIDIA Hopper, sm_90" in prompts["designer"]
    assert "29 of 29 shape checks passed on NVIDIA H100 80GB HBM3 (11 correctness, 18 benchmark" in prompts["designer"]
    assert "did not run" not in prompts["designer"]
    assert list(notes_in(prompts["designer"])) == ["fp8_blockscale_gemm.md", "hopper.md", "triton.md"]
    assert ("[knowledge: left out: cdna3.md (about AMD (ROCm) hardware; the target is NVIDIA (CUDA))]"
            in prompts["designer"])  # named as left out, with why: an H100 run carries no AMD notes
    assert list(notes_in(prompts["writer"])) == ["triton.md", "fp8_blockscale_gemm.md", "hopper.md"]
    assert list(notes_in(prompts["repair"])) == ["triton.md", "fp8_blockscale_gemm.md", "hopper.md"]
    for role in ("designer", "writer", "repair"):
        assert_notes_whole(prompts[role])
        assert "on cuda; OUTPUT" in prompts[role]
    assert "Keep that guard" not in prompts["designer"]


def test_a_named_target_chooses_its_notes_while_evaluating_elsewhere():
    prompts, _, _ = render_all(load_problem("fp8_blockscale_gemm"), CPU, target_setting="mi300x")
    assert "Target hardware: AMD MI300X (AMD CDNA3, gfx942" in prompts["designer"]
    assert list(notes_in(prompts["designer"]))[:2] == ["fp8_blockscale_gemm.md", "cdna3.md"]
    assert "hopper.md" not in notes_in(prompts["designer"]) and "hopper.md" not in notes_in(prompts["writer"])


def test_findings_reach_the_designer_and_selector_whole_and_old_ones_are_dropped_whole():
    long = [f"plan {i}: +{i}.0% measured vs +1..+5% predicted. " + "A long and careful lesson. " * 30
            for i in range(20)]
    prompts, _, _ = render_all(load_problem("softmax"), CPU, findings=long)
    for role in ("designer", "selector"):
        p = prompts[role]
        shown = [f for f in long if " ".join(f.split()) in p]
        assert shown and shown == long[-len(shown):]  # the newest, each whole
        for f in long[:-len(shown)]:
            assert f.split(":")[0] + ":" not in p  # the rest not at all, not cut
        assert f"({len(long) - len(shown)} older findings left out whole" in p


def test_kernelbench_level2_prompt_carries_model_constants_generators_and_the_first_task():
    problem = load_problem(str(LEVEL2), {"multiplier": "3.5"})
    assert "class ModelNew(Model):" in problem.seed_source
    prompts, _, _ = render_all(problem, CPU)
    for role in ("designer", "writer", "repair"):
        p = prompts[role]
        assert "class Model(nn.Module):" in p and "x = self.leaky_relu(x)" in p, role
        assert "multiplier = 3.5  # set with --set" in p and "def get_inputs():" in p, role
        assert "def get_init_inputs():" in p, role
        assert "Module constants as run: batch_size = 8, in_features = 32, out_features = 16, " \
               "multiplier = 3.5, negative_slope = 0.1" in p, role
        assert "ModelNew(*get_init_inputs())(*data)" in p and "data[0]: shape (8, 32), torch.float32" in p, role
        assert "[{}]" not in p, role
    for role in ("designer", "writer"):
        assert "# First task: write the kernels" in prompts[role] and "load_inline" in prompts[role]
    assert ("Shapes: one shape everywhere, checked for correctness and then timed: default (the module constants "
            "as run: batch_size=8, in_features=32, out_features=16, multiplier=3.5, negative_slope=0.1): "
            "data[0] 8x32 float32.") in prompts["selector"]
    assert list(notes_in(prompts["writer"])) == ["triton.md"]


def test_the_selector_is_not_called_when_there_is_nothing_to_choose():
    problem = load_problem("softmax")
    llm = Capture()
    sci = Scientist(llm, problem, "", strategy="llm")
    res = result(problem, CPU, 100.0)
    only = view("c-1", problem, res)
    failed = CandidateView("c-2", "c-1", "x", "wrong_answer", None, {}, "", "bad")
    selection = asyncio.run(sci.select([only, failed]))
    assert selection.base_id == "c-1" and "nothing to choose" in selection.justification
    assert llm.prompts == {}


def test_device_descriptions():
    assert describe("rocm", "AMD Instinct MI300X").architecture.startswith("AMD CDNA3, gfx942")
    assert describe("cuda", "Some Future GPU", (12, 0)).architecture == "NVIDIA sm_120"
    assert run_target(None, describe("cpu", "")).name == "not named"
    assert run_target("h100", describe("cpu", "")).kind == "cuda"


@pytest.mark.parametrize("name", ["softmax", "rmsnorm", "matmul", "swiglu", "fp8_blockscale_gemm"])
def test_every_builtin_renders_a_contract(name):
    from kscience.scientist.briefing import render_contract

    text = render_contract(load_problem(name), "cuda")
    assert "data[0]: shape" in text and "could not generate" not in text


def test_the_header_carries_versions_every_baseline_or_why_it_is_missing_and_per_shape_leaders():
    problem, device = load_problem("fp8_blockscale_gemm"), Device("cuda", "NVIDIA H100 80GB HBM3", 50 * 2**20, None)
    hw = describe_device(device)
    seed = result(problem, device, 180.0)
    seed["device"]["versions"] = {"torch": "2.11.0", "triton": "3.6.0", "cuda": "12.9", "hip": None}
    unsupported = EvalResult("runtime_error", "RuntimeError: blockwise scaling needs CUDA 12.9")
    verdicts = [("PyTorch eager", result(problem, device, 1000.0)),
                ("torch.compile (max-autotune)", result(problem, device, 300.0))]
    bench = bench_from_results(hw, hw, EvalResult.from_dict(seed),
                               [(label, EvalResult.from_dict(r)) for label, r in verdicts]
                               + [("vendor library: cuBLAS block-scaled fp8", unsupported)],
                               leaders="Per-shape leaders ...\n- fastest on 9 shape(s): c-60bb46a2: m=6144,...")
    header = render_header(bench)
    assert "Software there: torch 2.11.0, Triton 3.6.0, CUDA 12.9" in header
    assert "Baseline torch.compile (max-autotune): geomean 300.00 us" in header
    assert "Baseline vendor library: cuBLAS block-scaled fp8: runtime_error: `RuntimeError: blockwise" in header
    assert "fastest on 9 shape(s): c-60bb46a2" in header
    # and the prompts carry it
    llm = Capture()
    sci = Scientist(llm, problem, "", strategy="llm", target=hw)
    sci.observe(bench)
    asyncio.run(sci.design(view("c-1", problem, seed), None, [], done=[]))
    assert "c-60bb46a2" in llm.prompts["designer"] and "Triton 3.6.0" in llm.prompts["designer"]


def test_the_evaluating_device_reports_its_versions():
    versions = CPU.describe()["versions"]
    assert versions["torch"] == torch.__version__ and versions["triton"]
