"""Issue 17 wired into the product: what a run stores and says about profiles, `--profile ncu` with and
without Nsight Compute, `--stop-at-sol` on a scripted run, `kscience show`, and the prompts each role
gets with compile facts, counters and headroom.

The loop tests use test_loop's scripted scientist with an executor whose verdicts look like an H100's
(the CPU interpreter has no roofline bound, so speed of light is undefined there); the prompt test uses
the recorded Triton cache and Nsight Compute report under tests/data and a simulated H100, as
test_prompts does.
"""

import asyncio
import json
from pathlib import Path

import pytest
from test_loop import FakeExecutor, ScriptedScientist, fake_kernel, kernel_time
from test_prompts import H100, PLAN, Capture, result, view

from kscience.evaluate.profile import compile_facts, job as profile_job, ncu
from kscience.evaluate.result import EvalResult, ShapeResult
from kscience.run import profiling
from kscience.cli.main import main
from kscience.run.config import RunConfig
from kscience.run.events import CandidateProfiled, StageChanged
from kscience.jupyter.panels import header_facts
from kscience.jupyter.report import write_figures
from kscience.problems import load_problem
from kscience.problems.roofline import result_sol
from kscience.record.seen import Seen
from kscience.cli.progress import Progress
from kscience.run.driver import Run
from kscience.scientist.briefing import bench_from_results
from kscience.scientist.hardware import describe_device, run_target
from kscience.record.candidate import Candidate
from kscience.scientist.roles import Scientist
from kscience.record.snapshot import Snapshot
from kscience.record.store import Store

DATA = Path(__file__).parent / "data"
SHAPE = {"m": 4096, "n": 4096}
FLOOR_US = load_problem("softmax").bytes_moved(**SHAPE) / 3.35e12 * 1e6  # memory-bound: 20.03 us on an H100


class H100Executor(FakeExecutor):
    """The fake kernels' verdicts as an H100 would give them: one timed softmax shape, no interpreter."""

    def _judge(self, request) -> EvalResult:
        if request.profile_shape is not None:  # a profile job: Nsight Compute where the judge is
            return profile_job.run(request, load_problem(request.problem))
        verdict = super()._judge(request)
        shapes = [ShapeResult(shape=dict(SHAPE), ok=s.ok, phase="benchmark", time_us=s.time_us)
                  for s in verdict.shapes]
        verdict.shapes, verdict.device = shapes, {"name": "NVIDIA H100 80GB HBM3", "interpreted": False}
        return verdict


def h100_run(tmp_path, scientist, **config) -> Run:
    return Run.create(RunConfig(problem="softmax", **config), store=Store(tmp_path / "k.db"),
                      seed_source=fake_kernel(4 * FLOOR_US), scientist=scientist, executor=H100Executor())


def run_seed(run) -> str:
    return next(c.id for c in run.store.candidates(run.id) if c.kind == "seed")


def events_of(run, kind):
    return [e for e in run.store.events(run.id) if e["type"] == kind.type]


def test_every_evaluation_stores_its_speed_of_light_and_stop_at_sol_ends_the_run(tmp_path, capsys):
    # Seed at 25% of speed of light; plan 1 halves the base each round: 50% after round 1, 100% after round 2.
    sci = ScriptedScientist(factors=(0.5, 0.9, 1.1, 1.2, 1.3))
    run = h100_run(tmp_path, sci, iterations=6, stop_at_sol=0.9)
    progress = Progress(total=6)
    run.subscribe(progress)
    assert run.start(background=False).status == "finished"
    snap = Snapshot.load(run.store, run.id)
    assert snap.iterations_done == 2  # round 3 is never designed: the best is at the bound on every shape
    done = [e["payload"] for e in events_of(run, StageChanged) if e["payload"]["stage"] == "done"]
    assert len(done) == 1
    message = done[0]["detail"]
    assert message.startswith(f"best kernel {snap.best.id} reaches 100% of speed of light or more on every shape")
    assert "--stop-at-sol 0.9 target: the run ends here" in message
    assert message in capsys.readouterr().err  # the progress display says why the run ended
    # Every evaluated candidate, baselines included, has its stored speed of light.
    profiled = {p.candidate_id: p for p in run.store.profiles(run.id)}
    assert set(profiled) == {c.id for c in run.store.candidates(run.id) if c.result}
    seed = snap.seed
    assert snap.sol_summary(seed).worst == pytest.approx(0.25, rel=1e-3)
    assert profiled[seed.id].sol[0]["bound"] == "memory"
    m = snap.metrics()
    assert m.sol_worst == pytest.approx(1.0, rel=1e-3) and m.sol_best[0].shape == "m=4096,n=4096"


