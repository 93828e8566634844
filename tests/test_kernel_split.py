"""What the model sees of a kernel beyond its time (issue 44): the time of each kernel it launched, what it
printed, and Nsight Compute taken where it was judged, through the local and the queue:DIR executor.

Without a GPU the judge's per-kernel pass times each Triton launch under the interpreter, and a stand-in
`ncu` on the judging process's PATH writes a recorded H100 report: the path from the judging machine to
the next prompt is the one a GPU run takes.
"""

from __future__ import annotations

import asyncio
import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from test_prompts import Capture
from test_queue import start_worker, stop_worker

from kscience.evaluate import kernel_times
from kscience.evaluate.judge import candidate_output
from kscience.evaluate.judge.evaluation import evaluate
from kscience.evaluate.result import OK, EvalRequest
from kscience.jupyter.panels import header_facts
from kscience.problems import load_problem
from kscience.record.snapshot import Snapshot
from kscience.record.store import Store
from kscience.record.summary import sol_lines
from kscience.run.config import RunConfig
from kscience.run.driver import Run
from kscience.scientist.roles import Scientist

DATA = Path(__file__).parent / "data"
TWO_LAUNCHES = (DATA / "two_launch_softmax.py").read_text()
FALLBACK = "TMA unavailable, falling back to pointer loads"


def test_the_judge_splits_a_two_launch_kernel_and_keeps_what_it_printed():
    result = evaluate(EvalRequest(problem="softmax", source=TWO_LAUNCHES, shapes="all"))
    assert result.status == OK, result.message
    (bench,) = [s for s in result.shapes if s.phase == "benchmark"]
    assert [k["name"] for k in sorted(bench.kernels, key=lambda k: k["name"])] == ["normalise_kernel",
                                                                                  "row_max_kernel"]
    assert all(k["launches"] == 1 and k["us"] > 0 for k in bench.kernels)
    assert all(not s.kernels for s in result.shapes if s.phase == "test")  # only timed shapes are split
    assert result.kernel_profiler == kernel_times.CPU_PROFILER and "kernels" in result.phases_s
    # Printed on every call: one line, counted, marked as a warning.
    assert result.output.startswith(f"[stderr] {FALLBACK}  (x") and candidate_output.warning_count(result.output) == 1
    # Asked for nothing more, the judge measures nothing more.
    plain = evaluate(EvalRequest(problem="softmax", source=TWO_LAUNCHES, shapes="benchmarks", measure=[]))
    assert plain.status == OK and not any(s.kernels for s in plain.shapes) and "kernels" not in plain.phases_s


def test_a_malformed_kernels_reply_gives_no_times_and_says_so():
    good = {"calls": 2, "profiler": "p", "kernels": [["a", 2, 10.0], ["b", 4, 30.0]]}
    kernels, note = kernel_times.parse_reply(good)
    assert note == "" and kernels == [{"name": "b", "launches": 2, "us": 15.0}, {"name": "a", "launches": 1, "us": 5.0}]
    for bad in ({"calls": 0, "kernels": []}, {"calls": 1, "kernels": [["a", 1, float("nan")]]},
                {"calls": 1, "kernels": [["a", True, 1.0]]}, {"calls": 1, "kernels": "x"}):
        assert kernel_times.parse_reply(bad) == ([], "per-kernel times: malformed reply from the worker")
    assert kernel_times.parse_reply({"error": "CUPTI_ERROR_NOT_INITIALIZED", "profiler": "p"})[1].startswith(
        "per-kernel times unavailable (p): CUPTI")


