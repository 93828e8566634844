"""A campaign: one run per problem of a suite, in one database, under one campaign id.

    campaign = Campaign.create("level1/", CampaignConfig(iterations=2, llm="openai:gpt-4.1"), store=store)
    campaign.start()                 # runs the problems at once, sharing one executor's slots
    Campaign.resume(campaign.id, store=store).start()   # after a kill: finished problems are not redone

A suite is a folder of KernelBench files (a level), a folder of GPU MODE problem directories, or a
list (comma-separated; the command line also takes them space-separated) of built-in names,
KernelBench files, GPU MODE directories and such folders. Problems that cannot be
loaded, or whose inputs would not fit the device, are recorded as skipped with the reason; they
are not failures of the scientist. Up to `--problems-at-once` runs go on at once over one executor
(kscience.campaigns.scheduler). A campaign is resumable as a whole: each problem's run is linked to it as
soon as it exists (`runs.campaign_id`), so a resumed campaign continues that run (`Run.resume`) instead
of starting the problem again, and a finished or failed one is not redone.
"""

from __future__ import annotations

import fnmatch
import math
import os
import socket
import sys
import threading
from dataclasses import replace
from pathlib import Path

from kscience.campaigns.scheduler import PROBLEMS_PER_SLOT, Scheduler

from kscience.run.config import (ConfigError, RunConfig, add_db_option, add_run_options, check_settings, llm_choice,
                                 options_from_args)
from kscience.device import detect
from kscience.evaluate.executors.factory import make_executor
from kscience.record.liveness import display_status, run_is_alive
from kscience.record.rows import CampaignProblem, RunRow
from kscience.problems import ProblemError, load_problem, no_such_problem
from kscience.problems.fit import fit_reason
from kscience.problems.kind import ProblemKind
from kscience.problems.kinds import KINDS
from kscience.run.baselines import reference_source
from kscience.run.driver import Run
from kscience.scientist.offline import cannot_work_on
from kscience.scientist.llm.factory import default_llm_spec
from kscience.scientist.llm.providers import model_specs
from kscience.scientist.plans import PLANS_PER_LINE
from kscience.record.store import Store, StoreError
from kscience.run.threads import Background

SKIPPED, PENDING = "skipped", "pending"


class CampaignConfig:
    """The settings every run of the campaign shares; stored as the campaign's config.

    Its own settings are `problems` (a glob over the suite's problem names), `attempts` (candidate
    kernels per problem, as whole design rounds), `name` (the campaign's label) and `problems_at_once`
    (runs going on at once; None: enough to keep the slots busy, kscience.campaigns.scheduler); every other
    keyword is a run setting of `RunConfig`, read back as an attribute (`config.llm`, `config.iterations`).
    `overrides` (`--set NAME=VALUE`) reach each KernelBench file that has a constant NAME."""

    OWN = ("problems", "attempts", "name", "problems_at_once")
    PER_PROBLEM = ("problem", "name")  # run settings each problem's run gets from the campaign

    def __init__(self, problems: str = "*", attempts: int | None = None, name: str = "",
                 problems_at_once: int | None = None, **settings):
        check_settings(settings)
        if attempts is not None:
            if attempts < 1:
                raise ConfigError(f"--attempts must be at least 1, not {attempts}")
            settings["iterations"] = math.ceil(attempts / PLANS_PER_LINE)
        if problems_at_once is not None and problems_at_once < 1:
            raise ConfigError(f"--problems-at-once must be at least 1, not {problems_at_once}")
        self.problems, self.attempts, self.name = problems, attempts, name
        self.problems_at_once = problems_at_once
        self.settings = {k: v for k, v in settings.items() if v is not None}
        self._defaults = RunConfig(problem="-", **self.settings)  # the run settings are checked once, here

    def __getattr__(self, key: str):
        if key.startswith("_") or key not in RunConfig.__dataclass_fields__:
            raise AttributeError(key)
        return getattr(self._defaults, key)

    def run_config(self, locator: str, overrides: dict, name: str, lines: int | None = None) -> RunConfig:
        """A problem's run settings; `lines` where the campaign's own --lines is not set."""
        return RunConfig(**{"lines": lines, **self.settings, "problem": locator, "overrides": overrides, "name": name})

    def to_dict(self) -> dict:
        return {"problems": self.problems, "name": self.name, "problems_at_once": self.problems_at_once,
                **self.settings}

    @classmethod
    def from_dict(cls, d: dict) -> "CampaignConfig":
        """A stored config; settings this version does not know (or no longer has) are dropped."""
        known = set(RunConfig.__dataclass_fields__) - set(cls.PER_PROBLEM)
        return cls(problems=d.get("problems", "*"), name=d.get("name", ""), problems_at_once=d.get("problems_at_once"),
                   **{k: v for k, v in d.items() if k in known})