def test_stop_at_sol_never_stops_a_run_without_a_bound(tmp_path):
    sci = ScriptedScientist(factors=(0.5, 0.9, 1.1, 1.2, 1.3))
    store = Store(tmp_path / "k.db")
    run = Run.create(RunConfig(problem="softmax", iterations=2, stop_at_sol=0.01), store=store,
                     seed_source=fake_kernel(100.0), scientist=sci, executor=FakeExecutor())
    assert run.start(background=False).status == "finished"
    assert Snapshot.load(store, run.id).iterations_done == 2  # CPU interpreter: no bound, never "reached"
    assert all(p.sol == [] and p.compile_facts == [] for p in store.profiles(run.id))


def test_profile_ncu_without_ncu_says_so_once_and_the_run_completes(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(ncu, "ncu_path", lambda: None)
    monkeypatch.setattr(ncu, "profile", lambda *a, **k: pytest.fail("ncu must not run without ncu"))
    run = h100_run(tmp_path, ScriptedScientist(), iterations=2, profile="ncu")
    run.subscribe(Progress(total=2))
    assert run.start(background=False).status == "finished"
    err = capsys.readouterr().err
    notice = "profile ncu: Nsight Compute (ncu) is not on PATH; the run goes on without hardware counters"
    assert err.count(notice) == 1 and err.count("profile ncu") == 1
    assert [e["payload"]["candidate_id"] for e in events_of(run, CandidateProfiled)] == [None]
    assert all(p.ncu is None for p in run.store.profiles(run.id))


def test_a_judging_machine_without_ncu_says_so_once_and_is_not_asked_again(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(ncu, "ncu_path", lambda: None)
    monkeypatch.setattr(ncu, "profile", lambda *a, **k: pytest.fail("ncu must not run without ncu"))
    monkeypatch.setattr(H100Executor, "judges_elsewhere", True, raising=False)  # as a queue or a cluster does
    run = h100_run(tmp_path, ScriptedScientist(factors=(0.5, 0.9, 1.1, 1.2, 1.3)), iterations=2, profile="auto")
    run.subscribe(Progress(total=2))
    assert run.start(background=False).status == "finished"
    err = capsys.readouterr().err
    assert "where the judging machine has it" in err and err.count(profile_job.NO_NCU) == 1
    assert [e["payload"]["candidate_id"] for e in events_of(run, CandidateProfiled)] == [None, run_seed(run)]
    assert all(p.ncu is None for p in run.store.profiles(run.id))


def test_profile_ncu_looks_at_the_seed_and_each_new_best_outside_the_timing(tmp_path, capsys, monkeypatch):
    recorded = ncu.parse((DATA / "ncu" / "h100_softmax_full_raw.csv").read_text())
    looked_at = []

    def fake_profile(problem, source, shape, **kw):
        looked_at.append(kernel_time(source))
        recorded.shape, recorded.profile_s = dict(shape), 3.2  # as ncu.profile measures it
        return recorded

    monkeypatch.setattr(ncu, "ncu_path", lambda: "/opt/fake/ncu")
    monkeypatch.setattr(ncu, "profile", fake_profile)
    # Round 1 from the seed (4x the floor), judged in order: 0.5x is a new best; 0.8x beats the seed but not
    # 0.5x, and 1.1x beats nothing, so neither is profiled.
    sci = ScriptedScientist(factors=(0.5, 0.8, 1.1, 1.2, 1.3))
    run = h100_run(tmp_path, sci, iterations=1, profile="ncu")
    run.subscribe(Progress(total=1))
    assert run.start(background=False).status == "finished"
    seed_us = 4 * FLOOR_US
    assert sorted(looked_at) == sorted([seed_us, round(seed_us * 0.5, 3)])
    snap = Snapshot.load(run.store, run.id)
    with_counters = [p for p in snap.profiles if p.ncu]
    assert len(with_counters) == 2 and all(p.profile_s == recorded.profile_s for p in with_counters)
    assert with_counters[0].ncu["shape"] == SHAPE and with_counters[0].flag is None
    err = capsys.readouterr().err
    assert err.count(f"in {recorded.profile_s:.1f} s (outside its timing)") == 2
    m = snap.metrics()
    assert m.n_profiled == 2 and m.profile_s_total == pytest.approx(2 * recorded.profile_s)
    points = {p.id: p for p in snap.profile_points()}
    assert points[snap.seed.id].occupancy_pct == recorded.occupancy_pct


def test_kscience_show_prints_speed_of_light_when_profiles_exist(tmp_path, capsys):
    run = h100_run(tmp_path, ScriptedScientist(factors=(0.5, 0.9, 1.1, 1.2, 1.3)), iterations=1)
    run.start(background=False)
    capsys.readouterr()
    assert main(["show", run.id, "--db", str(tmp_path / "k.db")]) == 0
    out = capsys.readouterr().out
    assert "speed of light (best)  worst 50%, median 50% of the roofline bound over 1 shape(s)" in out
    assert "m=4096,n=4096" in out and "50% of the memory bound" in out
    assert " SOL " in out and " 25%  seed" in out  # the seed's row, at a quarter of the bound


def test_each_role_sees_compile_facts_counters_headroom_and_the_lazy_flag():
    problem = load_problem("fp8_blockscale_gemm")
    facts = compile_facts.read_triton_cache(DATA / "triton36_cache")
    counters = ncu.parse((DATA / "ncu" / "h100_fp8_blockscale_gemm_full_raw.csv").read_text())
    seed_res, child_res = result(problem, H100, 1000.0), result(problem, H100, 900.0)
    base_profile = Seen(compile_facts=facts, ncu=counters, sol=result_sol(problem, seed_res))
    lazy = "not doing the work: on m=128,n=320,k=512 the kernels moved 1e+03 bytes from DRAM, 0% of the 2e+05"
    child_profile = Seen(compile_facts=facts, sol=result_sol(problem, child_res), flag=lazy)
    base, child = view("c-1", problem, seed_res), view("c-2", problem, child_res, parent="c-1")
    base.profile, child.profile = base_profile, child_profile
    hw = describe_device(H100)
    llm = Capture()
    contexts = {}
    original = llm.complete

    async def keep(prompt, *, role, system=None, schema=None, context=None):
        contexts[role] = context
        return await original(prompt, role=role, system=system, schema=schema, context=context)

    llm.complete = keep
    sci = Scientist(llm, problem, "notes", strategy="llm", target=run_target(None, hw))
    sci.observe(bench_from_results(hw, run_target(None, hw), EvalResult.from_dict(seed_res), []))

    async def go():
        await sci.select([base, child], [])
        await sci.design(base, None, [])
        await sci.write(PLAN, base, None)
        await sci.repair(base.source, "wrong_answer", "mismatch", {"m": 64}, 1, profile=child_profile)
        await sci.finding(PLAN, base, "ok", 900.0, child=child)

    asyncio.run(go())
    prompts = llm.prompts
    worst = min(s.fraction for s in base_profile.sol)
    for role in ("designer", "writer"):
        p = prompts[role]
        assert "Profile of this kernel:\n- fp8_blockscale_gemm_kernel (Triton, sm_90" in p, role
        assert "4 warps, 4 stages; 104 KiB shared; tensor cores: yes (wgmma.mma_async)" in p, role
        assert "- Nsight Compute on " in p and "achieved occupancy" in p, role
        assert f"Headroom: {worst:.0%} of the " in p and "Speed of light per shape: m=" in p, role
        assert contexts[role].profile is base_profile  # the offline scientist reads the same data
    designer = prompts["designer"]
    assert "# Headroom\nHeadroom: " in designer and "never predict an uplift beyond what the bound leaves" in designer
    # The selector weighs headroom: each member's speed of light, compile facts and any warning.
    members = {m["id"]: m for m in json.loads(prompts["selector"].split("```json\n")[1].split("```")[0])}
    assert members["c-1"]["speed_of_light"]["worst"] == pytest.approx(worst, abs=1e-3)
    assert members["c-1"]["compiled"] == {"registers": None, "spills": None, "tensor_cores": True}  # PTX only
    assert "warning" not in members["c-1"]
    assert members["c-2"]["warning"] == lazy and "Weigh the headroom" in prompts["selector"]
    # The repairer sees the failing kernel's profile, flag included.
    assert f"- WARNING: {lazy}" in prompts["repair"] and contexts["repair"].profile is child_profile
    # The note-taker sees the new kernel's profile beside its times.
    assert "Per-shape times of the new kernel: " in prompts["finding"] and f"- WARNING: {lazy}" in prompts["finding"]


def test_the_dashboard_and_the_report_show_speed_of_light(tmp_path):
    run = h100_run(tmp_path, ScriptedScientist(factors=(0.5, 0.9, 1.1, 1.2, 1.3)), iterations=1)
    run.start(background=False)
    snap = Snapshot.load(run.store, run.id)
    assert dict(header_facts(snap))["speed of light"] == "worst 50% (m=4096,n=4096, memory bound), median 50%"
    written = write_figures(tmp_path / "k.db", tmp_path / "figures", run.id)
    assert (tmp_path / "figures" / "softmax-sol.png") in written
    assert (tmp_path / "figures" / "softmax-sol.png").read_bytes()[:4] == b"\x89PNG"


def test_which_stored_candidates_profile_ncu_looks_at():
    def cand(kind, iteration, us, evaluated, status="ok"):
        return Candidate.from_row({"id": f"c-{kind}-{us}-{evaluated}", "kind": kind, "iteration": iteration,
                                   "status": status, "geomean_us": us if status == "ok" else None,
                                   "evaluated": evaluated, "result": {"status": status, "message": "",
                                                                      "geomean_us": us if status == "ok" else None}})

    seed = cand("seed", 0, 100.0, 1)
    rows = [seed, cand("eager", 0, 10.0, 2), cand("child", 1, 90.0, 3)]
    look = lambda c: profiling.candidate_to_profile(c, rows + [c])  # noqa: E731
    assert look(seed) and look(cand("repair", 0, 100.0, 1))  # a repaired seed is the seed
    assert not look(rows[1]) and not look(cand("compiled", 0, 10.0, 2))  # baselines: timed only
    assert look(rows[2])  # faster than everything judged before it (the seed)
    assert not look(cand("child", 1, 95.0, 4)) and look(cand("repair", 1, 80.0, 4))  # a new best, or not
    assert look(cand("composite", 1, 85.0, 4))  # a composite that is a new best, as any member
    assert not look(cand("child", 1, 50.0, 4, status="wrong_answer"))

@pytest.mark.parametrize("elsewhere", [False, True])
def test_the_seeds_profile_is_asked_for_before_the_cheap_baselines_where_the_run_judges(tmp_path, monkeypatch,
                                                                                        elsewhere):
    """A profile may not share the GPU with a baseline's timing, so it waits for the baselines in flight: on an
    H100 the lines waited 13 s of baselines, then 12.5 s of profile. Where the run judges on its own slots the
    profile is asked for first; a queue or a cluster (judging elsewhere) still gets the seed and the baselines
    in one batch."""
    recorded = ncu.parse((DATA / "ncu" / "h100_softmax_full_raw.csv").read_text())
    monkeypatch.setattr(ncu, "ncu_path", lambda: "/opt/fake/ncu")
    monkeypatch.setattr(ncu, "profile", lambda problem, source, shape, **kw: recorded)
    executor = H100Executor()
    monkeypatch.setattr(H100Executor, "judges_elsewhere", elsewhere, raising=False)
    run = Run.create(RunConfig(problem="softmax", iterations=1, profile="ncu"), store=Store(tmp_path / "k.db"),
                     seed_source=fake_kernel(4 * FLOOR_US), scientist=ScriptedScientist(factors=(0.5, 0.8, 1.1)),
                     executor=executor)
    assert run.start(background=False).status == "finished"
    asked = ["profile" if r.profile_shape is not None else "baseline" if r.baseline else "kernel"
             for r in executor.requests]
    if elsewhere:
        assert asked[:2] == ["kernel", "baseline"]
    else:
        assert asked[:3] == ["kernel", "profile", "baseline"]
