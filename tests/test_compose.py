"""Per-shape composition: rules that generalise, a composite that is correct on shapes nobody timed,
and a run that builds, judges, stores, shows and resumes it."""

import ast
import importlib.util
import re
import asyncio
import sqlite3
import time

import pytest
import torch

from kscience.cli.main import main
from kscience.evaluate.judge.evaluation import evaluate
from kscience.evaluate.result import EvalRequest, EvalResult, ShapeResult
from kscience.run.composing import Composer
from kscience.run.config import RunConfig
from kscience.problems import load_problem, shape_label
from kscience.run.driver import Run
from kscience.scientist import compose
from kscience.record.candidate import Candidate
from kscience.scientist.roles import CandidateView, Draft
from kscience.scientist.strategy import tournament
from kscience.record.database import SCHEMA_VERSION
from kscience.record.store import Store
from test_loop import FakeExecutor, ScriptedScientist

SOFTMAX = load_problem("softmax")
WARPS_4 = SOFTMAX.seed_source.replace("NUM_WARPS = 8", "NUM_WARPS = 4")


def row(cid: str, times: dict, source: str = "", kind: str = "child") -> dict:
    """A stored candidate with hand-made per-shape times ({(m, n): us})."""
    shapes = [{"shape": {"m": m, "n": n}, "phase": "benchmark", "ok": True, "time_us": us}
              for (m, n), us in times.items()]
    gm = compose.geomean(list(times.values()))
    return Candidate.from_row({"id": cid, "kind": kind, "status": "ok", "geomean_us": gm, "source": source,
                               "result": {"status": "ok", "message": "", "shapes": shapes, "geomean_us": gm}})


# Wide rows favour b, narrow rows a: a rule on n, never a list of shapes.
A_TIMES = {(4096, 4096): 10.0, (8192, 8192): 40.0, (16384, 2048): 9.0, (2048, 32768): 60.0}
B_TIMES = {(4096, 4096): 12.0, (8192, 8192): 30.0, (16384, 2048): 11.0, (2048, 32768): 45.0}


def test_rules_split_by_size_reach_the_oracle_and_leave_other_sizes_to_the_best():
    comp = compose.plan(SOFTMAX, [row("c-a", A_TIMES), row("c-b", B_TIMES)])
    assert comp is not None and comp.dims == {"m": (0, 0), "n": (0, 1)}
    assert comp.predicted_us == comp.oracle_us < comp.best_us
    assert len(comp.rules) == 1 and comp.rules[0].part in ("c-a", "c-b")
    assert comp.leaders[shape_label({"m": 8192, "n": 8192})] == "c-b"
    pick = lambda m, n: next((r.part for r in comp.rules if all(compose._holds(c, {"m": m, "n": n})
                                                                for c in r.conditions)), comp.fallback)
    assert pick(3000, 20000) == "c-b" and pick(3000, 3000) == "c-a"  # sizes between the timed ones
    assert pick(4096, 65536) == comp.fallback  # beyond the timed range: the overall best
    assert "%" not in comp.rules[0].text() and "==" not in comp.rules[0].text()


def test_one_winner_everywhere_or_a_gain_within_noise_builds_nothing():
    faster = {k: v * 0.9 for k, v in A_TIMES.items()}
    assert compose.plan(SOFTMAX, [row("c-a", A_TIMES), row("c-f", faster)]) is None
    close = {**A_TIMES, (8192, 8192): 39.9}
    assert compose.plan(SOFTMAX, [row("c-a", A_TIMES), row("c-c", close)]) is None
    baseline = row("c-r", {k: 1.0 for k in A_TIMES}, kind="eager")  # baselines are never parts
    assert compose.plan(SOFTMAX, [row("c-a", A_TIMES), baseline]) is None


def test_leaders_text_names_the_kernel_fastest_on_each_shape():
    text = compose.leaders_text([row("c-a", A_TIMES), row("c-b", B_TIMES)], "c-a")
    assert "fastest on 2 shape(s): c-b: m=8192,n=8192; m=2048,n=32768" in text
    assert "c-a (the best overall)" in text
    assert compose.leaders_text([row("c-a", A_TIMES)], "c-a") == ""


