"""The evaluator: whether a candidate kernel is correct, and how fast it is, decided by a trusted
process about code it does not trust.

Entry point: `kscience.evaluate.judge.evaluation.evaluate(request, gpu=...)` takes an `EvalRequest`
(result.py) and always returns an `EvalResult`, never raising for anything a candidate does.
The loop reaches it through an `Executor` (executors.py: `make_executor`; executor.py: local slots per GPU;
ray_executor.py: a Ray cluster).

Trusted side (the process that holds the expected answers and decides):
    judge.py        the entry point: starts a session, runs it through its phases, decides the verdict
    session.py      one evaluation's conversation with its worker: limits, checks, timed calls
    measure.py      timing one shape in rounds: what is doubted is measured again, the CPU figure
    drive.py        the timed calls of one round, each on new inputs, and when to stop them
    compare.py      whether an output is right (sampled byte ranges of big tensors)
    crosscheck.py   whether reported times are believable
    contexts.py     whether other processes share the GPU (the driver's count of contexts)
    sandbox.py      starts, watches and kills the worker process
    candidate_output.py  what the candidate printed, deduplicated and bounded, for the scientist
    profile_job.py  Nsight Compute on a judged candidate, run wherever the request is judged
    probes.py       fixed kernels that check the knowledge notes' version-dependent claims on this device
    executor.py, ray_executor.py   where evaluations run
    result.py       the request and verdict types (plain data: they cross process, Ray and database
                    boundaries)

Untrusted side (the worker process, `python -m kscience.evaluate.worker`, which imports the
candidate):
    worker.py       the process: confines itself, then answers the judge's commands
    confine.py      restrictions it puts on itself before any candidate code runs
    harness.py      imports the candidate, builds inputs, calls it, hands back outputs
    integrity.py    notices a candidate that rewires the harness
    timing.py       the timed loop
    kernel_times.py time per launched kernel after the timed calls (both sides: the worker's profiled
                    calls, the judge's checks of their reply)
It also loads the problem (kscience.problems) to build inputs from the judge's seeds.

Both sides:
    wire.py         the framed channel between them (nothing is ever unpickled)

Nothing is imported here: the worker starts from this package and must load as little as
possible before it confines itself.
"""
