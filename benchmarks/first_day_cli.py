"""How long a new user waits on the command line for two answers that should be quick: `kscience --version`
(target: under 0.5 s, no torch import) and `kscience eval` of a kernel that hangs, under `--eval-timeout 5`
(target: over within 30 s, having said it was waiting). Both run as the user runs them, `python -m kscience`
in a fresh process; the second needs no GPU (on one it is judged there).

    PYTHONPATH=$PWD python3 benchmarks/first_day_cli.py [--repeats 5] [--out FILE]

Writes benchmarks/results/first-day-cli-<device>-<date>-at-<commit>.json and prints a table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kscience.device import detect  # noqa: E402  (this checkout's kscience, as the commands below run it)

HUNG = "import time\n\ndef custom_kernel(data):\n    while True:\n        time.sleep(1)\n"
VERSION_TARGET_S, HUNG_TARGET_S, EVAL_TIMEOUT_S = 0.5, 30.0, 5


def _timed(args: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "kscience", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
    return time.monotonic() - started, done


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    return done.stdout.strip() or "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="runs of each command (default 5)")
    ap.add_argument("--out", help="JSON path (default benchmarks/results/first-day-cli-<device>-<date>-at-<commit>.json)")
    args = ap.parse_args()
    versions = [_timed(["--version"])[0] for _ in range(args.repeats)]
    hung_runs = []
    with tempfile.TemporaryDirectory() as tmp:
        kernel = Path(tmp) / "hung.py"
        kernel.write_text(HUNG)
        for _ in range(args.repeats):
            took, done = _timed(["eval", "softmax", str(kernel), "--eval-timeout", str(EVAL_TIMEOUT_S)])
            hung_runs.append({"s": round(took, 2), "exit": done.returncode,
                              "said_waiting": f"(limit {EVAL_TIMEOUT_S} s per step)" in done.stderr,
                              "verdict": done.stdout.splitlines()[0] if done.stdout else done.stderr[-200:]})
    device, date, commit = detect().name, datetime.date.today().isoformat(), _commit()
    report = {"benchmark": "first_day_cli", "device": device, "date": date, "commit": commit,
              "version_s": [round(s, 3) for s in versions], "version_median_s": round(statistics.median(versions), 3),
              "version_target_s": VERSION_TARGET_S, "hung_eval": hung_runs,
              "hung_median_s": statistics.median(r["s"] for r in hung_runs), "hung_target_s": HUNG_TARGET_S}
    name = device.replace(" ", "_").replace("(", "").replace(")", "")
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / f"first-day-cli-{name}-{date}-at-{commit}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"first-day CLI on {device}, {date}, at {commit} ({args.repeats} runs each)")
    print(f"  {'command':<46} {'median s':>9} {'max s':>7} {'target s':>9}  met")
    for what, times, target in (("kscience --version", versions, VERSION_TARGET_S),
                                (f"kscience eval (hung) --eval-timeout {EVAL_TIMEOUT_S}",
                                 [r["s"] for r in hung_runs], HUNG_TARGET_S)):
        met = max(times) < target and (target != HUNG_TARGET_S or all(r["said_waiting"] for r in hung_runs))
        print(f"  {what:<46} {statistics.median(times):>9.2f} {max(times):>7.2f} {target:>9.1f}  {'yes' if met else 'NO'}")
    print(f"  verdict: {hung_runs[0]['verdict']}")
    print(f"written {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
