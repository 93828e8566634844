"""A run of the scientist: the driver that builds its scientist and executor, runs the controller,
and keeps the run's stored record (status, config, environment) up to date.

    run = Run.create(RunConfig(problem="softmax", iterations=2), store=Store("kscience.db"))
    run.subscribe(print)
    run.start()            # blocks in a shell; in Jupyter it runs on a background thread
    run.stop(); run.wait() # ends cleanly after the evaluations in flight

`Run.resume(run_id, store=...)` continues a stopped, failed or killed run from the store. What
the run did is read back through `kscience.record.snapshot`, never tallied here.
"""

from __future__ import annotations

import asyncio
import threading
import traceback
from typing import Callable

from kscience.run.baselines import reference_source
from kscience.run.config import ConfigError, RunConfig
from kscience.device import detect
from kscience.run.environment import environment
from kscience.evaluate.executors.factory import make_executor
from kscience.run.events import EventBus, RunFailed, RunFinished
from kscience.record.liveness import run_is_alive, this_process
from kscience.run.loop import Controller, RunError, Stopped
from kscience.problems import Problem, ProblemError, load_problem
from kscience.scientist.hardware import describe_device, run_target
from kscience.scientist.knowledge import knowledge_for
from kscience.scientist.llm import Budget, BudgetExceeded, LLMError
from kscience.scientist.llm.factory import make_llm
from kscience.scientist.roles import Scientist
from kscience.record.snapshot import first_of_kind, iterations_done, judged_count, run_metrics
from kscience.record.store import Store, StoreError
from kscience.run.slots import Slots
from kscience.run.threads import Background


def _check_evaluations_left(store: Store, run_id: str, config: RunConfig, done: int) -> None:
    """More iterations on a run whose --evaluations budget is spent would end at once, having done nothing:
    say so before anything changes. The budget is the user's cap on work; only --evaluations raises it."""
    if config.evaluations is None:
        return
    judged = judged_count(store.candidates(run_id))
    if judged >= config.evaluations:
        raise ConfigError(f"run {run_id} has spent its evaluation budget ({judged} of {config.evaluations}); "
                          f"--iterations adds designs, not evaluations: raise the budget as well, e.g. "
                          f"kscience resume {run_id} --iterations {config.iterations - done} "
                          f"--evaluations {judged + 3 * (config.iterations - done)} --db {store.path}")


