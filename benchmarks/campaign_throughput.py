"""Does a campaign keep the GPU busy? One suite, its problems at once against one problem at a time.

The suite: the five built-ins and, so that the offline scientist has at least eight problems it can work on,
GPU MODE tasks written here from three of them (`VARIANTS`: softmax, rmsnorm and swiglu on the second half of
their benchmark shapes, each with the built-in's seed as its submission). The model is the offline scientist
answering like a 30 s model (`--llm offline@30`). The same campaign runs in two modes, each in a database of
its own and with a fresh compile cache: every problem at once (`--problems-at-once` unset: the default) and
one at a time (`--problems-at-once 1`, what `kscience campaign` did before); every other setting is the
same, each run's `--lines` too (--lines, default 1). Per mode, from the campaign's own record
(`campaign_sessions`, each run's `slot_times` and candidates), printed and written to
benchmarks/results/campaign-throughput-<device>-<date>-at-<commit>.json:

  wall s        the campaign's wall time, every session of it (the time between sessions not counted)
  busy          slot time held (evaluations, profiles, slow baselines) over wall time x slots
  idle-wait s   slot-seconds a slot stood free while an evaluation waited for one (the scheduler keeps it 0)
  evals         candidates judged (seeds, children, repairs, composites; not the baselines)
  x faster      the one-at-a-time mode's wall time over this mode's
  per problem   its run's wall time, busy share and evaluations, and its seed's evaluation time (JSON)

Targets (issue 54) on one H200: busy >= 0.9 with the problems at once, and >= 3x faster than one at a time.

One at a time is the long part: eight problems of four model answers (selector, designer, writers, findings)
and a few evaluations each, estimated at 20-25 min on one GPU at one iteration, more than one device command
allows.
`--deadline S` stops the command's campaigns cleanly S seconds after it starts (a mode not begun by then is
left for later; a campaign stopped stays resumable), and the same command with the same `--dbs` folder
resumes a mode not yet finished (its sessions add up) and reports a finished one as it stands. On a machine
of two GPUs the modes run side by side, one GPU each (benchmarks/README.md gives the device commands).

    python benchmarks/campaign_throughput.py --dbs OUT                     # both modes, one GPU
    python benchmarks/campaign_throughput.py --dbs OUT --modes one --deadline 540   # one at a time, in parts
    KSCIENCE_DEVICE=cpu python benchmarks/campaign_throughput.py --quick   # CPU interpreter check, ~10 min
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's kscience

from kscience.campaigns.campaign import Campaign, CampaignConfig  # noqa: E402
from kscience.campaigns.report import campaign_report  # noqa: E402
from kscience.device import detect  # noqa: E402
from kscience.problems import load_problem  # noqa: E402
from kscience.record.store import BASELINE_KINDS, Store  # noqa: E402

TARGETS = {"busy": 0.9, "faster_than_one_at_a_time": 3.0}
VARIANTS = {"softmax_wide": "softmax", "rmsnorm_wide": "rmsnorm", "swiglu_wide": "swiglu"}
SUITE = ("softmax", "rmsnorm", "swiglu", "matmul", "fp8_blockscale_gemm", *VARIANTS)
MODES = {"all": None, "one": 1}  # mode -> --problems-at-once
QUICK = {"latency": 3.0, "problems": "softmax,rmsnorm,softmax_wide,rmsnorm_wide"}
VARIANT_REFERENCE = '''"""{name}: kscience's built-in {builtin} on {count} of its benchmark shapes, as a GPU MODE task
(written by benchmarks/campaign_throughput.py)."""
import torch
from kscience.problems import load_problem

_BUILTIN = load_problem({builtin!r})


def generate_input(seed, **shape):
    return tuple(_BUILTIN.generate_input(seed, "cuda" if torch.cuda.is_available() else "cpu", **shape))


def ref_kernel(data):
    return _BUILTIN.ref_kernel(data)
'''


def write_variant(folder: Path, name: str, builtin: str) -> Path:
    """A GPU MODE task of the built-in on the second half of its benchmark shapes, its seed the submission."""
    problem = load_problem(builtin)
    shapes = problem.benchmarks[len(problem.benchmarks) // 2:]
    seeded = lambda found: [dict(s, seed=1000 + i) for i, s in enumerate(found)]  # noqa: E731
    task = {"description": f"{builtin} on its widest benchmark shapes", "tests": seeded(problem.tests),
            "benchmarks": seeded(shapes), "cpu_tests": seeded(problem.cpu_tests),
            "cpu_benchmarks": seeded(problem.cpu_benchmarks), "config": {"rtol": problem.rtol, "atol": problem.atol}}
    target = folder / name
    target.mkdir(parents=True, exist_ok=True)
    files = {"task.yml": json.dumps(task, indent=1) + "\n",  # JSON is YAML
             "reference.py": VARIANT_REFERENCE.format(name=name, builtin=builtin, count=len(shapes)),
             "submission.py": problem.seed_source}
    for file, text in files.items():  # renamed into place: the other mode's process may be reading it
        tmp = target / f".{file}.{os.getpid()}"
        tmp.write_text(text)
        os.replace(tmp, target / file)
    return target


def suite(folder: Path, names: list[str]) -> list[str]:
    """The campaign's problem locators: built-in names as they are, variants written into `folder`."""
    return [str(write_variant(folder, n, VARIANTS[n])) if n in VARIANTS else n for n in names]


