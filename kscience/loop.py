"""The controller: select -> design -> (write -> evaluate -> repair -> finding) per chosen plan.

Every step reads what it needs from the store and commits what it produced before the next
step starts, so the controller can be dropped at any point (stop, failure, `kill -9`) and a
new one continues where it left off: a candidate still `pending` is evaluated, a failed one
is repaired if it has attempts left, a plan without a finding is finished, and iterations
are counted from the design rounds already committed.

Concurrency: the chosen plans of an iteration run as concurrent tasks, so their LLM calls
overlap; evaluations go through the executor, at most `executor.capacity` at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import threading
import time
from dataclasses import asdict

from kscience.evaluate import result as R
from kscience.evaluate.executor import Executor
from kscience import profiling
from kscience.baselines import compiled_baseline_wanted, vendor_source
from kscience.events import (CandidateEvaluated, CandidateProfiled, CandidateWritten, EvaluationWaiting, Event,
                             EventBus, FindingRecorded, HypothesesProposed, StageChanged)
from kscience.problems import Problem, shape_label
from kscience.scientist import compose
from kscience.scientist.briefing import bench_from_results, coverage, floor_times
from kscience.scientist.hardware import describe, run_target
from kscience.scientist.roles import CandidateView, Plan
from kscience.snapshot import REPAIRABLE, best_candidate, first_of_kind, iterations_done, uplift_pct
from kscience.store import BASELINE_KINDS, PENDING, WRITE_FAILED, Store

DIFF_LIMIT_CHARS = 20000
MAX_BASE_SWITCHES = 2  # other correct members tried as the base when the chosen one has nothing new left
WAIT_LOOK_S = 1.0  # how often an evaluation in flight is asked what it waits for
WAIT_REPEAT_S = 300.0  # an unchanged wait is reported again after this long


class Stopped(Exception):
    """A stop was requested (or another experiment failed); the run resumes later from the store."""


class RunError(Exception):
    """The run cannot go on, for a reason that is not the LLM's: e.g. a seed kernel that never passes."""


class NothingLeft(Exception):
    """No base has an experiment left that was not already carried out on it: the run ends here."""


def _diff(before: str, after: str) -> str:
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 "parent.py", "candidate.py")
    return "".join(lines)[:DIFF_LIMIT_CHARS]


