"""A run's money, token and time budget, and the wrapper that holds every backend to it and
records every exchange, the failed ones too."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from kscience.scientist.llm.base import LLM
from kscience.scientist.llm.call import LLMError
from kscience.record.llm_call import LLMCall


class BudgetExceeded(LLMError):
    """The run's money, token or time budget is spent; raised before a request goes out."""


@dataclass(frozen=True)
class Used:
    """What a run's model calls have spent so far."""

    cost_usd: float
    tokens: int
    elapsed_s: float  # since the budget was made
    calls: int


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
    def used(self) -> Used:
        with self._lock:
            return Used(self._cost_usd, self._tokens, time.monotonic() - self._started, self._calls)

    def check(self) -> None:
        used = self.used
        if self.max_cost_usd is not None and used.cost_usd >= self.max_cost_usd:
            raise BudgetExceeded(
                f"budget spent: ${used.cost_usd:.4f} of ${self.max_cost_usd:.4f} after {used.calls} calls"
            )
        if self.max_tokens is not None and used.tokens >= self.max_tokens:
            raise BudgetExceeded(
                f"budget spent: {used.tokens} of {self.max_tokens} tokens after {used.calls} calls"
            )
        if self.time_limit_s is not None and used.elapsed_s >= self.time_limit_s:
            raise BudgetExceeded(f"time limit reached: {used.elapsed_s:.0f}s of {self.time_limit_s:g}s")

    def add(self, call: LLMCall) -> None:
        with self._lock:
            self._cost_usd += call.cost_usd
            self._tokens += call.tokens
            self._calls += 1


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

    def refusal(self, problem: Any, kernels: list[str]) -> str | None:
        return self.inner.refusal(problem, kernels)

    async def preflight(self, problem: Any, kernels: list[str]) -> LLMCall | None:
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
        return call

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
