"""The model APIs a run can use, named once: what `--llm PROVIDER:MODEL` takes (factory.make_llm builds
each), so every text that lists them (the --llm help, the factory's refusal, the offline scientist's and a
campaign's advice) reads them from here."""

from __future__ import annotations

PROVIDERS = ("gemini", "openai")  # gemini: Google's API or Vertex AI; openai: any OpenAI-compatible server


def model_specs(last: str = " or ") -> str:
    """"gemini:MODEL or openai:MODEL": every provider's spec, the last one joined by `last`."""
    specs = [f"{p}:MODEL" for p in PROVIDERS]
    return ", ".join(specs[:-1]) + last + specs[-1] if len(specs) > 1 else specs[0]
