"""The sandbox (trusted side): starting, watching, freezing and killing worker processes.

    workers.py        one worker process: environment, namespaces, memory watch, kill
    spares.py         each slot's workers started ahead, paused while their slot times a shape
    cgroup.py         a cgroup per worker: memory and process caps, a freezer, a member list
    compile_cache.py  each evaluation's private compile caches, and the warm copy they start from
    leftovers.py      removing what a dead kscience process left (`python -m kscience.evaluate.sandbox.leftovers`)

Nothing is imported here.
"""
