"""IPython magics: `%%kernel_evolve` starts or resumes a run; `%kscience` is the CLI as a line magic.

    %load_ext kscience

    %%kernel_evolve softmax --iterations 2 -o run
    <the starting kernel: a module that defines custom_kernel>

    %kernel_evolve softmax --resume r-3f2a91bc     # one %: no cell body, so the problem's own
                                                   # seed, or the stored run, is the start

Mistakes (bad arguments, an unknown problem, a cell body that does not parse, a missing API key)
end the cell with one `UsageError:` line, which IPython shows without a traceback.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import sys

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from kscience.jupyter import launch
from kscience.jupyter.live import VIEWS, choose_view
from kscience.problems import Problem
from kscience.run import STRATEGIES

DEFAULT_ITERATIONS = 3


def _expected_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean bad input or configuration, shown as one line rather than a traceback."""
    from kscience.cli import UsageError as CliUsageError
    from kscience.problems import ProblemError
    from kscience.scientist.knowledge import KnowledgeError
    from kscience.scientist.llm import LLMError
    from kscience.store import StoreError

    return CliUsageError, ProblemError, KnowledgeError, LLMError, StoreError, ValueError, OSError


@contextlib.contextmanager
def one_line_errors():
    try:
        yield
    except _expected_errors() as exc:
        raise UsageError(" ".join(str(exc).split()) or type(exc).__name__) from None


