"""`kscience` on the command line: the parser and the entry point, a thin view over problems, the
evaluator and runs. The run settings' flags come from `kscience.run.config`, so they match the magics.

Exit codes: 0 success (a candidate that is ok), 1 a candidate that is not ok or a run that
failed, 2 a usage or problem error. Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

from kscience.cli.browse_commands import add_browse_commands
from kscience.cli.campaign_commands import add_campaign_commands
from kscience.evaluate.executors.queue_files import LEASE_S, POLL_S
from kscience.evaluate.executors.slot import interrupt_all
from kscience.evaluate.sandbox.leftovers import reclaim_and_say
from kscience.evaluate.sandbox.workers import hide_from_workers
from kscience.evaluate.result import BUILD_LIMIT_S
from kscience.record.store import default_db
from kscience.scientist.rules import judge_limits_text
from kscience.run.config import (PROBLEM_HELP, add_db_option, add_resume_arguments, add_run_arguments,
                                 add_setting_option)
from kscience.cli.problem_commands import cmd_eval, cmd_problems, cmd_seed
from kscience.cli.run_commands import cmd_best, cmd_resume, cmd_run, cmd_runs, cmd_show
from kscience.cli.usage_errors import Parser, refuse_unrecognized
from kscience.usage import USER_ERRORS
from kscience.version import __version__
from kscience.cli.store_commands import add_store_commands
from kscience.cli.worker_command import cmd_worker


EPILOG = """\
environment:
  GEMINI_API_KEY, GOOGLE_API_KEY  credentials for --llm gemini:MODEL (the default --llm when set)
  OPENAI_API_KEY                  credentials for --llm openai:MODEL (the default when no Gemini key)
  OPENAI_BASE_URL                 endpoint for --llm openai:MODEL (or --base-url)
  KSCIENCE_DB                     run database when --db is not given (default ./kscience.db)
  KSCIENCE_DEVICE=cpu             judge under the Triton interpreter even where a GPU is visible
  KSCIENCE_CACHE                  folder for compiled kernels and sandboxes (default ~/.cache/kscience)
  KSCIENCE_WORKER_RSS_BYTES       memory limit of the process that runs a candidate

exit codes:
  0    success: the candidate is correct, the run finished
  1    the candidate is not correct, or the run failed or stopped (it can be resumed)
  2    bad arguments, an unknown problem or an unusable database (one line on stderr)
  130  interrupted (Ctrl-C or SIGTERM); a run can be resumed

examples:
  kscience problems
  kscience seed softmax > my_softmax.py          # the problem's starting kernel, to edit
  kscience eval softmax my_softmax.py            # is it correct, and how fast?
  kscience run softmax --iterations 3 --llm offline
  kscience runs                                  # stored runs, newest first
  kscience show RUN_ID                           # a run's numbers and candidates
  kscience show CANDIDATE_ID                     # one candidate: verdicts, message, diff, source
  kscience best RUN_ID > best.py                 # its fastest correct kernel
  kscience resume RUN_ID --iterations 2          # two more design rounds
  kscience show RUN_ID --html run.html           # the run as one page, as a notebook shows it
  kscience serve                                 # every run of ./kscience.db in a browser (localhost:8080)
  kscience figures RUN_ID -o figs/               # its report figures as PNG files
  kscience prune                                 # which runs judged nothing (--yes removes them)
