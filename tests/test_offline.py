"""The offline scientist through the real roles: plans for every built-in seed, edits that apply and
compile, determinism, honest repairs, and a few of its kernels judged by the real evaluator."""

import asyncio
import json

import pytest

from kscience.evaluate.judge.evaluation import evaluate
from kscience.evaluate.result import EvalRequest
from kscience.problems import builtin_names, load_problem
from kscience.scientist.briefing import Brief
from kscience.scientist.llm.base import LLMError
from kscience.scientist.llm.call import NothingToPropose
from kscience.scientist.offline.moves import catalogue
from kscience.scientist.offline import OfflineLLM
from kscience.scientist.offline.backend import SEARCH_TITLE
from kscience.scientist.offline.kernel_source import Source
from kscience.scientist.offline.structural import STRUCTURAL_MOVES
from kscience.scientist.roles import CandidateView, Plan, Scientist

BUILTINS = builtin_names()
RULES = {"most innovative", "highest max", "highest min"}


def run(coro):
    return asyncio.run(coro)


def seed_view(problem, source=None, id="c0"):
    return CandidateView(id=id, parent_id=None, hypothesis="seed kernel", status="ok", geomean_us=100.0,
                         shape_times={"m=256,n=2048": 100.0}, source=source or problem.seed_source, message="ok")


def offline_scientist(problem, seed=0, strategy="tournament"):
    return Scientist(OfflineLLM(seed=seed), problem, "", strategy=strategy, seed=seed)


def all_shapes(problem):
    return problem.tests + problem.benchmarks + problem.cpu_tests + problem.cpu_benchmarks


@pytest.mark.parametrize("name", BUILTINS)
def test_designer_gives_three_distinct_plans_all_chosen_search_configs_and_a_structural_move(name):
    problem = load_problem(name)
    plans = run(offline_scientist(problem).design(seed_view(problem), None, []))
    assert 1 <= len(plans) <= 3 and len({p.title for p in plans}) == len(plans)
    assert all(p.chosen for p in plans)
    for p in plans:
        assert p.rationale and p.changes and p.predicted_min_pct <= p.predicted_max_pct and 1 <= p.innovation <= 10
    searched = [p for p in plans if p.title.startswith(SEARCH_TITLE)]
    assert searched, "the knob search proposes configurations on every built-in seed"
    assert all(("optuna-tpe" in p.rationale or "random+local" in p.rationale or "exhaustive" in p.rationale)
               for p in searched)
    structural = {m.title for build in STRUCTURAL_MOVES for m in build(Source(problem.seed_source), all_shapes(problem))}
    assert len(plans) - len(searched) == (1 if structural else 0)


@pytest.mark.parametrize("name", BUILTINS)
def test_writer_edits_apply_and_give_a_different_source_that_compiles(name):
    problem = load_problem(name)
    sci = offline_scientist(problem)
    base = seed_view(problem)
    for plan in run(sci.design(base, None, [])):
        draft = run(sci.write(plan, base, None))
        assert draft.error is None and draft.mode == "edits", plan.title
        assert draft.edits_applied == draft.edits_total >= 1
        assert draft.source != problem.seed_source
        compile(draft.source, f"{name}-{plan.title}.py", "exec")


def test_same_seed_same_answers_and_seeds_vary_the_plans():
    problem = load_problem("fp8_blockscale_gemm")  # more moves than plans, so the seed matters
    designs = [[p.title for p in run(offline_scientist(problem, seed=s).design(seed_view(problem), None, []))]
               for s in (0, 0, 1, 2, 3, 4)]
    assert designs[0] == designs[1]
    assert len({tuple(d) for d in designs}) > 1


def test_structural_moves_already_reported_are_not_offered_again():
    problem = load_problem("softmax")
    first = run(offline_scientist(problem).design(seed_view(problem), None, []))
    findings = [f"{p.title}: -3.0% measured (1.00 -> 1.03 us) vs -5..+10% predicted. Slower." for p in first]
    second = run(offline_scientist(problem).design(seed_view(problem), None, findings))
    tried = {p.title for p in first if not p.title.startswith(SEARCH_TITLE)}
    assert tried and not tried & {p.title for p in second}


def test_designer_takes_knob_values_from_a_reference():
    problem = load_problem("matmul")
    ref_source = problem.seed_source.replace("GROUP_M = 8", "GROUP_M = 2")
    moves = catalogue(problem.seed_source, all_shapes(problem), ref_source, "c7")
    assert "GROUP_M 8 -> 2 (from c7)" in [m.title for m in moves]


def test_designer_without_any_move_says_so():
    problem = load_problem("softmax")
    plain = "def custom_kernel(data):\n    return data[0].softmax(-1)\n"
    with pytest.raises(NothingToPropose, match="no catalogue move applies to c0"):  # the line tries another base
        run(offline_scientist(problem).design(seed_view(problem, plain), None, []))


