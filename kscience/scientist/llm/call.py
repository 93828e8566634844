"""The record of one exchange with a model, and the one error every backend raises.

Both are what the rest of kscience sees of a model: the store saves each `LLMCall` verbatim, and
an `LLMError` message is a single line naming the provider and model, so notebooks and the CLI
show one readable sentence, not a traceback.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


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
