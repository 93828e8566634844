"""benchmarks/campaign_throughput.py on the CPU: the same code path as its GPU run (the suite with a GPU MODE
task written from a built-in, both modes, figures from the campaigns' own record, the table), with the offline
scientist behind a short delay and the fake executor of test_loop.py. Nothing here is timed against a target:
what is checked is that the scheduler never left the slot free while an evaluation waited, that the problems
went on at once in one mode and one after another in the other, and what the report says."""

import argparse
import importlib.util
from pathlib import Path

from kscience.record.store import Store
from test_loop import FakeExecutor

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "campaign_throughput.py"


def load_benchmark():
    spec = importlib.util.spec_from_file_location("campaign_throughput_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def overlapping(store: Store, campaign_id: str) -> bool:
    """Whether any run of the campaign began before another had ended."""
    runs = sorted(store.campaign_runs(campaign_id), key=lambda r: r.created)
    return any(later.created < earlier.updated for earlier, later in zip(runs, runs[1:]))


def test_both_modes_of_the_benchmark_keep_the_slot_busy_and_the_report_compares_them(tmp_path):
    bench = load_benchmark()
    args = argparse.Namespace(latency=0.2, iterations=1, lines=1, gpus=None, profile="none")
    problems = bench.suite(tmp_path / "problems", ["softmax", "rmsnorm", "softmax_wide"])
    assert problems[:2] == ["softmax", "rmsnorm"] and Path(problems[2]).name == "softmax_wide"
    modes = []
    for mode in ("all", "one"):
        executor = FakeExecutor(capacity=1, delay_s=0.05)
        modes.append(bench.run_mode(tmp_path / f"{mode}.db", problems, mode, args, executor=executor))
        assert executor.max_in_flight == 1
    together, alone = modes
    for m in modes:
        assert m["status"] == "finished" and m["finished"] == 3 and m["sessions"] == 1, m
        assert m["idle_waiting_s"] == 0.0  # never a free slot while an evaluation waited
        assert m["evaluations"] >= 3 * 2 and all(p["seed_evaluation_s"] is not None for p in m["problems"])
        assert 0 < m["busy"] <= 1 and m["wall_s"] > 0
    assert (together["problems_at_once"], alone["problems_at_once"]) == (3, 1)
    assert overlapping(Store(tmp_path / "all.db"), together["campaign_id"])
    assert not overlapping(Store(tmp_path / "one.db"), alone["campaign_id"])

    bench.compare(modes, [])
    assert alone["faster_than_one_at_a_time"] == 1.0
    assert together["faster_than_one_at_a_time"] == round(alone["wall_s"] / together["wall_s"], 2)
    report = {"device": "cpu (fake executor)", "date": "today", "commit": "abc1234", "suite": ["a", "b", "c"],
              "settings": {"latency_s": 0.2, "iterations": 1, "lines": 1}, "modes": modes}
    lines = bench.table(report)
    assert "idle-wait s" in lines[1] and "x faster" in lines[1]
    assert lines[2].split()[:3] == ["all", "3", "1"] and lines[3].split()[:3] == ["one", "1", "1"]
    assert "3 of 3" in lines[2] and lines[-1].startswith("targets: busy >= 0.9")


def test_a_mode_stopped_at_its_deadline_is_resumed_by_the_same_command(tmp_path):
    bench = load_benchmark()
    problems = bench.suite(tmp_path / "problems", ["softmax", "rmsnorm"])
    args = argparse.Namespace(latency=0.5, iterations=1, lines=1, gpus=None, profile="none")
    first = bench.run_mode(tmp_path / "one.db", problems, "one", args, executor=FakeExecutor(capacity=1, delay_s=0.05),
                           stop_after=1.0)  # sooner than one problem's four model answers
    assert first["status"] == "stopped" and first["finished"] < 2
    done = bench.run_mode(tmp_path / "one.db", problems, "one", args, executor=FakeExecutor(capacity=1, delay_s=0.05))
    assert done["campaign_id"] == first["campaign_id"] and done["status"] == "finished"
    assert done["sessions"] == 2 and done["finished"] == 2 and done["wall_s"] > first["wall_s"]
    again = bench.run_mode(tmp_path / "one.db", problems, "one", args, executor=FakeExecutor(capacity=1))
    assert again == done  # finished: reported as it stands, not run again
