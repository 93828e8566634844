"""The judge (trusted side): the process that holds the expected answers, the clock that counts and
the verdict.

    evaluation.py        `evaluate`: one request through a session's phases to its `EvalResult`
    session.py           one evaluation's conversation with its worker: limits, inputs, answers, timed calls
    checking.py          a shape's output against the judge's answer; inputs left untouched; rechecks
    verdict.py           `Verdict`: how an evaluation ends early, with a status and why
    input_sets.py        input sets the judge built ahead of their calls, each used once
    phases.py            where an evaluation's seconds go, and what its judge is doing now
    driving.py           `TimedSession`: the members of a session that measure and drive use
    measure.py           timing one shape in rounds; what is doubted is measured again
    drive.py             the timed calls of one round, each on new inputs, and when to stop them
    compare.py           whether an output is right (sampled byte ranges of big tensors)
    crosscheck.py        whether reported times are believable
    contexts.py          whether other processes share the GPU
    peek.py              reading a timed call's output while the worker cannot run
    reference_outside.py what the problem's own reference shows outside its timed stream
    candidate_output.py  what the candidate printed, deduplicated and bounded

Nothing is imported here.
"""
