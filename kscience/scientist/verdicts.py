"""A verdict as the model reads it, whole: its status, the judge's message (for a wrong answer: how many
elements, the first bad value against the expected one and the tolerance it crossed; for a rejection: the
evidence and its threshold), the shape it failed on with that shape's sizes, and the shapes it covered.

A failed verdict's message can quote the candidate's own error text (an exception, a compiler's output),
so it is quoted as untrusted data (quoting.py), never pasted in as prompt lines; the status and the shape,
which the judge alone decides, stand outside the quote.
"""

from __future__ import annotations

from kscience.problems import Problem, shape_label
from kscience.scientist.briefing import shape_sizes
from kscience.scientist.quoting import quote, quote_inline, whole_sentences

OK = "ok"
VERDICT_MESSAGE_CHARS = 3000  # the judge's message in a finding or repair prompt, whole sentences up to this
CLAUSE_MESSAGE_CHARS = 600  # the same in a one-line finding, which every later designer reads
SELECTOR_MESSAGE_CHARS = 400  # and in a member of the selector's JSON


def verdict_block(problem: Problem, status: str, message: str, failing_shape: dict | None,
                  coverage: str = "") -> str:
    """The whole verdict as lines of a prompt."""
    lines = [f"Status: {status}"]
    if failing_shape is not None:
        lines.append(f"Failing shape: {shape_sizes(problem, failing_shape)}")
    if status == OK:
        lines.append(f"Judge's message: {whole_sentences(message, VERDICT_MESSAGE_CHARS) or '(none)'}")
    elif message.strip():
        lines.append(quote(message, "The judge's message, whole (it can quote the candidate's own error text)",
                           VERDICT_MESSAGE_CHARS))
    else:
        lines.append("Judge's message: (none recorded)")
    lines.append(f"Shapes covered: {coverage or 'not recorded'}")
    return "\n".join(lines)


def verdict_clause(status: str, message: str, failing_shape: dict | None) -> str:
    """A failed verdict in a few words for a one-line finding: its status, the shape and the message as a
    quoted span ("" for a correct one)."""
    if status == OK:
        return ""
    where = f" on {shape_label(failing_shape)}" if failing_shape is not None else ""
    said = f": {quote_inline(message, CLAUSE_MESSAGE_CHARS)}" if message.strip() else ""
    return f"{status}{where}{said}"


def selector_message(message: str) -> str:
    """A member's message for the selector's JSON (which escapes it): whole sentences within a budget."""
    return whole_sentences(message, SELECTOR_MESSAGE_CHARS)
