"""A stored run and campaign built row by row with fixed ids and times, so what the commands print of them can be
kept as expected output (tests/data/golden/) and compared byte for byte."""

from __future__ import annotations

import itertools
import secrets
import time

from kscience.evaluate.result import EvalResult
from kscience.record.llm_call import LLMCall
from kscience.record.store import Store

GPU = {"name": "NVIDIA H200", "host": "gpu-a", "interpreted": False, "capability": [9, 0]}
OTHER_GPU = {**GPU, "host": "gpu-b"}


def _shape(m: int, us: float | None, *, ok: bool = True, phase: str = "benchmark", floor: float | None = None,
           kernels: list | None = None, err: float = 1e-6) -> dict:
    return {"shape": {"m": m, "n": 4096}, "ok": ok, "phase": phase, "time_us": us, "mean_us": us and us * 1.01,
            "std_us": us and us * 0.02, "n": 20 if us else 0, "floor_us": floor, "clock": "cuda events" if us else "",
            "err_f64": err if ok else 0.5, "ref_err_f64": 2e-6, "scale_f64": 1.0, "message": "" if ok else "wrong at [0, 3]",
            "kernels": kernels or []}


def _result(status: str, us: float | None, *, device: dict = GPU, message: str = "", output: str = "",
            err: float = 1e-6, build_s: float = 0.0) -> dict:
    ok = status == "ok"
    shapes = [_shape(128, None, phase="test", ok=ok, err=err),
              _shape(1024, us, ok=ok, floor=10.0, err=err,
                     kernels=[{"name": "softmax_kernel", "launches": 1, "us": us}] if us else []),
              _shape(8192, us and us * 4, ok=ok, floor=40.0, err=err)]
    return {"status": status, "message": message or f"{status}", "geomean_us": us and us * 2 if ok else None,
            "shapes": shapes, "device": device, "timing_label": "cuda events", "output": output,
            "failing_shape": None if ok else {"m": 1024, "n": 4096}, "build_s": build_s,
            "precision": {}}


def build(path) -> dict:
    """The store at `path`; returns the ids the test names."""
    ticks, hexes = itertools.count(1_700_000_000, 7), itertools.count(0x10000000, 0x1111)
    real_time, real_hex = time.time, secrets.token_hex
    time.time = lambda: float(next(ticks))
    secrets.token_hex = lambda n: f"{next(hexes):08x}"
    try:
        return _fill(path)
    finally:
        time.time, secrets.token_hex = real_time, real_hex