def campaign_for(store: Store, problems: list[str], mode: str, args) -> Campaign | str:
    """The mode's campaign in its database: the id of one finished already (reported, not run again), one not
    finished (resumed), else a new one."""
    for row in store.list_campaigns():
        if row.name == mode:
            return row.id if row.status == "finished" else Campaign.resume(row.id, store=store, force=True)
    config = CampaignConfig(name=mode, problems_at_once=MODES[mode], llm=f"offline@{args.latency:g}",
                            iterations=args.iterations, lines=args.lines, compiled_baseline=False,
                            profile=args.profile, gpus=args.gpus)
    return Campaign.create(",".join(problems), config, store=store)


def run_mode(db: Path, problems: list[str], mode: str, args, executor=None, stop_after: float | None = None) -> dict:
    """Run (or resume) the mode's campaign to its end, or until it is stopped `stop_after` seconds from now;
    its figures from its record."""
    store = Store(db)
    campaign = campaign_for(store, problems, mode, args)
    if isinstance(campaign, str):
        return {"mode": mode, **figures(store, campaign)}
    deadline = threading.Timer(stop_after, campaign.stop) if stop_after is not None else None
    if deadline:
        deadline.start()
    try:
        campaign.start(executor=executor)
    finally:
        if deadline:
            deadline.cancel()
    return {"mode": mode, **figures(store, campaign.id)}


def figures(store: Store, campaign_id: str) -> dict:
    report = campaign_report(store, campaign_id)
    usage, problems = report.usage, []
    for row in report.problems:
        cands = store.candidates(row.run_id) if row.run_id else []
        judged = [c for c in cands if c.kind not in BASELINE_KINDS and c.result is not None]
        seed = next((c for c in cands if c.kind == "seed" and c.result is not None), None)
        problems.append({"name": row.name, "status": row.status, "wall_s": row.wall_s, "busy": row.busy,
                         "evaluations": len(judged), "seed_evaluation_s": seed and round(seed.result.wall_s, 1)})
    return {"campaign_id": campaign_id, "status": report.campaign.status, "sessions": usage.sessions,
            "slots": usage.slots, "problems_at_once": usage.problems_at_once, "wall_s": usage.wall_s,
            "busy": usage.busy, "idle_waiting_s": usage.idle_waiting_s, "gpu_hours": usage.gpu_hours,
            "evaluations": sum(p["evaluations"] for p in problems),
            "finished": sum(p["status"] == "finished" for p in problems), "problems": problems}


def compare(modes: list[dict], earlier: list[dict]) -> None:
    """Each mode's speed-up over one at a time (this report's, else an earlier one's), where both finished."""
    one = next((m for m in [*modes, *earlier] if m["mode"] == "one" and m["status"] == "finished"), None)
    for m in modes:
        m["faster_than_one_at_a_time"] = (round(one["wall_s"] / m["wall_s"], 2)
                                          if one and m["status"] == "finished" and m["wall_s"] else None)


