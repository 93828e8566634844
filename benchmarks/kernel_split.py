"""What the model sees of a kernel beyond its time (issue 44), recorded on the GPU:

1. A recorded run (no model: the seed and the baselines only) whose seed is a two-launch softmax
   (tests/data/two_launch_softmax.py: a row-max kernel, then the normalising kernel, printing a fallback
   line): its per-kernel split per timed shape from the judge's torch.profiler pass, what it printed,
   the Nsight Compute profile job's result and cost, and `kscience show`'s lines for it.
2. The fp8 dot probe on this device (kscience.evaluate.profile.probes): which instruction each
   `max_num_imprecise_acc` gives and how exact it is.

Prints a table; writes benchmarks/results/kernel-split-<device>-<date>.json and the run's database.

    PYTHONPATH=$PWD python3 benchmarks/kernel_split.py [--out DIR]
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
from pathlib import Path

from kscience.device import detect
from kscience.evaluate.profile import probes
from kscience.record.snapshot import Snapshot
from kscience.record.store import Store
from kscience.record.summary import sol_lines
from kscience.run.config import RunConfig
from kscience.run.driver import Run

SOURCE = Path(__file__).parents[1] / "tests" / "data" / "two_launch_softmax.py"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    device = detect()
    stem = f"kernel-split-{re.sub(r'[^A-Za-z0-9]+', '_', device.name)}-{datetime.date.today()}"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    db = out / f"{stem}.db"
    store = Store(db)
    run = Run.create(RunConfig(problem="softmax", iterations=0, profile="auto"), store=store,
                     seed_source=SOURCE.read_text())
    status = run.start(background=False).status
    snap = Snapshot.load(store, run.id)
    seed = snap.seed.stored_result
    rows = []
    print(f"{'shape':24} {'timed median us':>16} {'kernel':28} {'launches':>8} {'us/call':>9} {'share':>6}")
    for s in seed.get("shapes", []):
        kernels = s.get("kernels") or []
        total = sum(k["us"] for k in kernels) or 1.0
        for k in kernels:
            rows.append({"shape": s["shape"], "time_us": s["time_us"], **k})
            print(f"{json.dumps(s['shape'])[:24]:24} {s['time_us']:>16.2f} {k['name'][:28]:28} "
                  f"{k['launches']:>8g} {k['us']:>9.2f} {k['us'] / total:>6.0%}")
    print(f"\nper-kernel profiler: {seed.get('kernel_profiler')}")
    print(f"output: {seed.get('output')!r}")
    profiled = [e["payload"]["message"] for e in store.events(run.id) if e["type"] == "candidate_profiled"]
    print("\n".join(profiled))
    shown = sol_lines(snap.metrics())
    print("\n".join(shown))
    found = probes.run_all()
    for name, text in found.items():
        print(f"probe {name}: {text}")
    record = {"device": device.name, "date": str(datetime.date.today()), "run_status": status, "run_id": run.id,
              "phases_s": seed.get("phases_s"), "kernel_profiler": seed.get("kernel_profiler"), "kernels": rows,
              "output": seed.get("output"), "profiled": profiled, "show": shown, "probes": found,
              "database": db.name}
    (out / f"{stem}.json").write_text(json.dumps(record, indent=1))
    print(f"wrote {out / f'{stem}.json'} and {db}")
    return 0 if status == "finished" and rows else 1


if __name__ == "__main__":
    raise SystemExit(main())
