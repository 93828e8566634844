"""Knowledge notes checked against the compiler (issue 44, item 4): a version-dependent claim is shown
with the probe's result for the judging device, the probe runs once per device and Triton version, and
where there is no result the note says the claim is unchecked."""

import asyncio

from test_prompts import H100, Capture, result, view

from kscience.evaluate.judge.evaluation import evaluate
from kscience.evaluate.profile import probes
from kscience.evaluate.result import OK, EvalRequest, EvalResult
from kscience.problems import load_problem
from kscience.scientist.briefing import bench_from_results
from kscience.scientist.hardware import describe_device, run_target
from kscience.scientist.knowledge import fill_probes, knowledge_for, load_knowledge
from kscience.scientist.roles import Scientist

# What the probe printed on an H100 is not recorded here; this stands in for it, in its form.
FOUND = ("Triton 3.6.0 on NVIDIA H100 80GB HBM3 (sm_90), 128x128 fp8 e4m3 tl.dot: max_num_imprecise_acc=0 -> "
         "mma.sync, err 0 at K=128; =32 -> wgmma.mma_async, err 0 at K=128")


def test_every_version_dependent_fp8_claim_is_a_probe_marker():
    notes = load_knowledge(budget_chars=10**7)
    assert "is exact here" not in notes and "2**30" not in notes and "never promotes" not in notes
    assert notes.count("{{probe:fp8_dot}}") == 2  # the hardware note and the problem's note


def test_the_probe_runs_once_per_device_and_triton_version(tmp_path, monkeypatch):
    monkeypatch.setenv("KSCIENCE_CACHE", str(tmp_path))
    calls = []

    def run():
        calls.append(1)
        return {"fp8_dot": FOUND}

    assert probes.results(H100, run=run) == {"fp8_dot": FOUND}
    assert probes.results(H100, run=run) == {"fp8_dot": FOUND} and len(calls) == 1  # read from the cache
    assert probes.cache_file(H100).parent == tmp_path / "probes" and "H100" in probes.cache_file(H100).name
    assert probes.results(probes.detect(), run=run) == {} and len(calls) == 1  # CPU: nothing to probe


def test_the_judge_sends_its_probe_results_with_the_verdict():
    problem = load_problem("softmax")
    res = evaluate(EvalRequest(problem="softmax", source=problem.seed_source, shapes="tests", measure=[]))
    assert res.status == OK and res.device["probes"] == {}  # the interpreter compiles nothing to probe


def designer_prompt(seed_result: dict) -> str:
    problem = load_problem("fp8_blockscale_gemm")
    hw = describe_device(H100)
    target = run_target(None, hw)
    notes, code_notes = knowledge_for([], target.topics, problem.name)
    llm = Capture()
    sci = Scientist(llm, problem, notes, code_knowledge=code_notes, target=target)
    sci.observe(bench_from_results(hw, target, EvalResult.from_dict(seed_result), []))
    asyncio.run(sci.design(view("c-1", problem, seed_result), None, []))
    return llm.prompts["designer"]


def test_the_designer_sees_the_claim_with_the_judging_devices_probe_result():
    problem = load_problem("fp8_blockscale_gemm")
    seed = result(problem, H100, 1000.0)
    seed["device"]["probes"] = {"fp8_dot": FOUND}
    prompt = designer_prompt(seed)
    assert prompt.count(f"[checked on the judging device: {FOUND}]") == 2 and "{{probe:" not in prompt
    # A judge that sent no probe result: the claim is marked unchecked, never stated as fact.
    bare = designer_prompt(result(problem, H100, 1000.0))
    assert "[version-dependent, not checked here: no probe result from the judging device yet" in bare


def test_fill_probes_says_why_a_claim_is_unchecked():
    assert fill_probes("x {{probe:fp8_dot}}", None, interpreted=True) == (
        "x [version-dependent, not checked here: the CPU interpreter compiles no GPU code; "
        "read the compiled PTX before relying on it]")
    assert fill_probes("{{probe:fp8_dot}}", {"fp8_dot": "wgmma"}) == "[checked on the judging device: wgmma]"
