"""The evaluator: whether a candidate kernel is correct, and how fast it is, decided by a trusted
process about code it does not trust.

Entry point: `kscience.evaluate.judge.evaluation.evaluate(request, gpu=...)` takes an `EvalRequest`
(result.py) and always returns an `EvalResult`, never raising for anything a candidate does.
`docs/evaluation.md` gives the threat model, each defence and the residual risks.

The subpackages are split by trust side: one process holds the expected answers, the clock that
counts and the verdict (the judge's side); another imports the candidate (the worker), and whatever
it runs or writes after a timed call returns is hostile. tests/test_imports.py holds the line: the
worker imports only worker/, the shared modules, kscience.problems and kscience.device; the trusted
side imports nothing of worker/ except sandbox/workers.py's use of confine (its reason is stated there).

One evaluation, in call order:
    executors/factory.make_executor -> executors/base.LocalExecutor (or ray_cluster, queue_dir)
    -> executors/slot.JudgeProcess: the slot's long-lived trusted process
    -> judge/evaluation.evaluate -> judge/session.Session, which starts its worker through
       sandbox/spares.start_worker (a spare, or sandbox/workers.Worker)
    -> the worker process (`python -m kscience.evaluate.worker`, worker/__main__.py): confine.py,
       then harness.py loads the problem; null calls on the pristine worker; then it imports the
       candidate, and timing.py runs each call the judge asks for (clocks.py)
    -> judge/measure.time_shape -> judge/drive.run_calls: one command per call inside the judge's
       own clock, which writes the call's inputs (staging.py) and reads its output (shared_buffer.py)
       in memory of its own (judge/buffers.py)
    -> judge/compare.py and judge/crosscheck.py: right answers, the judge's estimate of each call
    -> the verdict as an EvalResult, held to the request's precision policy (result.under_policy),
       back through the slot to the executor's future.

Trusted side:
  judge/       the process that decides
    evaluation.py        `evaluate`: a request through a session's phases to its result
    session.py           one evaluation's conversation with its worker: limits, inputs, answers, timed calls
    checking.py          a shape's output against the judge's answer; inputs left untouched; rechecks;
                         its error against a float64 evaluation of the reference
    verdict.py           `Verdict`: how an evaluation ends early, with a status and why
    input_sets.py        input sets the judge built ahead of their calls, each used once
    phases.py            where an evaluation's seconds go, and what its judge is doing now
    driving.py           what measure, drive and checking use of a session (`TimedSession`, `CheckingSession`)
    measure.py           timing one shape: the judge's clock decides, the worker's events refine
    drive.py             the timed calls of one round, each on new inputs, inside the judge's clock
    buffers.py           the judge's own memory around a shape's calls: staged inputs, outputs, the flush
    crosscheck.py        the judge's estimate of a call, and how far the worker's numbers may be believed
    compare.py           whether an output is right (sampled byte ranges of big tensors)
    contexts.py          whether other processes share the GPU (the driver's count of contexts)
    builds.py            whether the worker is building: a compiler in its process tree, seen from /proc
    candidate_output.py  what the candidate printed, deduplicated and bounded, for the scientist
  sandbox/     the worker processes
    workers.py           starts, watches, freezes and kills one worker process
    spares.py            each slot's workers started ahead, paused while their slot times a shape
    cgroup.py            a cgroup per worker: memory and process caps, freezer, member list
    compile_cache.py     each evaluation's private compile caches and the warm copy they start from
    leftovers.py         what a dead kscience process left, removed
  executors/   where evaluations run
    base.py              `Executor`; `LocalExecutor`: slots per GPU on this machine
    factory.py           `make_executor`: the executor a `--executor` spec names
    slot.py              a slot's judge process (`python -m kscience.evaluate.executors.slot`)
    carried.py           a problem's files sent with its requests, unpacked where they are judged
    ray_cluster.py       `RayExecutor`: slots on a Ray cluster
    queue_dir.py         `QueueExecutor`: requests as files in a folder another machine serves
    queue_worker.py      that machine's side (`kscience worker`)
    queue_files.py       the folder's layout and atomic file operations
  profile/     facts about a judged candidate and the device
    job.py               Nsight Compute on a judged candidate, run wherever the request is judged
    ncu.py               the Nsight Compute command and its report
    entry.py             the process ncu profiles
    compile_facts.py     registers, spills, shared memory per kernel, from the compile caches
    probes.py            fixed kernels that check the knowledge notes' claims on this device

Untrusted side:
  worker/      the process that imports the candidate
    __main__.py          forks a reaper, confines itself, then answers the judge's commands
    confine.py           restrictions it puts on itself before any candidate code runs
    harness.py           imports the candidate, builds inputs, calls it, hands back outputs
    integrity.py         notices a candidate that rewires the worker's modules
    timing.py            the timed loop
It also loads the problem (kscience.problems) to build inputs from the judge's seeds.

Both sides (this folder):
    result.py            the request and verdict types (plain data: they cross process, Ray and
                         database boundaries)
    wire.py              the framed channel between judge and worker (nothing is ever unpickled)
    clocks.py            the worker's events around a call, and spinning synchronisation
    kernel_times.py      time per launched kernel and what a call holds: the worker's profiled calls, the judge's checks
    library_rule.py      forbidden library calls: the judge's static look, the worker's traps
    lifeline.py          a pipe whose closing tells a child its parent died
    shared_buffer.py     memory the judge owns and the worker maps: staged inputs in, outputs out
    staging.py           a call's inputs as the judge writes them and the fixed views the worker gives the candidate
    proctree.py          the processes a worker started, as the kernel records them, and killing them

Nothing is imported here, nor in any subpackage's __init__: the worker starts from this package and
must load as little as possible before it confines itself.
"""
