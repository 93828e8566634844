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

import argparse
import contextlib
import io
import os
import shlex
import sys
from pathlib import Path

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from kscience.campaigns.campaign import add_campaign_arguments, campaign_from_args
from kscience.cli.main import main as command_line
from kscience.run.config import (add_resume_arguments, add_run_arguments, check_resume_changes, option_specs,
                                 options_from_args)
from kscience.jupyter import launch
from kscience.jupyter.campaign_view import CampaignView
from kscience.jupyter.live import VIEWS, choose_view
from kscience.jupyter.results import open_run
from kscience.jupyter.views import show_live
from kscience.problems import Problem, load_problem
from kscience.record.store import DEFAULT_DB, open_store
from kscience.usage import USER_ERRORS

# Bad input or configuration: shown as one line rather than a traceback.
EXPECTED_ERRORS = (*USER_ERRORS, ValueError, OSError)


@contextlib.contextmanager
def one_line_errors():
    try:
        yield
    except EXPECTED_ERRORS as exc:
        raise UsageError(" ".join(str(exc).split()) or type(exc).__name__) from None


def run_arguments(func):
    """One magic argument per run setting (kscience.run.config), in the order they are declared there:
    the same flags, defaults and help as `kscience run`."""
    for flags, kwargs in reversed(option_specs()):  # decorators apply innermost first
        func = argument(*flags, **kwargs)(func)
    return func


@magics_class
class KscienceMagics(Magics):
    @line_cell_magic
    @magic_arguments()
    @argument("problem", help="a built-in problem name, a problem file or folder, or the name of a notebook "
                              "variable holding a Problem (or a name or path)")
    @run_arguments
    @argument("--db", metavar="PATH", help=f"SQLite file of runs (default: $KSCIENCE_DB or ./{DEFAULT_DB})")
    @argument("-o", "--output", metavar="NAME", help="also store the run object in this notebook variable")
    @argument("--resume", metavar="RUN_ID", help="continue this stored run instead of starting one (the cell body, "
                                                 "if any, is then ignored; --iterations then adds rounds)")
    @argument("--force", action="store_true",
              help="with --resume: take over a run marked running by a process this host cannot see")
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
            show_live(result, args.view, start=True)
        return result

    def _problem(self, name: str):
        """A notebook variable holding a Problem, a name or a path wins over the literal text."""
        value = self.shell.user_ns.get(name) if name.isidentifier() else None
        return value if isinstance(value, (Problem, str, os.PathLike)) else name

    def _new(self, args, problem, cell: str | None):
        if cell is not None and not cell.strip():
            raise UsageError("the cell body is the starting kernel: it must define custom_kernel "
                             "(`kscience seed PROBLEM` prints a problem's own seed to start from)")
        if args.force:
            raise UsageError("--force applies to --resume only")
        choose_view(args.view)
        return launch.new_run(problem, cell, db=args.db, **options_from_args(args))

    def _resumed(self, args, problem, cell: str | None):
        changes = options_from_args(args)
        iterations = changes.pop("iterations", None)
        check_resume_changes(changes)
        stored = open_run(args.resume, db=args.db).problem
        locator, overrides = launch.problem_locator(problem)
        if load_problem(locator, overrides).locator != stored:
            raise UsageError(f"run {args.resume} evolves {stored}, not {locator}")
        if cell and cell.strip():
            print("kscience: the cell body is ignored when resuming: the run continues from its stored kernels",
                  file=sys.stderr)
        choose_view(args.view)
        return launch.resumed_run(args.resume, iterations=iterations, db=args.db, force=args.force, **changes)

    @line_magic
    def kscience(self, line):
        """The kscience command line inside the notebook: %kscience runs, %kscience show RUN_ID,
        %kscience best RUN_ID, %kscience problems, %kscience seed PROBLEM, %kscience eval PROBLEM FILE.
        %kscience run ... and %kscience resume RUN_ID ... start the run with its live view and
        return the run object; %kscience campaign SUITE ... starts a campaign under a one-row-per-problem
        view and returns it (campaign.wait() blocks until it ends). %kscience --help lists every command and option."""
        try:
            argv = shlex.split(line)
        except ValueError as exc:
            raise UsageError(f"cannot split {line!r}: {exc}") from None
        if not argv or argv[0] not in ("run", "resume", "campaign"):
            return self._command_line(argv)
        captured = io.StringIO()
        try:
            with contextlib.redirect_stderr(captured):
                args = _starting_parser().parse_args(argv)
        except SystemExit as exc:  # argparse exits on --help (0) and on errors (2)
            if exc.code:
                lines = [ln for ln in captured.getvalue().splitlines() if ln.strip()]
                raise UsageError(lines[-1] if lines else "bad arguments to %kscience") from None
            return None
        with one_line_errors():
            if args.command == "run":
                kernel = Path(args.seed_kernel).read_text() if args.seed_kernel else None
                return launch.evolve(args.problem, kernel, db=args.db, **options_from_args(args))
            if args.command == "campaign":
                return self._cli_campaign(args)
            changes = options_from_args(args)
            iterations = changes.pop("iterations", None)
            return launch.resume(args.run_id, iterations=iterations, db=args.db, force=args.force, **changes)

    @staticmethod
    def _command_line(argv: list[str]) -> None:
        """Any other command is `kscience` itself; its one `kscience: error:` line becomes the UsageError."""
        captured = io.StringIO()
        try:
            with contextlib.redirect_stderr(captured):
                code = command_line(argv)
        except SystemExit as exc:  # --help, --version, or arguments argparse refuses
            code = 2 if exc.code else 0
        lines = [ln for ln in captured.getvalue().splitlines() if ln.strip()]
        if code == 2:
            why = next((ln for ln in reversed(lines) if "error: " in ln), "bad arguments to %kscience")
            raise UsageError(why.split("error: ", 1)[1] if "error: " in why else why)
        for ln in lines:
            print(ln, file=sys.stderr)
        return None

    @staticmethod
    def _cli_campaign(args):
        """The campaign runs on a thread under a one-row-per-problem view; `.wait()` blocks until it ends."""
        campaign = campaign_from_args(args, open_store(args.db, create=not args.resume))
        CampaignView(campaign)
        return campaign.start(background=True)


def _starting_parser() -> argparse.ArgumentParser:
    """`%kscience run / resume / campaign`: the same arguments as on the command line (declared with the
    run settings and the campaign), returning the run or campaign object under its live view."""
    parser = argparse.ArgumentParser(prog="%kscience", add_help=True)
    sub = parser.add_subparsers(dest="command", required=True)
    add_run_arguments(sub.add_parser("run", help="evolve a problem's kernel with the scientist"))
    add_resume_arguments(sub.add_parser("resume", help="continue a stopped, failed or interrupted run"))
    add_campaign_arguments(sub.add_parser("campaign", help="evolve every problem of a suite, one run each"))
    return parser


def register(ipython) -> None:
    """Register the magics; registering again replaces them, so loading twice is harmless."""
    ipython.register_magics(KscienceMagics)
