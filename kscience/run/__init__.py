"""One run: its settings, the controller, the driver and the event stream.

Read in this order: `config.py` (every run setting, declared once; the command-line flags and the
magics' arguments are generated from it), `loop.py` (the controller: the seed and the baselines, then the
lines), `scheduling.py` (K lines kept going at once over the executor's slots), `line.py` (one line of
inquiry: select, design, write, evaluate, repair, finding), `judging.py` (a candidate from its request to its
stored verdict), with what it hands on: `waiting.py` (an evaluation in flight, and what it says meanwhile),
`slot_use.py` (the run's use of the slots and their busy time), `pairing.py` (same-host pairs) and
`profile_jobs.py` (Nsight Compute profiles); `slots.py` (the executor's slots and who gets the next free
one, the run's own or shared by a campaign's runs), the parts the controller hands its lines and `Judging`
instead of itself (`journal.py`: the run's rows, kept in memory and written through to the store, its events
and stop; `budget.py`: --evaluations; `population.py`: what the scientist sees; `composing.py`: the
per-shape composite), `driver.py` (`Run`: builds the scientist and the executor, drives the
controller, and stops and resumes it), `events.py` (what a run tells its watchers) and `log.py` (the
lines they say in a live log, the same on a terminal and in a notebook), then the helpers:
`baselines.py` (eager, torch.compile and vendor-library timings), `baseline_cache.py` (torch.compile's
verdicts kept beside every database), `limits.py` (the limit per step a candidate is judged under),
`verdict.py` (a verdict as the run records it, from the slot's reply to the store), `seed_chain.py` (a seed
that fails: judged again under a raised limit, or the error that says what would get the run further),
`environment.py` (what the run ran on), `profiling.py` (hardware counters outside
the timing), `held.py` (optional work that goes out with the next evaluation through a batching queue),
`sharing.py`, `confirm.py`, `in_flight.py` and `threads.py`.
"""
