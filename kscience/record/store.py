"""The run store: one SQLite file holding everything a run did, in the order it did it.

Tables: runs, candidates (with lineage), plans (the designer's hypotheses and the selector's
choice they came from), findings, llm_calls, events; since schema 2 also campaigns (a suite of
problems, one run each: `campaign_problems`) and retimes (stored kernels judged again on another
device, beside their original verdicts); since schema 3 profiles (what a profiler saw of a
candidate: compile facts, Nsight Compute metrics, speed of light); since schema 4 slot_times
(how busy each evaluation slot was in each session of a run); since schema 5 compositions (a
composite candidate's parts and its rules by shape); since schema 6 campaign_sessions (how a campaign's
runs used the slots they shared, per session) and each slot's seconds on a GPU; since schema 7 a candidate's
`deviations` (its writer's note on what it did otherwise than the plan). Older files are migrated in
place when opened. A row is committed before anything is shown about it, so whatever a user has
seen survives a `kill -9` and a run resumes from here.

The file itself (opening, schema versions and migration, durability, transactions) is
`database.py`; this module is what a run writes and reads.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import time
from pathlib import Path

from kscience.record.database import JSON_COLUMNS, Database, StoreError
from kscience.record.candidate import Candidate
from kscience.record.llm_call import LLMCall
from kscience.record.rows import (CampaignProblem, CampaignRow, CampaignSession, FindingRow, LlmUsage, PlanRow,
                                   ProfileRow, RetimeRow, RunRow, SlotTime)

DEFAULT_DB = "kscience.db"
RUN_STATUSES = ("running", "finished", "failed", "stopped")
PENDING = "pending"  # a candidate written but not evaluated yet
WRITE_FAILED = "write_failed"  # the writer produced no source (edits that did not apply, no code)
# Kinds timed as baselines (PyTorch eager, it under torch.compile, the problem's vendor-library path and that
# call alone on inputs in its own layout, the libraries a user would install instead):
# never members of the evolving population, so never selected, ranked or reported as a run's best.
BASELINE_KINDS = ("eager", "compiled", "vendor", "vendor_alone", "library")
OFFLINE_MODEL = "offline"  # the model name the offline scientist records its scripted answers under
# The tables that hold a run's rows besides `runs`, those that refer to its candidates first.
RUN_TABLES = ("events", "llm_calls", "findings", "retimes", "profiles", "compositions", "slot_times", "plans",
              "candidates")


def default_db() -> str:
    """The run database when none is named: $KSCIENCE_DB, else ./kscience.db."""
    return os.environ.get("KSCIENCE_DB", DEFAULT_DB)


def open_store(path: str | Path | None, *, create: bool, readonly: bool = False) -> "Store":
    """The run database `path` (default: `default_db()`). Reading requires it to exist already;
    `readonly` for a command that only reads (see `Database`)."""
    path = Path(path or default_db()).expanduser()
    if not create and not path.is_file():
        raise StoreError(f"no database at {path} (name one with --db / db=, or set KSCIENCE_DB)")
    return Store(path, readonly=readonly)


def new_id(prefix: str) -> str:
    """Short, readable, unique enough within one database: `r-3f2a91bc`."""
    return f"{prefix}-{secrets.token_hex(4)}"


class Store(Database):
    """Runs, candidates, plans, findings, LLM calls, events, profiles, compositions, slot times,
    campaigns and retimes (the tables the module docstring lists), on a `Database`."""

    # --- runs --------------------------------------------------------------------------------
    def create_run(self, *, name: str, problem: str, overrides: dict, llm: str, strategy: str,
                   config: dict, environment: dict, pid: int | None = None, host: str | None = None,
                   campaign_id: str | None = None) -> str:
        run_id, now = new_id("r"), time.time()
        self._write("INSERT INTO runs (id, name, problem, overrides, llm, strategy, status, config, environment,"
                    " error, pid, host, created, updated, campaign_id) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (run_id, name or run_id, problem, self._clean(overrides), llm, strategy, "running",
                     self._clean(config), self._clean(environment), None, pid, host, now, now, campaign_id))
        return run_id

    def run(self, run_id: str) -> RunRow:
        rows = self._query("SELECT * FROM runs WHERE id=?", (run_id,))
        if not rows:
            raise StoreError(f"no run {run_id!r} in {self.path}")
        return RunRow.from_row(rows[0])

    def update_run(self, run_id: str, **fields) -> None:
        """Set columns of a run (status, error, llm, config, environment, pid, host, campaign_id)."""
        if fields.get("status") not in (None, *RUN_STATUSES):
            raise ValueError(f"unknown run status {fields['status']!r}")
        cols = ", ".join(f"{k}=?" for k in fields)
        self._write(f"UPDATE runs SET {cols}, updated=? WHERE id=?",
                    (*(self._clean(v) for v in fields.values()), time.time(), run_id))

    def delete_runs(self, run_ids: list[str]) -> None:
        """Every row of these runs, in one transaction: all of them go, or none."""
        with self._tx():
            for run_id in run_ids:
                for table in RUN_TABLES:
                    self._db.execute(f"DELETE FROM {table} WHERE run_id=?", (run_id,))
                self._db.execute("DELETE FROM runs WHERE id=?", (run_id,))

    def delete_campaign(self, campaign_id: str) -> None:
        """A campaign with its problems and every run it made, in one transaction."""
        with self._tx():
            self.delete_runs([r.id for r in self.campaign_runs(campaign_id)])
            self._db.execute("DELETE FROM campaign_problems WHERE campaign_id=?", (campaign_id,))
            self._db.execute("DELETE FROM campaigns WHERE id=?", (campaign_id,))

    def list_runs(self) -> list[RunRow]:
        """Every run, newest first (`kscience.record.snapshot.run_listing` adds their numbers)."""
        return [RunRow.from_row(r) for r in self._query("SELECT * FROM runs ORDER BY created DESC, rowid DESC")]

    # --- candidates --------------------------------------------------------------------------
    def add_candidate(self, run_id: str, *, kind: str, source: str, hypothesis: str, iteration: int,
                      parent_id: str | None = None, plan_id: str | None = None, repair_attempt: int = 0,
                      status: str = PENDING, message: str = "", write_mode: str | None = None,
                      edits_total: int = 0, edits_applied: int = 0, deviations: str = "") -> Candidate:
        """A new candidate, returned as written (its row is not read back); `deviations` is its writer's note on
        what it did otherwise than the plan."""
        with self._tx():
            seq = self._db.execute("SELECT count(*) FROM candidates WHERE run_id=?", (run_id,)).fetchone()[0] + 1
            row = {"id": new_id("c"), "run_id": run_id, "seq": seq, "parent_id": parent_id, "kind": kind,
                   "iteration": iteration, "plan_id": plan_id, "hypothesis": hypothesis, "source": source,
                   "status": status, "message": message, "geomean_us": None, "result": None,
                   "repair_attempt": repair_attempt, "write_mode": write_mode, "edits_total": edits_total,
                   "edits_applied": edits_applied, "created": time.time(), "evaluated": None,
                   "deviations": self._clean(deviations)}
            self._db.execute(f"INSERT INTO candidates ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                             tuple(row.values()))
        return Candidate.from_row(row)

    def record_result(self, cand: Candidate | str, result, notes: dict | None = None) -> Candidate:
        """Store an evaluation (the evaluator's EvalResult, which the store knows only as the record it keeps)
        with the run's notes beside it (Candidate.notes) on its candidate, given as it stands or by id. This is
        where a verdict becomes its stored JSON; the candidate returned holds `result` itself, and its row as
        stored, without reading it back."""
        cand = cand if isinstance(cand, Candidate) else self.candidate(cand)
        notes = dict(notes or {})
        text, evaluated = json.dumps({**result.to_dict(), **notes}), time.time()
        self._write("UPDATE candidates SET status=?, message=?, geomean_us=?, result=?, evaluated=? WHERE id=?",
                    (result.status, result.message, result.geomean_us, text, evaluated, cand.id))
        stored = {"status": result.status, "message": result.message, "geomean_us": result.geomean_us,
                  "evaluated": evaluated}
        # the row as a reader parses it from its columns, so this copy and a read of the row are equal
        return dataclasses.replace(cand, **stored, result=result, notes=notes,
                                   row={**cand.row, **stored, "result": json.loads(text)})

    def judge_again(self, cand: Candidate | str) -> Candidate:
        """Make a judged candidate (as it stands, or by id) pending, to be judged again (a verdict given under a
        limit the user has since raised); its earlier verdict stays in the run's events, where it was announced."""
        cand = cand if isinstance(cand, Candidate) else self.candidate(cand)
        self._write("UPDATE candidates SET status=?, message='', geomean_us=NULL, result=NULL, evaluated=NULL "
                    "WHERE id=?", (PENDING, cand.id))
        return Candidate.from_row({**cand.row, "status": PENDING, "message": "", "geomean_us": None, "result": None,
                                   "evaluated": None})

    def candidate(self, cand_id: str) -> Candidate:
        rows = self._query("SELECT * FROM candidates WHERE id=?", (cand_id,))
        if not rows:
            raise StoreError(f"no candidate {cand_id!r} in {self.path}")
        return Candidate.from_row(rows[0])

    def candidates(self, run_id: str) -> list[Candidate]:
        rows = self._query("SELECT * FROM candidates WHERE run_id=? ORDER BY seq", (run_id,))
        return [Candidate.from_row(r) for r in rows]

    def evaluated_with_source(self, run_id: str, source: str) -> Candidate | None:
        rows = self._query("SELECT * FROM candidates WHERE run_id=? AND source=? AND result IS NOT NULL "
                           "ORDER BY seq LIMIT 1", (run_id, source))
        return Candidate.from_row(rows[0]) if rows else None

    def judged_elsewhere(self, run_id: str, kind: str, source: str) -> list[Candidate]:
        """Candidates of `kind` with exactly this source that other runs of this store judged, newest first."""
        rows = self._query("SELECT * FROM candidates WHERE run_id<>? AND kind=? AND source=? AND result IS NOT NULL "
                           "ORDER BY evaluated DESC", (run_id, kind, source))
        return [Candidate.from_row(r) for r in rows]

    # --- profiles ----------------------------------------------------------------------------
    def record_profile(self, cand_id: str, *, compile_facts: list | None = None, ncu: dict | None = None,
                       sol: list | None = None, flag: str | None = None,
                       profile_s: float | None = None) -> ProfileRow:
        """Add what a profiler saw of a candidate; parts given as None keep what is already stored
        (compile facts come with the evaluation, ncu later and only for some candidates)."""
        parts = {"compile_facts": compile_facts, "ncu": ncu, "sol": sol, "flag": flag, "profile_s": profile_s}
        given = {k: (json.dumps(v) if k in JSON_COLUMNS else v) for k, v in parts.items() if v is not None}
        with self._tx():
            self._db.execute("INSERT OR IGNORE INTO profiles (candidate_id, run_id, updated) "
                             "SELECT id, run_id, ? FROM candidates WHERE id=?", (time.time(), cand_id))
            if given:
                cols = ", ".join(f"{k}=?" for k in given)
                self._db.execute(f"UPDATE profiles SET {cols}, updated=? WHERE candidate_id=?",
                                 (*given.values(), time.time(), cand_id))
        profile = self.profile(cand_id)
        if profile is None:  # the insert found no such candidate to take the run from
            raise StoreError(f"no candidate {cand_id!r} in {self.path}")
        return profile

    def profile(self, cand_id: str) -> ProfileRow | None:
        rows = self._query("SELECT * FROM profiles WHERE candidate_id=?", (cand_id,))
        return ProfileRow.from_row(rows[0]) if rows else None

    def profiles(self, run_id: str) -> list[ProfileRow]:
        """Every profile of a run, in candidate order (for plots: occupancy against speed...)."""
        return [ProfileRow.from_row(r) for r in self._query("SELECT p.* FROM profiles p JOIN candidates c ON "
                                                             "c.id=p.candidate_id WHERE p.run_id=? ORDER BY c.seq",
                                                             (run_id,))]

    # --- compositions ------------------------------------------------------------------------
    def add_composite(self, run_id: str, *, parts: list[str], rules: dict, **fields) -> Candidate:
        """A composite candidate (`add_candidate`'s fields) and what it is composed of, in one transaction."""
        with self._tx():
            cand = self.add_candidate(run_id, **fields)
            self._db.execute("INSERT INTO compositions VALUES (?,?,?,?,?)",
                             (cand.id, run_id, json.dumps(parts), json.dumps(rules), time.time()))
        return cand

    def composition(self, cand_id: str) -> dict | None:
        """{candidate_id, run_id, parts: [candidate ids], rules: Composition.to_dict()} or None."""
        rows = self._query("SELECT * FROM compositions WHERE candidate_id=?", (cand_id,))
        return rows[0] if rows else None

    def compositions(self, run_id: str) -> list[dict]:
        return self._query("SELECT * FROM compositions WHERE run_id=? ORDER BY created", (run_id,))

    # --- plans and findings ------------------------------------------------------------------
    def add_plans(self, run_id: str, iteration: int, *, base_id: str, reference_id: str | None,
                  justification: str, plans: list[dict]) -> list[PlanRow]:
        """One design round, all plans in one transaction: a round is either stored whole or not at all."""
        now, ids = time.time(), []
        with self._tx():
            for position, plan in enumerate(plans):
                ids.append(new_id("p"))
                self._db.execute(
                    "INSERT INTO plans VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (ids[-1], run_id, iteration, position, base_id, reference_id, self._clean(justification),
                     plan["title"], self._clean(plan), int(bool(plan.get("chosen"))), plan.get("why_chosen", ""),
                     plan.get("predicted_min_pct"), plan.get("predicted_max_pct"), now))
        return [PlanRow.from_row(self._query("SELECT * FROM plans WHERE id=?", (i,))[0]) for i in ids]

    def plans(self, run_id: str) -> list[PlanRow]:
        return [PlanRow.from_row(r) for r in
                self._query("SELECT * FROM plans WHERE run_id=? ORDER BY iteration, position", (run_id,))]

    def add_finding(self, run_id: str, *, plan_id: str, candidate_id: str | None, iteration: int, text: str,
                    predicted_min_pct: float | None, predicted_max_pct: float | None,
                    measured_pct: float | None) -> FindingRow:
        """A finding, returned as written (its row is not read back)."""
        row = {"run_id": run_id, "plan_id": plan_id, "candidate_id": candidate_id, "iteration": iteration,
               "text": self._clean(text), "predicted_min_pct": predicted_min_pct,
               "predicted_max_pct": predicted_max_pct, "measured_pct": measured_pct, "created": time.time()}
        row_id = self._write(f"INSERT INTO findings ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                             tuple(row.values()))
        return FindingRow(id=row_id, **row)

    def findings(self, run_id: str) -> list[FindingRow]:
        return [FindingRow.from_row(r) for r in self._query("SELECT * FROM findings WHERE run_id=? ORDER BY id",
                                                             (run_id,))]

    # --- LLM calls and events ----------------------------------------------------------------
    def add_llm_call(self, run_id: str, call: LLMCall) -> None:
        self._write("INSERT INTO llm_calls (run_id, role, model, prompt, response, input_tokens, output_tokens,"
                    " latency_s, cost_usd, priced, error, created) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                    (run_id, call.role, call.model, self._clean(call.prompt), self._clean(call.response),
                     call.input_tokens, call.output_tokens, call.latency_s, call.cost_usd, int(call.priced),
                     self._clean(call.error), time.time()))

    def llm_calls(self, run_id: str) -> list[dict]:
        return self._query("SELECT * FROM llm_calls WHERE run_id=? ORDER BY id", (run_id,))

    def llm_usage(self, run_id: str) -> LlmUsage:
        """Calls to a model, their tokens and cost, over every session of the run. The offline
        scientist's answers are counted apart (`offline_calls`): no model read or wrote a token."""
        row = self._query("SELECT coalesce(sum(model != ?), 0) AS calls,"
                          " coalesce(sum(CASE WHEN model = ? THEN 0 ELSE input_tokens + output_tokens END), 0)"
                          " AS tokens, coalesce(sum(cost_usd), 0.0) AS cost_usd,"
                          " coalesce(sum(error IS NOT NULL), 0) AS errors,"
                          " coalesce(sum(priced = 0 AND model != ?), 0) AS unpriced,"
                          " coalesce(sum(model = ?), 0) AS offline_calls FROM llm_calls WHERE run_id=?",
                          (OFFLINE_MODEL,) * 4 + (run_id,))
        return LlmUsage.from_row(row[0])

    def add_event(self, run_id: str, type_: str, payload: dict) -> int:
        return self._write("INSERT INTO events (run_id, type, payload, ts) VALUES (?,?,?,?)",
                           (run_id, type_, self._clean(payload), time.time()))

    def events(self, run_id: str, after_seq: int = 0) -> list[dict]:
        """Events of a run in order; `after_seq` lets a poller fetch only what is new."""
        return self._query("SELECT * FROM events WHERE run_id=? AND seq>? ORDER BY seq", (run_id, after_seq))


    # --- evaluation slots --------------------------------------------------------------------
    def record_slot_time(self, run_id: str, *, session: float, slot: int, wall_s: float, busy_s: float,
                         evaluations: int, gpu_busy_s: float = 0.0) -> None:
        """A slot's busy time in one session of a run (`session`: when it started), replacing the last;
        `gpu_busy_s` is the part of it spent on evaluations judged on a GPU."""
        self._write("INSERT OR REPLACE INTO slot_times (run_id, session, slot, wall_s, busy_s, evaluations, updated,"
                    " gpu_busy_s) VALUES (?,?,?,?,?,?,?,?)",
                    (run_id, session, slot, wall_s, busy_s, evaluations, time.time(), gpu_busy_s))

    def slot_times(self, run_id: str) -> list[SlotTime]:
        return [SlotTime.from_row(r) for r in
                self._query("SELECT * FROM slot_times WHERE run_id=? ORDER BY session, slot", (run_id,))]

    # --- campaigns ---------------------------------------------------------------------------
    def create_campaign(self, *, name: str, suite: str, config: dict, problems: list[dict],
                        pid: int | None = None, host: str | None = None) -> str:
        """A campaign and its problems (locator, name, overrides, status, reason) in one transaction."""
        campaign_id, now = new_id("k"), time.time()
        with self._tx():
            self._db.execute("INSERT INTO campaigns VALUES (?,?,?,?,?,?,?,?,?)",
                             (campaign_id, name or campaign_id, suite, self._clean(config), "running", pid, host,
                              now, now))
            for position, p in enumerate(problems):
                self._db.execute("INSERT INTO campaign_problems VALUES (?,?,?,?,?,?,?,?)",
                                 (campaign_id, position, p["locator"], p["name"], self._clean(p.get("overrides", {})),
                                  p.get("status", "pending"), p.get("reason"), None))
        return campaign_id

    def campaign(self, campaign_id: str) -> CampaignRow:
        rows = self._query("SELECT * FROM campaigns WHERE id=?", (campaign_id,))
        if not rows:
            raise StoreError(f"no campaign {campaign_id!r} in {self.path}")
        return CampaignRow.from_row(rows[0])

    def list_campaigns(self) -> list[CampaignRow]:
        return [CampaignRow.from_row(r) for r in
                self._query("SELECT * FROM campaigns ORDER BY created DESC, rowid DESC")]

    def update_campaign(self, campaign_id: str, **fields) -> None:
        """Set columns of a campaign (status, pid, host, config)."""
        cols = ", ".join(f"{k}=?" for k in fields)
        self._write(f"UPDATE campaigns SET {cols}, updated=? WHERE id=?",
                    (*(self._clean(v) for v in fields.values()), time.time(), campaign_id))

    def campaign_problems(self, campaign_id: str) -> list[CampaignProblem]:
        return [CampaignProblem.from_row(r) for r in
                self._query("SELECT * FROM campaign_problems WHERE campaign_id=? ORDER BY position", (campaign_id,))]

    def update_campaign_problem(self, campaign_id: str, position: int, **fields) -> None:
        """Set columns of one problem of a campaign (status, reason, run_id)."""
        cols = ", ".join(f"{k}=?" for k in fields)
        self._write(f"UPDATE campaign_problems SET {cols} WHERE campaign_id=? AND position=?",
                    (*fields.values(), campaign_id, position))

    def record_campaign_session(self, campaign_id: str, *, session: float, wall_s: float, slots: int, busy_s: float,
                                idle_waiting_s: float, problems_at_once: int) -> None:
        """How one session of a campaign (`session`: when it started) used the slots its runs shared, so far."""
        self._write("INSERT OR REPLACE INTO campaign_sessions (campaign_id, session, wall_s, slots, busy_s,"
                    " idle_waiting_s, problems_at_once, updated) VALUES (?,?,?,?,?,?,?,?)",
                    (campaign_id, session, wall_s, slots, busy_s, idle_waiting_s, problems_at_once, time.time()))

    def campaign_sessions(self, campaign_id: str) -> list[CampaignSession]:
        return [CampaignSession.from_row(r) for r in
                self._query("SELECT * FROM campaign_sessions WHERE campaign_id=? ORDER BY session", (campaign_id,))]

    def campaign_runs(self, campaign_id: str) -> list[RunRow]:
        return [RunRow.from_row(r) for r in
                self._query("SELECT * FROM runs WHERE campaign_id=? ORDER BY created, rowid", (campaign_id,))]

    # --- re-timing on another device ---------------------------------------------------------
    def add_retime(self, run_id: str, candidate_id: str, device: str, result) -> None:
        """A stored kernel judged again on `device` (its name), `result` the evaluator's EvalResult; the original
        verdict is left as it was."""
        self._write("INSERT INTO retimes (run_id, candidate_id, device, status, message, geomean_us, result,"
                    " created) VALUES (?,?,?,?,?,?,?,?)",
                    (run_id, candidate_id, device, result.status, result.message, result.geomean_us,
                     json.dumps(result.to_dict()), time.time()))

    def retimes(self, run_id: str, device: str | None = None) -> list[RetimeRow]:
        if device is None:
            rows = self._query("SELECT * FROM retimes WHERE run_id=? ORDER BY id", (run_id,))
        else:
            rows = self._query("SELECT * FROM retimes WHERE run_id=? AND device=? ORDER BY id", (run_id, device))
        return [RetimeRow.from_row(r) for r in rows]
