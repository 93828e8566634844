"""A run of the scientist: its settings, its stored record, and the driver that runs the controller.

    run = Run.create(RunConfig(problem="softmax", iterations=2), store=Store("kscience.db"))
    run.subscribe(print)
    run.start()            # blocks in a shell; in Jupyter it runs on a background thread
    run.stop(); run.wait() # ends cleanly after the evaluations in flight

`Run.resume(run_id, store=...)` continues a stopped, failed or killed run from the store. The
numbers a paper reports (repair success, edit-apply rate, predicted vs measured uplift) come
from `run_metrics`, recomputed from the stored rows rather than tallied while running.
"""

from __future__ import annotations

import asyncio
import os
import platform
import shutil
import socket
import subprocess
import sys
import threading
import traceback
from dataclasses import asdict, dataclass, field, fields

from kscience.events import EventBus, RunFailed, RunFinished
from kscience.loop import REPAIRABLE, Controller, RunError, Stopped
from kscience.problems import Problem, ProblemError, load_problem
from kscience.store import BASELINE_KINDS, Store, StoreError

STRATEGIES = ("llm", "tree", "tournament")


@dataclass
class RunConfig:
    """Everything that decides what a run does. Stored as the run's config; never holds a key."""

    problem: str  # locator: built-in name, KernelBench file or GPU MODE directory
    overrides: dict = field(default_factory=dict)
    name: str = ""
    llm: str = "offline"  # offline, gemini:MODEL or openai:MODEL
    base_url: str | None = None
    strategy: str | None = None  # None: tournament for the offline scientist, llm otherwise
    iterations: int = 3  # design rounds the run aims for in total
    repairs: int = 2  # repair attempts per broken candidate
    executor: str = "local"
    gpus: int | None = None
    knowledge: list[str] = field(default_factory=list)  # folders of the user's markdown notes
    seed: int = 0  # the scientist's RNG seed
    max_cost_usd: float | None = None
    max_tokens: int | None = None
    time_limit_s: float | None = None  # per session: a resumed run gets the full limit again
    llm_retries: int = 4
    llm_timeout_s: float = 120.0
    compiled_baseline: bool | None = None  # time torch.compile of the reference; None: when judged on a GPU

    def __post_init__(self):
        if self.strategy is None:
            self.strategy = "tournament" if self.llm == "offline" else "llm"
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {self.strategy!r}: use {', '.join(STRATEGIES)}")
        if self.executor.startswith("queue:"):  # absolute, so a resume from elsewhere finds the same queue
            from kscience.evaluate.queue_executor import queue_directory

            self.executor = "queue:" + queue_directory(self.executor)
        elif not (self.executor in ("local", "ray") or self.executor.startswith("ray://")):
            raise ValueError(f"unknown executor {self.executor!r}: use local, ray, ray://HOST:PORT or queue:DIR")
        if self.iterations < 0 or self.repairs < 0:
            raise ValueError("iterations and repairs must be >= 0")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "RunConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


def _baseline_head(problem: Problem, doc: str, imports: str = "") -> str:
    return (f'"""{doc}"""\n{imports}from kscience.problems import load_problem\n\n'
            f"_PROBLEM = load_problem({problem.locator!r}, {dict(problem.overrides)!r})\n"
            "_EAGER = _PROBLEM.eager_kernel or _PROBLEM.ref_kernel\n\n\n")


def reference_source(problem: Problem) -> str:
    """PyTorch as a user would write it (the problem's eager kernel, else its reference), as a
    candidate, so the evaluator can time it as the baseline every kernel is compared to."""
    head = _baseline_head(problem, "The problem in plain PyTorch as a candidate: the eager baseline.")
    if problem.entry == "ModelNew":
        return head + "class ModelNew(_PROBLEM.reference_model_class):\n    pass\n"
    return head + "def custom_kernel(data):\n    return _EAGER(data)\n"


