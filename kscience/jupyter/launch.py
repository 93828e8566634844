"""Starting and resuming runs from a notebook: what `%%kernel_evolve` does, as Python functions.

    run = evolve("softmax", kernel=open("my_seed.py").read(), iterations=2, llm="offline")
    run = resume("r-3f2a91bc", iterations=1)

Both show a live view and return a `RunResult`. Where widgets render, the run goes on in the
background and the call returns at once; elsewhere (papermill, nbconvert, a terminal) the call
shows a text summary and returns when the run ends. `new_run` and `resumed_run` prepare a run
without starting it, for callers that need the object first (the magic's `-o NAME`). Their
keyword settings are RunConfig's fields (kscience.run.config), the same the magics and CLI offer.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

from kscience.run.config import check_resume_changes, check_settings, new_config
from kscience.jupyter.live import choose_view
from kscience.jupyter.results import RunResult
from kscience.jupyter.views import show_live
from kscience.problems import Problem, ProblemError, load_problem
from kscience.run.driver import Run
from kscience.record.store import open_store


class SeedError(ValueError):
    """A starting kernel that cannot be used: not Python, or without the problem's entry point."""


def check_seed(source: str, entry: str, call: str) -> None:
    """The seed must parse and define the problem's entry point (its kind's: custom_kernel or ModelNew) at top
    level; `call`: how the judge calls it, as the refusal says."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise SeedError(f"the starting kernel is not valid Python: {exc.msg} (line {exc.lineno})") from None
    defined = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.ImportFrom):
            defined |= {a.asname or a.name for a in node.names}
    if entry not in defined:
        raise SeedError(f"the starting kernel must define {entry} (the problem calls {call})")


def problem_locator(problem) -> tuple[str, dict]:
    """(locator, overrides) of a built-in name, a file or folder path, or a loaded Problem."""
    if isinstance(problem, Problem):
        return problem.locator, dict(problem.overrides)
    if isinstance(problem, (str, os.PathLike)):
        return os.fspath(problem), {}
    raise ProblemError(f"expected a problem name, path or Problem, got {type(problem).__name__}")


def new_run(problem, kernel: str | None = None, *, db: str | Path | None = None, **settings) -> RunResult:
    """Store a new run of `problem` from the starting kernel source `kernel` (the problem's own
    seed when None), ready to start. `settings` are RunConfig fields: iterations, llm, name,
    overrides, strategy, repairs, executor, gpus, knowledge, seed, max_cost_usd, ... Without
    `llm`, the model is chosen from the API keys set."""
    check_settings(settings)
    locator, problem_overrides = problem_locator(problem)
    settings = {**settings, "overrides": {**problem_overrides, **(settings.get("overrides") or {})}}
    loaded = load_problem(locator, settings["overrides"])
    if kernel is not None:
        check_seed(kernel, loaded.entry, loaded.kind.call)
    store = open_store(db, create=True)
    run = Run.create(new_config(locator, settings), store=store, seed_source=kernel)
    return RunResult(store, run.id, run=run)


def resumed_run(run_id: str, *, iterations: int | None = None, db: str | Path | None = None, force: bool = False,
                **changes) -> RunResult:
    """Take up a stopped, failed or interrupted run, ready to start: `iterations` more rounds
    (default: what remains of its target); `changes` replace the settings a resumed run may
    change (kscience.run.config.RESUMABLE), e.g. llm="offline"."""
    check_resume_changes(changes)
    store = open_store(db, create=False)
    run = Run.resume(run_id, store=store, iterations=iterations, force=force, **changes)
    return RunResult(store, run.id, run=run)


def evolve(problem, kernel: str | None = None, *, view: str = "auto", **options) -> RunResult:
    """Start a run and show it live; `options` as for `new_run`. Where widgets render this returns
    at once with the run going on in the background; elsewhere it returns when the run ends."""
    choose_view(view)  # a bad view fails before anything is stored
    result = new_run(problem, kernel, **options)
    show_live(result, view, start=True)
    return result


def resume(run_id: str, *, view: str = "auto", **options) -> RunResult:
    """Continue a stored run and show it live; `options` as for `resumed_run`."""
    choose_view(view)
    result = resumed_run(run_id, **options)
    show_live(result, view, start=True)
    return result
