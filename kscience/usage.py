"""What counts as the user's mistake: bad arguments, settings, input files, problems, databases or
model names. The command line shows these as one `kscience: error:` line and exits with 2; the
magics as one `UsageError:` line. Anything else is a bug and keeps its traceback."""

from __future__ import annotations

from kscience.run.config import ConfigError
from kscience.problems import ProblemError
from kscience.scientist.knowledge import KnowledgeError
from kscience.scientist.llm import LLMError
from kscience.record.store import StoreError


class UsageError(Exception):
    """Bad arguments or input files."""


USER_ERRORS = (UsageError, ConfigError, ProblemError, KnowledgeError, LLMError, StoreError)
