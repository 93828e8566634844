"""What `--profile ncu` cost a stored run: seconds per profiled candidate and per round, beside the
run's wall time, and what Nsight Compute saw of each (issue 17).

    python3 benchmarks/profile_cost.py --db OUTDIR/profile-run.db --out OUTDIR/profile-run-cost.json

Reads the run through kscience.record.snapshot (the one reading of a stored run); prints one line per profiled
candidate and writes the same numbers as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kscience.record.snapshot import Snapshot
from kscience.record.text import fmt_sol
from kscience.record.store import Store


def cost(snap: Snapshot) -> dict:
    by_id = snap.by_id
    rows, rounds = [], {}
    for p in snap.profiles:
        if not p.ncu:
            continue
        c = by_id[p.candidate_id]
        counters = p.ncu
        rows.append({"candidate_id": c.id, "kind": c.kind, "iteration": c.iteration,
                     "geomean_us": c.geomean_us, "profile_s": p.profile_s, "shape": counters.get("shape"),
                     "kernel_launches": len(counters.get("kernels", [])),
                     "occupancy_pct": counters.get("occupancy_pct"), "dram_pct": counters.get("dram_pct"),
                     "speed_of_light": fmt_sol(snap.sol_summary(c)), "flag": p.flag})
        r = rounds.setdefault(c.iteration, {"iteration": c.iteration, "profiled": 0, "profile_s": 0.0})
        r["profiled"] += 1
        r["profile_s"] += p.profile_s or 0.0
    m = snap.metrics()
    return {"run_id": snap.run.id, "problem": snap.run.problem, "device": (m.device or {}).get("name"),
            "run_wall_s": round(snap.elapsed_s(), 1), "profiled": rows, "per_round": list(rounds.values()),
            "profile_s_total": m.profile_s_total,
            "profile_s_per_candidate": m.profile_s_total / len(rows) if rows else None}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    with Store(args.db) as store:
        runs = store.list_runs()
        if not runs:
            print(f"profile_cost: no run in {args.db}", file=sys.stderr)
            return 1
        report = cost(Snapshot.load(store, runs[0].id))  # the newest run
    for r in report["profiled"]:
        print(f"{r['candidate_id']} {r['kind']:<6} iteration {r['iteration']}: ncu {r['profile_s']:.1f} s on "
              f"{r['shape']}, {r['kernel_launches']} launch(es), occupancy {r['occupancy_pct']}%, "
              f"DRAM {r['dram_pct']}% of peak; speed of light {r['speed_of_light']}"
              + (f"; FLAG {r['flag']}" if r["flag"] else ""))
    for r in report["per_round"]:
        print(f"round {r['iteration']}: {r['profiled']} profiled, {r['profile_s']:.1f} s of ncu")
    per = report["profile_s_per_candidate"]
    print(f"run {report['run_id']} on {report['device']}: {report['run_wall_s']} s wall; ncu "
          + (f"{report['profile_s_total']:.1f} s in all, {per:.1f} s per profiled candidate" if per else
             "profiled nothing (is ncu on PATH?)"))
    Path(args.out).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
