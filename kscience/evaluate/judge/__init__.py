"""The judge (trusted side): the process that holds the expected answers, the clock that counts and
the verdict.

    evaluation.py        `evaluate`: one request through a session's phases to its `EvalResult`
    session.py           one evaluation's conversation with its worker: limits, inputs, answers, timed calls
    checking.py          a shape's output against the judge's answer; inputs left untouched; rechecks
    verdict.py           `Verdict`: how an evaluation ends early, with a status and why
    input_sets.py        input sets the judge built ahead of their calls, each used once
    phases.py            where an evaluation's seconds go, and what its judge is doing now
    driving.py           what measure, drive and checking need of a session (`TimedSession`, `CheckingSession`)
    measure.py           timing one shape: the judge's clock decides, the worker's events refine
    drive.py             the timed calls of one round, each on new inputs, inside the judge's clock
    buffers.py           the judge's own memory around a shape's calls: staged inputs, outputs, the flush
    crosscheck.py        the judge's estimate of a call, and how far the worker's numbers may be believed
    compare.py           whether an output is right (sampled byte ranges of big tensors)
    contexts.py          whether other processes share the GPU
    builds.py            whether the worker is building (a compiler in its process tree)
    candidate_output.py  what the candidate printed, deduplicated and bounded

Nothing is imported here.
"""
