"""The scripted model of `--llm scripted` (kscience.scientist.llm.scripted) served as a loopback
OpenAI-compatible endpoint, so a test drives the SDK client and the HTTP path with the same answers.

It tells the roles apart as a server sees them, from the request alone: the JSON schema's name for the
selector and designer, the prompt's headings for the others.

Used by tests/test_campaign.py, tests/test_lines.py and benchmarks/campaign_gpu.py (no model API is
reachable there).
"""

from __future__ import annotations

from llm_servers import FakeOpenAI, Reply

from kscience.scientist.llm.scripted import answer


class _Endless(list):
    """A script that never runs out: every request gets a reply made from what it asked."""

    def pop(self, index=-1):
        return Reply("")

    def __bool__(self):
        return True


def role_of(body: dict) -> str:
    """The scientist's role a request was sent for, read off the request as a server would."""
    schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("name", "")
    prompt = body["messages"][-1]["content"]
    if "Reply with the single word" in prompt:  # the run's first, one-word request
        return "preflight"
    if schema in ("designer", "selector"):
        return schema
    if "# Experiment" in prompt:  # the finding role (every prompt opens with the measurement header)
        return "finding"
    return "writer"  # the writer and the repairer are answered alike: a whole kernel file


class ScriptedKernelModel(FakeOpenAI):
    def __init__(self, solutions: dict[str, str] | None = None, n_plans: int = 1):
        super().__init__([])
        self.n_plans = n_plans
        self.script = _Endless()
        self.solutions = dict(solutions or {})

    def answer(self, body: dict) -> str:
        return answer(role_of(body), body["messages"][-1]["content"], self.solutions, self.n_plans)

    def reply_body(self, reply: Reply, params: dict, request) -> dict:
        return super().reply_body(Reply(self.answer(request.body or {})), params, request)
