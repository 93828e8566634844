"""The one interface every scientist backend speaks: `complete(prompt, role=..., system=...,
schema=...)` answers with the text and an `LLMCall` record, or raises `LLMError`.

Backends: remote.py (shared by gemini.py and openai_compat.py) and the offline scientist.
The record and the error live in call.py; the run's budget in budget.py.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

# The interface speaks these types.
from kscience.scientist.llm.call import LLMError
from kscience.record.llm_call import LLMCall

__all__ = ["LLM", "LLMCall", "LLMError"]


class LLM(ABC):
    """A source of answers for the scientist: a remote model or the offline scientist."""

    name: str  # "offline", "gemini:MODEL", "openai:MODEL"

    @abstractmethod
    async def complete(
        self, prompt: str, *, role: str, system: str | None = None, schema: dict | None = None,
        context: Any = None,
    ) -> tuple[str, LLMCall]:
        """Answer `prompt`. With `schema`, the text is a JSON string holding the schema's required
        top-level keys. `context` is the structured data the prompt was rendered from (a
        `briefing.Brief`); a model reads the prompt, the offline scientist the context.
        Raises LLMError (with `.call` set when a request was made)."""

    def refusal(self, problem: Any, kernels: list[str]) -> str | None:
        """Why this backend cannot work on the problem from `kernels` (the seed first), where that is known
        without asking anything (a run refuses to start then, and stores nothing); None: it may."""
        return None

    async def preflight(self, problem: Any, kernels: list[str]) -> LLMCall | None:
        """Fail fast, before anything is timed, when this backend cannot work on the problem from `kernels`
        (the seed first) or does not answer: raise LLMError with one line. By default nothing to check."""
        return None
