"""What a campaign cost, per problem and in total: wall time, slot time, GPU-hours, busy fraction, tokens, $.

Per problem, from its run's record (`slot_times`, `llm_calls`), over every session of the run:
* wall: the run's own wall time, session after session;
* GPU-hours: slot-seconds its evaluations held a slot and were judged on a GPU (the CPU interpreter's are
  slot time, not GPU time: 0 there), in hours;
* busy: the slot-seconds its evaluations held, over its wall time times the slots it judged on; where the runs
  of a campaign share the slots, this is the problem's share of them while it ran;
* tokens and $: its model calls' (the offline scientist's answers count none).

In total, from the campaign's own record (`campaign_sessions`, one row per session of the campaign): the wall
time of its sessions, and busy as the slot-seconds any run held a slot (evaluations, profiles, the slow
baselines) over that wall time times the slots; idle-waiting is the slot-seconds a slot stood free while an
evaluation waited for one. GPU-hours, tokens and $ are the problems' sums. A campaign stored before schema 6
has no sessions: its total wall time and busy fraction are not known ("-").
"""

from __future__ import annotations

from dataclasses import dataclass

from kscience.record.rows import SlotTime
from kscience.record.store import Store
from kscience.record.text import fmt_duration


@dataclass(frozen=True)
class RunUsage:
    """A problem's wall time, slot-seconds held, GPU-hours and busy fraction (None without a run or slot times)."""

    wall_s: float | None = None
    slot_busy_s: float | None = None
    gpu_hours: float | None = None
    busy: float | None = None


@dataclass(frozen=True)
class CampaignUsage:
    """The campaign's totals (see the module's docstring); None where a campaign stored before schema 6 has no
    sessions to say them."""

    sessions: int
    wall_s: float | None
    slots: int | None
    problems_at_once: int | None
    slot_busy_s: float | None
    busy: float | None
    idle_waiting_s: float | None
    gpu_hours: float
    tokens: int
    cost_usd: float


def run_usage(store: Store, run_id: str | None) -> RunUsage:
    """A problem's usage, from its run's slot times."""
    if run_id is None:
        return RunUsage()
    sessions: dict[float, list[SlotTime]] = {}
    for row in store.slot_times(run_id):
        sessions.setdefault(row.session, []).append(row)
    if not sessions:
        return RunUsage()
    wall = sum(max(r.wall_s for r in rows) for rows in sessions.values())
    slot_s = sum(max(r.wall_s for r in rows) * len(rows) for rows in sessions.values())
    busy = sum(r.busy_s for rows in sessions.values() for r in rows)
    gpu = sum(r.gpu_busy_s or 0.0 for rows in sessions.values() for r in rows)
    return RunUsage(wall_s=round(wall, 1), slot_busy_s=round(busy, 1), gpu_hours=round(gpu / 3600, 4),
                    busy=round(min(1.0, busy / slot_s), 3) if slot_s > 0 else None)


def campaign_usage(store: Store, campaign_id: str, rows: list) -> CampaignUsage:
    """The campaign's totals, given its problem rows (report_rows.ProblemRow: `run_usage`'s fields, tokens, $)."""
    sessions = store.campaign_sessions(campaign_id)
    wall = sum(s.wall_s for s in sessions)
    slot_s = sum(s.wall_s * s.slots for s in sessions)
    busy = sum(s.busy_s for s in sessions)
    return CampaignUsage(
        sessions=len(sessions), wall_s=round(wall, 1) if sessions else None,
        slots=max((s.slots for s in sessions), default=None),
        problems_at_once=sessions[-1].problems_at_once if sessions else None,
        slot_busy_s=round(busy, 1) if sessions else None,
        busy=round(min(1.0, busy / slot_s), 3) if slot_s > 0 else None,
        idle_waiting_s=round(sum(s.idle_waiting_s for s in sessions), 1) if sessions else None,
        gpu_hours=round(sum(r.gpu_hours or 0.0 for r in rows), 4),
        tokens=sum(r.tokens or 0 for r in rows), cost_usd=sum(r.cost_usd or 0.0 for r in rows))


def _wall(seconds: float | None) -> str:
    return fmt_duration(seconds) if seconds is not None else "-"


def _busy(fraction: float | None) -> str:
    return f"{fraction:.2f}" if fraction is not None else "-"


def usage_lines(rows: list, total: CampaignUsage) -> list[str]:
    """The report's table of time and cost: one line per problem, then the campaign's."""
    head = f"{'problem':<28} {'wall':>8} {'busy':>6} {'GPU-h':>8} {'tokens':>10} {'cost $':>8}"
    lines = [head, "-" * len(head)]
    for r in rows:
        gpu = f"{r.gpu_hours:.3f}" if r.gpu_hours is not None else "-"
        lines.append(f"{r.name[:28]:<28} {_wall(r.wall_s):>8} {_busy(r.busy):>6} {gpu:>8} "
                     f"{r.tokens or 0:>10,} {r.cost_usd or 0.0:>8.2f}")
    lines.append(f"{'campaign':<28} {_wall(total.wall_s):>8} {_busy(total.busy):>6} {total.gpu_hours:>8.3f} "
                 f"{total.tokens:>10,} {total.cost_usd:>8.2f}")
    if total.sessions:
        lines.append(f"campaign: {total.sessions} session(s), {total.problems_at_once} problem(s) at once on "
                     f"{total.slots} slot(s); a slot stood free while an evaluation waited for "
                     f"{total.idle_waiting_s:.1f} slot-s")
    lines.append("busy: slot time held over wall time x slots (a problem's: its share of the slots while it ran); "
                 "GPU-h: slot time of evaluations judged on a GPU")
    return lines