def compiled_source(problem: Problem) -> str:
    """The eager baseline under torch.compile (default settings) as a candidate: the baseline a kernel
    must beat to be worth writing by hand."""
    head = _baseline_head(problem, "The problem in plain PyTorch under torch.compile, timed as a baseline.",
                          "import torch\n\n")
    if problem.entry == "ModelNew":
        # Compile the forward, not the module: a compiled module kept as an attribute would be a submodule
        # that contains its own parent.
        return head + ("class ModelNew(_PROBLEM.reference_model_class):\n"
                       "    def __init__(self, *args, **kwargs):\n"
                       "        super().__init__(*args, **kwargs)\n"
                       "        self._compiled_forward = torch.compile(super().forward)\n\n"
                       "    def forward(self, *args, **kwargs):\n"
                       "        return self._compiled_forward(*args, **kwargs)\n")
    return head + ("_compiled = torch.compile(_EAGER)\n\n\n"
                   "def custom_kernel(data):\n    return _compiled(data)\n")


def _gpu_driver() -> str | None:
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def environment(config: RunConfig, model: str) -> dict:
    """What produced these numbers: device, driver, library versions, seeds and model ids."""
    import torch
    import triton

    import kscience
    from kscience.device import detect

    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] \
        if torch.cuda.is_available() else []
    return {"device": detect().describe(), "gpus": gpus, "driver": _gpu_driver(),
            "cuda": torch.version.cuda, "hip": torch.version.hip, "torch": torch.__version__,
            "triton": triton.__version__, "kscience": kscience.__version__, "python": sys.version.split()[0],
            "platform": platform.platform(), "seed": config.seed, "llm": config.llm, "model": model,
            "executor": config.executor}


