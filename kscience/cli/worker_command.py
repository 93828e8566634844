"""`kscience worker DIR`: the GPU side of `--executor queue:DIR`. It judges, through the same judge as
every other executor, the requests a run leaves in DIR and writes the verdicts back (see docs/remote.md)."""

from __future__ import annotations

import sys

from kscience.evaluate.executors.queue_worker import Worker
from kscience.usage import UsageError


def cmd_worker(args) -> int:
    try:
        worker = Worker(args.directory, gpus=args.gpus, cpu_workers=args.cpu_workers, lease_s=args.lease,
                        poll_s=args.poll, say=lambda line: print(line, file=sys.stderr, flush=True))
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot serve {args.directory}: {exc}") from None
    try:
        done = worker.run(once=args.once)
    except KeyboardInterrupt:
        print(f"kscience worker: interrupted after {worker.done} evaluation(s); unfinished requests are back in "
              f"the queue; continue with: kscience worker {args.directory}", file=sys.stderr)
        return 130
    print(f"kscience worker: {done} evaluation(s) done", file=sys.stderr)
    return 0
