"""What a candidate printed, as the scientist is shown it: its stdout and stderr (Python and Triton
warnings included, which go to stderr), each distinct line once with how often it came, warnings
first, bounded and with credentials masked.

A kernel that prints when it takes a fallback ("TMA unavailable, using pointer loads") says more
about an outlier time than the time does. The text comes from the candidate's process: it is shown,
never believed.
"""

from __future__ import annotations

import re

from kscience.redact import redact

MAX_LINES = 24
MAX_LINE_CHARS = 240
# Lines that say something went another way than the code intended.
WARNING = re.compile(r"warn|fall(?:ing)?\s*back|deprecat|not supported|unsupported|error|slow path|disabled", re.I)


def _distinct(text: str) -> list[tuple[str, int]]:
    """Each distinct non-blank line with its count, in the order first seen."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        line = line.rstrip()
        if line.strip():
            counts[line[:MAX_LINE_CHARS]] = counts.get(line[:MAX_LINE_CHARS], 0) + 1
    return list(counts.items())


def digest(stdout: str, stderr: str) -> str:
    """The candidate's output in at most MAX_LINES lines ("" when it printed nothing): warning lines
    first, then the rest, each prefixed by its stream and suffixed by its count when repeated."""
    rows = [(stream, line, n) for stream, text in (("stderr", stderr), ("stdout", stdout))
            for line, n in _distinct(redact(text or ""))]
    rows.sort(key=lambda r: not WARNING.search(r[1]))  # stable: warnings first, each stream's order kept
    shown = [f"[{stream}] {line}" + (f"  (x{n})" if n > 1 else "") for stream, line, n in rows[:MAX_LINES]]
    if len(rows) > MAX_LINES:
        shown.append(f"... and {len(rows) - MAX_LINES} more distinct line(s)")
    return "\n".join(shown)


def warning_count(text: str) -> int:
    """How many distinct lines of a digest read as warnings."""
    return sum(bool(WARNING.search(line)) for line in text.splitlines() if line.startswith("["))
