"""LLM backends for the scientist, behind one small interface.

    llm = make_llm("gemini:gemini-2.5-pro", budget=Budget(max_cost_usd=5), recorder=calls.append)
    text, call = await llm.complete(prompt, role="designer", system=..., schema=...)

Read in this order: base.py (the interface), call.py (the error; the record of an exchange, `LLMCall`, is
kscience.record.llm_call),
budget.py (a run's limits), remote.py with gemini.py and openai_compat.py (the HTTP backends),
scripted.py (`--llm scripted`, a stand-in model for a dry run), slowed.py (`offline@SECONDS`),
providers.py (the providers `--llm PROVIDER:MODEL` takes, named once), factory.py (`make_llm`,
`default_llm_spec`), pricing.py. This package's own import names only
the types, so the offline scientist (which implements the interface) can import them freely.
"""

from kscience.scientist.llm.base import LLM
from kscience.scientist.llm.budget import Budget, BudgetExceeded, Metered
from kscience.scientist.llm.call import LLMError, NothingToPropose
from kscience.scientist.llm.remote import LLM_RETRIES, LLM_TIMEOUT_S

__all__ = ["LLM", "LLMError", "NothingToPropose", "BudgetExceeded", "Budget", "Metered", "LLM_RETRIES",
           "LLM_TIMEOUT_S"]
