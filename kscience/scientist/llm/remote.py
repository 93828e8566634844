"""What the HTTP backends (Gemini, OpenAI-compatible) share: timing, token and cost accounting,
JSON checking, and turning SDK exceptions into one-line LLMErrors."""

from __future__ import annotations

import json
import logging
import re
import time
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

from kscience.redact import redact
from kscience.scientist.llm.base import LLM
from kscience.scientist.llm.call import LLMError, full_prompt, one_line
from kscience.record.llm_call import LLMCall
from kscience.scientist.llm.pricing import cost_usd

log = logging.getLogger(__name__)

LLM_TIMEOUT_S = 120.0  # limit per request attempt, unless a run sets llm_timeout_s
LLM_RETRIES = 4  # retries of a failed request (the SDKs' own backoff), unless a run sets llm_retries
PREFLIGHT_PROMPT = "kscience is checking that this endpoint answers. Reply with the single word: ready"
PREFLIGHT_RETRIES = 1


@dataclass
class Answer:
    """What a remote backend got back, before kscience checks it."""

    text: str
    input_tokens: int
    output_tokens: int
    prompt: str  # the full prompt as finally sent (a fallback may have added to it)
    finish: str = ""  # the provider's stop reason, shown when the text is empty


def is_timeout(exc: BaseException) -> bool:
    """True for the timeout exceptions of every transport the SDKs use (asyncio, aiohttp,
    httpx, httpx2, openai); matched by class name so none of them has to be imported here."""
    return any("Timeout" in cls.__name__ for cls in type(exc).__mro__)


def retries_phrase(n: int) -> str:
    """" after 2 retries", or nothing when there were none."""
    return f" after {n} retr{'y' if n == 1 else 'ies'}" if n else ""


_FENCE = re.compile(r"^```[A-Za-z]*\s*\n(.*?)\n?```$", re.DOTALL)


def parse_json_answer(text: str, schema: dict) -> tuple[str | None, str | None]:
    """(JSON text, None) when `text` is JSON and, for an object schema, an object holding the
    required top-level keys; else (None, what is wrong). A single markdown fence around the JSON is
    dropped, because OpenAI-compatible servers in plain JSON mode sometimes add one."""
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    if fenced:
        stripped = fenced.group(1).strip()
    try:
        value = json.loads(stripped)
    except json.JSONDecodeError as exc:
        return None, f"{exc.msg} at line {exc.lineno} column {exc.colno} (starts {stripped[:60]!r})"
    if schema.get("type") == "object" or "required" in schema or "properties" in schema:
        if not isinstance(value, dict):
            return None, f"expected a JSON object, got {type(value).__name__}"
        missing = [key for key in schema.get("required", []) if key not in value]
        if missing:
            return None, f"missing required keys {missing}"
    return stripped, None


class RemoteLLM(LLM):
    """Shared machinery of the HTTP backends: timing, token and cost accounting, JSON checking,
    and turning SDK exceptions into one-line LLMErrors."""

    provider: str  # "gemini" or "openai"

    def __init__(self, model: str, *, timeout_s: float, max_retries: int, secrets: tuple[str, ...]):
        self.model = model
        self.name = f"{self.provider}:{model}"
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self._secrets = tuple(s for s in secrets if s)

    @abstractmethod
    def _make_client(self) -> Any:
        """A new async SDK client, usable as an async context manager, configured with this
        backend's key, base URL, timeout and retries. One is made per call: SDK clients hold
        connection pools tied to the event loop that used them, and a notebook may run each
        call in a fresh loop; closing the client after its call leaves nothing behind."""

    @abstractmethod
    async def _send(self, client: Any, prompt: str, *, role: str, system: str | None, schema: dict | None) -> Answer:
        """One request through the SDK (its own retries included)."""

    @abstractmethod
    def _explain(self, exc: Exception) -> str:
        """One line saying what an SDK exception means, without the provider prefix."""

    def _redact(self, text: str) -> str:
        return redact(text, self._secrets)

    async def preflight(self, problem: Any, kernels: list[str]) -> LLMCall:
        """One tiny request, with at most PREFLIGHT_RETRIES retries, so a dead endpoint, a wrong model
        name or a bad key shows in seconds, before minutes of baseline timing."""
        retries, self.max_retries = self.max_retries, min(self.max_retries, PREFLIGHT_RETRIES)
        try:
            _, call = await self.complete(PREFLIGHT_PROMPT, role="preflight")
        except LLMError as exc:
            raise LLMError(f"{exc} (a first, one-word request failed, so nothing was timed)", exc.call) from None
        finally:
            self.max_retries = retries
        return call

    async def complete(
        self, prompt: str, *, role: str, system: str | None = None, schema: dict | None = None,
        context: Any = None,
    ) -> tuple[str, LLMCall]:
        started = time.perf_counter()
        answer: Answer | None = None
        problem: str | None = None
        try:
            async with self._make_client() as client:
                answer = await self._send(client, prompt, role=role, system=system, schema=schema)
        except LLMError as exc:
            problem = str(exc)
        except Exception as exc:  # every SDK and transport failure becomes one line
            log.debug("%s request failed", self.name, exc_info=True)
            if is_timeout(exc):
                elapsed = time.perf_counter() - started
                problem = f"{self.name}: timed out after {elapsed:.1f}s (limit {self.timeout_s:g}s per attempt)"
            else:
                problem = f"{self.name}: {self._explain(exc)}"
        latency_s = time.perf_counter() - started

        text = answer.text if answer else ""
        if answer is not None and not text.strip():
            problem = f"{self.name} returned no text for the {role} (finish reason: {answer.finish or 'unknown'})"
        elif answer is not None and schema is not None:
            parsed, what = parse_json_answer(text, schema)
            if what is not None:
                problem = f"{self.name} returned malformed JSON for the {role}: {what}"
            else:
                text = parsed

        input_tokens = answer.input_tokens if answer else 0
        output_tokens = answer.output_tokens if answer else 0
        cost, priced = cost_usd(self.model, input_tokens, output_tokens)
        call = LLMCall(
            role=role,
            model=self.name,
            prompt=answer.prompt if answer else full_prompt(prompt, system),
            response=answer.text if answer else "",
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            latency_s=latency_s,
            cost_usd=cost,
            error=self._redact(one_line(problem)) if problem else None,
            priced=priced,
        )
        if call.error is not None:
            raise LLMError(call.error, call) from None
        return text, call
