"""Removing runs from a database: `kscience delete ID...` (runs or whole campaigns) and `kscience prune`
(the runs a filter picks: by default those that judged nothing).

Both only say what they would remove unless given --yes, and then open the database read-only: a look
changes nothing. A run still driven by a live process is never removed, nor a run of a campaign on its
own (the campaign's report would lose a problem): delete the campaign instead.
"""

from __future__ import annotations

import sys
import time

from kscience.record.liveness import display_status, run_is_alive
from kscience.record.rows import RunRow
from kscience.record.snapshot import Snapshot
from kscience.record.store import StoreError
from kscience.record.text import plural
from kscience.cli.run_commands import open_store_or_explain
from kscience.run.config import add_db_option
from kscience.usage import UsageError

DAY_S = 86400.0
STATUSES = ("finished", "failed", "stopped", "interrupted")


def add_store_commands(sub) -> None:
    s = sub.add_parser("delete", help="remove runs or campaigns from the database (says what, then --yes does it)",
                       description="Remove runs (r-...) or campaigns (k-..., with every run they made) and all they "
                                   "recorded. Without --yes, only says what would go.")
    s.add_argument("ids", nargs="+", metavar="ID", help="a run (r-...) or campaign (k-...) id")
    s.add_argument("--yes", action="store_true", help="remove them (default: only say what would be removed)")
    add_db_option(s)
    s.set_defaults(func=cmd_delete)

    s = sub.add_parser("prune", help="remove the runs a filter picks (by default those that judged nothing)",
                       description="Remove the runs that match every filter given (by default: runs that judged "
                                   "no candidate). Runs still going and runs of a campaign are kept. Without "
                                   "--yes, only says what would go.")
    s.add_argument("--status", action="append", choices=STATUSES, metavar="STATUS",
                   help=f"runs that ended so ({', '.join(STATUSES)}; repeatable)")
    s.add_argument("--older-than", type=float, metavar="DAYS", help="runs last changed more than DAYS days ago")
    s.add_argument("--no-correct", action="store_true", help="runs without a correct kernel (seed included)")
    s.add_argument("--yes", action="store_true", help="remove them (default: only say what would be removed)")
    add_db_option(s)
    s.set_defaults(func=cmd_prune)


def _what(snap: Snapshot) -> str:
    row = snap.run
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(row.updated))
    return (f"run {row.id} ({row.problem}, {display_status(row)}, {plural(len(snap.evaluated), 'candidate')} "
            f"judged, {plural(len(snap.correct), 'correct kernel')}, last changed {when})")


def _removable(run: RunRow) -> str | None:
    """Why a run may not be removed, or None."""
    if run_is_alive(run):
        return f"run {run.id} is still running (pid {run.pid} on {run.host}): stop it first"
    return None


def _say(lines: list[str], yes: bool, noun: str) -> None:
    for line in lines:
        print(("deleting " if yes else "would delete ") + line)
    if not yes and lines:
        print(f"(nothing deleted: add --yes to delete {noun})")


def cmd_delete(args) -> int:
    with open_store_or_explain(args.db, create=False, readonly=not args.yes) as store:
        runs, campaigns, lines = [], [], []
        for ident in dict.fromkeys(args.ids):
            try:
                if ident.startswith("k-"):
                    campaign = store.campaign(ident)
                    members = store.campaign_runs(ident)
                    for run in members:
                        why = _removable(run)
                        if why:
                            raise UsageError(f"campaign {ident} cannot be deleted: {why}")
                    campaigns.append(ident)
                    lines.append(f"campaign {ident} ({campaign.suite}) with its "
                                 f"{plural(len(members), 'run')}")
                    continue
                run = store.run(ident)
            except StoreError as exc:
                raise UsageError(str(exc)) from None
            why = _removable(run)
            if why is None and run.campaign_id:
                why = (f"run {ident} belongs to campaign {run.campaign_id}, whose report counts it: delete the "
                       f"campaign (kscience delete {run.campaign_id})")
            if why:
                raise UsageError(why)
            runs.append(ident)
            lines.append(_what(Snapshot.load(store, ident)))
        _say(lines, args.yes, "them")
        if args.yes:
            store.delete_runs(runs)
            for ident in campaigns:
                store.delete_campaign(ident)
    return 0


def _picked(args, snap: Snapshot, now: float) -> bool:
    row = snap.run
    if args.status and display_status(row) not in args.status:
        return False
    if args.older_than is not None and now - row.updated < args.older_than * DAY_S:
        return False
    if args.no_correct and snap.correct:
        return False
    if not (args.status or args.older_than is not None or args.no_correct):  # the default filter
        return not snap.evaluated
    return True


def cmd_prune(args) -> int:
    if args.older_than is not None and args.older_than < 0:
        raise UsageError(f"--older-than is a number of days, at least 0, not {args.older_than:g}")
    now = time.time()
    with open_store_or_explain(args.db, create=False, readonly=not args.yes) as store:
        picked, kept = [], 0
        for row in store.list_runs():
            snap = Snapshot.load(store, row.id)
            if not _picked(args, snap, now):
                continue
            if _removable(row) or row.campaign_id:
                kept += 1
                continue
            picked.append(snap)
        _say([_what(s) for s in picked], args.yes, "them")
        if not picked:
            print("nothing to prune" + ("" if any((args.status, args.older_than is not None, args.no_correct))
                                        else " (by default: runs that judged no candidate)"))
        if kept:
            print(f"kept {plural(kept, 'matching run')} still running or of a campaign "
                  "(delete a campaign whole: kscience delete k-...)", file=sys.stderr)
        if args.yes and picked:
            store.delete_runs([s.run.id for s in picked])
    return 0