def _composite_of_two_triton_softmaxes():
    # Timed (by hand) on three of the four interpreter shapes; m=33,n=1000 was timed by none.
    a = {(1, 128): 5.0, (8, 4099): 50.0, (256, 2048): 30.0}
    b = {(1, 128): 6.0, (8, 4099): 40.0, (256, 2048): 20.0}
    comp = compose.plan(SOFTMAX, [row("c-a", a, SOFTMAX.seed_source), row("c-b", b, WARPS_4)])
    return comp, compose.source(comp, {"c-a": SOFTMAX.seed_source, "c-b": WARPS_4})


def test_a_composite_of_two_triton_kernels_passes_the_evaluator_on_every_shape():
    comp, text = _composite_of_two_triton_softmaxes()
    assert comp.parts == ["c-a", "c-b"] or comp.parts == ["c-b", "c-a"]
    result = evaluate(EvalRequest(problem="softmax", source=text, shapes="all"), problem=SOFTMAX)
    assert result.status == "ok", result.message
    assert {shape_label(s.shape) for s in result.shapes} >= {"m=33,n=1000", "m=1,n=128", "m=8,n=4099"}


def test_the_composite_dispatches_to_each_part_and_is_right_on_an_unseen_shape(tmp_path):
    comp, text = _composite_of_two_triton_softmaxes()
    path = tmp_path / "candidate.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("composite_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    called = []
    for cid, fn in list(module._KERNELS.items()):
        setattr(module, compose._var(cid), lambda data, cid=cid, fn=fn: called.append(cid) or fn(data))
    for m, n in [(1, 128), (200, 3000), (3, 5000)]:  # (200, 3000) and (3, 5000): timed by no part
        data = SOFTMAX.generate_input(1, "cpu", m=m, n=n)
        torch.testing.assert_close(module.custom_kernel(data).float(), SOFTMAX.ref_kernel(data).float(),
                                   rtol=SOFTMAX.rtol, atol=SOFTMAX.atol)
    assert set(called) == {"c-a", "c-b"}
    assert not hasattr(module, "softmax_kernel") and not hasattr(module, "NUM_WARPS")  # parts keep their own


# --- in a run -------------------------------------------------------------------------------------
SHAPES = [{"m": 4096, "n": 4096}, {"m": 8192, "n": 8192}, {"m": 16384, "n": 2048}, {"m": 2048, "n": 32768}]


def kernel(times: list[float]) -> str:
    return f'"""fake kernel"""\nTIMES = {times!r}\nSTATUS = \'ok\'\n'


class ShapeExecutor(FakeExecutor):
    """Fake kernels carry a time per shape; a composite takes each shape's fastest part."""

    def _judge(self, request) -> EvalResult:
        found = re.findall(r"TIMES = (\[[0-9., ]+\])", request.source)
        if not found:
            return super()._judge(request)
        time.sleep(self.delay_s)  # so concurrent lines overlap in the evaluator
        times = [min(ts) for ts in zip(*(ast.literal_eval(f) for f in found))]
        shapes = [ShapeResult(shape=s, ok=True, phase="benchmark", time_us=t) for s, t in zip(SHAPES, times)]
        return EvalResult(status="ok", message="fake ok", geomean_us=compose.geomean(times), shapes=shapes,
                          device={"name": "fake device", "interpreted": True}, timing_label="fake clock")


class TwoIdeas(ScriptedScientist):
    """Round 1 writes a kernel that wins the wide rows and loses the rest."""

    async def write(self, plan, base, reference):
        self._enter("write", plan.title)
        slow = plan.title.startswith("x1.1")
        times = [12.0, 30.0, 11.0, 45.0] if not slow else [99.0] * 4
        return Draft(source=kernel(times) + f"# {plan.title}\n", mode="whole", edits_total=0, edits_applied=0)


