"""benchmarks/search_throughput.py measures the search, not its start: its figures from a run's own record.

A short matmul run with the offline scientist behind a delay and the fake executor of test_loop.py, whose
eager baseline takes HELD_S: the start-up (to the first child) stays within its target, the seed's
evaluation plus two model answers, because the lines do not wait for the baselines.
"""

import importlib.util
import time
from pathlib import Path

from kscience.run.config import RunConfig
from kscience.run.driver import Run
from kscience.record.store import Store
from test_loop import FakeExecutor

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "search_throughput.py"
HELD_S = 3.0  # the eager baseline's evaluation
LATENCY_S, WINDOW_S, SAMPLE_S = 0.3, 4.0, 0.5


def load_benchmark():
    spec = importlib.util.spec_from_file_location("search_throughput_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class SlowEager(FakeExecutor):
    def _judge(self, request):
        if "_EAGER(data)" in request.source:
            time.sleep(HELD_S)
        return super()._judge(request)


def test_start_up_reaches_the_first_child_before_the_baselines_and_the_report_says_so(tmp_path):
    bench = load_benchmark()
    store = Store(tmp_path / "runs.db")
    run = Run.create(RunConfig(problem="matmul", llm=f"offline@{LATENCY_S:g}", lines=2, evaluations=1000,
                               compiled_baseline=False), store=store, executor=SlowEager(capacity=1, delay_s=0.05))
    started = time.time()
    assert bench.run_for(run, WINDOW_S) == "stopped"
    figures = bench.measure(store, run.id, started, WINDOW_S, 1, SAMPLE_S, LATENCY_S)
    assert figures["seed_s"] is not None
    assert figures["startup_target_s"] == round(figures["seed_s"] + 2 * LATENCY_S, 1)
    # The first child went out two model answers after the seed's verdict, not after the eager baseline's.
    assert figures["startup_s"] < HELD_S
    assert figures["evaluations"] >= 2 and figures["refused_plans"] == 0
    assert [t for t, _ in figures["queue"]] == [round(SAMPLE_S * i, 1) for i in range(len(figures["queue"]))]

    report = {"device": "cpu (fake executor)", "problem": "matmul", "date": "today", "runs": [
        {"run_id": run.id, "lines": 2, "slots": 1, "status": "stopped", **figures}],
        "settings": {"slots": 1, "latency_s": LATENCY_S, "window_s": WINDOW_S, "sample_s": SAMPLE_S}}
    bench.compare(report["runs"], [{"lines": 1, "evaluations_per_hour": figures["evaluations_per_hour"] / 2}])
    lines = bench.table(report)
    assert "target s" in lines[1] and "refused" in lines[1] and "accepted/min" in lines[1]
    row = lines[2].split()
    assert row[:3] == ["2", f"{figures['startup_s']:.0f}", f"{figures['startup_target_s']:.0f}"] and row[5] == "2.00"
    assert lines[3].startswith("queue length every 0.5 s")
    assert lines[4].split()[1:] == [str(n) for _, n in figures["queue"]]