# --- suites ----------------------------------------------------------------------------------------
def _kind(locator: str) -> ProblemKind | None:
    return next((kind for kind in KINDS if kind.claims(locator)), None)


def _is_problem(path: Path) -> bool:
    """Whether a path met in a suite's folder is a problem of some kind (a GPU MODE directory, a KernelBench file)."""
    return any(kind.found(path) for kind in KINDS)


def suite_locators(suite: str) -> list[str]:
    """The problem locators of a suite, in a stable order. ProblemError when it names nothing usable."""
    items = [s.strip() for s in suite.split(",") if s.strip()]
    if not items:
        raise ProblemError("an empty suite: give a folder or a comma list of problems")
    out = []
    for item in items:
        path, kind = Path(item).expanduser(), _kind(item)
        if kind is not None and kind.in_package:
            out.append(item)
        elif path.is_dir() and not _is_problem(path):
            found = sorted(str(p.resolve()) for p in path.iterdir() if _is_problem(p))
            if not found:
                raise ProblemError(f"{path}: no KernelBench files or GPU MODE problem directories in it")
            out.extend(found)
        elif path.exists():
            out.append(str(path.resolve()))
        else:
            raise no_such_problem(item)
    return list(dict.fromkeys(out))


def problem_name(locator: str) -> str:
    kind = _kind(locator)
    return locator if kind is not None and kind.in_package else Path(locator).stem


def overrides_for(locator: str, overrides: dict) -> dict:
    """The --set values a problem defines a module-level constant for (others keep theirs)."""
    kind = _kind(locator)
    names = kind.settable(locator) if overrides and kind is not None else {}
    return {k: v for k, v in overrides.items() if k in names}


