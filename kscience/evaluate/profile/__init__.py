"""Profiling a judged candidate (trusted side), and the device facts the scientist is told.

    job.py            Nsight Compute on a judged candidate, run wherever the request is judged
    ncu.py            the Nsight Compute command and its report, parsed
    entry.py          the process ncu profiles (`python -m kscience.evaluate.profile.entry`)
    compile_facts.py  registers, spills and shared memory per kernel, read from the compile caches
    probes.py         fixed kernels that check the knowledge notes' claims on this device
                      (`python -m kscience.evaluate.profile.probes`)

Nothing is imported here.
"""
