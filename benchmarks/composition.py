"""Keep every win: does per-shape composition reach the oracle, and does the best beat what a user would pick?

Runs `kscience run PROBLEM --llm offline --iterations N` (three evaluations an iteration; composites are
built and judged as the run goes) for each problem through the CLI into one database, then reports per
problem: the final best (a composite or not) against the per-shape oracle over the run's own correct
kernels (the fastest of them on every shape; target: within 1%), and against PyTorch eager, torch.compile
(max-autotune) and the problem's vendor-library path (cuBLAS...), saying where a baseline wins. Also
whether the last designer prompt carried the device's versions, the baselines, the per-shape leaders and
(with --profile auto on a GPU with ncu) the Nsight Compute stall reasons. Results are written after each
problem to benchmarks/results/composition-<device>-<date>.{json,md}; rows of earlier invocations of the
same day and device are kept (one row per problem, iterations and --profile), so the problems can be
split over several commands.

    python benchmarks/composition.py [--iterations 10] [--problems softmax,matmul] [--profile none] [--budget S]
    (--budget: seconds for all the problems; each run gets a share of what is left as its --time-limit,
    by its number of shapes (an evaluation times them all), and stops there with what it has, so a
    device command's limit never loses them all)
    python benchmarks/composition.py --quick      # CPU check of the machinery: softmax, 1 iteration
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

from kscience.device import detect
from kscience.problems import builtin_names, geomean, load_problem
from kscience.scientist import compose
from kscience.record.candidate import Candidate
from kscience.record.snapshot import Snapshot
from kscience.record.store import Store

TARGET_GAP_PCT = 1.0


def oracle_us(cands: list[Candidate]) -> tuple[float | None, int]:
    """(geomean over the benchmark shapes every correct kernel timed of the fastest kernel on each, number
    of kernels it ranges over); composites and baselines are not counted, the seed is."""
    parts = compose.contenders(cands)
    times = [compose.timed_shapes(c) for c in parts]
    labels = set.intersection(*(set(t) for t in times)) if times else set()
    if not labels:
        return None, len(parts)
    return geomean([min(t[label][1] for t in times) for label in sorted(labels)]), len(parts)


def prompt_facts(store: Store, run_id: str) -> dict:
    designs = [c["prompt"] for c in store.llm_calls(run_id) if c["role"] == "designer"]
    last = designs[-1] if designs else ""
    return {"versions": "Software there:" in last, "vendor": "Baseline vendor library" in last,
            "leaders": "Per-shape leaders" in last, "stalls": "top warp stalls" in last}


def row_for(store: Store, run_id: str, problem: str) -> dict:
    snap = Snapshot.load(store, run_id)
    m, cands = snap.metrics(), snap.candidates
    oracle, n_parts = oracle_us(cands)
    best = m.best_us
    losses = [name for name, us in (("eager", m.eager_us), ("torch.compile", m.compiled_us),
                                    ("vendor", m.vendor_us)) if us is not None and best is not None and us < best]
    if (m.device or {}).get("interpreted"):
        losses = ["n/a (interpreter times)"]
    return {"problem": problem, "run_id": run_id, "seed_us": m.seed_us, "best_us": best,
            "best_kind": m.best_kind, "oracle_us": oracle, "kernels": n_parts,
            "gap_pct": 100 * (best / oracle - 1) if best and oracle else None,
            "composites": m.n_composites, "eager_us": m.eager_us, "compiled_us": m.compiled_us,
            "compiled_status": m.compiled_status, "vendor_us": m.vendor_us, "vendor_status": m.vendor_status,
            "vendor_label": m.vendor_label, "vendor_message": (m.vendor_message or "")[:200] or None,
            "loses_to": losses, "n_candidates": m.n_candidates, "prompt": prompt_facts(store, run_id),
            "device": (m.device or {}).get("name"), "versions": (m.device or {}).get("versions")}


def fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.1f}"
    if isinstance(x, (list, tuple)):
        return ", ".join(map(str, x)) or "none"
    if isinstance(x, dict):
        return " ".join(k for k, v in x.items() if v) or "none"
    return str(x)


COLUMNS = [("problem", "problem"), ("iterations", "iterations"), ("seed us", "seed_us"), ("best us", "best_us"), ("best is", "best_kind"),
           ("oracle us", "oracle_us"), ("gap %", "gap_pct"), ("composites", "composites"),
           ("eager us", "eager_us"), ("compile us", "compiled_us"), ("vendor us", "vendor_us"),
           ("loses to", "loses_to"), ("candidates", "n_candidates"), ("prompt has", "prompt"), ("wall s", "wall_s")]


def table(rows: list[dict]) -> list[str]:
    lines = ["| " + " | ".join(h for h, _ in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(fmt(r.get(k)) for _, k in COLUMNS) + " |" for r in rows]
    notes = [f"- {r['problem']}: vendor path {r['vendor_status']}: {r['vendor_message']}" for r in rows
             if r.get("vendor_status") not in (None, "ok")]
    notes += [f"- {r['problem']}: torch.compile {r['compiled_status']}" for r in rows
              if r.get("compiled_status") not in (None, "ok")]
    gaps = [r for r in rows if r.get("gap_pct") is not None]
    if gaps:
        within = sum(r["gap_pct"] <= TARGET_GAP_PCT for r in gaps)
        notes.append(f"- final best within {TARGET_GAP_PCT:g}% of the per-shape oracle: {within} of {len(gaps)}")
    return lines + ([""] + notes if notes else [])


def row_key(row: dict) -> tuple:
    return row["problem"], row.get("iterations"), row.get("profile")


def device_slug(name: str) -> str:
    return name.replace(" ", "_").replace("(", "").replace(")", "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", default=",".join(builtin_names()))
    ap.add_argument("--iterations", type=int, default=10, help="design rounds per run (3 evaluations each)")
    ap.add_argument("--profile", default="none", help="--profile of each run: none, auto or ncu")
    ap.add_argument("--db", default="composition.db")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    ap.add_argument("--quick", action="store_true", help="CPU check: softmax, 1 iteration")
    ap.add_argument("--budget", type=float, default=None, help="seconds for all the runs together")
    args = ap.parse_args()
    if args.quick:
        args.problems, args.iterations = "softmax", 1
    device = detect()
    stamp = datetime.date.today().isoformat()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"composition-{device_slug(device.name)}-{stamp}"
    title = (f"Per-shape composition and the baselines a user would pick: offline scientist, "
             f"{args.iterations} iterations ({3 * args.iterations} evaluations), {device.name}, {stamp}")
    old = json.loads(stem.with_suffix(".json").read_text()).get("rows", []) if stem.with_suffix(".json").exists() else []
    rows, problems, begun = [], args.problems.split(","), time.perf_counter()
    weights = [len(p.tests) + len(p.benchmarks) for p in map(load_problem, problems)]
    for i, problem in enumerate(problems):
        name = f"compose-{problem}-{args.iterations}it-{int(time.time())}"
        cmd = [sys.executable, "-m", "kscience.cli.main", "run", problem, "--llm", "offline", "--iterations",
               str(args.iterations), "--db", args.db, "--name", name, "--profile", args.profile]
        if args.budget is not None:
            left = args.budget - (time.perf_counter() - begun)
            cmd += ["--time-limit", str(max(int(left * weights[i] / sum(weights[i:])), 1))]
        started = time.perf_counter()
        code = subprocess.run(cmd).returncode
        wall = time.perf_counter() - started
        with Store(args.db) as store:
            run = next(r for r in store.list_runs() if r.name == name)
            rows.append(dict(row_for(store, run.id, problem), iterations=args.iterations, profile=args.profile,
                             exit_code=code, wall_s=round(wall, 1)))
        kept = [r for r in old if row_key(r) not in {row_key(x) for x in rows}]
        stem.with_suffix(".json").write_text(json.dumps({"device": device.name, "date": stamp, "title": title,
                                                         "rows": kept + rows}, indent=2))
        stem.with_suffix(".md").write_text(f"# {title}\n\n" + "\n".join(table(kept + rows)) + "\n")
    print(f"\n{title}\n" + "\n".join(table(rows)))
    print(f"wrote {stem}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
