"""The one error every backend raises, and the text of an exchange with a model as it is recorded.

An `LLMError` message is a single line naming the provider and model, so notebooks and the CLI show one
readable sentence, not a traceback. The record of one exchange, `LLMCall`, is the store's
(kscience.record.llm_call).
"""

from __future__ import annotations

from kscience.record.llm_call import LLMCall


def one_line(text: object, limit: int = 300) -> str:
    """Collapse any text (an exception, a server body) to one short line."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def full_prompt(prompt: str, system: str | None) -> str:
    """The text recorded in LLMCall.prompt: what the model saw, system part first."""
    return prompt if not system else f"[system]\n{system}\n\n[user]\n{prompt}"


class LLMError(Exception):
    """A model could not give a usable answer: provider down, rate limited past retries,
    timed out, bad response, or budget spent. The message is always one line."""

    def __init__(self, message: str, call: LLMCall | None = None):
        super().__init__(one_line(message))
        self.call = call  # the failed exchange, when a request was actually made


class NothingToPropose(LLMError):
    """The scientist has no experiment for the base it was given: the offline scientist, on a kernel its
    catalogue cannot rewrite (a per-shape composite, say). The line tries its next base, as it does when
    everything proposed was carried out already."""
