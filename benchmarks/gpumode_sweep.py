"""Every problem directory of GPU MODE's reference-kernels, judged by `kscience eval` with its own solutions.

For each directory holding task.yml and reference.py: every published `solutions/correct/*` and the
directory's `submission.py` must come out ok, every `solutions/incorrect/*` must not. Each
evaluation is its own `python -m kscience eval DIR FILE --json` process, so a judge that crashes
shows up as a traceback in that row rather than ending the sweep. Writes
benchmarks/results/gpumode-sweep-<device>-<date>.md: one row per (directory, solution) with the
verdict and its one-line reason, and a count at the top.

    python benchmarks/gpumode_sweep.py --repo /path/to/reference-kernels [--time-limit 60] [--only pmpp]

The GPU machine has no network: `--repo` is a checkout (or `git archive` extract) carried there.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import torch

from kscience.device import detect

RESULTS = Path(__file__).parent / "results"


def solutions(folder: Path) -> list[tuple[str, Path, bool]]:
    """(label, file, should pass) for each published solution of one directory."""
    found = [(f"correct/{f.name}", f, True) for f in sorted((folder / "solutions" / "correct").glob("*.py"))]
    if (folder / "submission.py").is_file():
        found.append(("submission.py", folder / "submission.py", True))
    found += [(f"incorrect/{f.name}", f, False) for f in sorted((folder / "solutions" / "incorrect").glob("*.py"))]
    return found


def judge(folder: Path, file: Path, time_limit: float) -> tuple[str, str, float]:
    """(status, one-line reason, seconds) of `kscience eval folder file`."""
    cmd = [sys.executable, "-m", "kscience", "eval", str(folder), str(file), "--json", "--timeout", str(time_limit)]
    t0 = time.monotonic()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=time_limit + 120)
    except subprocess.TimeoutExpired:
        return "timeout", f"the eval process outlived its {time_limit:g} s limit by 2 minutes", time.monotonic() - t0
    wall = time.monotonic() - t0
    if "Traceback (most recent call last)" in done.stderr:
        last = [line for line in done.stderr.strip().splitlines() if line.strip()][-1]
        return "TRACEBACK", last[:300], wall
    try:
        result = json.loads(done.stdout)
        return result["status"], result.get("message", "").splitlines()[0][:300] if result.get("message") else "", wall
    except (json.JSONDecodeError, KeyError, TypeError):
        # A problem kscience cannot load or run says so in one line on stderr (exit status 2).
        lines = [line for line in (done.stderr or done.stdout).strip().splitlines() if line.strip()]
        return "refused", (lines[-1] if lines else f"exit status {done.returncode}, no output")[:300], wall


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repo", required=True, type=Path, help="a checkout of gpu-mode/reference-kernels")
    p.add_argument("--time-limit", type=float, default=60.0, metavar="SECONDS",
                   help="the limit of each evaluation (kscience eval --timeout; default 60)")
    p.add_argument("--only", default="", help="only directories whose path contains this text")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args()
    problems = args.repo / "problems"
    if not problems.is_dir():
        raise SystemExit(f"gpumode_sweep: {args.repo} has no problems/ folder (a reference-kernels checkout?)")
    commit = _commit(args.repo)
    device = detect()
    folders = sorted(f.parent for f in problems.rglob("task.yml") if (f.parent / "reference.py").is_file())
    folders = [f for f in folders if args.only in str(f.relative_to(problems))]
    rows, t_start = [], time.monotonic()
    for folder in folders:
        name = str(folder.relative_to(problems))
        for label, file, should_pass in solutions(folder) or [("(none)", None, True)]:
            if file is None:
                status, why, wall = "no solution", "the directory publishes no solution", 0.0
            else:
                status, why, wall = judge(folder, file, args.time_limit)
            expected = status == "ok" if should_pass else status not in ("ok", "TRACEBACK")
            rows.append({"dir": name, "solution": label, "status": status, "reason": why,
                         "seconds": round(wall, 1), "as_expected": expected})
            print(f"{name:<44} {label:<34} {status:<14} {wall:6.1f}s  {why[:110]}", flush=True)
    date = datetime.date.today().isoformat()
    tag = re.sub(r"\W+", "_", device.name).strip("_")
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"gpumode-sweep-{tag}-{date}.md"
    out.write_text(_markdown(rows, device.name, date, commit, time.monotonic() - t_start, args.time_limit))
    print(f"wrote {out}")
    return 0


def _markdown(rows: list[dict], device: str, date: str, commit: str, seconds: float, limit: float) -> str:
    correct = [r for r in rows if r["solution"] != "(none)" and not r["solution"].startswith("incorrect/")]
    dirs = sorted({r["dir"] for r in rows})
    ok_dirs = sorted({r["dir"] for r in correct if r["status"] == "ok"})
    tracebacks = [r for r in rows if r["status"] == "TRACEBACK"]
    wrong_kept = [r for r in rows if r["solution"].startswith("incorrect/")]
    lines = [
        f"# GPU MODE reference-kernels through `kscience eval` — {device}, {date}",
        "",
        f"reference-kernels commit `{commit}`; torch {torch.__version__}; "
        f"`benchmarks/gpumode_sweep.py --time-limit {limit:g}`, {seconds / 60:.1f} minutes in all.",
        "",
        f"- directories: {len(dirs)}; with at least one published solution judged ok: {len(ok_dirs)}",
        f"- published solutions (correct/* and submission.py): {len(correct)}, ok: "
        f"{sum(r['status'] == 'ok' for r in correct)}, refused before running: "
        f"{sum(r['status'] == 'refused' for r in correct)}",
        f"- incorrect/* solutions: {len(wrong_kept)}, judged wrong as they should be: "
        f"{sum(r['as_expected'] for r in wrong_kept)}",
        f"- evaluator tracebacks: {len(tracebacks)}",
        "",
        "| directory | solution | verdict | seconds | reason |",
        "|---|---|---|---:|---|",
    ]
    for r in rows:
        reason = r["reason"].replace("|", "\\|")
        lines.append(f"| {r['dir']} | {r['solution']} | {r['status']} | {r['seconds']} | {reason} |")
    return "\n".join(lines) + "\n"


def _commit(repo: Path) -> str:
    try:
        done = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True)
        if done.returncode == 0:
            return done.stdout.strip()
    except OSError:
        pass
    stamp = repo / "COMMIT"  # an extract made with `git archive` can carry its commit here
    return stamp.read_text().strip() if stamp.is_file() else "unknown"


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