class Controller:
    def __init__(self, *, store: Store, run_id: str, problem: Problem, scientist, executor: Executor,
                 bus: EventBus, repairs: int, seed_source: str, reference_source: str, compiled_source: str,
                 compiled_baseline: bool | None, stop: threading.Event, profile: str | None = None,
                 stop_at_sol: float | None = None):
        self.store, self.run_id, self.problem = store, run_id, problem
        self.scientist, self.executor, self.bus = scientist, executor, bus
        self.repairs = repairs
        self.seed_source, self.reference_source = seed_source, reference_source
        self.compiled_source, self.compiled_baseline = compiled_source, compiled_baseline
        self.vendor_source = vendor_source(problem)
        self._stop = stop  # set by the user (Run.stop)
        self._halted = False  # set when one experiment failed, so its siblings stop too
        self._slots = asyncio.Semaphore(max(1, executor.capacity))
        self.profile, self.stop_at_sol = profile, stop_at_sol  # --profile auto/ncu/none, --stop-at-sol F
        self._profiling = asyncio.Lock()  # one profile at a time, each with every evaluation slot held
        self._composing = asyncio.Lock()  # concurrent experiments finish at once: one composite at a time

    # --- the run -----------------------------------------------------------------------------
    async def run_iterations(self, target: int) -> None:
        """Bring the run to `target` committed design rounds, finishing any interrupted work first."""
        if self.iterations_done() < target:
            # Fail fast: a dead endpoint, or a scientist that cannot work on this problem, is found before
            # minutes of seed and baseline timing.
            kernels = [self.seed_source] + [c["source"] for c in self.store.candidates(self.run_id)
                                            if c["kind"] in ("child", "repair") and c["status"] == R.OK]
            await self.scientist.preflight(kernels)
        self.profile, said = profiling.resolve_profiler(self.profile)  # said once: on, or why it is off
        if said:
            self._emit(CandidateProfiled(None, self.iterations_done(), "ncu", None, said))
        await self._roots()
        await self.maybe_compose(self.iterations_done())  # composition hook 1 of 2 (a resumed run)
        self._observe()
        open_plans = [p for p in self.store.plans(self.run_id) if p["chosen"] and p["id"] not in self._found()]
        await self._experiments(open_plans)
        while self.iterations_done() < target:
            self._check_stop()
            reached = profiling.stop_message(self.problem, best_candidate(self.store.candidates(self.run_id)),
                                             self.stop_at_sol)
            if reached is not None:
                self._stage("done", self.iterations_done(), reached)
                return
            try:
                await self._iteration(self.iterations_done() + 1)
            except NothingLeft as exc:
                self._stage("done", self.iterations_done(), str(exc))
                return

    def iterations_done(self) -> int:
        return iterations_done(self.store.plans(self.run_id))

    def _check_stop(self) -> None:
        if self._stop.is_set() or self._halted:
            raise Stopped("stopped on request")

    def _emit(self, event: Event) -> None:
        self.bus.publish(event)

    def _stage(self, stage: str, iteration: int, detail: str = "") -> None:
        self._emit(StageChanged(stage=stage, iteration=iteration, detail=detail))

    # --- seed and baselines ------------------------------------------------------------------
    async def _roots(self) -> None:
        """The seed (repaired if it fails) is the root of the population; the reference and its
        torch.compile are baselines. A baseline that fails keeps its status and the run goes on."""
        candidates = self.store.candidates(self.run_id)
        chain = [c for c in candidates if c["iteration"] == 0 and c["kind"] in ("seed", "repair")]
        if not chain:
            self._stage("seed", 0)
            chain = [self._add(kind="seed", source=self.seed_source, hypothesis="seed kernel", iteration=0)]
        final = await self._settle(chain, iteration=0, plan_id=None, title="seed kernel")
        if final["status"] != R.OK:
            raise RunError(f"the seed kernel does not pass ({chain[0]['status']}: {chain[0]['message']}) "
                           f"and {self.repairs} repair attempt(s) did not fix it")
        reference = first_of_kind(candidates, "reference")
        if reference is None:
            self._stage("reference", 0)
            reference = self._add(kind="reference", source=self.reference_source,
                                  hypothesis="PyTorch eager", iteration=0)
        if reference["status"] == PENDING:
            await self._evaluate(reference)
        vendor = first_of_kind(candidates, "vendor")
        if vendor is None and self.vendor_source:  # where it cannot run, it is stored with the reason
            self._stage("vendor", 0)
            vendor = self._add(kind="vendor", source=self.vendor_source, hypothesis=self.problem.vendor_label,
                               iteration=0)
        if vendor is not None and vendor["status"] == PENDING:
            await self._evaluate(vendor)
        if not compiled_baseline_wanted(self.compiled_baseline, final):
            return
        compiled = first_of_kind(candidates, "compiled")
        if compiled is None:
            self._stage("compiled", 0)
            compiled = self._add(kind="compiled", source=self.compiled_source,
                                 hypothesis="torch.compile of PyTorch eager", iteration=0)
        if compiled["status"] == PENDING:
            await self._evaluate(compiled)

    # --- one iteration -----------------------------------------------------------------------
    async def _iteration(self, iteration: int) -> None:
        self._observe()
        views = self._views()
        population = list(views.values())
        findings = [f["text"] for f in self.store.findings(self.run_id)]  # oldest first
        self._stage("select", iteration)
        selection = await self.scientist.select(population, findings)
        base = views.get(selection.base_id)
        justification = selection.justification
        if base is None or base.status != R.OK:  # the selector must build on a correct kernel
            base = min((v for v in population if v.status == R.OK), key=lambda v: v.geomean_us)
            justification = f"{justification} [selected {selection.base_id!r} is not a correct candidate; " \
                            f"using the fastest correct one, {base.id}]"
        reference = views.get(selection.reference_id) if selection.reference_id != base.id else None
        # Every finding so far: fitting them to the prompt's budget is the designer's job, since only it
        # knows what else shares the prompt. A base with nothing new to try gives way to the next correct
        # member; when none has anything left, the run ends rather than run an empty round.
        others = sorted((v for v in population if v.status == R.OK and v.id != base.id), key=lambda v: v.geomean_us)
        tried = []
        for candidate in [base, *others[:MAX_BASE_SWITCHES]]:
            if candidate is not base:
                justification += f" [switched to {candidate.id}: nothing new to try on {base.id}]"
                base, reference = candidate, None
            self._stage("design", iteration, f"base {base.id}")
            done = [p["title"] for p in self.store.plans(self.run_id) if p["chosen"] and p["base_id"] == base.id]
            plans = await self.scientist.design(base, reference, findings, done)
            if any(p.chosen for p in plans):
                break
            tried.append(base.id)
        else:
            raise NothingLeft(f"iteration {iteration}: every experiment proposed for {', '.join(tried)} was already "
                              "carried out there; nothing left to try, so the run ends")
        rows = self.store.add_plans(self.run_id, iteration, base_id=base.id,
                                    reference_id=reference.id if reference else None,
                                    justification=justification, plans=[asdict(p) for p in plans])
        self._emit(HypothesesProposed(iteration=iteration, base_id=base.id,
                                      reference_id=reference.id if reference else None,
                                      justification=justification,
                                      plans=[{"plan_id": r["id"], **r["plan"]} for r in rows]))
        await self._experiments([r for r in rows if r["chosen"]])

    async def _experiments(self, plan_rows: list[dict]) -> None:
        """Run plans concurrently. If one fails, the others stop after their current step; the first
        failure is raised once all of them have committed what they finished."""

        async def guarded(row: dict) -> None:
            try:
                await self._experiment(row)
            except Stopped:
                raise
            except Exception:
                self._halted = True
                raise

        outcomes = await asyncio.gather(*(guarded(r) for r in plan_rows), return_exceptions=True)
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        failures = [e for e in errors if not isinstance(e, Stopped)]
        if failures:
            raise failures[0]
        if errors:
            raise errors[0]

    async def _experiment(self, row: dict) -> None:
        plan = Plan(**row["plan"])
        iteration, views = row["iteration"], self._views()
        base, reference = views[row["base_id"]], views.get(row["reference_id"])
        chain = [c for c in self.store.candidates(self.run_id) if c["plan_id"] == row["id"]]
        if not chain:
            self._check_stop()
            self._stage("write", iteration, plan.title)
            draft = await self.scientist.write(plan, base, reference)
            chain = [self._add_draft(draft, kind="child", parent_id=base.id, parent_source=base.source,
                                     iteration=iteration, plan_id=row["id"], hypothesis=plan.title)]
        final = await self._settle(chain, iteration=iteration, plan_id=row["id"], title=plan.title)
        self._check_stop()
        self._stage("finding", iteration, plan.title)
        self._observe()
        text = await self.scientist.finding(plan, base, final["status"], final["geomean_us"],
                                            child=self._view(final))
        measured = uplift_pct(base.geomean_us, final["geomean_us"]) if final["status"] == R.OK else None
        self.store.add_finding(self.run_id, plan_id=row["id"], candidate_id=final["id"], iteration=iteration,
                               text=text, predicted_min_pct=plan.predicted_min_pct,
                               predicted_max_pct=plan.predicted_max_pct, measured_pct=measured)
        self._emit(FindingRecorded(plan_id=row["id"], candidate_id=final["id"], iteration=iteration, text=text,
                                   predicted_min_pct=plan.predicted_min_pct,
                                   predicted_max_pct=plan.predicted_max_pct, measured_pct=measured))
        await self.maybe_compose(iteration)  # composition hook 2 of 2: after each experiment's verdict

    # --- per-shape composition (kscience/scientist/compose.py) ---------------------------------
    async def maybe_compose(self, iteration: int) -> None:
        """Judge a pending composite (a resumed run), then build and judge a new one when the correct
        kernels differ in which is fastest per shape and no composite of the same parts and rules exists."""
        async with self._composing:
            for cand in self.store.candidates(self.run_id):
                if cand["kind"] == compose.KIND and cand["status"] == PENDING:
                    await self._evaluate(cand)
            cands = self.store.candidates(self.run_id)
            comp = compose.plan(self.problem, cands)
            if comp is None:
                return
            sources = {c["id"]: c["source"] for c in cands}
            text = compose.source(comp, sources)
            if any(c["source"] == text for c in cands):
                return
            self._stage("compose", iteration, compose.summary(comp))
            cand = self.store.add_composite(self.run_id, parts=comp.parts, rules=comp.to_dict(), kind=compose.KIND,
                                            source=text, hypothesis=compose.summary(comp), iteration=iteration,
                                            parent_id=comp.fallback)
            self._emit(CandidateWritten(candidate_id=cand["id"], parent_id=comp.fallback, kind=compose.KIND,
                                        iteration=iteration, plan_title=cand["hypothesis"], status=cand["status"],
                                        diff=_diff(sources[comp.fallback], text)))
            await self._evaluate(cand)

    async def _settle(self, chain: list[dict], *, iteration: int, plan_id: str | None, title: str) -> dict:
        """Evaluate the chain's newest candidate if it is pending, then repair the newest broken one
        until a candidate passes or `repairs` attempts are used; return the chain's last candidate."""
        last = chain[-1]
        if last["status"] == PENDING:
            last = chain[-1] = await self._evaluate(last)
        attempts = sum(c["kind"] == "repair" for c in chain)
        while last["status"] in (*REPAIRABLE, WRITE_FAILED) and attempts < self.repairs:
            broken = next((c for c in reversed(chain) if c["status"] in REPAIRABLE), None)
            if broken is None:  # the first draft produced no source: nothing to repair
                break
            self._check_stop()
            attempts += 1
            self._stage("repair", iteration, f"{broken['id']} attempt {attempts}")
            failing = (broken["result"] or {}).get("failing_shape")
            draft = await self.scientist.repair(broken["source"], broken["status"], broken["message"], failing,
                                                attempts, coverage=coverage(broken["result"], self.problem),
                                                profile=self.store.profile(broken["id"]))
            last = self._add_draft(draft, kind="repair", parent_id=broken["id"], parent_source=broken["source"],
                                   iteration=iteration, plan_id=plan_id, hypothesis=f"repair {attempts}: {title}",
                                   repair_attempt=attempts)
            chain.append(last)
            if last["status"] == PENDING:
                last = chain[-1] = await self._evaluate(last)
        return last

    # --- candidates --------------------------------------------------------------------------
    def _add(self, **fields) -> dict:
        cand = self.store.add_candidate(self.run_id, **fields)
        self._emit(CandidateWritten(candidate_id=cand["id"], parent_id=cand["parent_id"], kind=cand["kind"],
                                    iteration=cand["iteration"], plan_title=cand["hypothesis"],
                                    status=cand["status"]))
        return cand

    def _add_draft(self, draft, *, kind: str, parent_id: str, parent_source: str, iteration: int,
                   plan_id: str | None, hypothesis: str, repair_attempt: int = 0) -> dict:
        written = draft.source is not None
        cand = self.store.add_candidate(
            self.run_id, kind=kind, source=draft.source or "", hypothesis=hypothesis, iteration=iteration,
            parent_id=parent_id, plan_id=plan_id, repair_attempt=repair_attempt,
            status=PENDING if written else WRITE_FAILED, message="" if written else (draft.error or "no source"),
            write_mode=draft.mode, edits_total=draft.edits_total, edits_applied=draft.edits_applied)
        self._emit(CandidateWritten(candidate_id=cand["id"], parent_id=parent_id, kind=kind, iteration=iteration,
                                    plan_title=hypothesis, status=cand["status"],
                                    diff=_diff(parent_source, draft.source) if written else ""))
        return cand

    async def _evaluate(self, cand: dict) -> dict:
        self._check_stop()
        twin = self.store.evaluated_with_source(self.run_id, cand["source"])
        if twin is not None:  # the same text was judged already: reuse its verdict, say so
            result = dict(twin["result"], message=f"same source as {twin['id']}: {twin['result']['message']}")
        else:
            async with self._slots:
                self._check_stop()
                self._stage("evaluate", cand["iteration"], cand["id"])
                request = R.EvalRequest(problem=self.problem.locator, source=cand["source"],
                                        overrides=dict(self.problem.overrides), shapes="all",
                                        candidate_id=cand["id"])
                future = self.executor.submit(request)
                try:
                    result = (await self._outcome(cand, future)).to_dict()
                except asyncio.CancelledError:
                    # Ctrl-C: a started evaluation runs to its end in its own process anyway (the
                    # executor waits for it on shutdown), so keep its verdict rather than redo it.
                    # Its verdict is stored and announced like any other, so the event log and
                    # every view show the candidate a user saw being judged.
                    if not future.cancel():
                        with contextlib.suppress(Exception):
                            self._record_verdict(cand, future.result().to_dict())
                    raise
        cand = self._record_verdict(cand, result)
        if self.profile == "ncu" and twin is None and profiling.candidate_to_profile(
                cand, self.store.candidates(self.run_id)):
            await self._profile(cand)
        return cand

    def _record_verdict(self, cand: dict, result: dict) -> dict:
        """Store an evaluation's verdict, then announce it (committed before anyone is told)."""
        cand = self.store.record_result(cand["id"], result)
        self.store.record_profile(cand["id"], **profiling.after_evaluation(self.problem, result))
        best, seed = self._best_and_seed()
        self._emit(CandidateEvaluated(candidate_id=cand["id"], parent_id=cand["parent_id"], kind=cand["kind"],
                                      iteration=cand["iteration"], hypothesis=cand["hypothesis"],
                                      status=cand["status"],
                                      geomean_us=cand["geomean_us"], message=cand["message"],
                                      best_us=best, seed_us=seed))
        return cand

    async def _profile(self, cand: dict) -> None:
        """Nsight Compute on one shape of the candidate, on a thread so events keep flowing, with every
        evaluation slot held so nothing is timed meanwhile. Its cost is shown, and never timed."""
        said: list[str] = []
        async with self._profiling:
            held = 0
            try:
                for _ in range(max(1, self.executor.capacity)):
                    await self._slots.acquire()
                    held += 1
                self._stage("profile", cand["iteration"], cand["id"])
                record = await asyncio.to_thread(profiling.profile_with_ncu, self.problem, cand["source"],
                                                 cand["result"], say=said.append)
            finally:
                for _ in range(held):
                    self._slots.release()
        if record is not None:
            self.store.record_profile(cand["id"], **record)
        self._emit(CandidateProfiled(candidate_id=cand["id"], iteration=cand["iteration"], profiler="ncu",
                                     profile_s=record and record["profile_s"],
                                     message=profiling.profiled_line(cand["id"], record, said)))

    async def _outcome(self, cand: dict, future) -> R.EvalResult:
        """The evaluation's result. One that waits outside this process (a queue) is reported while it
        waits, and a stop ends the wait: its request stays outstanding and a resumed run takes its result."""
        wrapped = asyncio.wrap_future(future)
        started, said, said_at = time.monotonic(), None, 0.0
        while True:
            done, _ = await asyncio.wait({wrapped}, timeout=WAIT_LOOK_S)
            if done:
                return wrapped.result()
            state = self.executor.wait_state(future)
            if state is None:
                continue
            if self._stop.is_set():
                future.cancel()
                raise Stopped("stopped while waiting for an evaluation")
            if state != said or time.monotonic() - said_at > WAIT_REPEAT_S:
                said, said_at = state, time.monotonic()
                self._emit(EvaluationWaiting(candidate_id=cand["id"], iteration=cand["iteration"], state=state,
                                             waited_s=round(said_at - started, 1)))

    def _best_and_seed(self) -> tuple[float | None, float | None]:
        cands = self.store.candidates(self.run_id)
        best, seed = best_candidate(cands), first_of_kind(cands, "seed")
        return (best["geomean_us"] if best else None), (seed["geomean_us"] if seed else None)

    # --- what the scientist sees -------------------------------------------------------------
    def _views(self) -> dict[str, CandidateView]:
        """Every evaluated candidate of the population (the baselines are not members)."""
        cands = [c for c in self.store.candidates(self.run_id)
                 if c["kind"] not in BASELINE_KINDS and c["result"] is not None]
        by_id = {c["id"]: c for c in cands}
        profiles = {p["candidate_id"]: p for p in self.store.profiles(self.run_id)}
        children: dict[str, int] = {}
        for c in cands:
            children[c["parent_id"]] = children.get(c["parent_id"], 0) + 1

        def depth(c: dict) -> int:
            d = 0
            while c["parent_id"] in by_id:
                c, d = by_id[c["parent_id"]], d + 1
            return d

        return {c["id"]: self._view(c, depth(c), children.get(c["id"], 0), profiles.get(c["id"])) for c in cands}

    def _view(self, c: dict, depth: int = 0, n_children: int = 0, profile: dict | None = None) -> CandidateView:
        result = c["result"] or {}
        profile = profile or self.store.profile(c["id"])
        return CandidateView(
            id=c["id"], parent_id=c["parent_id"], hypothesis=c["hypothesis"], status=c["status"],
            geomean_us=c["geomean_us"], source=c["source"], message=c["message"],
            shape_times={shape_label(s["shape"]): s["time_us"] for s in result.get("shapes", []) if s.get("time_us")},
            depth=depth, n_children=n_children, coverage=coverage(result, self.problem), profile=profile)

    def _observe(self) -> None:
        """Tell the scientist how the numbers were measured: the device and timing of the (repaired) seed,
        the spread of repeated calls, the baselines and the physical floor."""
        cands = self.store.candidates(self.run_id)
        roots = [c for c in cands if c["iteration"] == 0 and c["kind"] in ("seed", "repair") and c["result"]]
        seed = next((c["result"] for c in reversed(roots) if c["status"] == R.OK), roots[-1]["result"] if roots else None)
        info = (seed or {}).get("device") or {}
        device = describe(info.get("kind", ""), info.get("name", ""))
        target = getattr(self.scientist, "target", None) or run_target(None, device)
        kinds = {c["kind"]: c for c in cands}
        baselines = [(label, (kinds.get(kind) or {}).get("result")) for kind, label in
                     (("reference", "PyTorch eager"), ("compiled", "torch.compile (max-autotune)"),
                      ("vendor", f"vendor library: {self.problem.vendor_label}")) if kind != "vendor" or kind in kinds]
        best = best_candidate(cands)
        self.scientist.observe(bench_from_results(device, target, seed, baselines, floor_times(seed),
                                                  leaders=compose.leaders_text(cands, best and best["id"])))

    def _found(self) -> set[str]:
        return {f["plan_id"] for f in self.store.findings(self.run_id)}
