"""Subcommands that drive or read the scientist's runs: run, resume, runs, show, best.

Progress goes to stderr (kscience.cli.progress); results go to stdout. A run that fails or stops on
its budget prints one `kscience: error:` line naming the way to resume it and exits with 1; bad
arguments or an unusable database exit with 2 (kscience.usage).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from kscience.run.config import llm_choice, new_config, options_from_args
from kscience.problems.precision import label as precision_label
from kscience.record.liveness import display_status
from kscience.record.rows import RunRow
from kscience.cli.browse_commands import write_run_html
from kscience.cli.candidate_view import candidate_detail, candidate_lines
from kscience.cli.progress import Progress
from kscience.run.driver import Run
from kscience.run.log import wrapped
from kscience.record.snapshot import Snapshot, iterations_done, run_listing
from kscience.record.candidate import speedup
from kscience.record.text import fmt_us, fmt_x, kind_text, plural
from kscience.record.store import StoreError, open_store
from kscience.record.summary import CPU_NOTE, summary_lines
from kscience.usage import UsageError


def open_store_or_explain(path: str | None, *, create: bool, readonly: bool = False):
    try:
        return open_store(path, create=create, readonly=readonly)
    except StoreError as exc:
        raise UsageError(str(exc)) from None


def cmd_run(args) -> int:
    seed_source = None
    if args.seed_kernel:
        try:
            seed_source = Path(args.seed_kernel).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            why = getattr(exc, "strerror", None) or exc
            raise UsageError(f"cannot read seed kernel {args.seed_kernel}: {why}") from None
    options = options_from_args(args)
    config = new_config(args.problem, options, say_choice=False)
    with open_store_or_explain(args.db, create=True) as store:
        run = Run.create(config, store=store, seed_source=seed_source)
        choice = llm_choice(options)
        if choice:  # said once the run exists: a bad argument or problem gets its error line alone
            print(f"kscience: {choice}", file=sys.stderr)
        return _drive(run, args)


def cmd_resume(args) -> int:
    changes = options_from_args(args)
    iterations = changes.pop("iterations", None)
    with open_store_or_explain(args.db, create=False) as store:
        run = Run.resume(args.run_id, store=store, iterations=iterations, force=args.force, **changes)
        return _drive(run, args)


def _drive(run: Run, args) -> int:
    print(f"kscience: run {run.id}: {run.problem.name} with {run.config.llm} ({run.config.strategy}), "
          f"up to {plural(run.target, 'iteration')}, stored in {run.store.path}", file=sys.stderr)
    progress = Progress(run.target, initial=iterations_done(run.store.plans(run.id)))
    run.subscribe(progress)
    try:
        run.start(background=False)
    except KeyboardInterrupt:
        progress.close()
        _print_outcome(run, args)  # what was judged before the stop, the verdict in flight included
        print(f"kscience: interrupted; continue with: kscience resume {run.id} --db {run.store.path}", file=sys.stderr)
        return 130
    progress.close()
    row = _print_outcome(run, args)
    if row.error:
        then = "" if run.advised else f"; continue with: kscience resume {run.id} --db {run.store.path}"
        print(f"kscience: error: {row.error} (run {run.id} is stored{then})", file=sys.stderr)
        return 1
    if row.status != "finished":
        return 1
    db = f" --db {run.store.path}"
    print(f"kscience: next: kscience show {run.id}{db} / kscience best {run.id}{db} > best.py", file=sys.stderr)
    return 0


def _print_outcome(run: Run, args) -> dict:
    row, metrics = run.store.run(run.id), Snapshot.load(run.store, run.id).metrics()
    if args.json:
        print(json.dumps({"run": _run_json(row), "metrics": metrics.to_dict()}, indent=2))
    elif metrics.n_candidates:
        print("\n".join(summary_lines(row, metrics)))
    return row


def _run_json(row: RunRow) -> dict:
    return {**row.to_dict(), "status": display_status(row)}


def cmd_runs(args) -> int:
    with open_store_or_explain(args.db, create=False, readonly=True) as store:
        rows = run_listing(store)
    if args.json:
        print(json.dumps([{**r.to_dict(), "status": display_status(r.run)} for r in rows], indent=2))
        return 0
    if not rows:
        print("no runs yet")
        return 0
    print(f"{'id':<11} {'problem':<20} {'status':<11} {'iter':>4} {'cands':>5} {'seed us':>14} {'best us':>14} "
          f"{'speedup':>8}  {'timed on':<16} {'llm':<22} created")
    for r in rows:
        run = r.run
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(run.created))
        timed_on = "CPU interpreter" if r.interpreted else (r.device_name or "-")
        print(f"{run.id:<11} {Path(run.problem).name[:20]:<20} {display_status(run):<11} {r.iterations_done:>4} "
              f"{r.n_candidates:>5} {fmt_us(r.seed_us):>14} {fmt_us(r.best_us):>14} "
              f"{fmt_x(speedup(r.seed_us, r.best_us)):>8}  {timed_on[:16]:<16} {run.llm[:22]:<22} {created}")
    print("best us: the fastest correct kernel of the run, the seed included (a campaign report's best child "
          "leaves the seed out)")
    if any(r.interpreted for r in rows):
        print(f"(CPU interpreter: {CPU_NOTE})")
    return 0


def _snapshot(store, run_id: str) -> Snapshot:
    try:
        return Snapshot.load(store, run_id)
    except StoreError as exc:
        raise UsageError(str(exc)) from None


def cmd_show(args) -> int:
    if args.run_id.startswith("c-"):
        if args.html:
            raise UsageError("--html writes a run's page: give a run id (r-...); a candidate's is in it")
        return _show_candidate(args)
    if args.html:
        write_run_html(args.db, args.run_id, args.html)
        return 0
    with open_store_or_explain(args.db, create=False, readonly=True) as store:
        snap, db = _snapshot(store, args.run_id), store.path
    row, metrics = snap.run, snap.metrics()
    if args.json:
        print(json.dumps({"run": _run_json(row), "metrics": metrics.to_dict(),
                          "candidates": [c.to_row() for c in snap.candidates],
                          "plans": [p.to_dict() for p in snap.plans],
                          "findings": [f.to_dict() for f in snap.findings]}, indent=2))
        return 0
    print("\n".join(summary_lines(row, metrics)))
    if row.error:
        print(f"error: {row.error}")
    # SOL: the worst shape's fraction of the roofline bound, "-" without one (CPU interpreter, failures).
    print(f"\n  {'#':>3} {'id':<11} {'parent':<11} {'kind':<14} {'status':<13} {'geomean us':>14} {'SOL':>5}"
          "  hypothesis")
    for c in snap.candidates:
        sol = snap.sol_summary(c)
        sol_text = f"{sol.worst:.0%}" if sol else "-"
        print(f"  {c.seq:>3} {c.id:<11} {c.parent_id or '-':<11} {kind_text(c.kind):<14} {c.status:<13} "
              f"{fmt_us(c.geomean_us):>14} {sol_text:>5}  {c.hypothesis[:60]}")
        if c.status not in ("ok", "pending") and c.message:  # why it failed, whole
            print("\n".join(wrapped(c.message, " " * 18)))
        elif c.reduced_precision:  # correct, and far less precise than the reference
            print(f"  {'':>3} {'':<11} {precision_label(c.precision)}")
    print(f"\n(one candidate in full: kscience show CANDIDATE_ID --db {db})")
    return 0


def _show_candidate(args) -> int:
    with open_store_or_explain(args.db, create=False, readonly=True) as store:
        try:
            detail = candidate_detail(store, args.run_id)
        except StoreError as exc:
            raise UsageError(str(exc)) from None
    print(json.dumps(detail.to_dict(), indent=2) if args.json
          else "\n".join(candidate_lines(detail)))
    return 0


def cmd_best(args) -> int:
    with open_store_or_explain(args.db, create=False, readonly=True) as store:
        best = _snapshot(store, args.run_id).best
    if best is None:
        print(f"kscience: error: run {args.run_id} has no correct candidate", file=sys.stderr)
        return 1
    sys.stdout.write(best.source)
    return 0
