"""What makes an evaluation slower while the next spare worker starts beside it?

On an H100 (benchmarks/results/README.md), fp8_blockscale_gemm evaluations during which the
next spare started took 6.2-6.7 s, the one during which none did 4.6 s. A spare runs no GPU
code before its job: it imports Python and torch inside fresh user/network/PID/mount
namespaces, confines itself and waits. So each round here evaluates the same seed with an
already imported worker, beside one disturbance started at the same moment:

  none        nothing starts
  spare       the next evaluation's spare worker (what `keep_spare=True` does)
  import      a bare `python -c "import torch ..."`: the spare's imports, without the sandbox
  namespaces  `unshare ... sleep 3`: the spare's namespaces, without Python
  cuda        a process that creates a CUDA context on the same GPU (a spare does not do
              this; it tests whether any other process's GPU start slows the judge)

Rounds interleave the modes so drift hits all alike. Per mode: wall seconds and mean
seconds per phase, and the CPU seconds the disturbance itself used. The host's CPU grant
(affinity, cgroup quota) is recorded: a 16-core machine may allow fewer cores.

    python benchmarks/probes/spare_cost.py [--problem fp8_blockscale_gemm] [--rounds 2] [--out DIR]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))  # benchmarks/, for scaleout

from scaleout import host_cpus, mean_phases  # noqa: E402

from kscience.device import detect  # noqa: E402
from kscience.evaluate.judge.evaluation import evaluate, judging_process  # noqa: E402
from kscience.evaluate.result import EvalRequest  # noqa: E402
from kscience.evaluate.sandbox import spares, workers  # noqa: E402
from kscience.problems import load_problem  # noqa: E402

MODES = ("none", "spare", "import", "namespaces", "cuda")
_TICK = os.sysconf("SC_CLK_TCK")


def group_cpu_s(pgid: int) -> float:
    """CPU seconds used so far by the processes of a process group (a worker and its children)."""
    total = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[2]) == pgid:
                total += int(fields[11]) + int(fields[12])
    return total / _TICK


def ready_spare(gpu: int, interpreted: bool) -> workers.Worker:
    """Leave a spare that has finished importing (its CPU time has stopped growing) for the next evaluation."""
    spares.start_worker(gpu, interpreted, workers.default_rss_limit(), keep_spare=True).close()
    _, spare = next(iter(spares._spares.values()))[-1]  # the newest spare
    return settle(spare.proc.pid)


def settle(pgid: int, timeout_s: float = 30.0):
    last, deadline = -1.0, time.monotonic() + timeout_s
    time.sleep(1.0)
    while time.monotonic() < deadline:
        now = group_cpu_s(pgid)
        if now == last:
            return now
        last = now
        time.sleep(0.5)
    return last


def disturbance(mode: str, gpu: int) -> subprocess.Popen | None:
    py = [sys.executable, "-c"]
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpu))
    if mode == "import":
        return subprocess.Popen(py + ["import torch, kscience.evaluate.worker.harness"], env=env)
    if mode == "namespaces" and workers.namespaces_available():
        return subprocess.Popen(workers._unshare_prefix() + ["sleep", "3"])
    if mode == "cuda":
        return subprocess.Popen(py + ["import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()"],
                                env=env)
    return None


def cpu_of(proc: subprocess.Popen) -> float:
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problem", default="fp8_blockscale_gemm")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=str(Path(__file__).parents[1] / "results"))
    args = ap.parse_args()
    judging_process()  # as in a local slot
    device = detect()
    if device.interpreted:
        print("spare_cost.py needs a GPU", file=sys.stderr)
        return 2
    gpu = 0
    request = EvalRequest(problem=args.problem, source=load_problem(args.problem).seed_source, shapes="benchmarks")
    warm = evaluate(EvalRequest(problem=args.problem, source=request.source, shapes="all"), gpu=gpu)
    if not warm.ok:
        print(f"the seed does not pass: {warm.status}: {warm.message}", file=sys.stderr)
        return 1
    runs: dict[str, list] = {m: [] for m in MODES}
    cpu: dict[str, list] = {m: [] for m in MODES}
    for r in range(args.rounds):
        for mode in MODES:
            ready_spare(gpu, device.interpreted)
            other = disturbance(mode, gpu)
            result = evaluate(request, gpu=gpu, keep_spare=mode == "spare")
            if mode == "spare":
                cpu[mode].append(settle(next(iter(spares._spares.values()))[-1][1].proc.pid))
            elif other is not None:
                cpu[mode].append(cpu_of(other))
            runs[mode].append(result)
            print(f"round {r + 1} {mode:<11} {result.status} {result.wall_s:6.2f} s {result.phases_s}", flush=True)
    rows = {m: {"wall_s": [round(x.wall_s, 3) for x in runs[m]], "ok": all(x.ok for x in runs[m]),
                "median_wall_s": statistics.median(x.wall_s for x in runs[m]), "phases_s": mean_phases(runs[m]),
                "disturbance_cpu_s": cpu[m]} for m in MODES}
    stamp = datetime.date.today().isoformat()
    report = {"device": device.name, "date": stamp, "problem": args.problem, "host": host_cpus(),
              "warm_evaluation_s": warm.wall_s, "namespaces": workers.namespaces_available(), "modes": rows}
    out = Path(args.out) / f"spare-cost-{device.name.replace(' ', '_')}-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"\n{device.name} {args.problem}; host {report['host']}")
    print(f"{'mode':<12}{'median s':>9}{'vs none':>9}{'its CPU s':>11}  mean phase s")
    base = rows["none"]["median_wall_s"]
    for m, row in rows.items():
        its = f"{statistics.fmean(row['disturbance_cpu_s']):.2f}" if row["disturbance_cpu_s"] else "-"
        print(f"{m:<12}{row['median_wall_s']:>9.2f}{row['median_wall_s'] - base:>+9.2f}{its:>11}  "
              + " ".join(f"{k} {v:.2f}" for k, v in row["phases_s"].items()))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