def test_the_gpu_profiler_pass_does_not_import_torch_inductor():
    """torch.profiler.profile imports torch._inductor on its first session to read one setting: 4-6 s of
    every evaluation on an H100. The worker's pass uses the autograd profiler beneath it. Run in a fresh
    interpreter, where nothing else has imported torch._inductor; without CUDA the pass records the
    CPU ops of the calls and no kernel, which is all this checks."""
    code = ("import sys, warnings, torch\n"
            "warnings.simplefilter('ignore')\n"
            "from kscience.evaluate import kernel_times\n"
            "x = torch.ones(8, 8)\n"
            "kernel_times._cuda_launches(lambda: x @ x, 2)\n"
            "print('torch._inductor' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-800:]
    assert done.stdout.strip().splitlines()[-1] == "False"


def test_output_is_deduplicated_bounded_redacted_and_warnings_come_first(monkeypatch):
    monkeypatch.setenv("SOME_API_KEY", "sk-very-secret-value")
    text = candidate_output.digest("tile 64\n" * 50 + "key sk-very-secret-value\n" + "".join(f"row {i}\n" for i in range(30)),
                                   "".join(f"line {i}\n" for i in range(5)) + "UserWarning: slow path taken\n")
    lines = text.splitlines()
    assert lines[0] == "[stderr] UserWarning: slow path taken"
    assert "[stdout] tile 64  (x50)" in lines and "sk-very-secret-value" not in text
    assert len(lines) == candidate_output.MAX_LINES + 1 and lines[-1].startswith("... and ")


class Recording(Capture):
    """Keeps each role's prompts. With `waits` its designer is a model slower than Nsight Compute: it answers
    once the seed's profile is stored (`profiled`, set once the run exists), as a real model's does."""

    profiled = staticmethod(lambda: True)
    waits = True

    def __init__(self):
        super().__init__()
        self.designs: list[tuple[bool, str]] = []  # (the seed's profile stored when asked, prompt)

    async def preflight(self, problem, kernels):
        return None

    async def complete(self, prompt, *, role, system=None, schema=None, context=None):
        if role == "designer":
            self.designs.append((self.profiled(), prompt))
            for _ in range(1200 if self.waits else 0):
                if self.profiled():
                    break
                await asyncio.sleep(0.05)
        return await super().complete(prompt, role=role, system=system, schema=schema, context=context)


def fake_ncu(directory: Path) -> Path:
    """An `ncu` that writes a recorded H100 report wherever it is told to log."""
    report = DATA / "ncu" / "h100_softmax_full_raw.csv"
    path = directory / "ncu"
    path.write_text("#!/bin/sh\nwhile [ $# -gt 0 ]; do\n"
                    f'  if [ "$1" = --log-file ]; then cp "{report}" "$2"; fi\n  shift\ndone\n')
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return directory


@pytest.mark.parametrize("executor", ["local", "queue"])
def test_kernel_times_output_and_the_judging_machines_profile_reach_the_next_prompts(tmp_path, monkeypatch,
                                                                                      executor):
    monkeypatch.setenv("PATH", f"{fake_ncu(tmp_path)}:{Path('/usr/bin')}:{Path('/bin')}")
    spec = "local" if executor == "local" else f"queue:{tmp_path / 'queue'}"
    llm = Recording()
    # A queue batches: the seed's profile goes out with the first child, so the first design cannot wait for it.
    llm.waits = executor == "local"
    store = Store(tmp_path / "runs.db")
    config = RunConfig(problem="softmax", iterations=2, executor=spec, compiled_baseline=False)
    sci = Scientist(llm, load_problem("softmax"), "")
    worker = start_worker(tmp_path / "queue") if executor == "queue" else None
    try:
        run = Run.create(config, store=store, seed_source=TWO_LAUNCHES, scientist=sci)
        llm.profiled = lambda: any(p.ncu for p in store.profiles(run.id))
        assert run.start(background=False).status == "finished", run.error
    finally:
        if worker is not None:
            stop_worker(worker)
    (first_profiled, designer), (_, second_designer) = llm.designs[:2]
    finding = llm.prompts["finding"]
    for prompt in (designer, finding):  # the base's, then the child's (the seed with a comment added)
        assert "time per launched kernel and call" in prompt and kernel_times.CPU_PROFILER in prompt
        split = next(line for line in prompt.splitlines() if line.strip().startswith("m=256,n=2048:"))
        assert "normalise_kernel x1" in split and "row_max_kernel x1" in split
        assert f"[stderr] {FALLBACK}" in prompt
    # The stored finding keeps the child's split, so every later designer sees where its time went.
    finding = store.findings(run.id)[0]
    assert "(per kernel on m=256,n=2048: " in finding.text and "row_max_kernel x1" in finding.text
    # Nsight Compute ran where the seed was judged (a slot's judge, or the queue worker), not in the run. The
    # first design did not wait for it (start-up is the seed's evaluation and two model answers); the next
    # design, asked after it was stored (through a queue: after it came back with the first child's verdict),
    # has it.
    assert first_profiled is False and "Nsight Compute on m=256" not in designer
    assert "Nsight Compute on m=256,n=2048" in second_designer
    snap = Snapshot.load(store, run.id)
    profiled = [p for p in snap.profiles if p.ncu]
    assert profiled[0].candidate_id == snap.seed.id  # the child too when its timing made it a new best
    said = [json.loads(json.dumps(e["payload"])) for e in store.events(run.id) if e["type"] == "candidate_profiled"]
    assert any(e["candidate_id"] == snap.seed.id and " on " in e["message"] for e in said)
    shown = "\n".join(sol_lines(snap.metrics()))  # `kscience show`
    assert "kernels (best)" in shown and "row_max_kernel x1" in shown and "of slot time" in shown
    assert FALLBACK in shown
    assert "row_max_kernel" in dict(header_facts(snap))["kernels (best)"]  # the dashboard's header
