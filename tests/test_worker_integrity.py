"""The worker's integrity check watches every kscience.evaluate module the worker process runs.

A module the worker imports but the check does not watch is one whose functions a candidate can
replace unseen (the timing primitives in clocks.py, say). The candidate below looks from inside a
real worker: the kscience.evaluate modules loaded there, and the modules the worker's `Integrity`
snapshot holds. Adding a module to the worker's import path without adding it to the watched list
in worker/__main__.py fails this test.
"""

from __future__ import annotations

import json

from kscience.evaluate.judge.evaluation import evaluate
from kscience.evaluate.result import OK, EvalRequest

LOOK_FROM_INSIDE = """
import gc
import json
import sys
import types

import torch

_checks = [o for o in gc.get_objects() if type(o).__name__ == "Integrity"]
_watched = sorted({owner.__name__ for check in _checks for owner, *_ in check._points
                   if isinstance(owner, types.ModuleType)})
_loaded = sorted(name for name, module in list(sys.modules.items())
                 if name.startswith("kscience.evaluate") and not hasattr(module, "__path__"))
print("MODULES " + json.dumps({"checks": len(_checks), "watched": _watched, "loaded": _loaded}))


def custom_kernel(data):
    (x,) = data
    x = x.float()
    e = (x - x.amax(-1, keepdim=True)).exp()  # from its parts: softmax forbids calling torch.softmax
    return (e / e.sum(-1, keepdim=True)).to(torch.bfloat16)
"""


def test_every_kscience_evaluate_module_the_worker_runs_is_watched_by_its_integrity_check():
    result = evaluate(EvalRequest(problem="softmax", source=LOOK_FROM_INSIDE, shapes="tests"))
    assert result.status == OK, result.message
    line = next(line for line in result.stdout_tail.splitlines() if line.startswith("MODULES "))
    seen = json.loads(line.removeprefix("MODULES "))
    assert seen["checks"] == 1, seen
    # The worker's entry runs as __main__ and is watched under that name.
    assert "__main__" in seen["watched"] and "kscience.evaluate.worker.harness" in seen["loaded"], seen
    unwatched = sorted(set(seen["loaded"]) - set(seen["watched"]))
    assert not unwatched, f"the worker runs modules its integrity check does not watch: {unwatched}"
