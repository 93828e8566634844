"""The offline scientist: a non-LLM baseline that answers every role without a network.

It is plain autotuning of the knobs a seed declares (`space.py`, `search.py`: Optuna TPE when the
`offline` extra is installed, else a random+local sweep, exhaustive where the space is small) plus
a fixed catalogue of structural rewrites (`moves.py`, `structural.py`), behind the same LLM
interface the models use (`backend.py`). A run with `--llm offline` answers "did the model beat
plain autotuning?" for the same number of evaluations.
"""

from kscience.scientist.offline.backend import NOTICE, OfflineLLM, cannot_work_on

__all__ = ["NOTICE", "OfflineLLM", "cannot_work_on"]
