"""Two-iteration runs on every built-in and on a KernelBench level-1 and level-2 file, on this machine.

The built-ins run with the offline scientist. The offline scientist cannot write kernels from
scratch, so each KernelBench file is first tried offline (it must fail at once, before any timing,
with a one-line reason) and then run with a scripted model behind the loopback OpenAI-compatible
server of tests/llm_servers.py: it answers every role from the prompt it receives (a first task of
writing a Triton `ModelNew`, then a block-size retune), through the real openai client, exactly as
a model would (in process, without HTTP, where the openai package is not installed). Results go to benchmarks/results/model-runs-<device>-<date>.{json,md}.

    python benchmarks/model_runs.py [--iterations 2] [--only builtins|kernelbench] [--db model-runs.db]
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]  # offline_runs and the loopback servers

from llm_servers import FakeOpenAI, Reply, Respond  # noqa: E402
from offline_runs import row_for, table  # noqa: E402

from kscience.device import detect  # noqa: E402
from kscience.problems import builtin_names, load_problem  # noqa: E402
from kscience.run.config import RunConfig  # noqa: E402
from kscience.cli.progress import Progress  # noqa: E402
from kscience.run.driver import Run  # noqa: E402
from kscience.scientist.hardware import describe_device, run_target  # noqa: E402
from kscience.scientist.knowledge import knowledge_for  # noqa: E402
from kscience.scientist.llm import LLM, Metered  # noqa: E402
from kscience.record.llm_call import LLMCall  # noqa: E402
from kscience.scientist.roles import Scientist  # noqa: E402
from kscience.record.store import Store  # noqa: E402

DATA = HERE.parent / "tests" / "data"
# Each KernelBench file with the sizes it runs at: the level-2 file is the tests' own, set to
# KernelBench's level-2 problem 12 sizes as a user would (`--set`).
KERNELBENCH = {
    HERE / "kernelbench" / "level1_19_ReLU.py": {},
    DATA / "kernelbench_gemm_multiply_leakyrelu.py": {"batch_size": "128", "in_features": "1024", "out_features": "512"},
}
FIRST_PLAN = "Replace the forward with Triton kernels"
SECOND_PLAN = "BLOCK 1024 -> 2048"

# The scripted model's kernels, by problem: correct Triton ModelNew classes (the GEMM stays in cuBLAS).
KERNELS = {
    "level1_19_ReLU": '''import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK=BLOCK)
        return y
''',
    "kernelbench_gemm_multiply_leakyrelu": (DATA / "kernelbench_gemm_multiply_leakyrelu_new.py").read_text(),
}


def _plan(title: str) -> dict:
    return {"title": title, "rationale": "scripted", "changes": [title], "predicted_min_pct": 0,
            "predicted_max_pct": 30, "innovation": 3}


def answer(prompt: str) -> str:
    """The scripted model: an answer for each role, read off the prompt it was sent."""
    problem = re.search(r"^Problem `([^`]+)`", prompt, re.M)
    kernel = KERNELS.get(problem.group(1), "") if problem else ""
    if "Reply with the single word" in prompt:
        return "ready"
    if "\n# Population\n" in prompt:
        members = json.loads(re.search(r"```json\n(.*?)\n```", prompt, re.S).group(1))
        best = min((m for m in members if m["status"] == "ok"), key=lambda m: m["geomean_us"])
        return json.dumps({"base_id": best["id"], "reference_id": "", "justification": "the fastest"})
    if "Design the next round" in prompt:
        title = FIRST_PLAN if "# First task: write the kernels" in prompt else SECOND_PLAN
        return json.dumps({"avenues": [title], "plans": [_plan(title)]})
    if "\n# Experiment\n" in prompt:
        return "A scripted lesson: only a GPU measurement says whether this helped."
    block = 2048 if f"# Plan: {SECOND_PLAN}" in prompt else 1024
    kernel = re.sub(r"^BLOCK = \d+$", f"BLOCK = {block}", kernel, flags=re.M)
    return f"```python\n{kernel}```"


class InProcessModel(LLM):
    """The same scripted answers without HTTP, for a machine that lacks the openai package."""

    name = "scripted (in process)"

    async def complete(self, prompt, *, role, system=None, schema=None, context=None):
        text = answer(prompt)
        return text, LLMCall(role=role, model=self.name, prompt=prompt, response=text, input_tokens=len(prompt) // 4,
                             output_tokens=len(text) // 4, latency_s=0.0, cost_usd=0.0)

    async def preflight(self, problem, kernels):
        return None


def run_in_process(path: Path, sizes: dict, name: str, iterations: int, db: str) -> int:
    """A run of `path` driven by InProcessModel, built as `kscience run` would build it."""
    config = RunConfig(problem=str(path), llm="openai:scripted", name=name, iterations=iterations, overrides=sizes)
    store = Store(db)
    problem = load_problem(config.problem, config.overrides)
    target = run_target(None, describe_device(detect()))
    designer, writer = knowledge_for([], target.topics, problem.name)
    llm = Metered(InProcessModel())
    scientist = Scientist(llm, problem, designer, code_knowledge=writer, strategy="llm", target=target)
    run = Run.create(config, store=store, scientist=scientist)
    llm.recorder = run._record_call  # the calls go into the run's record, as a model's would
    run.subscribe(Progress(iterations))
    return 0 if run.start(background=False).status == "finished" else 1


def run_cli(args: list[str]) -> int:
    return subprocess.run([sys.executable, "-m", "kscience.cli.main", "run", *args]).returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--only", choices=("builtins", "kernelbench"), default=None)
    ap.add_argument("--db", default="model-runs.db")
    ap.add_argument("--out", default=str(HERE / "results"))
    args = ap.parse_args()
    device = detect()
    stamp = datetime.date.today().isoformat()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = re.sub(r"[^A-Za-z0-9_.-]", "", device.name.replace(" ", "_"))
    stem = out / f"model-runs-{tag}-{stamp}{'-' + args.only if args.only else ''}"
    rows: list[dict] = []

    def record(name: str, problem: str, code: int, scientist: str) -> None:
        with Store(args.db) as store:
            run = next(r for r in reversed(store.list_runs()) if r.name == name)
            rows.append(dict(row_for(store, run.id, problem), scientist=scientist, status=run.status,
                             error=run.error, exit_code=code))
        stem.with_suffix(".json").write_text(json.dumps({"device": device.name, "date": stamp,
                                                         "iterations": args.iterations, "rows": rows}, indent=2))
        lines = table(rows) + ["", "| problem | scientist | status | error |", "|---|---|---|---|"]
        lines += [f"| {r['problem']} | {r['scientist']} | {r['status']} | {r['error'] or ''} |" for r in rows]
        stem.with_suffix(".md").write_text(f"# Two-iteration runs, {device.name}, {stamp}\n\n" + "\n".join(lines) + "\n")

    common = ["--iterations", str(args.iterations), "--db", args.db]
    if args.only in (None, "builtins"):
        for problem in builtin_names():
            name = f"offline-{problem}-{stamp}"
            record(name, problem, run_cli([problem, "--llm", "offline", "--name", name, *common]), "offline")
    if args.only in (None, "kernelbench"):
        for path, sizes in KERNELBENCH.items():
            sets = [arg for key, value in sizes.items() for arg in ("--set", f"{key}={value}")]
            name = f"offline-{path.stem}-{stamp}"
            record(name, path.stem, run_cli([str(path), "--llm", "offline", "--name", name, *sets, *common]), "offline")
            name = f"scripted-{path.stem}-{stamp}"
            if importlib.util.find_spec("openai") is not None:
                with FakeOpenAI([Respond(lambda request: Reply(answer(request.body["messages"][-1]["content"])))]
                                * 200) as server:
                    code = run_cli([str(path), "--llm", "openai:scripted", "--base-url", server.base_url,
                                    "--name", name, *sets, *common])
                record(name, path.stem, code, "scripted model (loopback openai)")
            else:  # no openai client here: the same answers in process
                record(name, path.stem, run_in_process(path, sizes, name, args.iterations, args.db),
                       "scripted model (in process: no openai package)")
    print(f"results: {stem}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
