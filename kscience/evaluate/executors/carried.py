"""Problems that travel with their requests, on the judging side.

A request for a KernelBench file or a GPU MODE directory carries the problem's files
(`EvalRequest.problem_files`, packed by the run with `kscience.problems.bundle.pack`). Whatever process
judges it (a local slot, the slot of a `kscience worker` on another machine, a Ray actor on another node)
unpacks them into its machine's cache, keyed by their digest, and judges the problem from there: the path
the run named need not exist where the judge runs.
"""

from __future__ import annotations

import dataclasses

from kscience.evaluate.result import EvalRequest
from kscience.problems import bundle


def judged_here(request: EvalRequest) -> EvalRequest:
    """The request with `problem` naming the problem's files on this machine; ProblemError for files that
    do not match their digest or would be written outside their folder."""
    # The cache's folder exists before this judge's first worker confines itself, whatever it judges: a worker
    # may read only what existed, or lies below a folder that existed, when it applied Landlock (a spare starts
    # before its request is known), and a problem unpacked later goes below this folder.
    bundle.cache_root().mkdir(parents=True, exist_ok=True)
    if request.problem_files is None:
        return request
    return dataclasses.replace(request, problem=bundle.unpack(request.problem_files), problem_files=None)
