"""Which worker layer changes a published solution's times: the evaluation judged with each layer undone.

On an H100 (2026-11-27) GPU MODE's pmpp sort submission, honest, was rejected as side work in five
evaluations of five (61-96 us per call outside the events, where the day before it showed 35-48 us).
Between those dates the worker gained read rules and Landlock scopes, a seccomp filter, its own IPC
namespace, a collector freeze, a view check in every timed call and a secret shape order. This copies
the package into a temporary folder for each variant, undoes one of them there by a textual edit
(refusing to run if the text is not found), and judges the solution with `bracket_probe.py` from that
copy, so the worker the judge starts is the edited one. It prints, per variant, the verdict and each
shape's event time, time outside the events and the round's null calls' host minus event time (the
clocks' disagreement in the worker's state then, against the idle gap it measured before the import),
and writes them to OUT as JSON. Its answer on an H100 at f2e8195: no one layer. The solution was ok
as is and with the view check undone, rejected with each other layer undone and with all six undone;
rejected rounds had small shapes at 1.3-2x their event times in ok rounds (100k elements: 306-335 us
against 162-209) and outside times to match (60-85 us against 33-50), big shapes unchanged: a slow
state of the worker's host, whose launch no longer hides under the cover, not a layer.

    python benchmarks/probes/undo_layers.py --repo .refk --task pmpp/sort_py [--variants all-off,seccomp]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BRACKET_PROBE = Path(__file__).resolve().with_name("bracket_probe.py")

# name -> [(text, replacement)]: the text is looked for in every module under kscience/evaluate
EDITS = {
    "seccomp": [("    machine = _SECCOMP_ARCH.get(platform.machine())", "    machine = None")],
    "read-rules": [('unreadable = [p for p in os.environ.get(confine.UNREADABLE_VAR, "").split(os.pathsep) if p]',
                    "unreadable = []")],
    "scopes": [("scoped = _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL if abi >= 6 else 0", "scoped = 0")],
    "ipc-namespace": [('"--pid", "--ipc", ', '"--pid", ')],
    "gc-freeze": [("    gc.freeze()", "    pass")],
    "view-check": [("            h.not_a_view(out, self.work)", "            pass")],
    "shape-order": [('random.Random(f"{seed}:{which}").shuffle(shuffled)', "pass")],
}
EDITS["all-worker-layers"] = [e for k in ("seccomp", "read-rules", "scopes", "ipc-namespace", "gc-freeze", "view-check")
                              for e in EDITS[k]]


def patched_copy(variant: str, into: Path) -> Path:
    shutil.copytree(ROOT / "kscience", into / "kscience", ignore=shutil.ignore_patterns("__pycache__"))
    modules = sorted((into / "kscience" / "evaluate").rglob("*.py"))
    for text, replacement in EDITS.get(variant, []):
        holding = [m for m in modules if text in m.read_text()]
        if len(holding) != 1:
            raise SystemExit(f"undo_layers: {variant}: the text to undo is in {len(holding)} modules, not one: {text!r}")
        holding[0].write_text(holding[0].read_text().replace(text, replacement))
    return into


def judge(variant: str, args) -> dict:
    with tempfile.TemporaryDirectory(prefix="undo-layers-") as tmp:
        copy = patched_copy(variant, Path(tmp))
        out = Path(tmp) / "out"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(copy), os.environ.get("PYTHONPATH", "")]))
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, str(BRACKET_PROBE), "--repo", args.repo,
                               "--task", args.task, "--solution", args.solution, "--shapes", args.shapes,
                               "--out", str(out)], env=env, capture_output=True, text=True, timeout=args.timeout)
        wall = time.monotonic() - t0
        found = list(out.glob("*.json"))
        if proc.returncode or not found:
            return {"variant": variant, "status": "probe failed", "wall_s": wall,
                    "message": (proc.stderr or proc.stdout)[-600:], "rounds": []}
        data = json.loads(found[0].read_text())
        return {"variant": variant, "wall_s": wall, **data}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", required=True, help="an extract of gpu-mode/reference-kernels")
    ap.add_argument("--task", default="pmpp/sort_py")
    ap.add_argument("--solution", default="submission.py")
    ap.add_argument("--shapes", default="benchmarks", choices=("tests", "benchmarks", "all"))
    ap.add_argument("--variants", default="none,all-worker-layers," + ",".join(k for k in EDITS if k != "all-worker-layers"),
                    help="comma-separated: none (as is), " + ", ".join(EDITS))
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per evaluation")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = ap.parse_args()
    results = []
    for variant in args.variants.split(","):
        r = judge(variant, args)
        results.append(r)
        shapes = "  ".join(f"{x['shape'].split('=')[-1]}: {x['event_us'].get('median', 0):.0f}/{x['outside_us']:.0f}"
                           f"/{x.get('null_host_less_event_us', {}).get('median', float('nan')):.0f}"
                           for x in r["rounds"])
        print(f"{variant:20s} {r['status']:10s} {r['wall_s']:6.1f} s  event/outside/null host-event us  {shapes}",
              flush=True)
        if r["status"] != "ok":
            print(f"{'':20s} {r['message'][:300]}", flush=True)
    print(f"wrote {write(results, Path(args.out), args.task)}")
    return 0


def write(results: list[dict], out: Path, task: str) -> Path:
    """The variants' results as JSON in `out`, named by the task, the device that judged them and the date."""
    device = "".join(c for c in (results[0].get("device") if results else "unknown").replace(" ", "_")
                     if c.isalnum() or c in "_.-")
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"undo-layers-{task.replace('/', '-')}-{device}-{datetime.date.today().isoformat()}.json"
    path.write_text(json.dumps(results, indent=1))
    return path


if __name__ == "__main__":
    sys.exit(main())