# --- the campaign ----------------------------------------------------------------------------------
class Campaign:
    """Use `Campaign.create` or `Campaign.resume`; `start()` runs every problem not yet done."""

    def __init__(self, store: Store, campaign_id: str, config: CampaignConfig, force: bool = False):
        self.store, self.id, self.config = store, campaign_id, config
        self._force = force  # resumed with --force: its runs marked running elsewhere are resumed too
        self._listeners: list = []
        self._stop = threading.Event()
        self._scheduler: Scheduler | None = None
        self._given_executor = None  # start(executor=...): the caller's, left open
        self._task = Background(self._run_all, name=f"kscience-{campaign_id}")

    @classmethod
    def create(cls, suite: str, config: CampaignConfig, *, store: Store) -> "Campaign":
        locators = [loc for loc in suite_locators(suite) if fnmatch.fnmatch(problem_name(loc), config.problems)]
        if not locators:
            raise ProblemError(f"no problem of {suite} matches {config.problems!r}")
        used = {name for loc in locators for name in overrides_for(loc, config.overrides)}
        unused = sorted(set(config.overrides) - used)
        if unused:
            raise ProblemError(f"--set {unused[0]}: no problem of the suite has a module-level constant of that name")
        problems = [{"locator": loc, "name": problem_name(loc), "overrides": overrides_for(loc, config.overrides)}
                    for loc in locators]
        campaign_id = store.create_campaign(name=config.name, suite=suite, config=config.to_dict(),
                                           problems=problems, pid=os.getpid(), host=socket.gethostname())
        return cls(store, campaign_id, config)

    @classmethod
    def resume(cls, campaign_id: str, *, store: Store, force: bool = False,
               problems_at_once: int | None = None) -> "Campaign":
        """The stored campaign, to continue; `problems_at_once` replaces its --problems-at-once."""
        row = store.campaign(campaign_id)
        if row.status == "running" and not force and run_is_alive(row):
            raise StoreError(f"campaign {campaign_id} is still running (pid {row.pid} on {row.host})")
        config = CampaignConfig.from_dict({**row.config, **({"problems_at_once": problems_at_once}
                                                               if problems_at_once is not None else {})})
        store.update_campaign(campaign_id, status="running", pid=os.getpid(), host=socket.gethostname(),
                              config=config.to_dict())
        return cls(store, campaign_id, config, force)

    # --- watching ----------------------------------------------------------------------------
    def subscribe(self, callback) -> None:
        """`callback(campaign, row, event)` on each change: row is the problem's campaign row, event a
        run event or None when only the problem's status changed; row None once the campaign ends."""
        self._listeners.append(callback)

    def _tell(self, row: CampaignProblem, event=None) -> None:
        for callback in self._listeners:
            callback(self, row, event)

    def problems(self) -> list[CampaignProblem]:
        """The campaign's problems with their run's status where there is one."""
        return self.store.campaign_problems(self.id)

    # --- driving -----------------------------------------------------------------------------
    def start(self, background: bool | None = False, executor=None) -> "Campaign":
        """Run the campaign: on a thread of its own with `background=True`, here with False (see
        kscience.run.threads); through `executor` (the caller's, left open) instead of one of its own."""
        self._given_executor = executor
        self._task.start(background)
        return self

    def stop(self) -> None:
        """End after the evaluations in flight of every problem going on; resume continues from there."""
        self._stop.set()
        if self._scheduler is not None:
            for run in list(self._scheduler.runs):
                run.stop()

    def wait(self, timeout: float | None = None) -> str:
        self._task.join(timeout)
        return self.store.campaign(self.id).status

    async def _run_all(self) -> None:
        rows = [r for r in self.problems() if r.status != SKIPPED]
        done = {r.position for r in rows if self._done(r)}
        rows = [r for r in rows if r.position not in done]
        resuming = {r.position for r in rows if self._linked_run(r) is not None}
        self._scheduler = Scheduler(self.store, self.id, make_executor=self._executor,
                                    at_once=self.config.problems_at_once, lines=self.config.lines,
                                    open_run=self._open_for, finished=self._finished, stopping=self._stop.is_set)
        try:
            finished = await self._scheduler.drive(rows, resuming)
        except BaseException:
            self.store.update_campaign(self.id, status="stopped")
            raise
        finally:
            if self._scheduler.executor is not None and self._given_executor is None:
                self._scheduler.executor.shutdown()
        stopped = self._stop.is_set() or not finished
        self.store.update_campaign(self.id, status="stopped" if stopped else "finished")
        self._tell(None)

    def _executor(self):
        """The one executor every run of this session judges through (--executor, --gpus)."""
        if self._given_executor is not None:
            return self._given_executor
        try:
            return make_executor(self.config.executor, self.config.gpus)
        except ImportError as exc:  # Ray not installed: a setting the user can change, in one line
            raise ConfigError(str(exc)) from None

    def _done(self, row: CampaignProblem) -> bool:
        """Whether the problem's run has ended for good (finished, or failed: a result of the campaign, not work
        left); its row is brought up to date."""
        existing = self._linked_run(row)
        if existing is None or existing.status not in ("finished", "failed"):
            return False
        if row.status != existing.status or row.run_id != existing.id:
            self._set(row, status=existing.status, run_id=existing.id)
        return True

    def _linked_run(self, row: CampaignProblem) -> RunRow | None:
        """The run of this problem, also when the campaign was killed before it recorded the link."""
        if row.run_id:
            return self.store.run(row.run_id)
        mine = [r for r in self.store.campaign_runs(self.id) if r.problem == row.locator
                or r.config.get("problem") == row.locator]
        return mine[-1] if mine else None

    def _set(self, row: CampaignProblem, **fields) -> CampaignProblem:
        self.store.update_campaign_problem(self.id, row.position, **fields)
        row = replace(row, **fields)
        self._tell(row)
        return row

    def _open_for(self, row: CampaignProblem, shared) -> Run | None:
        """The problem's run, ready to drive over the shared executor (`shared()`: executor, slots, --lines);
        None where it is skipped (and its row says why)."""
        existing = self._linked_run(row)
        if existing is not None and display_status(existing) == "running" and not self._force:
            raise StoreError(f"run {existing.id} of {row.name} is still running in another process "
                             f"(pid {existing.pid} on {existing.host}); if it is gone, resume with --force")
        try:
            run = self._open(row, existing, shared)
        except ProblemError as exc:
            self._set(row, status=SKIPPED, reason=str(exc))
            return None
        if run is None:
            return None
        row = self._set(row, status="running", run_id=run.id, reason=None)
        run.subscribe(lambda event: self._tell(row, event))
        return run

    def _finished(self, row: CampaignProblem, run: Run) -> None:
        final = self.store.run(run.id)
        self._set(row, status=final.status, run_id=run.id, reason=final.error)

    def _open(self, row: CampaignProblem, existing: RunRow | None, shared) -> Run | None:
        """The problem's run, resumed or new; None (and the row marked skipped) when it does not fit."""
        if existing is not None:
            executor, slots, _ = shared()
            return Run.resume(existing.id, store=self.store, executor=executor, slots=slots, force=self._force)
        problem = load_problem(row.locator, row.overrides)
        reason = fit_reason(problem, detect()) or self._offline_reason(self.config, problem)
        if reason:
            self._set(row, status=SKIPPED, reason=reason)
            return None
        executor, slots, lines = shared()
        config = self.config.run_config(row.locator, row.overrides, f"{row.name} ({self.id})", lines)
        run = Run.create(config, store=self.store, executor=executor, slots=slots)
        self.store.update_run(run.id, campaign_id=self.id)
        return run

    @staticmethod
    def _offline_reason(config: CampaignConfig, problem) -> str | None:
        """A problem the offline scientist cannot start on (no seed kernel it can rewrite) is skipped with the
        reason, as `kscience run` refuses it, rather than failed as if it had been tried."""
        if config.llm.partition("@")[0] != "offline":
            return None
        reason = cannot_work_on(problem, [problem.seed_source or reference_source(problem)])
        return reason and f"needs a model: {reason}; a campaign with --llm {model_specs()} runs it"