class Run:
    """One run: use `Run.create` or `Run.resume`. Events are committed, then given to subscribers."""

    def __init__(self, store: Store, config: RunConfig, problem: Problem, *, scientist=None, executor=None,
                 slots: Slots | None = None):
        self.store, self.config, self.problem = store, config, problem
        self.slots = slots  # the executor's slots where other runs share them (a campaign's)
        self.id: str | None = None
        self.target = config.iterations
        self.bus = EventBus(record=self._record_event)
        self._scientist, self._executor = scientist, executor
        self._seed_source: str | None = None
        self.advised = False  # the run's error says what to do next itself (RunError.advised), not "resume"
        self._stop = threading.Event()
        self._task = Background(self.run_async, name="kscience-run")

    # --- construction ------------------------------------------------------------------------
    @classmethod
    def create(cls, config: RunConfig, *, store: Store, seed_source: str | None = None,
               scientist=None, executor=None, slots: Slots | None = None) -> "Run":
        """A new run. Configuration errors (unknown LLM, missing key) raise before anything is stored.
        `executor` and `slots`: judge through these, shared with other runs, rather than an executor of its own."""
        problem = load_problem(config.problem, config.overrides)
        run = cls(store, config, problem, scientist=scientist, executor=executor, slots=slots)
        run._scientist = scientist or run._build_scientist(spent_usd=0.0, spent_tokens=0, done=0)
        run._seed_source = seed_source or problem.seed_source or reference_source(problem)
        refusal = run._refusal([run._seed_source], done=0)
        if refusal:  # known before any work: nothing is stored, and there is nothing to resume
            raise ConfigError(refusal)
        run.id = store.create_run(name=config.name, problem=problem.locator, overrides=config.overrides,
                                  llm=config.llm, strategy=config.strategy, config=config.to_dict(),
                                  environment=environment(config, run._model_name()), **this_process())
        return run

    @classmethod
    def resume(cls, run_id: str, *, store: Store, iterations: int | None = None, force: bool = False,
               scientist=None, executor=None, slots: Slots | None = None, **changes) -> "Run":
        """Continue a stored run: `iterations` more iterations (default: what remains of its target).
        `changes` replace config fields, e.g. llm="offline" to finish a run whose provider died.
        `force` resumes a run that looks alive: one started on another host, which cannot be checked."""
        row = store.run(run_id)
        if run_is_alive(row) and not force:
            raise StoreError(f"run {run_id} is still running (pid {row.pid} on {row.host}); "
                             "if that process is gone, resume with --force")
        if iterations is not None and iterations < 0:
            raise ConfigError(f"--iterations must be at least 0 (on resume: how many to add), not {iterations}")
        done = iterations_done(store.plans(run_id))
        stored = dict(row.config)
        if (stored.get("iterations") or 0) < 0:  # stored by a version that added a negative count unchecked
            stored["iterations"] = done
        config = RunConfig.from_dict({**stored, **{k: v for k, v in changes.items() if v is not None}})
        problem = load_problem(config.problem, config.overrides)
        run = cls(store, config, problem, scientist=scientist, executor=executor, slots=slots)
        run.id = run_id
        if iterations is not None:
            run.target = config.iterations = done + iterations
        elif changes.get("evaluations") and stored.get("iterations") == stored.get("evaluations"):
            # The run was bounded by its evaluation budget alone (its iterations were set from it): a larger
            # budget lifts the iterations with it.
            run.target = config.iterations = max(config.iterations, config.evaluations)
        if iterations:
            _check_evaluations_left(store, run_id, config, done)
        usage = store.llm_usage(run_id)
        run._scientist = scientist or run._build_scientist(spent_usd=usage.cost_usd,
                                                           spent_tokens=usage.tokens, done=done)
        candidates = store.candidates(run_id)
        seed = first_of_kind(candidates, "seed")
        run._seed_source = seed.source if seed else (problem.seed_source or reference_source(problem))
        kernels = [run._seed_source] + [c.source for c in candidates if c.kind in ("child", "repair") and c.ok]
        refusal = run._refusal(kernels, done)
        if refusal:  # the run stays as it was: resuming it so would only fail again
            raise ConfigError(f"run {run_id} cannot go on with {config.llm}: {refusal}")
        env = environment(config, run._model_name())
        env["previous_sessions"] = [*row.environment.pop("previous_sessions", []), row.environment]
        store.update_run(run_id, status="running", error=None, llm=config.llm, config=config.to_dict(),
                         environment=env, **this_process())
        return run

    def _build_scientist(self, *, spent_usd: float, spent_tokens: int, done: int):
        c = self.config
        # Money and tokens are budgets of the whole run, so a resumed run gets what is left of them.
        budget = Budget(max_cost_usd=None if c.max_cost_usd is None else max(c.max_cost_usd - spent_usd, 0.0),
                        max_tokens=None if c.max_tokens is None else max(c.max_tokens - spent_tokens, 0),
                        time_limit_s=c.time_limit_s)
        llm = make_llm(c.llm, base_url=c.base_url, budget=budget, timeout_s=c.llm_timeout_s,
                       max_retries=c.llm_retries, recorder=self._record_call, seed=c.seed + done)
        target = run_target(c.target, describe_device(detect()))
        knowledge, code_knowledge = knowledge_for(c.knowledge, target.topics, self.problem.name)
        # A resumed session gets a shifted seed so it does not replay the choices of the first one.
        return Scientist(llm, self.problem, knowledge, strategy=c.strategy, seed=c.seed + done,
                         code_knowledge=code_knowledge, target=target, chooser=c.chooser)

    def _refusal(self, kernels: list[str], done: int) -> str | None:
        """Why the scientist cannot design on this problem from `kernels`, where it has iterations to design
        (a run of none only judges its seed and baselines); None: it may."""
        refusal = getattr(self._scientist, "refusal", None)
        return refusal(kernels) if refusal is not None and self.target > done else None

    def _model_name(self) -> str:
        return getattr(self._scientist, "model_name", self.config.llm)

    def _record_call(self, call) -> None:
        self.store.add_llm_call(self.id, call)

    def _record_event(self, event) -> None:
        self.store.add_event(self.id, event.type, event.to_dict())

    # --- driving -----------------------------------------------------------------------------
    def subscribe(self, callback):
        """Call `callback(event)` for each event from now on (on the run's thread); returns unsubscribe."""
        return self.bus.subscribe(callback)

    def start(self, background: bool | None = None) -> "Run":
        """Run the controller: on a thread of its own with `background=True`, here with False; None
        picks a thread exactly when an event loop already runs here (Jupyter). See kscience.run.threads."""
        self._task.name = f"kscience-{self.id}"
        self._task.start(background)
        return self

    @property
    def running(self) -> bool:
        """Started by this process and not over yet."""
        return self._task.alive

    @property
    def started(self) -> bool:
        return self._task.started

    def when_over(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback()` once the controller has ended (at once if it has); returns a cancel function."""
        return self._task.when_over(callback)

    def stop(self) -> None:
        """Ask the run to end after the evaluations in flight; it can be resumed later."""
        self._stop.set()

    def wait(self, timeout: float | None = None) -> str:
        self._task.join(timeout)
        return self.status

    @property
    def status(self) -> str:
        return self.store.run(self.id).status

    @property
    def error(self) -> str | None:
        return self.store.run(self.id).error

    async def run_async(self) -> str:
        """The controller on the current event loop; returns the final status."""
        executor = self._executor
        status, error, detail = "finished", None, ""
        try:
            if executor is None:
                executor = make_executor(self.config.executor, self.config.gpus)
            controller = Controller(store=self.store, run_id=self.id, problem=self.problem,
                                    scientist=self._scientist, executor=executor, bus=self.bus, config=self.config,
                                    seed_source=self._seed_source, stop=self._stop, slots=self.slots)
            await controller.run_iterations(self.target)
        except Stopped:
            status = "stopped"
        except BudgetExceeded as exc:
            status, error = "stopped", str(exc)
        except (LLMError, RunError, ProblemError, StoreError) as exc:
            status, error = "failed", str(exc)
            self.advised = getattr(exc, "advised", False)
        except asyncio.CancelledError:  # Ctrl-C in a shell: record the stop, then let it through
            self.store.update_run(self.id, status="stopped", error="interrupted")
            raise
        except Exception as exc:  # a bug: one line for people, the traceback kept in the event
            status, error = "failed", f"{type(exc).__name__}: {exc}"
            detail = traceback.format_exc()
        finally:
            if executor is not None and self._executor is None:
                executor.shutdown()
        self.store.update_run(self.id, status=status, error=error)
        if error is None:
            self.bus.publish(RunFinished(status=status, summary=run_metrics(self.store, self.id).to_dict()))
        else:
            self.bus.publish(RunFailed(status=status, error=error, detail=detail))
        return status
