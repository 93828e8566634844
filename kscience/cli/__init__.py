"""`kscience` on the command line: `main.py` (the parser and the entry point) and one module per
group of commands: `problem_commands.py` (with `eval_baselines.py`, the speed-ups `eval` prints),
`run_commands.py` (with `progress.py`, the live lines of a run, and `candidate_view.py`),
`campaign_commands.py`, `store_commands.py` (deleting and pruning runs), `browse_commands.py` (a run as
an HTML page, browsing a database over HTTP, report figures), `worker_command.py`, and `usage_errors.py`
(the subcommand's usage and the nearest flag for a mistyped one).
"""

from kscience.version import __version__


def asks_for_version(argv: list[str]) -> bool:
    """`kscience --version` (or an abbreviation argparse would accept, `--vers`) before any command: answered
    without loading the parser, whose settings import torch (seconds)."""
    return bool(argv) and len(argv[0]) >= 3 and "--version".startswith(argv[0])


def entry() -> None:
    """The `kscience` command. A Ctrl-C or SIGTERM while it still loads (seconds, for torch) ends it
    quietly: nothing has started yet, and `main` handles them from then on."""
    import os
    import signal
    import sys

    if asks_for_version(sys.argv[1:]):
        print(f"kscience {__version__}")
        sys.exit(0)

    def loading(signum, frame):
        print("kscience: interrupted", file=sys.stderr)
        os._exit(130)

    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) is not signal.SIG_IGN:  # a background job's SIGINT stays ignored
            signal.signal(sig, loading)
    from kscience.cli.main import main

    sys.exit(main())