# --- from a command line: `kscience campaign` and `%kscience campaign` ------------------------------
CAMPAIGN_HELPS = {
    "name": "a label for the campaign (each run is named after its problem)",
    "iterations": "design rounds per problem (default 3)",
    "max_cost_usd": "stop a problem's run once its LLM calls cost this much",
    "max_tokens": "stop a problem's run once its LLM calls used this many tokens",
    "time_limit_s": "stop a problem's run after this long",
    "lines": "iterations each problem's run keeps going at once (default: the slots shared out among the "
             "problems at once, at least 1)",
    "overrides": "override a module-level constant in every KernelBench file that has it (repeatable)",
}


def add_campaign_arguments(parser) -> None:
    parser.add_argument("suite", nargs="*", metavar="PROBLEM",
                        help="built-in names, KernelBench files, GPU MODE directories, or folders of them "
                             "(several, or a comma list)")
    parser.add_argument("--resume", metavar="ID", help="continue a campaign: finished problems are not redone")
    parser.add_argument("--problems", default="*", metavar="GLOB", help="only problems whose name matches")
    parser.add_argument("--attempts", type=int, metavar="N",
                        help="candidate kernels per problem, as whole design rounds (instead of --iterations)")
    parser.add_argument("--problems-at-once", type=int, metavar="K",
                        help="problems whose runs go on at once, sharing the executor's slots (default: enough to "
                             f"keep them busy, {PROBLEMS_PER_SLOT} per slot; each run then gets --lines "
                             "slots/K, at least 1); with --resume it replaces the campaign's")
    # Every run setting, generated from RunConfig like `kscience run`'s; --name labels the campaign.
    add_run_options(parser, helps=CAMPAIGN_HELPS)
    parser.add_argument("--force", action="store_true",
                        help="resume a campaign marked running elsewhere, and its runs marked running elsewhere")
    add_db_option(parser)


def campaign_from_args(args, store: Store) -> Campaign:
    """A new campaign from `add_campaign_arguments`' arguments, or the one --resume names."""
    if bool(args.suite) == bool(args.resume):
        raise ConfigError("give a SUITE to start a campaign, or --resume ID to continue one")
    if args.resume:
        return Campaign.resume(args.resume, store=store, force=args.force, problems_at_once=args.problems_at_once)
    settings = options_from_args(args)
    if args.attempts is not None and "iterations" in settings:
        raise ConfigError("give --attempts or --iterations, not both")
    reason = llm_choice(settings)
    settings["llm"] = settings.get("llm") or default_llm_spec()[0]
    name = settings.pop("name", "")
    config = CampaignConfig(problems=args.problems, attempts=args.attempts, name=name,
                            problems_at_once=args.problems_at_once, **settings)
    campaign = Campaign.create(",".join(args.suite), config, store=store)
    if reason:  # said once the campaign exists: a bad argument or suite gets its error line alone
        print(f"kscience: {reason}", file=sys.stderr)
    return campaign