def test_knob_moves_respect_the_rules_of_the_notes():
    problem = load_problem("fp8_blockscale_gemm")
    titles = [m.title for m in catalogue(problem.seed_source, all_shapes(problem))]
    assert not any(t.startswith(("SCALE_BLOCK", "BLOCK_K")) for t in titles)  # fixed by the problem
    for m in catalogue(problem.seed_source, all_shapes(problem)):
        if m.title.startswith("One B scale"):  # once B's scale is a scalar, BLOCK_N may not pass 128
            after = [n.title for n in catalogue(m.new_source, all_shapes(problem))]
            assert "BLOCK_N 128 -> 64" in after and "BLOCK_N 128 -> 256" not in after
    matmul = load_problem("matmul")
    small = matmul.seed_source.replace("BLOCK_M = 128", "BLOCK_M = 16")
    assert "BLOCK_M 16 -> 8" not in [m.title for m in catalogue(small, all_shapes(matmul))]  # tl.dot needs 16


ROW_MAJOR_MATMUL = '''import torch
import triton
import triton.language as tl

BLOCK_M = 64
BLOCK_N = 64
BLOCK_K = 32
NUM_WARPS = 4


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid = tl.program_id(axis=0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        ks = k * BLOCK_K + offs_k
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + ks[None, :] * stride_ak,
                    mask=(offs_m[:, None] < M) & (ks[None, :] < K), other=0.0).to(tl.float32)
        b = tl.load(b_ptr + ks[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=(ks[:, None] < K) & (offs_n[None, :] < N), other=0.0).to(tl.float32)
        acc += tl.dot(a, b)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def custom_kernel(data):
    a, b = data
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    matmul_kernel[grid](
        a, b, c, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
        num_warps=NUM_WARPS,
    )
    return c
'''


def test_grouped_order_and_fused_accumulation_on_a_row_major_matmul():
    moves = {m.title: m for m in catalogue(ROW_MAJOR_MATMUL, all_shapes(load_problem("matmul")))}
    grouped = moves["Grouped tile order"].new_source
    assert "GROUP_M = 8" in grouped and "GROUP_M=GROUP_M" in grouped and "GROUP_M: tl.constexpr" in grouped
    assert "num_pid_m = tl.cdiv(M, BLOCK_M)" in grouped  # the row-major kernel never needed it
    assert "acc = tl.dot(a, b, acc)" in moves["Accumulate inside tl.dot"].new_source
    assert "NUM_STAGES" not in "".join(moves)  # no literal to move: none is invented


# --- selector, repair and findings ---------------------------------------------------------------

def test_offline_selector_follows_the_tournament_rule_and_says_it_is_offline():
    problem = load_problem("softmax")
    members = [seed_view(problem),
               CandidateView("c1", "c0", "a", "ok", 90.0, {"x": 80.0, "y": 101.0}, "", "ok"),
               CandidateView("c2", "c0", "b", "ok", 80.0, {"x": 80.0, "y": 80.0}, "", "ok"),
               CandidateView("c3", "c0", "c", "ok", 85.0, {"x": 85.0, "y": 85.0}, "", "ok")]
    chosen = run(offline_scientist(problem, strategy="llm").select(members))
    assert (chosen.base_id, chosen.reference_id) == ("c2", "c1")
    assert chosen.justification.startswith("offline scientist (no LLM configured)")


def test_repair_lowers_resources_after_an_out_of_resources_error():
    problem = load_problem("matmul")
    sci = offline_scientist(problem)
    broken = problem.seed_source.replace("BLOCK_M = 128", "BLOCK_M = 256")
    draft = run(sci.repair(broken, "compile_error", "OutOfResources: out of resource: shared memory, "
                                                    "Required: 262144, Hardware limit: 232448", None, 1))
    assert draft.error is None
    assert "BLOCK_M = 128" in draft.source and "NUM_STAGES = 2" in draft.source


def test_repair_restores_the_parents_knobs_for_a_kernel_it_wrote():
    problem = load_problem("matmul")
    sci = offline_scientist(problem)
    base = seed_view(problem)
    plan = next(p for p in run(sci.design(base, None, [])) if p.title.startswith(SEARCH_TITLE))
    child = run(sci.write(plan, base, None)).source
    draft = run(sci.repair(child, "wrong_answer", "m=129,n=257,k=320: max abs err 3.1", {"m": 129}, 1))
    assert draft.error is None and draft.source.strip() == problem.seed_source.strip()


def test_repair_fails_honestly_when_it_has_nothing_to_offer():
    problem = load_problem("softmax")
    sci = offline_scientist(problem)
    stranger = problem.seed_source.replace("mask = cols < N", "mask = cols <= N")
    draft = run(sci.repair(stranger, "wrong_answer", "max abs err 0.5", None, 1))
    assert draft.source is None and draft.error.startswith("after one retry")
    base = seed_view(problem)
    plan = Plan("Four rows per program", "a structural move of the catalogue", ["rows"], 0, 5, 5)
    child = run(sci.write(plan, base, None)).source
    draft = run(sci.repair(child, "wrong_answer", "max abs err 0.5", None, 1))
    assert draft.source is None  # a structural change is beyond a knob edit


