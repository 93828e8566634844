"""Every problem directory of GPU MODE's reference-kernels, judged by `kscience eval` with its own solutions.

For each directory holding task.yml and reference.py: every published `solutions/correct/*` and the
directory's `submission.py` must come out ok, every published wrong one (`solutions/wrong/*`, as
reference-kernels names them: empty kernels, a bf16 matmul, a sum that skips elements; or
`solutions/incorrect/*`) must not. Each is judged
as `kscience eval DIR FILE` judges it (within the task's own time limit, task.yml's test and benchmark
timeouts together, or --time-limit), in this process (one spare worker started
ahead, so the next evaluation does not wait for its worker's imports); anything escaping the judge
is recorded as a TRACEBACK row, and a judge that outlives the limit by a minute is stopped. Writes
benchmarks/results/gpumode-sweep-<device>-<date>.md: one row per (directory, solution) with the
verdict and its one-line reason, and a count at the top.

    python benchmarks/gpumode_sweep.py --repo /path/to/reference-kernels [--time-limit 240] [--only pmpp]
        [--with-reference]   # also the task's own reference, as a candidate, for every directory
        [--shapes tests]     # correctness only, no timing
        [--budget 330]       # start no evaluation after 330 s; the rest are listed as not run
        [--resume FILE]      # keep FILE's verdicts but those not run or timed out (or named by --only)

A device call is limited to ten minutes, so a whole sweep on a GPU takes several: each resumes the
file the last one wrote (`--resume`), with `--only` and `--time-limit` chosen per call.

The GPU machine has no network: `--repo` is a checkout (or `git archive` extract) carried there.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import resource
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch

from kscience.device import detect
from kscience.evaluate.judge.evaluation import evaluate, judging_process
from kscience.evaluate.result import EvalRequest
from kscience.evaluate.sandbox import spares
from kscience.problems import ProblemError, load_problem

RESULTS = Path(__file__).parent / "results"
WRONG = ("wrong", "incorrect")  # folders of published solutions that must not come out ok
NOT_A_VERDICT = ("ok", "TRACEBACK", "refused", "not run")  # what a wrong solution must not get
DEFAULT_LIMIT_S = 60.0  # an evaluation's limit where the task declares none and --time-limit is not given


def solutions(folder: Path) -> list[tuple[str, Path, bool]]:
    """(label, file, should pass) for each published solution of one directory."""
    found = [(f"correct/{f.name}", f, True) for f in sorted((folder / "solutions" / "correct").glob("*.py"))]
    if (folder / "submission.py").is_file():
        found.append(("submission.py", folder / "submission.py", True))
    for kind in WRONG:
        found += [(f"{kind}/{f.name}", f, False) for f in sorted((folder / "solutions" / kind).glob("*.py"))]
    return found


def must_fail(label: str) -> bool:
    return label.split("/")[0] in WRONG


class _Overran(BaseException):  # not an Exception: no handler in the task or the judge may swallow it
    pass


def _alarm(signum, frame):
    raise _Overran()


def judge(folder: Path, source: str, time_limit: float | None, gpu: int | None,
          shapes: str = "all") -> tuple[str, str, float]:
    """(status, one-line reason, seconds) of one evaluation, as `kscience eval` gives it. `time_limit`
    None: the task's own (task.yml's test and benchmark timeouts together), else DEFAULT_LIMIT_S."""
    t0 = time.monotonic()
    limit = time_limit or DEFAULT_LIMIT_S
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(int(limit) + 60)  # the judge's own work (inputs, the reference) has no limit of its own
    try:
        problem = load_problem(str(folder))
        if time_limit is None and problem.time_limit_s:
            limit = problem.time_limit_s
            signal.alarm(int(limit) + 60)
        result = evaluate(EvalRequest(problem=problem.locator, source=source, timeout_s=limit, shapes=shapes),
                          gpu=gpu, problem=problem, keep_spare=True)
        status, why = result.status, (result.message or "").splitlines()[0] if result.message else ""
        if status == "timeout":  # how far it got: a limit too short by a little or by far
            kinds = {"all": ("tests", "benchmarks"), "tests": ("tests",), "benchmarks": ("benchmarks",)}[shapes]
            total = sum(len(problem.shapes(kind, gpu is None)) for kind in kinds)
            why += f" ({len(result.shapes)} of {total} shapes judged)"
        # Where the seconds went (the judge's phases over a tenth of a second), so a slow task shows its cause
        spent = ", ".join(f"{k} {v:.1f}" for k, v in (result.phases_s or {}).items() if v >= 0.1)
        why = f"{why[:300 - len(spent) - 12]} [phases: {spent}]" if spent else why
    except ProblemError as exc:
        status, why = "refused", str(exc).splitlines()[0]
    except _Overran:
        status, why = "timeout", f"the judge itself outlived the {limit:g} s limit by a minute"
    except Exception:  # noqa: BLE001 - the point is to see it
        status, why = "TRACEBACK", traceback.format_exc().strip().splitlines()[-1]
    finally:
        signal.alarm(0)
    return status, why[:300], time.monotonic() - t0


def reference_as_candidate(folder: Path) -> str:
    """The task's reference.py, with `custom_kernel = ref_kernel`: a candidate that needs nothing."""
    return (folder / "reference.py").read_text() + "\n\ncustom_kernel = ref_kernel\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repo", required=True, type=Path, help="a checkout of gpu-mode/reference-kernels")
    p.add_argument("--time-limit", type=float, default=None, metavar="SECONDS",
                   help="the limit of each whole evaluation (EvalRequest.timeout_s); default: the task's own "
                        f"(task.yml's test and benchmark timeouts together), else {DEFAULT_LIMIT_S:g}")
    p.add_argument("--only", action="append", default=[], metavar="TEXT",
                   help="only directories whose path contains this text (repeatable: any of them)")
    p.add_argument("--with-reference", action="store_true",
                   help="also judge each task's own reference as a candidate (needs no package a solution may)")
    p.add_argument("--shapes", choices=("all", "tests"), default="all",
                   help="check and time every shape (default), or only check the test shapes")
    p.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="stop starting evaluations after this long; the rest are listed as not run")
    p.add_argument("--memory-limit-gb", type=float, default=None, metavar="GB",
                   help="without a GPU: the address space this process may take (default: half the host's "
                        "memory), so a reference too big for the host fails in one line instead of being killed")
    p.add_argument("--resume", type=Path, default=None, metavar="FILE",
                   help="a results file of an earlier sweep: its verdicts are kept, except rows not run "
                        "or timed out, which are judged again, and every row of the directories --only names")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args()
    judging_process()
    if not torch.cuda.is_available():  # CUDA maps far more address space than it uses: CPU only
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        cap = int(args.memory_limit_gb * 2**30) if args.memory_limit_gb else total // 2
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    gpu = 0 if torch.cuda.is_available() else None
    problems = args.repo / "problems"
    if not problems.is_dir():
        raise SystemExit(f"gpumode_sweep: {args.repo} has no problems/ folder (a reference-kernels checkout?)")
    commit = _commit(args.repo)
    device = detect()
    folders = sorted(f.parent for f in problems.rglob("task.yml") if (f.parent / "reference.py").is_file())
    chosen = [f for f in folders if not args.only or any(t in str(f.relative_to(problems)) for t in args.only)]
    earlier = sweep_rows(args.resume) if args.resume else {}
    rows, t_start = [], time.monotonic()
    date = datetime.date.today().isoformat()
    tag = re.sub(r"\W+", "_", device.name).strip("_")
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"gpumode-sweep-{tag}-{date}.md"
    settings = (f"--time-limit {args.time_limit:g}" if args.time_limit else "the tasks' own time limits") + \
        f" --shapes {args.shapes}" + (" --with-reference" if args.with_reference else "")
    for folder in folders:
        name = str(folder.relative_to(problems))
        if folder not in chosen and not any(d == name for d, _ in earlier):
            continue
        entries = solutions(folder) or [("(none)", None, True)]
        if args.with_reference:
            entries.append(("(reference)", folder / "reference.py", True))
        for label, file, should_pass in entries:
            kept = earlier.get((name, label))
            if kept is not None and (folder not in chosen or not args.only and kept["status"] not in ("not run", "timeout")):
                rows.append(kept)
                continue
            if file is None:
                status, why, wall = "no solution", "the directory publishes no solution", 0.0
            elif args.budget is not None and time.monotonic() - t_start > args.budget:
                status, why, wall = "not run", f"the sweep's {args.budget:g} s budget was spent", 0.0
            else:
                source = reference_as_candidate(folder) if label == "(reference)" else file.read_text()
                status, why, wall = judge(folder, source, args.time_limit, gpu, args.shapes)
            expected = status == "ok" if should_pass else status not in NOT_A_VERDICT
            rows.append({"dir": name, "solution": label, "status": status, "reason": why,
                         "seconds": round(wall, 1), "as_expected": expected})
            print(f"{name:<44} {label:<34} {status:<14} {wall:6.1f}s  {why[:110]}", flush=True)
            # Written after every row, with the resumed rows not reached yet: a sweep stopped from
            # outside still leaves everything it knows.
            later = [r for key, r in earlier.items() if key[0] not in {row["dir"] for row in rows}]
            out.write_text(_markdown(rows + later, device.name, date, commit, time.monotonic() - t_start, settings))
    out.write_text(_markdown(rows, device.name, date, commit, time.monotonic() - t_start, settings))
    print(f"wrote {out}")
    spares.close_spares()
    return 0


