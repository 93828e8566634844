"""The one interface every scientist backend speaks, the record of each exchange, and the run's budget.

A backend answers `complete(prompt, role=..., system=..., schema=...)` with the text and an
`LLMCall` record. Every failure surfaces as an `LLMError` whose message is a single line naming
the provider and model, so notebooks and the CLI show one readable sentence, not a traceback.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import Any, Callable

from kscience.scientist.llm.pricing import cost_usd

log = logging.getLogger(__name__)

PREFLIGHT_PROMPT = "kscience is checking that this endpoint answers. Reply with the single word: ready"
PREFLIGHT_RETRIES = 1

@dataclass
class LLMCall:
    """One exchange with a model, successful or not; the store saves these verbatim."""

    role: str  # "selector" | "designer" | "writer" | "repair" | "finding"
    model: str  # "provider:model", e.g. "gemini:gemini-2.5-pro"
    prompt: str  # the full text sent (system + user); never holds a key
    response: str  # the raw text that came back ("" when nothing did)
    input_tokens: int
    output_tokens: int
    latency_s: float
    cost_usd: float  # estimate from pricing.py; 0.0 when the model is not in the table
    error: str | None = None
    priced: bool = True  # False when cost_usd is 0.0 only because the model's price is unknown

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "LLMCall":
        return cls(**d)


def one_line(text: object, limit: int = 300) -> str:
    """Collapse any text (an exception, a server body) to one short line."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


class LLMError(Exception):
    """A model could not give a usable answer: provider down, rate limited past retries,
    timed out, bad response, or budget spent. The message is always one line."""

    def __init__(self, message: str, call: LLMCall | None = None):
        super().__init__(one_line(message))
        self.call = call  # the failed exchange, when a request was actually made


class BudgetExceeded(LLMError):
    """The run's money, token or time budget is spent; raised before a request goes out."""


class Budget:
    """Limits shared by every call of one run. Thread-safe, because scientist roles may run
    concurrently. `check()` before each call, `add()` after it, failed calls included."""

    def __init__(
        self,
        max_cost_usd: float | None = None,
        max_tokens: int | None = None,
        time_limit_s: float | None = None,
    ):
        self.max_cost_usd = max_cost_usd
        self.max_tokens = max_tokens
        self.time_limit_s = time_limit_s
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._cost_usd = 0.0
        self._tokens = 0
        self._calls = 0

    @property
    def used(self) -> dict:
        with self._lock:
            return {
                "cost_usd": self._cost_usd,
                "tokens": self._tokens,
                "elapsed_s": time.monotonic() - self._started,
                "calls": self._calls,
            }

    def check(self) -> None:
        used = self.used
        if self.max_cost_usd is not None and used["cost_usd"] >= self.max_cost_usd:
            raise BudgetExceeded(
                f"budget spent: ${used['cost_usd']:.4f} of ${self.max_cost_usd:.4f} after {used['calls']} calls"
            )
        if self.max_tokens is not None and used["tokens"] >= self.max_tokens:
            raise BudgetExceeded(
                f"budget spent: {used['tokens']} of {self.max_tokens} tokens after {used['calls']} calls"
            )
        if self.time_limit_s is not None and used["elapsed_s"] >= self.time_limit_s:
            raise BudgetExceeded(f"time limit reached: {used['elapsed_s']:.0f}s of {self.time_limit_s:g}s")

    def add(self, call: LLMCall) -> None:
        with self._lock:
            self._cost_usd += call.cost_usd
            self._tokens += call.tokens
            self._calls += 1


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

    async def preflight(self, problem: Any, kernels: list[str]) -> None:
        """Fail fast, before anything is timed, when this backend cannot work on the problem from `kernels`
        (the seed first) or does not answer: raise LLMError with one line. By default nothing to check."""


class Metered(LLM):
    """Puts a run's budget and recorder around any backend: check the budget before each call,
    then account and record every exchange, the failed ones too."""

    def __init__(
        self,
        inner: LLM,
        budget: Budget | None = None,
        recorder: Callable[[LLMCall], None] | None = None,
    ):
        self.inner = inner
        self.name = inner.name
        self.budget = budget
        self.recorder = recorder

    async def preflight(self, problem: Any, kernels: list[str]) -> None:
        if self.budget is not None:
            self.budget.check()
        try:
            call = await self.inner.preflight(problem, kernels)
        except LLMError as exc:
            if exc.call is not None:
                self._account(exc.call)
            raise
        if call is not None:
            self._account(call)

    async def complete(
        self, prompt: str, *, role: str, system: str | None = None, schema: dict | None = None,
        context: Any = None,
    ) -> tuple[str, LLMCall]:
        if self.budget is not None:
            self.budget.check()
        try:
            text, call = await self.inner.complete(prompt, role=role, system=system, schema=schema, context=context)
        except LLMError as exc:
            if exc.call is not None:
                self._account(exc.call)
            raise
        self._account(call)
        return text, call

    def _account(self, call: LLMCall) -> None:
        if self.budget is not None:
            self.budget.add(call)
        if self.recorder is not None:
            self.recorder(call)


@dataclass
class Answer:
    """What a remote backend got back, before kscience checks it."""

    text: str
    input_tokens: int
    output_tokens: int
    prompt: str  # the full prompt as finally sent (a fallback may have added to it)
    finish: str = ""  # the provider's stop reason, shown when the text is empty


def full_prompt(prompt: str, system: str | None) -> str:
    """The text recorded in LLMCall.prompt: what the model saw, system part first."""
    return prompt if not system else f"[system]\n{system}\n\n[user]\n{prompt}"


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
        for secret in self._secrets:
            text = text.replace(secret, "[redacted]")
        return text

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
