"""kscience in Jupyter: magics, a live dashboard, run objects and report figures, and (`export.py`) those
pages and figures for the command line outside a notebook (`kscience show --html`, `serve`, `figures`).

Importing this package needs neither IPython nor ipywidgets; the modules that draw widgets or
register magics import them when they are used. `%load_ext kscience` registers the magics.
"""

from kscience.jupyter.launch import evolve, resume
from kscience.jupyter.results import Candidate, RunResult, open_run

__all__ = ["Candidate", "RunResult", "evolve", "open_run", "resume"]
