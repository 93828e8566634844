"""The record of one exchange with a model: what every backend returns and the store saves verbatim, in the
`llm_calls` table."""

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
