"""How an evaluation ends early: a status and why, raised anywhere on the trusted side."""

from __future__ import annotations


class Verdict(Exception):
    """Ends an evaluation early with a status; `evaluation.evaluate` makes it the result."""

    def __init__(self, status: str, message: str, shape: dict | None = None):
        super().__init__(message)
        self.status, self.shape = status, shape
