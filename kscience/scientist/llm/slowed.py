"""A backend whose every answer takes a set time longer: `--llm offline@30` is the offline scientist
answering like a model that thinks for 30 s a call. It shows how a run uses the machine while a
model thinks (benchmarks/search_throughput.py: one line against several), with no model to pay for."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from kscience.scientist.llm.base import LLM
from kscience.scientist.llm.call import LLMError
from kscience.record.llm_call import LLMCall


def parse_latency(spec: str) -> float:
    """The SECONDS of "offline@SECONDS"."""
    text = spec.partition("@")[2].removesuffix("s")
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise LLMError(f"{spec!r}: the delay after @ is seconds per answer, e.g. offline@30")
    return seconds


class Slowed(LLM):
    def __init__(self, inner: LLM, latency_s: float):
        self.inner, self.latency_s = inner, latency_s
        self.name = f"{inner.name}@{latency_s:g}"

    def refusal(self, problem: Any, kernels: list[str]) -> str | None:
        return self.inner.refusal(problem, kernels)

    async def preflight(self, problem: Any, kernels: list[str]) -> LLMCall | None:
        return await self.inner.preflight(problem, kernels)

    async def complete(self, prompt: str, *, role: str, system: str | None = None, schema: dict | None = None,
                       context: Any = None) -> tuple[str, LLMCall]:
        await asyncio.sleep(self.latency_s)
        text, call = await self.inner.complete(prompt, role=role, system=system, schema=schema, context=context)
        return text, dataclasses.replace(call, latency_s=call.latency_s + self.latency_s)
