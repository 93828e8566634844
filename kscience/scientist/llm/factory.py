"""Choosing and building the scientist's backend from a spec: "PROVIDER:MODEL" for each of
providers.PROVIDERS (gemini; openai: any OpenAI-compatible server through base_url), "offline" (the
scientist that needs no model: knob search and known rewrites; "offline@SECONDS" makes each of its answers take that long, like a model's),
"scripted" (a stand-in model for a dry run of the model path), or None to pick from the API keys in the
environment. Neither SDK is imported until its backend makes a client."""

from __future__ import annotations

import os
from typing import Callable

from kscience.scientist.llm.base import LLM
from kscience.scientist.llm.budget import Budget, Metered
from kscience.scientist.llm.call import LLMError
from kscience.record.llm_call import LLMCall
from kscience.scientist.llm.gemini import DEFAULT_GEMINI_MODEL, GeminiLLM, gemini_credentials
from kscience.scientist.llm.openai_compat import DEFAULT_OPENAI_MODEL, OpenAILLM
from kscience.scientist.llm.providers import PROVIDERS
from kscience.scientist.llm.remote import LLM_RETRIES, LLM_TIMEOUT_S
from kscience.scientist.llm.scripted import NAME as SCRIPTED, ScriptedLLM
from kscience.scientist.llm.slowed import Slowed, parse_latency
from kscience.scientist.offline import OfflineLLM


def default_llm_spec() -> tuple[str, str]:
    """(spec, reason): Gemini when its credentials are set, else OpenAI, else the offline scientist."""
    gemini = gemini_credentials()
    if gemini is not None:
        return f"gemini:{DEFAULT_GEMINI_MODEL}", f"{gemini} is set: using Gemini"
    if os.environ.get("OPENAI_API_KEY"):
        return f"openai:{DEFAULT_OPENAI_MODEL}", "OPENAI_API_KEY is set: using OpenAI"
    return "offline", "no GEMINI_API_KEY/GOOGLE_API_KEY/OPENAI_API_KEY set: using the offline scientist"


def make_llm(
    spec: str | None,
    *,
    base_url: str | None = None,
    budget: Budget | None = None,
    timeout_s: float = LLM_TIMEOUT_S,
    max_retries: int = LLM_RETRIES,
    recorder: Callable[[LLMCall], None] | None = None,
    seed: int = 0,
) -> LLM:
    """Build the backend named by `spec`, wrapped so that `budget` is checked before every call
    and every exchange, failed ones included, is accounted in `budget` and then given to `recorder`.
    `seed` makes the offline scientist's choices vary between runs; online models ignore it."""
    spec = (spec or default_llm_spec()[0]).strip()
    provider, _, model = spec.partition(":")
    if provider == "gemini":
        inner: LLM = GeminiLLM(model or DEFAULT_GEMINI_MODEL, base_url=base_url, timeout_s=timeout_s,
                               max_retries=max_retries)
    elif provider == "openai":
        inner = OpenAILLM(model or DEFAULT_OPENAI_MODEL, base_url=base_url, timeout_s=timeout_s,
                          max_retries=max_retries)
    elif spec == "offline":
        inner = OfflineLLM(seed=seed)
    elif spec == SCRIPTED:
        inner = ScriptedLLM()
    elif spec.startswith("offline@"):  # the offline scientist answering as slowly as a model (see slowed.py)
        inner = Slowed(OfflineLLM(seed=seed), parse_latency(spec))
    else:
        raise LLMError(f"unknown LLM {spec!r}: use {', '.join(p + ':MODEL' for p in PROVIDERS)}, offline, "
                       f"offline@SECONDS or {SCRIPTED}")
    return Metered(inner, budget=budget, recorder=recorder)
