"""The worker (untrusted side): the process that imports the candidate, `python -m
kscience.evaluate.worker` (__main__.py). Everything it runs after a timed call returns is hostile.

    __main__.py   the process: forks a reaper, confines itself, then answers the judge's commands
    confine.py    restrictions it puts on itself before any candidate code runs
    harness.py    imports the candidate, builds inputs, calls it, hands back outputs
    integrity.py  notices a candidate that rewires the worker's modules
    timing.py     the timed loop

Its modules import only this package, the shared modules of kscience.evaluate, kscience.problems and
kscience.device (tests/test_imports.py). Nothing is imported here: the worker must load as little as
possible before it confines itself.
"""
