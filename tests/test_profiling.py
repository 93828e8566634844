"""The two integration points a run calls: after an evaluation (free) and --profile ncu (on demand)."""

from pathlib import Path

import pytest

from kscience.evaluate.profile import compile_facts, ncu
from kscience.evaluate.result import EvalResult
from kscience.run import profiling
from kscience.problems import load_problem

DATA = Path(__file__).parent / "data"
SOFTMAX_SHAPES = [{"m": 4096, "n": 4096}, {"m": 1024, "n": 8192}]


def _result(times, device="NVIDIA H100 80GB HBM3"):
    return {"device": {"name": device, "interpreted": device == "cpu"},
            "shapes": [{"shape": s, "phase": "benchmark", "time_us": t} for s, t in zip(SOFTMAX_SHAPES, times)]}


def test_after_evaluation_gives_facts_and_speed_of_light():
    problem = load_problem("softmax")
    facts = [f.to_dict() for f in compile_facts.read_triton_cache(DATA / "triton36_cache")]
    out = profiling.after_evaluation(problem, dict(_result([40.0, 10.0]), compile_facts=facts))
    assert [f["name"] for f in out["compile_facts"]] == ["fp8_blockscale_gemm_kernel"]
    # 4096*4096*2*2 bytes / 3.35e12 B/s = 20.03 us floor; measured 40 us
    assert out["sol"][0]["fraction"] == pytest.approx(0.5008, rel=1e-3)
    assert profiling.after_evaluation(problem, _result([40.0, 10.0], "cpu")) == {"compile_facts": [], "sol": []}


def test_which_candidates_ncu_looks_at_and_when_a_run_may_stop():
    ok = EvalResult(status="ok", message="ok", geomean_us=10.0)
    assert profiling.worth_profiling("seed", ok, None)
    assert profiling.worth_profiling("candidate", ok, 12.0)
    assert not profiling.worth_profiling("candidate", ok, 9.0)
    assert not profiling.worth_profiling("seed", EvalResult(status="wrong_answer", message="mismatch"), None)
    assert not profiling.worth_profiling("seed", None, None)  # no verdict yet
    problem = load_problem("softmax")
    # floors on an H100: 4096*4096*4 bytes -> 20.03 us; 1024*8192*4 bytes -> 10.02 us
    assert profiling.reached_sol(problem, _result([22.0, 11.0]), 0.9)  # 91% and 91% of the bound
    assert not profiling.reached_sol(problem, _result([22.0, 40.0]), 0.9)  # 25% on the second shape
    assert not profiling.reached_sol(problem, _result([22.0, 11.0]), None)  # no --stop-at-sol
    assert not profiling.reached_sol(problem, _result([22.0, 11.0], "cpu"), 0.1)  # no bound, never stops


def test_the_profiled_shape_is_the_one_with_most_headroom():
    problem = load_problem("softmax")
    assert profiling.profile_shape(problem, _result([40.0, 10.0])) == SOFTMAX_SHAPES[0]  # 50% vs ~100%
    assert profiling.profile_shape(problem, _result([20.1, 40.0])) == SOFTMAX_SHAPES[1]
    assert profiling.profile_shape(problem, _result([1.0, 1.0], "cpu")) == SOFTMAX_SHAPES[0]  # no bound: first


def test_profile_with_ncu_flags_a_lazy_kernel(monkeypatch):
    problem = load_problem("softmax")
    recorded = ncu.parse((DATA / "ncu" / "h100_softmax_full_raw.csv").read_text())
    recorded.profile_s = 3.2
    monkeypatch.setattr(ncu, "profile", lambda *a, **k: recorded)
    out = profiling.profile_with_ncu(problem, "source", _result([40.0, 10.0]))
    assert out["flag"] is None and out["profile_s"] == 3.2 and out["ncu"]["occupancy_pct"] == 87.43
    recorded.dram_bytes = 1e6  # a kernel that read almost nothing
    assert profiling.profile_with_ncu(problem, "source", _result([40.0, 10.0]))["flag"].startswith("not doing")


def test_profile_with_ncu_never_fails_the_run(monkeypatch):
    said = []

    def broken(*a, **k):
        raise ncu.NcuError("ncu failed (exit 1): ==ERROR== profiling is not supported")

    monkeypatch.setattr(ncu, "profile", broken)
    assert profiling.profile_with_ncu(load_problem("softmax"), "s", _result([40.0, 10.0]), say=said.append) is None
    assert said == ["profile ncu: ncu failed (exit 1): ==ERROR== profiling is not supported"]