def run_is_alive(row: dict) -> bool:
    """Whether a run marked running still has its process (on this host; elsewhere assume so)."""
    if row["status"] != "running" or not row.get("pid"):
        return False
    if row.get("host") != socket.gethostname():
        return True
    try:
        os.kill(row["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def display_status(row: dict) -> str:
    """A run's status for people: one marked running whose process is gone was interrupted."""
    return "interrupted" if row["status"] == "running" and not run_is_alive(row) else row["status"]


class Run:
    """One run: use `Run.create` or `Run.resume`. Events are committed, then given to subscribers."""

    def __init__(self, store: Store, config: RunConfig, problem: Problem, *, scientist=None, executor=None):
        self.store, self.config, self.problem = store, config, problem
        self.id: str | None = None
        self.target = config.iterations
        self.bus = EventBus(record=self._record_event)
        self._scientist, self._executor = scientist, executor
        self._seed_source: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- construction ------------------------------------------------------------------------
    @classmethod
    def create(cls, config: RunConfig, *, store: Store, seed_source: str | None = None,
               scientist=None, executor=None) -> "Run":
        """A new run. Configuration errors (unknown LLM, missing key) raise before anything is stored."""
        problem = load_problem(config.problem, config.overrides)
        run = cls(store, config, problem, scientist=scientist, executor=executor)
        run._scientist = scientist or run._build_scientist(spent_usd=0.0, spent_tokens=0, done=0)
        run._seed_source = seed_source or problem.seed_source or reference_source(problem)
        run.id = store.create_run(name=config.name, problem=problem.locator, overrides=config.overrides,
                                  llm=config.llm, strategy=config.strategy, config=config.to_dict(),
                                  environment=environment(config, run._model_name()), pid=os.getpid(),
                                  host=socket.gethostname())
        return run

    @classmethod
    def resume(cls, run_id: str, *, store: Store, iterations: int | None = None, force: bool = False,
               scientist=None, executor=None, **changes) -> "Run":
        """Continue a stored run: `iterations` more design rounds (default: what remains of its target).
        `changes` replace config fields, e.g. llm="offline" to finish a run whose provider died.
        `force` resumes a run that looks alive: one started on another host, which cannot be checked."""
        row = store.run(run_id)
        if run_is_alive(row) and not force:
            raise StoreError(f"run {run_id} is still running (pid {row['pid']} on {row['host']}); "
                             "if that process is gone, resume with --force")
        config = RunConfig.from_dict({**row["config"], **{k: v for k, v in changes.items() if v is not None}})
        problem = load_problem(config.problem, config.overrides)
        run = cls(store, config, problem, scientist=scientist, executor=executor)
        run.id = run_id
        done = max((p["iteration"] for p in store.plans(run_id)), default=0)
        if iterations is not None:
            run.target = config.iterations = done + iterations
        usage = store.llm_usage(run_id)
        run._scientist = scientist or run._build_scientist(spent_usd=usage["cost_usd"],
                                                           spent_tokens=usage["tokens"], done=done)
        seed = next((c for c in store.candidates(run_id) if c["kind"] == "seed"), None)
        run._seed_source = seed["source"] if seed else (problem.seed_source or reference_source(problem))
        env = environment(config, run._model_name())
        env["previous_sessions"] = [*row["environment"].pop("previous_sessions", []), row["environment"]]
        store.update_run(run_id, status="running", error=None, llm=config.llm, config=config.to_dict(),
                         environment=env, pid=os.getpid(), host=socket.gethostname())
        return run

    def _build_scientist(self, *, spent_usd: float, spent_tokens: int, done: int):
        from kscience.device import detect
        from kscience.scientist.knowledge import load_knowledge
        from kscience.scientist.llm import Budget, make_llm
        from kscience.scientist.roles import Scientist

        c = self.config
        # Money and tokens are budgets of the whole run, so a resumed run gets what is left of them.
        budget = Budget(max_cost_usd=None if c.max_cost_usd is None else max(c.max_cost_usd - spent_usd, 0.0),
                        max_tokens=None if c.max_tokens is None else max(c.max_tokens - spent_tokens, 0),
                        time_limit_s=c.time_limit_s)
        llm = make_llm(c.llm, base_url=c.base_url, budget=budget, timeout_s=c.llm_timeout_s,
                       max_retries=c.llm_retries, recorder=self._record_call, seed=c.seed + done)
        device = detect()
        knowledge = load_knowledge(c.knowledge, topics=[device.kind, device.name, self.problem.name])
        # A resumed session gets a shifted seed so it does not replay the choices of the first one.
        return Scientist(llm, self.problem, knowledge, strategy=c.strategy, seed=c.seed + done)

    def _model_name(self) -> str:
        return getattr(self._scientist, "model_name", self.config.llm)

    def _record_call(self, call) -> None:
        self.store.add_llm_call(self.id, call.to_dict())

    def _record_event(self, event) -> None:
        self.store.add_event(self.id, event.type, event.to_dict())

    # --- driving -----------------------------------------------------------------------------
    def subscribe(self, callback):
        """Call `callback(event)` for each event from now on (on the run's thread); returns unsubscribe."""
        return self.bus.subscribe(callback)

    def start(self, background: bool | None = None) -> "Run":
        """Run the controller. `background=None` picks a thread when an event loop is already running
        in this thread (Jupyter), where `asyncio.run` cannot be used, and blocks otherwise."""
        running_here = _loop_running_here()
        if background is None:
            background = running_here
        if background or running_here:
            self._thread = threading.Thread(target=lambda: asyncio.run(self.run_async()),
                                            name=f"kscience-{self.id}", daemon=True)
            self._thread.start()
            if not background:
                self._thread.join()
        else:
            asyncio.run(self.run_async())
        return self

    def stop(self) -> None:
        """Ask the run to end after the evaluations in flight; it can be resumed later."""
        self._stop.set()

    def wait(self, timeout: float | None = None) -> str:
        if self._thread is not None:
            self._thread.join(timeout)
        return self.status

    @property
    def status(self) -> str:
        return self.store.run(self.id)["status"]

    @property
    def error(self) -> str | None:
        return self.store.run(self.id)["error"]

    async def run_async(self) -> str:
        """The controller on the current event loop; returns the final status."""
        from kscience.scientist.llm import BudgetExceeded, LLMError

        executor = self._executor
        status, error, detail = "finished", None, ""
        try:
            if executor is None:
                from kscience.evaluate.executor import make_executor

                executor = make_executor(self.config.executor, self.config.gpus)
            controller = Controller(store=self.store, run_id=self.id, problem=self.problem,
                                    scientist=self._scientist, executor=executor, bus=self.bus,
                                    repairs=self.config.repairs, seed_source=self._seed_source,
                                    reference_source=reference_source(self.problem),
                                    compiled_source=compiled_source(self.problem),
                                    compiled_baseline=self.config.compiled_baseline, stop=self._stop)
            await controller.run_iterations(self.target)
        except Stopped:
            status = "stopped"
        except BudgetExceeded as exc:
            status, error = "stopped", str(exc)
        except (LLMError, RunError, ProblemError, StoreError) as exc:
            status, error = "failed", str(exc)
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
            self.bus.publish(RunFinished(status=status, summary=run_metrics(self.store, self.id)))
        else:
            self.bus.publish(RunFailed(status=status, error=error, detail=detail))
        return status


def _loop_running_here() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def run_metrics(store: Store, run_id: str) -> dict:
    """The run's numbers, recomputed from its stored rows."""
    cands = store.candidates(run_id)
    evaluated = sorted((c for c in cands if c["kind"] not in BASELINE_KINDS and c["evaluated"] is not None),
                       key=lambda c: (c["evaluated"], c["seq"]))
    ok = [c for c in evaluated if c["status"] == "ok"]
    best = min(ok, key=lambda c: c["geomean_us"]) if ok else None
    seed = next((c for c in cands if c["kind"] == "seed"), None)
    reference = next((c for c in cands if c["kind"] == "reference"), None)
    compiled = next((c for c in cands if c["kind"] == "compiled"), None)
    seed_us = seed["geomean_us"] if seed else None
    ref_us = reference["geomean_us"] if reference else None
    compiled_us = compiled["geomean_us"] if compiled else None
    best_us = best["geomean_us"] if best else None
    judged = (best or seed or {}).get("result") or {}  # where the timings came from

    # A chain is one plan's candidates (or the seed's): repair succeeds when a repair in it passes.
    chains: dict[str, list[dict]] = {}
    for c in cands:
        if c["kind"] in ("seed", "child", "repair"):
            chains.setdefault(c["plan_id"] or "seed", []).append(c)
    repaired = [ch for ch in chains.values() if any(c["kind"] == "repair" for c in ch)]
    fixed = [ch for ch in repaired if any(c["kind"] == "repair" and c["status"] == "ok" for c in ch)]
    drafts = [c for c in cands if c["kind"] in ("child", "repair") and c["edits_total"]]
    edits_total = sum(c["edits_total"] for c in drafts)
    edits_applied = sum(c["edits_applied"] for c in drafts)
    uplift = [{k: f[k] for k in ("plan_id", "candidate_id", "iteration", "predicted_min_pct",
                                 "predicted_max_pct", "measured_pct")}
              for f in store.findings(run_id) if f["measured_pct"] is not None and f["predicted_min_pct"] is not None]
    inside = [u for u in uplift if u["predicted_min_pct"] <= u["measured_pct"] <= (u["predicted_max_pct"]
                                                                                   or u["predicted_min_pct"])]
    errors = [abs((u["predicted_min_pct"] + (u["predicted_max_pct"] or u["predicted_min_pct"])) / 2
                  - u["measured_pct"]) for u in uplift]
    return {
        "n_candidates": len(evaluated), "n_ok": len(ok),
        "n_failed": sum(c["status"] in REPAIRABLE for c in evaluated),
        "best_id": best["id"] if best else None, "best_us": best_us, "seed_us": seed_us, "reference_us": ref_us,
        "compiled_us": compiled_us, "compiled_status": compiled["status"] if compiled else None,
        "speedup_vs_seed": seed_us / best_us if seed_us and best_us else None,
        "speedup_vs_reference": ref_us / best_us if ref_us and best_us else None,
        "speedup_vs_compiled": compiled_us / best_us if compiled_us and best_us else None,
        "evaluated_to_best": evaluated.index(best) + 1 if best else None,
        "iterations_done": max((p["iteration"] for p in store.plans(run_id)), default=0),
        "repairs_tried": len(repaired), "repairs_succeeded": len(fixed),
        "repair_attempts": sum(c["kind"] == "repair" for c in cands),
        "repair_success_rate": len(fixed) / len(repaired) if repaired else None,
        "edits_total": edits_total, "edits_applied": edits_applied,
        "edit_apply_rate": edits_applied / edits_total if edits_total else None,
        "uplift": uplift, "uplift_in_range": len(inside),
        "uplift_mean_abs_error_pct": sum(errors) / len(errors) if errors else None,
        "llm": store.llm_usage(run_id),
        "timing_label": judged.get("timing_label"), "device": judged.get("device"),
    }