"""


def _set_arg(s) -> None:
    s.add_argument("--set", action="append", metavar="NAME=VALUE", default=[],
                   help="override a module-level constant of a KernelBench file (repeatable)")


def _run_id(s) -> None:
    s.add_argument("run_id", metavar="RUN_ID", help="a run's id, as `kscience runs` lists it (r-...)")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="kscience", description="Evolve GPU kernels with an LLM scientist.",
               epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("problems", help="list problems with their test and benchmark shapes",
                       description="The built-in problems (or those named), each with its test and benchmark shapes "
                                   "on a GPU and the smaller ones the CPU interpreter uses.")
    s.add_argument("problem", nargs="*", help=f"{PROBLEM_HELP} (default: every built-in)")
    s.add_argument("--json", action="store_true", help="print the problems as JSON")
    _set_arg(s)
    s.set_defaults(func=cmd_problems)

    s = sub.add_parser("seed", help="print a problem's starting kernel (the seed a run evolves from)",
                       description="Print a problem's starting kernel, to read, edit and `kscience eval`. "
                                   "Not to be confused with `run --seed N` (the scientist's random seed) or "
                                   "`run --seed-kernel FILE` (start a run from your own kernel).")
    s.add_argument("problem", help=PROBLEM_HELP)
    _set_arg(s)
    s.set_defaults(func=cmd_seed)

    s = sub.add_parser("eval", help="judge one candidate kernel: correct, and how fast")
    s.add_argument("problem", help=PROBLEM_HELP)
    s.add_argument("candidate", help="Python file defining custom_kernel(data) (or ModelNew)")
    s.add_argument("--json", action="store_true", help="print the full verdict as JSON")
    add_setting_option(s, "eval_timeout_s", f"the judge's own limits ({judge_limits_text()}); a "
                                            "problem that declares a limit for the whole evaluation (a GPU MODE "
                                            "task.yml) keeps it as well")
    s.add_argument("--shapes", choices=("tests", "benchmarks", "all"), default="all",
                   help="check the test shapes only, check and time the benchmark shapes only, or both "
                        "(default all)")
    _set_arg(s)
    s.add_argument("--unconfined", action="store_true",
                   help="run even where Landlock or namespaces are missing (the verdict says which)")
    add_setting_option(s, "build_limit_s", f"{BUILD_LIMIT_S:g} s")
    add_setting_option(s, "precision", "tolerance, the problem's own (as KernelBench)")
    s.add_argument("--no-baselines", dest="baselines", action="store_false",
                   help="do not judge PyTorch eager and torch.compile beside the candidate for its speed-up "
                        "(torch.compile is timed on a GPU only, and taken from an earlier timing where one exists)")
    s.set_defaults(func=cmd_eval)

    s = sub.add_parser("run", help="evolve a problem's kernel with the scientist")
    add_run_arguments(s)
    s.add_argument("--json", action="store_true", help="print the summary as JSON")
    s.set_defaults(func=cmd_run)

    s = sub.add_parser("worker", help="evaluate the requests a run (--executor queue:DIR) leaves in DIR")
    s.add_argument("directory", metavar="DIR", help="the queue directory (shared, or synced with the run's)")
    s.add_argument("--once", action="store_true",
                   help="evaluate what is there (and claims of others once they lapse), then exit (for a batch job)")
    add_setting_option(s, "gpus", "all")
    s.add_argument("--cpu-workers", type=int, metavar="N",
                   help="without a GPU: interpreter evaluations at once (default 1)")
    s.add_argument("--lease", type=float, default=LEASE_S, metavar="SECONDS",
                   help=f"a claim not renewed for this long is put back in the queue (default {LEASE_S:g})")
    s.add_argument("--poll", type=float, default=POLL_S, metavar="SECONDS",
                   help=f"how often to look for requests (default {POLL_S:g})")
    s.set_defaults(func=cmd_worker)

    s = sub.add_parser("resume", help="continue a stopped, failed or interrupted run")
    add_resume_arguments(s)
    s.add_argument("--json", action="store_true", help="print the summary as JSON")
    s.set_defaults(func=cmd_resume)

    s = sub.add_parser("runs", help="list stored runs, newest first")
    add_db_option(s)
    s.add_argument("--json", action="store_true", help="print the runs as JSON")
    s.set_defaults(func=cmd_runs)

    s = sub.add_parser("show", help="a run, its candidates and its numbers; or one candidate in full")
    s.add_argument("run_id", metavar="ID", help="a run's id (r-...), as `kscience runs` lists it, or a candidate's "
                                               "(c-...): its verdict per shape, message, finding, diff and source")
    add_db_option(s)
    s.add_argument("--json", action="store_true", help="print the run, its candidates, plans and findings as JSON")
    s.add_argument("--html", metavar="FILE", help="write the run as one HTML page to FILE (the view a notebook "
                                                  "shows: timing plot, leaderboard, hypotheses, diffs, log)")
    s.set_defaults(func=cmd_show)

    s = sub.add_parser("best", help="print the source of a run's fastest correct kernel")
    _run_id(s)
    add_db_option(s)
    s.set_defaults(func=cmd_best)

    add_campaign_commands(sub)
    add_store_commands(sub)
    add_browse_commands(sub)
    return p


# Commands that start judges and workers: before they do, what a killed kscience process left goes.
EVALUATING = {"run", "resume", "campaign", "eval", "worker"}


SLOTS_AFTER_S = 0.2  # the run notices its interruption before its evaluations in flight end unjudged


def _interrupted(signum, frame) -> None:
    """Ctrl-C, and SIGTERM (a batch scheduler's time limit, a `kill`) alike: this process is
    interrupted, keeping its work for a resume, and once it has noticed, its slot processes (in
    process groups of their own) end their evaluations unjudged."""
    threading.Timer(SLOTS_AFTER_S, interrupt_all).start()
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:
        refuse_unrecognized(parser, args.command, extras)
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, _interrupted) for sig in (signal.SIGINT, signal.SIGTERM)
                if in_main_thread and signal.getsignal(sig) is not signal.SIG_IGN}  # a background job's stays ignored
    try:
        if args.command in EVALUATING:
            reclaim_and_say(lambda line: print(line, file=sys.stderr))
            if hasattr(args, "db"):  # the candidates this command judges may not read the runs stored beside theirs
                db = str(Path(args.db or default_db()).expanduser())
                hide_from_workers(*(db + suffix for suffix in ("", "-wal", "-shm", "-journal")))
        return args.func(args)
    except USER_ERRORS as exc:
        print(f"kscience: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kscience: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `kscience show ... | head`: the reader left, which is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    finally:
        for sig, handler in previous.items():  # a caller's own handlers (a test calling main) come back
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
