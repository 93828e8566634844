"""Credentials never leave the process that holds them: the one place that says what a secret
looks like and masks it. The store, the evaluator's sandbox and the LLM backends all use it."""

from __future__ import annotations

import os
import re

# Environment variable names that hold credentials (API keys, tokens, passwords, cookies).
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION", re.I)
MASK = "[redacted]"


def secret_values() -> list[str]:
    """Values of this process's environment that look like credentials (long enough to be one)."""
    return [v for k, v in os.environ.items() if SECRET_NAME.search(k) and len(v) >= 8]


def redact(text: str, secrets: list[str] | tuple[str, ...] | None = None) -> str:
    """`text` with every secret (default: `secret_values()`) replaced by a mask."""
    for value in secrets if secrets is not None else secret_values():
        if value:
            text = text.replace(value, MASK)
    return text