def test_a_run_builds_judges_stores_shows_and_resumes_a_composite(tmp_path, capsys):
    store = Store(tmp_path / "k.db")
    run = Run.create(RunConfig(problem="softmax", iterations=2), store=store,
                     seed_source=kernel([10.0, 40.0, 9.0, 60.0]), scientist=TwoIdeas(), executor=ShapeExecutor())
    assert run.start(background=False).status == "finished"
    cands = store.candidates(run.id)
    composite = [c for c in cands if c.kind == compose.KIND]
    assert len(composite) == 1 and composite[0].status == "ok"
    # the fastest member, so the scripted selector builds round 2 on it: a composite can be a base
    assert {p.base_id for p in store.plans(run.id) if p.iteration == 2} == {composite[0].id}
    assert composite[0].geomean_us < min(c.geomean_us for c in cands if c.kind in ("seed", "child"))
    stored = store.composition(composite[0].id)
    assert len(stored["parts"]) == 2 and cands[0].id in stored["parts"] and stored["rules"]["rules"]
    capsys.readouterr()
    assert main(["show", run.id, "--db", str(store.path)]) == 0
    shown = capsys.readouterr().out
    assert f"best {composite[0].id}" in shown and "1 composite judged; the best kernel is a per-shape" in shown
    # A run stopped before its composite was judged judges it on resuming, and builds no second one.
    store._write("UPDATE candidates SET status='pending', result=NULL, geomean_us=NULL WHERE id=?",
                 (composite[0].id,))
    again = Run.resume(run.id, store=store, iterations=0, scientist=TwoIdeas(), executor=ShapeExecutor())
    assert again.start(background=False).status == "finished"
    after = [c for c in store.candidates(run.id) if c.kind == compose.KIND]
    assert len(after) == 1 and after[0].status == "ok"


@pytest.mark.parametrize("version, dropped", [(3, ("slot_times", "compositions", "campaign_sessions")),
                                              (4, ("compositions", "campaign_sessions"))])
def test_an_older_database_gains_compositions_and_keeps_its_rows(tmp_path, version, dropped):
    path = tmp_path / "old.db"
    with Store(path) as store:
        run_id = store.create_run(name="old", problem="softmax", overrides={}, llm="offline", strategy="llm",
                                  config={}, environment={})
        cand = store.add_candidate(run_id, kind="seed", source="x", hypothesis="seed", iteration=0)
    db = sqlite3.connect(path)  # make it what kscience wrote before composition (schema 5)
    for table in dropped:
        db.execute(f"DROP TABLE {table}")
    db.execute("ALTER TABLE candidates DROP COLUMN deviations")  # schema 7
    if "slot_times" not in dropped:
        db.execute("ALTER TABLE slot_times DROP COLUMN gpu_busy_s")  # schema 6
    db.execute(f"PRAGMA user_version={version}")
    db.commit()
    db.close()
    with Store(path) as store:
        assert [c.id for c in store.candidates(run_id)] == [cand.id]
        comp = store.add_composite(run_id, parts=[cand.id], rules={"rules": []}, kind=compose.KIND, source="y",
                                   hypothesis="composite", iteration=1, parent_id=cand.id)
        assert store.composition(comp.id)["parts"] == [cand.id] and len(store.compositions(run_id)) == 1
        assert store.slot_times(run_id) == []
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 7


