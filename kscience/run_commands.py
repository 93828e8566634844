"""Subcommands that drive the scientist loop: run, resume, runs, show, best.

Progress goes to stderr (a tqdm bar when tqdm is installed, plain lines otherwise); results go
to stdout. A run that fails or stops on its budget prints one `kscience: error:` line naming
the way to resume it and exits with 1; bad arguments or an unusable database exit with 2.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from kscience.events import CandidateEvaluated, EvaluationWaiting, HypothesesProposed, RunFinished, StageChanged

DEFAULT_DB = "kscience.db"


def _default_db() -> str:
    return os.environ.get("KSCIENCE_DB", DEFAULT_DB)


def add_run_commands(sub) -> None:
    """Register the run-related subcommands on the `kscience` parser."""
    from kscience.run import STRATEGIES

    s = sub.add_parser("run", help="evolve a problem's kernel with the scientist")
    s.add_argument("problem", help="built-in name, KernelBench .py file or GPU MODE directory")
    s.add_argument("--seed-kernel", metavar="FILE", help="starting kernel (default: the problem's seed)")
    s.add_argument("--llm", help="offline, gemini:MODEL or openai:MODEL (default: chosen from the API keys set)")
    s.add_argument("--base-url", metavar="URL", help="endpoint of an OpenAI-compatible or Gemini server")
    s.add_argument("--iterations", type=int, default=3, metavar="N", help="design rounds (default 3)")
    s.add_argument("--name", default="", help="a label for the run")
    s.add_argument("--strategy", choices=STRATEGIES,
                   help="how the base kernel is picked (default: tournament offline, llm otherwise)")
    s.add_argument("--repairs", type=int, default=2, metavar="K",
                   help="repair attempts per broken candidate (default 2)")
    s.add_argument("--executor", default="local", metavar="SPEC",
                   help="local (default), ray, ray://HOST:PORT or queue:DIR (for `kscience worker DIR`)")
    s.add_argument("--gpus", type=int, metavar="N", help="evaluate on at most N GPUs at once")
    s.add_argument("--knowledge", action="append", default=[], metavar="DIR",
                   help="folder of *.md notes for the designer (repeatable)")
    s.add_argument("--seed", type=int, default=0, metavar="N", help="the scientist's random seed")
    s.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="override a module-level constant of a KernelBench file")
    s.add_argument("--no-compiled-baseline", dest="compiled_baseline", action="store_false", default=None,
                   help="do not time torch.compile of the eager PyTorch baseline (timed by default on a GPU)")
    _common_run_args(s)
    s.set_defaults(func=cmd_run)

    s = sub.add_parser("resume", help="continue a stopped, failed or interrupted run")
    s.add_argument("run_id")
    s.add_argument("--iterations", type=int, metavar="N", help="design rounds to add (default: what remains)")
    s.add_argument("--llm", help="switch the scientist's model, e.g. offline")
    s.add_argument("--base-url", metavar="URL")
    s.add_argument("--strategy", choices=STRATEGIES, help="switch how the base kernel is picked")
    s.add_argument("--repairs", type=int, metavar="K", help="change the repair attempts per broken candidate")
    s.add_argument("--force", action="store_true",
                   help="resume a run marked running by a process this host cannot see (another machine)")
    _common_run_args(s)
    s.set_defaults(func=cmd_resume)

    s = sub.add_parser("runs", help="list stored runs, newest first")
    _db_arg(s)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_runs)

    s = sub.add_parser("show", help="a run, its candidates and its numbers")
    s.add_argument("run_id")
    _db_arg(s)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_show)

    s = sub.add_parser("best", help="print the source of a run's fastest correct kernel")
    s.add_argument("run_id")
    _db_arg(s)
    s.set_defaults(func=cmd_best)


def _db_arg(s) -> None:
    s.add_argument("--db", default=None, metavar="PATH", help=f"SQLite file (default: $KSCIENCE_DB or ./{DEFAULT_DB})")


def _common_run_args(s) -> None:
    _db_arg(s)
    s.add_argument("--max-cost-usd", type=float, metavar="USD", help="stop once the LLM calls cost this much")
    s.add_argument("--max-tokens", type=int, metavar="N", help="stop once the LLM calls used this many tokens")
    s.add_argument("--time-limit", type=float, metavar="SECONDS", help="stop this session after this long")
    s.add_argument("--llm-retries", type=int, metavar="N", help="retries of a failed LLM request (default 4)")
    s.add_argument("--llm-timeout", type=float, metavar="SECONDS", help="limit per LLM request (default 120)")
    s.add_argument("--json", action="store_true", help="print the summary as JSON")


def _open_store(path: str | None, *, create: bool):
    from kscience.cli import UsageError
    from kscience.store import Store, StoreError

    path = path or _default_db()
    if not create and not Path(path).expanduser().is_file():
        raise UsageError(f"no database at {path} (give --db PATH or set KSCIENCE_DB)")
    try:
        return Store(path)
    except StoreError as exc:
        raise UsageError(str(exc)) from None


def _budgets(args) -> dict:
    changes = {"max_cost_usd": args.max_cost_usd, "max_tokens": args.max_tokens, "time_limit_s": args.time_limit,
               "llm_retries": args.llm_retries, "llm_timeout_s": args.llm_timeout}
    return {k: v for k, v in changes.items() if v is not None}


def cmd_run(args) -> int:
    from kscience.cli import UsageError, parse_sets
    from kscience.run import Run, RunConfig

    spec = args.llm
    if spec is None:
        from kscience.scientist.llm import default_llm_spec

        spec, reason = default_llm_spec()
        print(f"kscience: {reason}", file=sys.stderr)
    seed_source = None
    if args.seed_kernel:
        try:
            seed_source = Path(args.seed_kernel).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            why = getattr(exc, "strerror", None) or exc
            raise UsageError(f"cannot read seed kernel {args.seed_kernel}: {why}") from None
    try:
        config = RunConfig(problem=args.problem, overrides=parse_sets(args.set), name=args.name, llm=spec,
                           base_url=args.base_url, strategy=args.strategy, iterations=args.iterations,
                           repairs=args.repairs, executor=args.executor, gpus=args.gpus,
                           knowledge=list(args.knowledge), seed=args.seed,
                           compiled_baseline=args.compiled_baseline, **_budgets(args))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    with _open_store(args.db, create=True) as store:
        run = _setup(lambda: Run.create(config, store=store, seed_source=seed_source))
        return _drive(run, args)


def cmd_resume(args) -> int:
    from kscience.run import Run

    with _open_store(args.db, create=False) as store:
        run = _setup(lambda: Run.resume(args.run_id, store=store, iterations=args.iterations, force=args.force,
                                        llm=args.llm, base_url=args.base_url, strategy=args.strategy,
                                        repairs=args.repairs, **_budgets(args)))
        return _drive(run, args)


def _setup(build):
    """Build a Run, turning configuration errors (unknown model, missing key, bad folder) into usage errors."""
    from kscience.cli import UsageError
    from kscience.scientist.knowledge import KnowledgeError
    from kscience.scientist.llm import LLMError
    from kscience.store import StoreError

    try:
        return build()
    except (LLMError, KnowledgeError, StoreError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def _drive(run, args) -> int:
    from kscience.run import run_metrics

    print(f"kscience: run {run.id}: {run.problem.name} with {run.config.llm} ({run.config.strategy}), "
          f"up to {run.target} iterations, stored in {run.store.path}", file=sys.stderr)
    progress = Progress(run.target, initial=_iterations_done(run.store, run.id))
    run.subscribe(progress)
    try:
        run.start(background=False)
    except KeyboardInterrupt:
        progress.close()
        print(f"kscience: interrupted; continue with: kscience resume {run.id} --db {run.store.path}", file=sys.stderr)
        return 130
    progress.close()
    row, metrics = run.store.run(run.id), run_metrics(run.store, run.id)
    if args.json:
        print(json.dumps({"run": _run_json(row), "metrics": metrics}, indent=2))
    elif metrics["n_candidates"]:
        print("\n".join(summary_lines(row, metrics)))
    if row["error"]:
        print(f"kscience: error: {row['error']} (run {run.id} is stored; continue with: "
              f"kscience resume {run.id} --db {run.store.path})", file=sys.stderr)
        return 1
    return 0 if row["status"] == "finished" else 1


def _iterations_done(store, run_id: str) -> int:
    return max((p["iteration"] for p in store.plans(run_id)), default=0)


_PLAIN_STAGES = {"seed": "evaluating the seed kernel", "reference": "timing PyTorch eager",
                 "compiled": "timing torch.compile of PyTorch eager"}


class Progress:
    """Watches a run's events: a tqdm bar over iterations on a terminal, and a line per evaluated
    candidate. Without tqdm, or when stderr is a file or pipe, plain lines only."""

    def __init__(self, total: int, initial: int = 0):
        self.bar = None
        try:
            from tqdm import tqdm
        except ImportError:
            tqdm = None
        if tqdm is not None and sys.stderr.isatty():
            self.bar = tqdm(total=total, initial=initial, unit="iter", file=sys.stderr, dynamic_ncols=True,
                            bar_format="{desc} {n_fmt}/{total_fmt} iterations |{bar}| {elapsed} {postfix}")

    def _line(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)

    def __call__(self, event) -> None:
        if isinstance(event, StageChanged):
            if self.bar is not None:
                self.bar.n = max(self.bar.n, event.iteration - 1)
                self.bar.set_postfix_str(f"{event.stage} {event.detail}".strip()[:60])
            elif event.stage in _PLAIN_STAGES:
                self._line(_PLAIN_STAGES[event.stage])
        elif isinstance(event, HypothesesProposed):
            chosen = [p["title"] for p in event.plans if p.get("chosen")]
            self._line(f"iteration {event.iteration}: from {event.base_id}, trying: {'; '.join(chosen)}")
        elif isinstance(event, CandidateEvaluated):
            if event.status == "ok":
                us = f"{_fmt_us(event.geomean_us):>15} us {_ratio(event.seed_us, event.geomean_us):>7} vs seed"
                what = event.hypothesis
            else:
                us, what = " " * 34, event.message
            self._line(f"  {event.candidate_id} {event.kind:<9} {event.status:<13} {us}  {what[:70]}")
            if self.bar is not None and event.best_us:
                self.bar.set_description_str(f"best {event.best_us:.1f} us")
        elif isinstance(event, EvaluationWaiting):
            self._line(f"  {event.candidate_id} waiting {event.waited_s:.0f} s: {event.state}")
            if self.bar is not None:
                self.bar.set_postfix_str(f"waiting: {event.state}"[:60])
        elif isinstance(event, RunFinished) and self.bar is not None:
            self.bar.n = event.summary["iterations_done"]
            self.bar.set_postfix_str(event.status)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _fmt_us(us: float | None) -> str:
    return f"{us:,.2f}" if us else "-"


def _ratio(num: float | None, den: float | None) -> str:
    return f"{num / den:.3g}x" if num and den else "-"


def _rate(part: int, whole: int, noun: str) -> str:
    return f"{part} of {whole} {noun} ({100 * part / whole:.0f}%)" if whole else f"no {noun}"


def summary_lines(row: dict, m: dict) -> list[str]:
    """The end-of-run table: best vs seed vs the baselines, and the numbers a paper reports."""
    from kscience.run import display_status

    device = (m.get("device") or {}).get("name", "unknown device")
    label = m.get("timing_label") or "unknown timing"
    cpu_note = ("; CPU-interpreter timings check the machinery, not GPU performance"
                if (m.get("device") or {}).get("interpreted") else "")
    seed, ref, compiled, best = m["seed_us"], m["reference_us"], m["compiled_us"], m["best_us"]
    lines = [f"run {row['id']} ({row['problem']}, {row['llm']}, {row['strategy']}): {display_status(row)} "
             f"after {m['iterations_done']} iteration(s)",
             f"device: {device}, {label}{cpu_note}", "",
             f"  {'':<20}{'geomean us':>16}{'vs seed':>10}{'vs reference':>14}"
             + (f"{'vs torch.compile':>18}" if compiled else "")]
    rows = [("reference", ref)] + ([("torch.compile", compiled)] if m["compiled_status"] else [])
    for name, us in (*rows, ("seed", seed), (f"best {m['best_id'] or ''}", best)):
        line = f"  {name:<20}{_fmt_us(us):>16}{_ratio(seed, us):>10}{_ratio(ref, us):>14}"
        if compiled:
            line += f"{_ratio(compiled, us):>18}"
        elif name == "torch.compile":  # timed but not ok: say why there is no number
            line += f"  {m['compiled_status']}"
        lines.append(line)
    llm = m["llm"]
    uplift = m["uplift"]
    lines += ["",
              f"  candidates evaluated   {m['n_candidates']} ({m['n_ok']} correct)"
              + (f"; best reached after {m['evaluated_to_best']}" if m["evaluated_to_best"] else ""),
              f"  repair success         {_rate(m['repairs_succeeded'], m['repairs_tried'], 'broken kernels fixed')}",
              f"  edit-apply rate        {_rate(m['edits_applied'], m['edits_total'], 'edits applied')}",
              f"  predicted vs measured  " + (f"{len(uplift)} plan(s) measured, {m['uplift_in_range']} inside the "
                                             f"predicted range, mean error {m['uplift_mean_abs_error_pct']:.1f} points"
                                             if uplift else "no plan measured"),
              f"  LLM                    {llm['calls']} calls, {llm['tokens']:,} tokens, ${llm['cost_usd']:.4f}"
              + (f" ({llm['unpriced']} unpriced)" if llm["unpriced"] else "")]
    return lines


def _run_json(row: dict) -> dict:
    from kscience.run import display_status

    return {**row, "status": display_status(row)}


def cmd_runs(args) -> int:
    with _open_store(args.db, create=False) as store:
        rows = [_run_json(r) for r in store.list_runs()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no runs yet")
        return 0
    print(f"{'id':<11} {'problem':<20} {'status':<11} {'iter':>4} {'cands':>5} {'seed us':>14} {'best us':>14} "
          f"{'speedup':>8}  {'llm':<22} created")
    for r in rows:
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["created"]))
        print(f"{r['id']:<11} {Path(r['problem']).name[:20]:<20} {r['status']:<11} {r['iterations_done']:>4} "
              f"{r['n_candidates']:>5} {_fmt_us(r['seed_us']):>14} {_fmt_us(r['best_us']):>14} "
              f"{_ratio(r['seed_us'], r['best_us']):>8}  {r['llm'][:22]:<22} {created}")
    return 0


def cmd_show(args) -> int:
    from kscience.run import run_metrics

    with _open_store(args.db, create=False) as store:
        row, metrics = _run_or_usage(store, args.run_id), run_metrics(store, args.run_id)
        candidates, plans = store.candidates(args.run_id), store.plans(args.run_id)
        findings = store.findings(args.run_id)
    if args.json:
        print(json.dumps({"run": _run_json(row), "metrics": metrics, "candidates": candidates, "plans": plans,
                          "findings": findings}, indent=2))
        return 0
    print("\n".join(summary_lines(row, metrics)))
    if row["error"]:
        print(f"error: {row['error']}")
    print(f"\n  {'#':>3} {'id':<11} {'parent':<11} {'kind':<9} {'status':<13} {'geomean us':>14}  hypothesis")
    for c in candidates:
        print(f"  {c['seq']:>3} {c['id']:<11} {c['parent_id'] or '-':<11} {c['kind']:<9} {c['status']:<13} "
              f"{_fmt_us(c['geomean_us']):>14}  {c['hypothesis'][:60]}")
    return 0


def cmd_best(args) -> int:
    from kscience.run import run_metrics

    with _open_store(args.db, create=False) as store:
        _run_or_usage(store, args.run_id)
        best_id = run_metrics(store, args.run_id)["best_id"]
        if best_id is None:
            print(f"kscience: error: run {args.run_id} has no correct candidate", file=sys.stderr)
            return 1
        sys.stdout.write(store.candidate(best_id)["source"])
    return 0


def _run_or_usage(store, run_id: str) -> dict:
    from kscience.cli import UsageError
    from kscience.store import StoreError

    try:
        return store.run(run_id)
    except StoreError as exc:
        raise UsageError(str(exc)) from None
