"""Typed records made by hand for tests of the text and the figures drawn from them: run metrics and report rows
with only the fields a test is about, every other one empty."""

from __future__ import annotations

import dataclasses

from kscience.campaigns.report import speedup, suite_summary
from kscience.campaigns.report_rows import BASELINES, CampaignReport, ProblemRow
from kscience.campaigns.usage import CampaignUsage
from kscience.record.metrics import FigureHosts, RunMetrics
from kscience.record.rows import CampaignRow, LlmUsage

def _empty(field: dataclasses.Field):
    if field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING:
        return field.default if field.default is not dataclasses.MISSING else field.default_factory()
    kind = {"list": list, "dict": dict, "int": int, "bool": bool}.get(str(field.type).split("[")[0])
    return kind() if kind else None


def metrics_with(**given) -> RunMetrics:
    """RunMetrics with `given` and nothing else: no times, no counts, no model calls."""
    values = {f.name: _empty(f) for f in dataclasses.fields(RunMetrics)}
    values.update(figure_hosts=FigureHosts(None, None, None, None, None),
                  llm=LlmUsage(calls=0, tokens=0, cost_usd=0.0, errors=0, unpriced=0, offline_calls=0))
    return RunMetrics(**{**values, **given})


def problem_row(name: str, **given) -> ProblemRow:
    """A finished problem's row with its speedups computed from the times given."""
    row = ProblemRow(position=0, name=name, locator=name, status=given.pop("status", "finished"), reason=None,
                     run_id="r-1", **given)
    return dataclasses.replace(row, **{f"speedup_{b}": speedup(row, b) for b in BASELINES})


def report_of(rows: list[ProblemRow], campaign_id: str = "k-1", suite: str = "trial") -> CampaignReport:
    campaign = CampaignRow(id=campaign_id, name="", suite=suite, config={}, status="finished", pid=None, host=None,
                           created=0.0, updated=0.0)
    usage = CampaignUsage(sessions=0, wall_s=None, slots=None, problems_at_once=None, slot_busy_s=None, busy=None,
                          idle_waiting_s=None, gpu_hours=0.0, tokens=0, cost_usd=0.0)
    return CampaignReport(campaign=campaign, problems=rows, summary=suite_summary(rows), usage=usage)