def test_fp8_wins_split_by_rows_as_in_the_real_model_trial():
    """The widened-to-fp16 kernel wins the 6144-row shapes, split-K the 1024-row ones: one rule on m,
    between the timed sizes, so a 4096-row call goes to the 6144-row winner and a 2000-row call to the other;
    below the smallest timed size nothing was measured, and the overall best answers."""
    problem = load_problem("fp8_blockscale_gemm")

    def fp8_row(cid, big, small):
        shapes = [{"shape": s, "phase": "benchmark", "ok": True, "time_us": big if s["m"] == 6144 else small}
                  for s in problem.benchmarks]
        gm = compose.geomean([s["time_us"] for s in shapes])
        return Candidate.from_row({"id": cid, "kind": "child", "status": "ok", "geomean_us": gm, "source": "",
                                   "result": {"status": "ok", "message": "", "shapes": shapes}})

    comp = compose.plan(problem, [fp8_row("c-60bb46a2", 200.0, 120.0), fp8_row("c-split", 280.0, 100.0)])
    assert comp is not None and comp.predicted_us == comp.oracle_us
    (rule,) = comp.rules
    pick = lambda m, n=4096, k=7168: rule.part if all(compose._holds(c, {"m": m, "n": n, "k": k})
                                                      for c in rule.conditions) else comp.fallback
    assert pick(4096) == "c-60bb46a2" and pick(2000) == "c-split" and pick(1024) == "c-split"
    assert pick(100) == comp.fallback == "c-60bb46a2"
    text = compose.leaders_text([fp8_row("c-60bb46a2", 200.0, 120.0), fp8_row("c-split", 280.0, 100.0)], None)
    assert "fastest on 9 shape(s): c-60bb46a2: m=6144," in text


def test_rule_based_selection_builds_on_kernels_it_can_tune_not_on_a_composite():
    comp, text = _composite_of_two_triton_softmaxes()
    views = [CandidateView("c-a", None, "seed", "ok", 50.0, {}, SOFTMAX.seed_source, "ok"),
             CandidateView("c-b", "c-a", "warps", "ok", 45.0, {}, WARPS_4, "ok"),
             CandidateView("c-comp", "c-b", "composite", "ok", 40.0, {}, text, "ok")]
    assert tournament(views).base_id == "c-b"


def test_a_size_every_timed_shape_shares_bounds_no_rule():
    a = {(1024, 4096): 10.0, (4096, 4096): 40.0, (16384, 4096): 160.0}
    b = {(1024, 4096): 12.0, (4096, 4096): 30.0, (16384, 4096): 120.0}
    comp = compose.plan(SOFTMAX, [row("c-a", a), row("c-b", b)])
    assert comp is not None and {name for r in comp.rules for name, _, _ in r.conditions} == {"m"}
    assert [r.text() for r in comp.rules] == ["m >= 1024 and m <= 2048"]  # the narrow rows: c-a; else c-b


def test_concurrent_lines_compose_one_at_a_time_and_never_the_same_composite_twice(tmp_path, monkeypatch):
    """Three lines record verdicts at once: one composer works, the others' verdicts make it look again."""
    active, most, asked_while_busy, composer = [0], [0], [], []
    real_compose, real_maybe = Composer._compose, Composer.maybe_compose

    async def watched_compose(self, iteration, line):
        composer[:] = [asyncio.current_task()]
        active[0] += 1
        most[0] = max(most[0], active[0])
        try:
            await real_compose(self, iteration, line)
        finally:
            active[0] -= 1

    async def watched_maybe(self, iteration, line=0):
        asked_while_busy.append(self._composing and asyncio.current_task() not in composer)  # another line
        await real_maybe(self, iteration, line)

    monkeypatch.setattr(Composer, "_compose", watched_compose)
    monkeypatch.setattr(Composer, "maybe_compose", watched_maybe)
    store = Store(tmp_path / "k.db")
    run = Run.create(RunConfig(problem="softmax", iterations=3, lines=3), store=store,
                     seed_source=kernel([10.0, 40.0, 9.0, 60.0]), scientist=TwoIdeas(),
                     executor=ShapeExecutor(capacity=3, delay_s=0.05))
    assert run.start(background=False).status == "finished"
    composites = [c for c in store.candidates(run.id) if c.kind == compose.KIND]
    assert composites and all(c.status == "ok" for c in composites)
    assert len({c.source for c in composites}) == len(composites) == len(store.compositions(run.id))
    assert most[0] == 1 and any(asked_while_busy)  # other lines asked while one composed, and did not compose