def test_writer_declines_a_plan_outside_its_catalogue():
    problem = load_problem("softmax")
    plan = Plan("Online softmax in two passes", "r", ["c"], 0, 10, 8)
    draft = run(offline_scientist(problem).write(plan, seed_view(problem), None))
    assert draft.source is None and draft.edits_total == 0


@pytest.mark.parametrize("status, child_us, lesson", [
    ("ok", 90.0, "prediction held"), ("ok", 50.0, "beat the predicted range"), ("ok", 99.5, "no measurable"),
    ("ok", 125.0, "slower"), ("wrong_answer", None, "broke the kernel (wrong_answer)")])
def test_findings_follow_the_numbers(status, child_us, lesson):
    problem = load_problem("softmax")
    plan = Plan("NUM_WARPS 8 -> 4", "r", ["c"], 2, 15, 2)
    text = run(offline_scientist(problem).finding(plan, seed_view(problem), status, child_us))
    assert text.startswith("NUM_WARPS 8 -> 4: ") and lesson in text


def test_offline_calls_are_recorded_like_a_models():
    llm = OfflineLLM(seed=0)
    brief = Brief("finding", plan=Plan("x", "r", ["c"], 1.0, 5.0, 1), status="ok", measured_pct=3.0)
    text, call = run(llm.complete("any wording at all", role="finding", system="sys", context=brief))
    assert call.model == "offline" and call.role == "finding" and call.response == text
    assert call.cost_usd == 0.0 and call.error is None and call.prompt.startswith("[system]\nsys")
    assert Scientist(llm, load_problem("softmax"), "").model_name == "offline"
    with pytest.raises(LLMError) as caught:
        run(llm.complete("anything", role="critic"))
    assert caught.value.call is not None and caught.value.call.error
    with pytest.raises(LLMError, match="without its structured brief"):
        run(llm.complete("Status: ok", role="finding"))


def test_kwarg_literals_are_knobs_too():
    source = ROW_MAJOR_MATMUL.replace("NUM_WARPS = 4\n", "").replace("num_warps=NUM_WARPS,",
                                                                     "num_warps=4, num_stages=2,")
    moves = {m.title: m for m in catalogue(source, [])}
    assert {"num_warps 4 -> 8", "num_warps 4 -> 2", "num_stages 2 -> 3", "num_stages 2 -> 1"} <= set(moves)
    assert "num_warps=8, num_stages=2," in moves["num_warps 4 -> 8"].new_source


# --- judged by the real evaluator -----------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("name", BUILTINS)
def test_the_most_innovative_offline_kernel_is_correct(name):
    problem = load_problem(name)
    sci = offline_scientist(problem)
    base = seed_view(problem)
    plan = next(p for p in run(sci.design(base, None, [])) if p.why_chosen == "most innovative")
    draft = run(sci.write(plan, base, None))
    result = evaluate(EvalRequest(problem=name, source=draft.source, shapes="tests"))
    assert result.status == "ok", f"{plan.title}: {result.message}"


@pytest.mark.slow
def test_grouped_order_rewrite_is_correct():
    problem = load_problem("matmul")
    move = next(m for m in catalogue(ROW_MAJOR_MATMUL, all_shapes(problem)) if m.title == "Grouped tile order")
    result = evaluate(EvalRequest(problem="matmul", source=move.new_source, shapes="tests"))
    assert result.status == "ok", result.message


def test_designer_answer_follows_the_schema_it_is_given():
    problem = load_problem("swiglu")
    seen = {}

    class Capture(OfflineLLM):
        async def complete(self, prompt, **kw):
            seen.update(kw, prompt=prompt)
            return await super().complete(prompt, **kw)

    run(Scientist(Capture(), problem, "").design(seed_view(problem), None, []))
    text, _ = run(OfflineLLM(seed=0).complete(seen["prompt"], role="designer", schema=seen["schema"],
                                              context=seen["context"]))
    answer = json.loads(text)
    assert set(seen["schema"]["required"]) <= set(answer)
    item = seen["schema"]["properties"]["plans"]["items"]
    assert len(answer["plans"]) == 3 and all(set(item["required"]) <= set(p) for p in answer["plans"])
    assert len(answer["avenues"]) == 3 and all(isinstance(a, str) for a in answer["avenues"])


def test_a_base_whose_every_move_was_tried_gets_them_again_rather_than_an_error():
    """An H100 run of rmsnorm (offline@30) stopped with an error once the catalogue ran dry on its best kernel;
    proposed again, the moves are found carried out, so the line tries another member or the run ends with
    nothing left to try."""
    problem = load_problem("rmsnorm")
    seed = seed_view(problem, problem.seed_source)
    sci = offline_scientist(problem)
    everything, done = set(), []
    for _ in range(40):  # enough designs to exhaust the seed's moves and knob values
        plans = run(sci.design(seed, None, [], done))
        titles = {p.title for p in plans}
        if titles <= everything:
            break
        everything |= titles
        done = sorted(everything)
    again = run(sci.design(seed, None, [], sorted(everything)))
    assert again and {p.title for p in again} <= everything
