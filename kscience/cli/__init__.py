"""`kscience` on the command line: `main.py` (the parser and the entry point) and one module per
group of commands: `problem_commands.py` (with `eval_baselines.py`, the speed-ups `eval` prints),
`run_commands.py` (with `progress.py`, the live lines of a run, and `candidate_view.py`),
`campaign_commands.py` and `worker_command.py`.
"""


def entry() -> None:
    """The `kscience` command. A Ctrl-C or SIGTERM while it still loads (seconds, for torch) ends it
    quietly: nothing has started yet, and `main` handles them from then on."""
    import os
    import signal
    import sys

    def loading(signum, frame):
        print("kscience: interrupted", file=sys.stderr)
        os._exit(130)

    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) is not signal.SIG_IGN:  # a background job's SIGINT stays ignored
            signal.signal(sig, loading)
    from kscience.cli.main import main

    sys.exit(main())
