"""kscience: an LLM scientist that evolves GPU kernels, judged by an isolated evaluator.

Data flows one way: problems -> evaluate -> record -> scientist -> run -> campaigns -> cli/jupyter,
each a folder of this package (docs/architecture.md draws the map; the README's Layout section gives
the order to read the modules in). Importing this package imports nothing:
the evaluator's worker, the CLI and the notebook side each load only what they use.
"""

from kscience.version import __version__

__all__ = ["__version__", "load_ipython_extension", "open_run"]


def load_ipython_extension(ipython):
    """`%load_ext kscience` registers the `%%kernel_evolve` and `%kscience` magics."""
    from kscience.jupyter.magics import register  # IPython: the jupyter extra

    register(ipython)


def open_run(run_id, db=None):
    """Reopen a stored run as a RunResult (it follows the run while another process still drives it)."""
    from kscience.jupyter.results import open_run as _open_run  # the notebook side, loaded only when asked

    return _open_run(run_id, db=db)
