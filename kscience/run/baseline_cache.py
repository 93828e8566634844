"""torch.compile's verdicts kept beside every database, so the baseline is timed once per problem, GPU and
versions, whichever database, campaign, path or command asks next.

A run already takes torch.compile's verdict from an earlier run of its own database that timed the same
source (kscience.run.loop). That misses a run in another database (a campaign of its own, a notebook's), the
same problem file at another path (the baseline's source names the file), and `kscience eval`, which has no
database. Max-autotune holds a GPU for minutes per problem (325 s for the fp8 GEMM's 29 shapes on an H100),
so its passing verdicts are also kept here, one JSON file each, under $KSCIENCE_CACHE/baselines (default
~/.cache/kscience/baselines), keyed by:

* the baseline's source with the problem's path taken out, and the problem's own source (the reference as
  the scientist is shown it, after --set), so a copy of a file elsewhere finds it and an edited file does not;
* the judging GPU's name and the torch, Triton and CUDA/ROCm versions of its verdict;
* kscience's version, whose judge took the time.

Nothing is kept for the CPU interpreter, where torch.compile is not timed. A file that cannot be read is a
miss, and one that cannot be written costs only the time of timing it again.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from kscience.evaluate.result import DeviceRecord, EvalResult
from kscience.problems import Problem
from kscience.scientist.briefing import problem_source
from kscience.version import __version__

CACHE_VAR = "KSCIENCE_CACHE"  # the folder kscience keeps its caches in (the compile caches' too)


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_VAR, Path.home() / ".cache" / "kscience")) / "baselines"


@dataclass(frozen=True)
class Kept:
    """A passing verdict of a baseline timed earlier, as a run or `kscience eval` reuses it."""

    result: dict  # the verdict as stored (EvalResult.to_dict(), with a run's notes where a run kept it)
    where: str  # who timed it: "run r1 (c4) of runs.db", "kscience eval on gpu-a"
    when: float  # epoch seconds

    def message(self, said: str) -> str:
        """The message of the verdict taken from this timing (`said`: the verdict's own), saying whose it was."""
        return (f"timed by {self.where} on {time.strftime('%Y-%m-%d', time.localtime(self.when))} on this device "
                f"with these versions, reused: {said}")


def cache_key(problem: Problem, kind: str, source: str, device: DeviceRecord) -> str | None:
    """The file name a baseline's verdict is kept under on `device` (a verdict's device record); None on the
    CPU interpreter or a device of unknown versions."""
    if device.interpreted is not False or not device.name or not device.versions:
        return None
    material = {"kind": kind, "source": source.replace(repr(problem.locator), "<problem>"),
                "problem": hashlib.sha256(problem_source(problem).encode()).hexdigest(),
                "overrides": {k: str(v) for k, v in sorted(problem.overrides.items())},
                "device": device.name, "versions": device.versions, "kscience": __version__}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def recall(problem: Problem, kind: str, source: str, device: DeviceRecord) -> Kept | None:
    """The passing verdict kept for this baseline on a GPU like `device`; None where there is none."""
    key = cache_key(problem, kind, source, device)
    if key is None:
        return None
    try:
        kept = Kept(**json.loads((cache_dir() / f"{key}.json").read_text()))
    except (OSError, ValueError, TypeError):  # unreadable, not JSON, or not what `keep` writes
        return None
    ok = (isinstance(kept.result, dict) and kept.result.get("status") == "ok" and isinstance(kept.where, str)
          and isinstance(kept.when, (int, float)))
    return kept if ok else None


def keep(problem: Problem, kind: str, source: str, result: EvalResult, stored: dict, where: str) -> Path | None:
    """Keep a passing baseline verdict, written as `stored` (`where`: who timed it, for the message of whoever
    reuses it); the file written, or None where nothing was (not ok, the interpreter, or a folder that cannot be
    written)."""
    key = cache_key(problem, kind, source, result.judged_on)
    if key is None or not result.ok:
        return None
    path = cache_dir() / f"{key}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(Kept(stored, where, time.time()))))
        os.replace(tmp, path)
    except OSError:
        return None
    return path