def table(report: dict) -> list[str]:
    s = report["settings"]
    out = [f"{report['device']}  {len(report['suite'])} problems, model {s['latency_s']:g} s/answer, "
           f"{s['iterations']} iteration(s), {s['lines']} line(s) each  {report['date']} at {report['commit']}",
           f"{'mode':<6}{'at once':>8}{'slots':>6}{'wall s':>9}{'busy':>7}{'idle-wait s':>12}{'evals':>7}"
           f"{'finished':>10}{'x faster':>10}  status"]
    for m in report["modes"]:
        faster = "-" if m["faster_than_one_at_a_time"] is None else f"{m['faster_than_one_at_a_time']:.2f}"
        busy = "-" if m["busy"] is None else f"{m['busy']:.2f}"
        wall = "-" if m["wall_s"] is None else f"{m['wall_s']:.0f}"
        idle = "-" if m["idle_waiting_s"] is None else f"{m['idle_waiting_s']:.1f}"
        out.append(f"{m['mode']:<6}{m['problems_at_once'] or '-':>8}{m['slots'] or '-':>6}{wall:>9}{busy:>7}{idle:>12}"
                   f"{m['evaluations']:>7}{m['finished']:>6} of {len(m['problems'])}{faster:>8}  {m['status']} "
                   f"({m['sessions']} session(s))")
    out.append(f"targets: busy >= {TARGETS['busy']} with the problems at once, >= "
               f"{TARGETS['faster_than_one_at_a_time']:g}x faster than one at a time")
    return out


def commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", default=None, help=f"comma list of {', '.join(SUITE)} (default: all)")
    ap.add_argument("--modes", default="all,one", help="all (problems at once), one (one at a time), or both")
    ap.add_argument("--latency", type=float, default=None, help="seconds per model answer (default 30)")
    ap.add_argument("--iterations", type=int, default=1, help="design rounds per problem (default 1)")
    ap.add_argument("--lines", type=int, default=1, help="each run's --lines, in both modes (default 1)")
    ap.add_argument("--gpus", type=int, default=None, help="evaluation slots on at most N GPUs (default: all)")
    ap.add_argument("--profile", default="none", help="each run's --profile (default none: evaluations only)")
    ap.add_argument("--deadline", type=float, default=None, help="stop the campaigns this many seconds after the "
                                                                  "command starts; the same command with --dbs resumes")
    ap.add_argument("--dbs", help="folder of the modes' databases, kept to resume (default: a temporary one)")
    ap.add_argument("--one-at-a-time-from", metavar="JSON", help="compare with the 'one' mode of an earlier report")
    ap.add_argument("--quick", action="store_true", help="CPU check: 4 problems, a 3 s model")
    ap.add_argument("--out", help="JSON path (default benchmarks/results/campaign-throughput-<device>-<date>...)")
    args = ap.parse_args()
    started = time.monotonic()
    defaults = {"latency": 30.0, "problems": ",".join(SUITE), **(QUICK if args.quick else {})}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    names, modes = args.problems.split(","), args.modes.split(",")
    unknown = sorted({*names} - set(SUITE)) + sorted({*modes} - set(MODES))
    if unknown:
        ap.error(f"unknown problem or mode: {', '.join(unknown)}")
    device, date, at = detect(), datetime.date.today().isoformat(), commit()
    tag = re.sub(r"[^A-Za-z0-9]+", "_", device.name).strip("_")
    out = Path(args.out) if args.out else (ROOT / "benchmarks" / "results" /
                                           f"campaign-throughput-{tag}-{date}-at-{at}{'-quick' if args.quick else ''}.json")
    earlier = json.loads(Path(args.one_at_a_time_from).read_text())["modes"] if args.one_at_a_time_from else []
    report = {"benchmark": "campaign_throughput", "device": device.name, "date": date, "commit": at, "suite": names,
              "settings": {"latency_s": args.latency, "iterations": args.iterations, "lines": args.lines,
                           "gpus": args.gpus, "profile": args.profile, "deadline_s": args.deadline,
                           "model": f"offline@{args.latency:g}", "compiled_baseline": False, "quick": args.quick},
              "modes": [], "targets": TARGETS}
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kscience-campaigns-") as tmp:
        dbs = Path(args.dbs) if args.dbs else Path(tmp)
        dbs.mkdir(parents=True, exist_ok=True)
        problems = suite(dbs / "problems", names)
        for mode in modes:
            left = None if args.deadline is None else args.deadline - (time.monotonic() - started)
            if left is not None and left <= 0:
                print(f"mode {mode} not begun: the deadline has passed", file=sys.stderr)
                continue
            print(f"campaign of {len(problems)} problems, mode {mode} ...", file=sys.stderr, flush=True)
            with tempfile.TemporaryDirectory(prefix="kscience-cache-") as cache:  # no kernel compiled by the other
                os.environ["KSCIENCE_CACHE"] = cache
                report["modes"].append(run_mode(dbs / f"campaign-throughput-{mode}.db", problems, mode, args,
                                                stop_after=left))
            compare(report["modes"], earlier)
            out.write_text(json.dumps(report, indent=2) + "\n")  # after each mode: a cut-off keeps those done
    print("\n" + "\n".join(table(report)))
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