@magics_class
class KscienceMagics(Magics):
    @line_cell_magic
    @magic_arguments()
    @argument("problem", help="a built-in problem name, a problem file or folder, or the name of a notebook "
                              "variable holding a Problem (or a name or path)")
    @argument("--iterations", type=int, metavar="N",
              help=f"design rounds (default {DEFAULT_ITERATIONS}; with --resume: what remains of the run's target)")
    @argument("--llm", metavar="ID",
              help="offline, gemini:MODEL or openai:MODEL (default: chosen from the API keys set)")
    @argument("--db", metavar="PATH", help="SQLite file of runs (default: $KSCIENCE_DB or ./kscience.db)")
    @argument("-o", "--output", metavar="NAME", help="also store the run object in this notebook variable")
    @argument("--resume", metavar="RUN_ID", help="continue this stored run instead of starting one (the cell body, "
                                                 "if any, is then ignored)")
    @argument("--name", default="", help="a label for the run")
    @argument("--strategy", choices=STRATEGIES, help="how the base kernel is picked")
    @argument("--repairs", type=int, metavar="K", help="repair attempts per broken candidate (default 2)")
    @argument("--seed", type=int, metavar="N", help="the scientist's random seed (default 0)")
    @argument("--knowledge", action="append", metavar="DIR", help="folder of *.md notes (repeatable)")
    @argument("--executor", help="local, ray or ray://HOST:PORT (default local)")
    @argument("--gpus", type=int, metavar="N", help="evaluate on at most N GPUs at once")
    @argument("--base-url", metavar="URL", help="endpoint of an OpenAI-compatible or Gemini server")
    @argument("--set", action="append", metavar="NAME=VALUE", help="override a constant of a KernelBench file")
    @argument("--max-cost-usd", type=float, metavar="USD", help="stop once the LLM calls cost this much")
    @argument("--max-tokens", type=int, metavar="N", help="stop once the LLM calls used this many tokens")
    @argument("--time-limit", type=float, metavar="SECONDS", help="stop this session after this long")
    @argument("--llm-retries", type=int, metavar="N", help="retries of a failed LLM request (default 4)")
    @argument("--llm-timeout", type=float, metavar="SECONDS", help="limit per LLM request (default 120)")
    @argument("--view", choices=VIEWS, default="auto",
              help="widgets: the live dashboard; text: a text summary that updates in place (what papermill "
                   "and nbconvert get); auto: widgets in a kernel that JupyterLab or Notebook started, text "
                   "elsewhere (KSCIENCE_VIEW overrides it)")
    def kernel_evolve(self, line, cell=None):
        """Evolve a GPU kernel: the cell body is the starting kernel, a module defining custom_kernel
        (or ModelNew for KernelBench problems). As a line magic (one %), the run starts from the
        problem's own seed, or continues the run named by --resume. Shows a live dashboard and
        returns the run object (kscience.jupyter.RunResult): .best, .candidates, .to_dataframe(),
        .plot(), .wait(), .stop().
        """
        args = parse_argstring(self.kernel_evolve, line)
        problem = self._problem(args.problem)
        with one_line_errors():
            result = self._resumed(args, problem, cell) if args.resume else self._new(args, problem, cell)
        if args.output:
            self.shell.user_ns[args.output] = result
        with one_line_errors():
            launch.show_live(result, args.view, start=True)
        return result

    def _problem(self, name: str):
        """A notebook variable holding a Problem, a name or a path wins over the literal text."""
        value = self.shell.user_ns.get(name) if name.isidentifier() else None
        return value if isinstance(value, (Problem, str, os.PathLike)) else name

    @staticmethod
    def _budgets(args) -> dict:
        from kscience.run_commands import _budgets

        return _budgets(args)

    def _new(self, args, problem, cell: str | None):
        from kscience.cli import parse_sets

        if cell is not None and not cell.strip():
            raise UsageError("the cell body is the starting kernel: it must define custom_kernel "
                             "(`kscience seed PROBLEM` prints a problem's own seed to start from)")
        choose_view(args.view)
        settings = {k: v for k, v in {"strategy": args.strategy, "repairs": args.repairs, "seed": args.seed,
                                      "knowledge": args.knowledge, "executor": args.executor, "gpus": args.gpus,
                                      "base_url": args.base_url}.items() if v is not None}
        iterations = DEFAULT_ITERATIONS if args.iterations is None else args.iterations
        return launch.new_run(problem, cell, iterations=iterations, llm=args.llm, db=args.db, name=args.name,
                              overrides=parse_sets(args.set), **settings, **self._budgets(args))

    def _resumed(self, args, problem, cell: str | None):
        from kscience.jupyter.results import open_run
        from kscience.problems import load_problem

        stored = open_run(args.resume, db=args.db).problem
        locator, overrides = launch.problem_locator(problem)
        if load_problem(locator, overrides).locator != stored:
            raise UsageError(f"run {args.resume} evolves {stored}, not {locator}")
        if cell and cell.strip():
            print("kscience: the cell body is ignored when resuming: the run continues from its stored kernels",
                  file=sys.stderr)
        choose_view(args.view)
        changes = {k: v for k, v in {"llm": args.llm, "strategy": args.strategy, "repairs": args.repairs,
                                     "base_url": args.base_url}.items() if v is not None}
        return launch.resumed_run(args.resume, iterations=args.iterations, db=args.db, **changes,
                                  **self._budgets(args))

    @line_magic
    def kscience(self, line):
        """The kscience command line inside the notebook: %kscience runs, %kscience show RUN_ID,
        %kscience best RUN_ID, %kscience problems, %kscience seed PROBLEM, %kscience eval PROBLEM FILE.
        %kscience run ... and %kscience resume RUN_ID ... start the run with its live view and
        return the run object; %kscience campaign SUITE ... starts a campaign under a one-row-per-problem
        view and returns it (campaign.wait() blocks until it ends). %kscience --help lists every command and option."""
        from kscience.cli import build_parser

        parser = build_parser()
        try:
            argv = shlex.split(line)
        except ValueError as exc:
            raise UsageError(f"cannot split {line!r}: {exc}") from None
        captured = io.StringIO()
        try:
            with contextlib.redirect_stderr(captured):
                args = parser.parse_args(argv)
        except SystemExit as exc:  # argparse exits on --help (0) and on errors (2)
            if exc.code:
                lines = [ln for ln in captured.getvalue().splitlines() if ln.strip()]
                raise UsageError(lines[-1] if lines else "bad arguments to %kscience") from None
            return None
        with one_line_errors():
            if args.command == "run":
                return self._cli_run(args)
            if args.command == "resume":
                return self._cli_resume(args)
            if args.command == "campaign":
                return self._cli_campaign(args)
            args.func(args)
        return None

    def _cli_run(self, args):
        from pathlib import Path

        from kscience.cli import parse_sets

        kernel = Path(args.seed_kernel).read_text() if args.seed_kernel else None
        return launch.evolve(args.problem, kernel, iterations=args.iterations, llm=args.llm, db=args.db,
                             name=args.name, overrides=parse_sets(args.set), strategy=args.strategy,
                             repairs=args.repairs, executor=args.executor, gpus=args.gpus,
                             knowledge=list(args.knowledge), seed=args.seed, base_url=args.base_url,
                             **self._budgets(args))

    def _cli_resume(self, args):
        changes = {k: v for k, v in {"llm": args.llm, "strategy": args.strategy, "repairs": args.repairs,
                                     "base_url": args.base_url}.items() if v is not None}
        return launch.resume(args.run_id, iterations=args.iterations, db=args.db, force=args.force, **changes,
                             **self._budgets(args))


    @staticmethod
    def _cli_campaign(args):
        """The campaign runs on a thread under a one-row-per-problem view; `.wait()` blocks until it ends."""
        from kscience.campaign_commands import build_campaign
        from kscience.jupyter.campaign_view import CampaignView
        from kscience.run_commands import _open_store

        campaign = build_campaign(args, _open_store(args.db, create=not args.resume))
        CampaignView(campaign)
        return campaign.start(background=True)


def register(ipython) -> None:
    """Register the magics; registering again replaces them, so loading twice is harmless."""
    ipython.register_magics(KscienceMagics)
