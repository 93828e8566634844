"""Subcommands for suites of problems: campaign, campaigns, report, retime.

    kscience campaign PROBLEM... [--problems GLOB] [--attempts N | --iterations N] [every `kscience run` setting]
    kscience campaign --resume ID
    kscience report ID [--json] [--figure FILE]
    kscience retime RUN_OR_CAMPAIGN_ID [--top K] [--executor SPEC] [--show]

Progress goes to stderr, one line per problem change and per evaluated candidate; the report
goes to stdout. Exit codes as for `kscience run`: 0 when everything finished, 1 when a problem's
run failed or the campaign was stopped, 2 for usage errors, 130 when interrupted.
"""

from __future__ import annotations

import json
import sys

from kscience.campaigns.campaign import add_campaign_arguments, campaign_from_args
from kscience.campaigns.report import campaign_figure, campaign_report, report_json, report_lines
from kscience.evaluate.executors.factory import EXECUTORS
from kscience.run.config import add_db_option, add_setting_option
from kscience.problems.libraries import INSTALL_HINT
from kscience.run.events import CandidateEvaluated, Notice
from kscience.campaigns.retime import comparison, comparison_lines, retime
from kscience.cli.run_commands import open_store_or_explain
from kscience.record.text import US, fmt_us, kind_text, plural
from kscience.usage import UsageError


def _setup(build):
    """Build a campaign or its config, turning a bad setting (a ValueError) into a usage error."""
    try:
        return build()
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def add_campaign_commands(sub) -> None:

    s = sub.add_parser("campaign", help="evolve every problem of a suite, one run each, under one campaign id")
    add_campaign_arguments(s)
    s.add_argument("--json", action="store_true", help="print the report as JSON")
    s.set_defaults(func=cmd_campaign)

    s = sub.add_parser("campaigns", help="list stored campaigns, newest first")
    add_db_option(s)
    s.set_defaults(func=cmd_campaigns)

    s = sub.add_parser("report", help="a campaign's table: baselines, best kernels, fast_p, speedups, cost")
    s.add_argument("campaign_id", metavar="CAMPAIGN_ID", help="a campaign's id, as `kscience campaigns` lists it")
    s.add_argument("--json", action="store_true", help="print the report as JSON")
    s.add_argument("--figure", metavar="FILE", help="also draw the report figure (png, svg, pdf)")
    add_db_option(s)
    s.set_defaults(func=cmd_report)

    s = sub.add_parser("retime", help="judge a run's or campaign's kernels again on this device")
    s.add_argument("target", metavar="RUN_OR_CAMPAIGN_ID", help="the run (r-...) or campaign (k-...) to re-time")
    s.add_argument("--top", type=int, default=3, metavar="K", help="best K candidates of each run (default 3)")
    s.add_argument("--executor", default="local", metavar="SPEC", help=f"where kernels are judged: {EXECUTORS}")
    add_setting_option(s, "gpus", "all")
    s.add_argument("--show", action="store_true", help="only show the stored comparison")
    s.add_argument("--device", help="compare with the re-timing on this device (default: the latest)")
    s.add_argument("--json", action="store_true", help="print the comparison as JSON")
    add_db_option(s)
    s.set_defaults(func=cmd_retime)


def _status_lines():
    """What a campaign prints as it goes: a line per problem change and per evaluated candidate, and the packages
    missing for library baselines once for the whole campaign (each problem's run would say its own)."""
    said: set[str] = set()

    def status_line(campaign, row, event) -> None:
        if isinstance(event, Notice) and event.missing:
            new = [name for name in event.missing if name not in said]
            if new:
                said.update(new)
                print(f"kscience: baselines skipped where they need {', '.join(new)}, not installed here "
                      f"({INSTALL_HINT})", file=sys.stderr)
            return
        _status_line(campaign, row, event)

    return status_line


def _status_line(campaign, row, event) -> None:

    if row is None:
        return
    if event is None:
        why = f": {row.reason}" if row.reason and row.status in ("skipped", "failed") else ""
        print(f"kscience: [{row.position + 1}] {row.name}: {row.status}{why}", file=sys.stderr)
    elif isinstance(event, CandidateEvaluated):
        t = f" {fmt_us(event.geomean_us, US)}" if event.geomean_us else ""
        print(f"kscience:     {row.name}: {kind_text(event.kind)} {event.candidate_id} {event.status}{t}",
              file=sys.stderr)


def cmd_campaign(args) -> int:

    with open_store_or_explain(args.db, create=not args.resume) as store:
        campaign = _setup(lambda: campaign_from_args(args, store))
        print(f"kscience: campaign {campaign.id}: {plural(len(campaign.problems()), 'problem')} with {campaign.config.llm}, "
              f"{plural(campaign.config.iterations, 'iteration')} each, stored in {store.path}", file=sys.stderr)
        campaign.subscribe(_status_lines())
        try:
            _setup(lambda: campaign.start())
        except KeyboardInterrupt:
            print(f"kscience: interrupted; continue with: kscience campaign --resume {campaign.id} --db {store.path}",
                  file=sys.stderr)
            return 130
        report = campaign_report(store, campaign.id)
        print(report_json(report) if args.json else "\n".join(report_lines(report)))
        failed = [r for r in report.problems if r.status not in ("finished", "skipped")]
        if failed:
            print(f"kscience: error: {len(failed)} problem(s) did not finish; continue with: "
                  f"kscience campaign --resume {campaign.id} --db {store.path}", file=sys.stderr)
        return 1 if failed else 0


def cmd_campaigns(args) -> int:
    with open_store_or_explain(args.db, create=False, readonly=True) as store:
        for c in store.list_campaigns():
            rows = store.campaign_problems(c.id)
            done = sum(r.status in ("finished", "failed", "skipped") for r in rows)
            print(f"{c.id}  {c.status:<9} {done}/{len(rows)} problems  {c.suite}")
    return 0


def cmd_report(args) -> int:

    with open_store_or_explain(args.db, create=False, readonly=True) as store:
        report = _setup(lambda: campaign_report(store, args.campaign_id))
    print(report_json(report) if args.json else "\n".join(report_lines(report)))
    if args.figure:
        try:
            fig = campaign_figure(report)
        except ImportError:
            raise UsageError("--figure needs matplotlib: pip install 'kscience[jupyter]'") from None
        fig.savefig(args.figure)
        print(f"kscience: figure written to {args.figure}", file=sys.stderr)
    return 0


def cmd_retime(args) -> int:

    with open_store_or_explain(args.db, create=False) as store:
        if not args.show:
            def said(run, cand, result):
                t = f" {fmt_us(result.geomean_us, US)}" if result.geomean_us else ""
                print(f"kscience: {run.problem}: {kind_text(cand.kind)} {cand.id} {result.status}{t}",
                      file=sys.stderr)

            done = _setup(lambda: retime(store, args.target, top_k=args.top, executor_spec=args.executor,
                                         gpus=args.gpus, on_result=said))
            print(f"kscience: re-timed {done.judged} kernels on {done.device} "
                  f"({done.kept} already were)", file=sys.stderr)
            for run_id, why in done.unloadable.items():
                print(f"kscience: run {run_id} not re-timed: {why}", file=sys.stderr)
        comps = _setup(lambda: comparison(store, args.target, args.device or (None if args.show else done.device)))
        print(json.dumps([c.to_dict() for c in comps], indent=2) if args.json else "\n".join(comparison_lines(store, comps)))
    return 0