def sweep_rows(path: Path) -> dict:
    """{(directory, solution): row} from a results file `_markdown` wrote."""
    rows = {}
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) != 5 or cells[0] in ("directory", "---") or not re.fullmatch(r"[\d.]+", cells[3]):
            continue
        name, label, status, seconds, reason = cells
        expected = status not in NOT_A_VERDICT if must_fail(label) else status == "ok"
        rows[(name, label)] = {"dir": name, "solution": label, "status": status, "seconds": float(seconds),
                               "reason": reason.replace("\\|", "|"), "as_expected": expected}
    return rows


def _markdown(rows: list[dict], device: str, date: str, commit: str, seconds: float, settings: str) -> str:
    correct = [r for r in rows if r["solution"] not in ("(none)", "(reference)") and not must_fail(r["solution"])]
    as_candidate = [r for r in rows if r["solution"] == "(reference)"]
    dirs = sorted({r["dir"] for r in rows})
    ok_dirs = sorted({r["dir"] for r in correct if r["status"] == "ok"})
    tracebacks = [r for r in rows if r["status"] == "TRACEBACK"]
    wrong_kept = [r for r in rows if must_fail(r["solution"])]
    lines = [
        f"# GPU MODE reference-kernels through `kscience eval` — {device}, {date}",
        "",
        f"reference-kernels commit `{commit}`; torch {torch.__version__}; "
        f"`benchmarks/gpumode_sweep.py {settings}`, {seconds / 60:.1f} minutes in all.",
        "",
        f"- directories: {len(dirs)}; with at least one published solution judged ok: {len(ok_dirs)}",
        f"- published solutions (correct/* and submission.py): {len(correct)}, ok: "
        f"{sum(r['status'] == 'ok' for r in correct)}, refused before running: "
        f"{sum(r['status'] == 'refused' for r in correct)}, not run (budget spent): "
        f"{sum(r['status'] == 'not run' for r in correct)}",
        f"- published wrong solutions (wrong/* and incorrect/*): {len(wrong_kept)}, judged not ok as they should be: "
        f"{sum(r['as_expected'] for r in wrong_kept)}",
        f"- evaluator tracebacks: {len(tracebacks)}",
        *([f"- each task's reference as a candidate: {len(as_candidate)}, ok: "
           f"{sum(r['status'] == 'ok' for r in as_candidate)}"] if as_candidate else []),
        "",
        "| directory | solution | verdict | seconds | reason |",
        "|---|---|---|---:|---|",
    ]
    for r in rows:
        reason = r["reason"].replace("|", "\\|")
        lines.append(f"| {r['dir']} | {r['solution']} | {r['status']} | {r['seconds']} | {reason} |")
    return "\n".join(lines) + "\n"


def _commit(repo: Path) -> str:
    stamp = repo / "COMMIT"  # an extract made with `git archive` carries its commit here; git would
    if stamp.is_file():  # name the checkout the extract sits in
        return stamp.read_text().strip()
    try:
        done = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True)
        if done.returncode == 0:
            return done.stdout.strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    sys.exit(main())