def _fill(path) -> dict:
    with Store(path) as store:
        campaign = store.create_campaign(name="golden", suite="golden-suite", config={"iterations": 2, "llm": "offline"},
                                         problems=[{"locator": "softmax", "name": "softmax"},
                                                   {"locator": "big.py", "name": "big", "status": "skipped",
                                                    "reason": "needs 900 GiB, this machine has 128 GiB"}])
        run = store.create_run(name="", problem="softmax", overrides={"rows": 8}, llm="offline", strategy="tournament",
                               config={"iterations": 2, "max_tokens": 100000, "max_cost_usd": 2.5,
                                       "time_limit_s": 3600},
                               environment={"python": "3.12", "device": GPU}, pid=None, host="gpu-a",
                               campaign_id=campaign)
        store.update_campaign_problem(campaign, 0, status="finished", run_id=run)

        def judged(kind, us, status="ok", **kw):
            extra = {k: kw.pop(k) for k in ("device", "message", "output", "err", "build_s") if k in kw}
            cand = store.add_candidate(run, kind=kind, source=f"# {kind} {us}\nBLOCK = {int(us or 1)}\n",
                                       hypothesis=kw.pop("hypothesis", f"{kind} kernel"), **kw)
            store.record_result(cand.id, EvalResult.from_dict(_result(status, us, **extra)))
            return cand

        seed = judged("seed", 400.0, iteration=0, build_s=1.5)
        judged("eager", 500.0, iteration=0, hypothesis="PyTorch eager")
        judged("compiled", 300.0, iteration=0, hypothesis="torch.compile")
        judged("vendor", 350.0, iteration=0, hypothesis="cuDNN softmax 9.1")
        judged("vendor_alone", None, "runtime_error", iteration=0, hypothesis="cuDNN call alone",
               message="cudnn: bad layout")
        judged("library", 280.0, iteration=0, hypothesis="Liger-Kernel 0.5 softmax")
        plans = store.add_plans(run, 1, base_id=seed.id, reference_id=None, justification="start from the seed",
                                plans=[{"title": "wider blocks", "chosen": True, "why_chosen": "most innovative",
                                        "predicted_min_pct": 5.0, "predicted_max_pct": 30.0, "changes": ["BLOCK"]},
                                       {"title": "two passes", "chosen": True, "why_chosen": "highest max",
                                        "predicted_min_pct": 10.0, "predicted_max_pct": 50.0},
                                       {"title": "not chosen", "chosen": False, "predicted_min_pct": 0.0}])
        fast = judged("child", 200.0, iteration=1, parent_id=seed.id, plan_id=plans[0].id, write_mode="edit",
                      edits_total=3, edits_applied=3, deviations="kept the old mask",
                      output="warning: slow path\nsecond line")
        broken = judged("child", None, "wrong_answer", iteration=1, parent_id=seed.id, plan_id=plans[1].id,
                        write_mode="edit", edits_total=2, edits_applied=1, message="wrong answer at [0, 3]")
        judged("repair", 260.0, iteration=1, parent_id=broken.id, plan_id=plans[1].id, repair_attempt=1,
               write_mode="full", device=OTHER_GPU, err=0.01)
        store.add_candidate(run, kind="child", source="", hypothesis="no code came back", iteration=1,
                            parent_id=seed.id, status="write_failed", message="no edit applied", edits_total=2)
        store.add_finding(run, plan_id=plans[0].id, candidate_id=fast.id, iteration=1,
                          text="wider blocks halved the time", predicted_min_pct=5.0, predicted_max_pct=30.0,
                          measured_pct=100.0)
        store.add_finding(run, plan_id=plans[1].id, candidate_id=None, iteration=1,
                          text="two passes failed then repaired", predicted_min_pct=10.0, predicted_max_pct=50.0,
                          measured_pct=53.8)
        for role, model, tokens, cost in (("designer", "gemini-x", 1200, 0.01), ("writer", "offline", 0, 0.0)):
            store.add_llm_call(run, LLMCall(role=role, model=model, prompt="p", response="r", input_tokens=tokens,
                                            output_tokens=tokens // 4, latency_s=1.0, cost_usd=cost))
        store.record_profile(seed.id, compile_facts=[{"kernel": "softmax_kernel", "registers": 40, "spills": 0}])
        store.record_profile(fast.id, compile_facts=[{"kernel": "softmax_kernel", "registers": 64, "spills": 2}],
                             ncu={"occupancy_pct": 50.0, "dram_pct": 80.0}, profile_s=12.0,
                             sol=[{"shape": {"m": 1024, "n": 4096}, "fraction": 0.05, "bound": "memory",
                                   "floor_us": 10.0, "time_us": 200.0, "compute_fraction": 0.01,
                                   "memory_fraction": 0.05}], flag="does no work on shape m=8192")
        store.record_slot_time(run, session=1_700_000_000.0, slot=0, wall_s=100.0, busy_s=60.0, evaluations=6,
                               gpu_busy_s=50.0)
        store.record_slot_time(run, session=1_700_000_000.0, slot=1, wall_s=100.0, busy_s=30.0, evaluations=3)
        store.record_slot_time(run, session=1_700_000_500.0, slot=0, wall_s=40.0, busy_s=35.0, evaluations=2,
                               gpu_busy_s=35.0)
        store.record_campaign_session(campaign, session=1_700_000_000.0, wall_s=150.0, slots=2, busy_s=120.0,
                                      idle_waiting_s=4.0, problems_at_once=1)
        store.add_retime(run, fast.id, "NVIDIA B200",
                         EvalResult.from_dict(_result("ok", 150.0, device={**GPU, "name": "NVIDIA B200"})))
        store.update_run(run, status="finished")
        store.update_campaign(campaign, status="finished")
        return {"run": run, "campaign": campaign, "best": fast.id, "broken": broken.id}
