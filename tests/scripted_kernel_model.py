"""A loopback OpenAI-compatible model that plays every role of the scientist, for campaigns.

It answers by role, as the scientist asks (the JSON schema's name for the selector and designer,
the prompt's headings for the others): `n_plans` plans for the designer, the fastest member for the
selector, a one-line lesson for findings, and for the writer and repairer a full kernel file:
the solution given for the problem (a correct `ModelNew` for a KernelBench file), else the base
kernel of the prompt with a comment added, which is correct and a different text.

Used by tests/test_campaign.py and benchmarks/campaign_gpu.py (no model API is reachable there).
"""

from __future__ import annotations

import json
import re

from llm_servers import FakeOpenAI, Reply


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


class _Endless(list):
    """A script that never runs out: every request gets a reply made from what it asked."""

    def pop(self, index=-1):
        return Reply("")

    def __bool__(self):
        return True


class ScriptedKernelModel(FakeOpenAI):
    def __init__(self, solutions: dict[str, str] | None = None, n_plans: int = 1):
        super().__init__([])
        self.n_plans = n_plans
        self.script = _Endless()
        self.solutions = dict(solutions or {})

    def answer(self, body: dict) -> str:
        schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("name", "")
        prompt = body["messages"][-1]["content"]
        if "Reply with the single word" in prompt:  # the run's first, one-word request
            return "ready"
        if schema == "designer":
            return json.dumps(plans(self.n_plans, first_free_variant(prompt)))
        if schema == "selector":
            members = json.loads(prompt.split("```json\n", 1)[1].split("\n```", 1)[0])  # the population block
            ok = [m for m in members if m.get("status") == "ok" and m.get("geomean_us")]
            best = min(ok, key=lambda m: m["geomean_us"]) if ok else members[0]
            return json.dumps({"base_id": best["id"], "reference_id": "", "justification": "fastest"})
        if "# Experiment" in prompt:  # the finding role (every prompt opens with the measurement header)
            return "The scripted change kept the kernel correct."
        named = re.search(r"Problem `([^`]+)`", prompt)
        if named and named.group(1) in self.solutions:
            return f"```python\n{self.solutions[named.group(1)]}\n```"
        # The kernel to vary is the last code block: the reference's source comes earlier in the prompt.
        base = re.findall(r"```python\n(.*?)```", prompt, re.S)[-1]
        return f"```python\n{base}# scripted variant {prompt.count('variant')}\n```"

    def reply_body(self, reply: Reply, params: dict, request) -> dict:
        return super().reply_body(Reply(self.answer(request.body or {})), params, request)
