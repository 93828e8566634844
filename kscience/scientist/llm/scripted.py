"""`--llm scripted`: a stand-in model for a dry run of the model path, with no key and no network.

It reads each prompt as a model would (never the structured brief the offline scientist reads) and answers
every role in the format a model is asked for: `n_plans` plans for the designer, the fastest member for the
selector, a one-line lesson for findings, and for the writer and repairer a whole kernel file: the solution
given for the problem (`solutions`, by problem name), else the last kernel of the prompt with a comment added,
which is correct and a different text. So a run drives everything a model run does (prompts, parsing the
answers, writing, judging, repairs, findings, the store) on any problem, a KernelBench file or a GPU MODE
folder included, and finds nothing faster: it checks the machinery, as the offline scientist's timings under
the CPU interpreter do. The tests serve these same answers over HTTP (tests/scripted_kernel_model.py), so
there the SDK clients are driven too.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from kscience.scientist.llm.base import LLM
from kscience.scientist.llm.call import full_prompt
from kscience.record.llm_call import LLMCall
from kscience.scientist.llm.remote import PREFLIGHT_PROMPT

NAME = "scripted"


def plans(n: int, first: int = 0) -> dict:
    """The designer's answer: n plans, so n experiments per design round (at most three are chosen)."""
    return {"avenues": ["tile", "fuse", "vectorise"], "plans": [
        {"title": f"variant {i}", "rationale": "scripted", "changes": [f"change {i}"],
         "predicted_min_pct": 1 + i, "predicted_max_pct": 5 + i, "innovation": 3 + i} for i in range(first, first + n)]}


def first_free_variant(prompt: str) -> int:
    """After the variants another line of the run has under way on this base, as a model told so would."""
    under_way = re.search(r"Under way on this base[^:]*: ([^\n]*)", prompt)
    numbers = [int(n) for n in re.findall(r"variant (\d+)", under_way.group(1))] if under_way else []
    return max(numbers, default=-1) + 1


def answer(role: str, prompt: str, solutions: dict[str, str] | None = None, n_plans: int = 1) -> str:
    """What the scripted model says to `prompt`, asked as `role` (preflight, selector, designer, writer, repair,
    finding)."""
    if role == "preflight":
        return "ready"
    if role == "designer":
        return json.dumps(plans(n_plans, first_free_variant(prompt)))
    if role == "selector":
        members = json.loads(prompt.split("```json\n", 1)[1].split("\n```", 1)[0])  # the population block
        ok = [m for m in members if m.get("status") == "ok" and m.get("geomean_us")]
        best = min(ok, key=lambda m: m["geomean_us"]) if ok else members[0]
        return json.dumps({"base_id": best["id"], "reference_id": "", "justification": "fastest"})
    if role == "finding":
        return "The scripted change kept the kernel correct."
    named = re.search(r"Problem `([^`]+)`", prompt)
    if named and named.group(1) in (solutions or {}):
        return f"```python\n{solutions[named.group(1)]}\n```"
    # The kernel to vary is the last code block: the reference's source comes earlier in the prompt.
    base = re.findall(r"```python\n(.*?)```", prompt, re.S)[-1]
    return f"```python\n{base}# scripted variant {prompt.count('variant')}\n```"


class ScriptedLLM(LLM):
    name = NAME

    def __init__(self, solutions: dict[str, str] | None = None, n_plans: int = 1):
        self.solutions, self.n_plans = dict(solutions or {}), n_plans

    async def preflight(self, problem: Any, kernels: list[str]) -> LLMCall:
        """The one-word question a remote model is asked first, asked here too, so its call is recorded."""
        _, call = await self.complete(PREFLIGHT_PROMPT, role="preflight")
        return call

    async def complete(self, prompt: str, *, role: str, system: str | None = None, schema: dict | None = None,
                       context: Any = None) -> tuple[str, LLMCall]:
        started = time.perf_counter()
        text = answer(role, prompt, self.solutions, self.n_plans)
        sent = full_prompt(prompt, system)
        return text, LLMCall(role=role, model=self.name, prompt=sent, response=text, input_tokens=len(sent) // 4,
                             output_tokens=len(text) // 4, latency_s=time.perf_counter() - started, cost_usd=0.0)
