"""The offline scientist: answers every role's prompt without a network, in the formats a model is asked for.

It is what runs when no API key is configured. It reads the same structured brief the prompt was
rendered from (`briefing.Brief`: the population, the base kernel, the shapes, the plan, the
numbers), never the prompt's text, so rewording a prompt cannot break it; and it answers in the
format a model is asked for, JSON for the selector and designer, SEARCH/REPLACE blocks for the
writer and repairer, a sentence for findings, so the roles run the same code with or without a model.

Its ideas come from a search over the knobs the kernel declares (`space.py`, `search.py`): each
round the designer proposes the search's next configurations, told what every kernel it has seen
in a brief measured (the base, the reference, each finding's child), and the writer sets them on
the best kernel so far; one slot a round goes to an untried structural rewrite from the catalogue
(`moves.py`, `structural.py`) where the source has a pattern it recognises. It is honest
about its limits: a plan outside the catalogue is declined, and a repair it cannot justify fails.
It is deterministic: every answer draws from a generator seeded with (seed, role, prompt); the knob
search is seeded from it, and in a run of several lines it keeps to the share of titles its line's
avenue owns, so lines designing at once are proposed different experiments.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import time
from typing import Any

from kscience.scientist import strategy
from kscience.scientist.edits import edits_between, render_edits
from kscience.scientist.offline.kernel_source import Source
from kscience.scientist.llm.base import LLM
from kscience.scientist.llm.call import LLMError, full_prompt
from kscience.record.llm_call import LLMCall
from kscience.scientist.llm.call import NothingToPropose
from kscience.scientist.llm.providers import model_specs
from kscience.scientist.offline.moves import allowed, catalogue, find_knobs, set_knob
from kscience.scientist.offline.search import Observation, best_of, propose, search_name
from kscience.scientist.offline.space import describe, knob_space
from kscience.scientist.offline.structural import STRUCTURAL_MOVES
from kscience.scientist.plans import AVENUES, PLANS_PER_LINE

NOTICE = ("offline scientist (no LLM configured): plain autotuning of the seed's declared knobs plus a fixed "
          "catalogue of structural moves")
# What to do instead, after `cannot_work_on`'s reason.
REFUSAL_ADVICE = ("start from a Triton kernel that declares one (`kscience seed softmax` shows one; --seed-kernel "
                  f"FILE), or use a model: --llm {model_specs()} (--llm scripted rehearses that path without one)")
KNOBS = ("module-level integer constants named like BLOCK_SIZE, GROUP_M, NUM_WARPS, NUM_STAGES or SPLIT_K, or a "
         "launch's num_warps=4")
RESOURCE_ERROR = re.compile(r"out of resource|shared memory|too many resources|OutOfResources|registers|\bLDS\b",
                            re.IGNORECASE)
STRUCTURAL_PER_ROUND = 1  # slots a round gives an untried structural move; the rest go to the knob search
SEARCH_TITLE = "knob search: "


def _key(source: str) -> str:
    """Identity of a kernel text that survives code-block round trips (final newline, trailing spaces)."""
    return hashlib.sha256("\n".join(line.rstrip() for line in source.strip().split("\n")).encode()).hexdigest()


def _share(brief):
    """Which titles this designer may propose: where its line favours an avenue (a run of several lines,
    whose designs may run at once, on one base each favouring another avenue), the titles whose hash falls
    to that avenue, so concurrent answers never overlap, also with a design that began before the others;
    else (a lone line) all."""
    if brief.avenue not in AVENUES:
        return lambda title: True
    index = AVENUES.index(brief.avenue)
    return lambda title: int(hashlib.sha256(title.encode()).hexdigest()[:8], 16) % len(AVENUES) == index


def _config_of(title: str) -> dict[str, int]:
    """The knob values a knob-search plan's title names."""
    return {name: int(v) for name, v in re.findall(r"(\w+)=(\d+)", title[len(SEARCH_TITLE):])}


def _first_sentence(text: str) -> str:
    return re.split(r"(?<=\.)\s", text, maxsplit=1)[0]


def cannot_work_on(problem: Any, kernels: list[str]) -> str | None:
    """Why the offline scientist has nothing to do on `problem` from `kernels` (the seed first), or None:
    it only rewrites Triton kernels with patterns or knobs its catalogue knows, and writes none from scratch."""
    shapes = [*problem.tests, *problem.benchmarks, *problem.cpu_tests, *problem.cpu_benchmarks]

    def workable(source: str) -> bool:
        try:
            return bool(catalogue(source, shapes))
        except SyntaxError:
            return False

    if any(workable(k) for k in kernels):
        return None
    seed = kernels[0] if kernels else ""
    has = ("has Triton kernels but declares no such knob and no pattern it rewrites" if "triton.jit" in seed
           else "is plain PyTorch (the problem's own code, or a submission without a Triton kernel)")
    return (f"the offline scientist cannot write kernels from scratch: it tunes the knobs a seed declares ({KNOBS}) "
            f"and applies rewrites it knows, and the seed of {problem.name} {has}")


class OfflineLLM(LLM):
    name = "offline"
    notice = NOTICE

    def __init__(self, seed: int = 0):
        self.seed = seed
        # kernels this scientist wrote -> the kernel each was derived from, so a repair can revert knobs
        self._parents: dict[str, str] = {}
        # knob values (sorted (name, value) pairs) -> best geomean us seen in a brief (None: only failures):
        # what the knob search is told
        self._measured: dict[tuple, float | None] = {}
        self.search_ran: set[str] = set()  # which searches proposed configurations ("optuna-tpe", ...)
        self.notice = f"{NOTICE}; knob search: {search_name()}"

    def refusal(self, problem: Any, kernels: list[str]) -> str | None:
        """It cannot write a kernel from scratch: without a catalogue move on any of `kernels` (the seed, and
        on a resumed run the correct kernels a model wrote) it has nothing to do."""
        reason = cannot_work_on(problem, kernels)
        return reason and f"{reason}; {REFUSAL_ADVICE}"

    async def preflight(self, problem: Any, kernels: list[str]) -> None:
        reason = self.refusal(problem, kernels)
        if reason:
            raise LLMError(reason)

    async def complete(self, prompt: str, *, role: str, system: str | None = None,
                       schema: dict | None = None, context: Any = None) -> tuple[str, LLMCall]:
        started = time.perf_counter()
        rng = random.Random(f"{self.seed}:{role}:{hashlib.sha256(prompt.encode()).hexdigest()}")
        answer = {"selector": self._select, "designer": self._design, "writer": self._write,
                  "repair": self._repair, "finding": self._finding}.get(role)
        text, error, kind = "", None, LLMError
        try:
            if answer is None:
                raise LLMError(f"offline scientist has no answer for the role {role!r}")
            if context is None:
                raise LLMError(f"offline scientist: the {role} call came without its structured brief")
            text = answer(context, rng)
        except LLMError as exc:
            error, kind = str(exc), type(exc)
        sent = full_prompt(prompt, system)
        call = LLMCall(role=role, model=self.name, prompt=sent, response=text, input_tokens=len(sent) // 4,
                       output_tokens=len(text) // 4, latency_s=time.perf_counter() - started, cost_usd=0.0,
                       error=error)
        if error is not None:
            raise kind(error, call)
        return text, call

    # --- selector: the tournament rule, justified ------------------------------------------------
    def _select(self, brief, rng: random.Random) -> str:
        population = list(brief.population)
        if not population:
            raise LLMError("offline scientist: the selector was given no population")
        chosen = strategy.tournament(population, list(brief.taken))
        return json.dumps({"base_id": chosen.base_id, "reference_id": chosen.reference_id or "",
                           "justification": f"{NOTICE}; tournament rule: {chosen.justification}"})

    # --- designer: the knob search's next configurations, plus structural moves --------------------
    def _moves(self, brief):
        if brief.base is None:
            raise LLMError("offline scientist: the brief has no base kernel")
        ref = brief.reference
        return catalogue(brief.base.source, brief.shapes, ref.source if ref else None, ref.id if ref else "the reference")

    def _observe(self, source: str | None, geomean_us: float | None) -> None:
        """Tell the search what a kernel it has seen in a brief measured (None: it failed)."""
        try:
            knobs = tuple(sorted((k.name, k.value) for k in find_knobs(Source(source or ""))))
        except SyntaxError:
            return
        if knobs:
            old = self._measured.get(knobs)
            self._measured[knobs] = geomean_us if old is None else min(old, geomean_us or old)

    def _observations(self, space) -> list[Observation]:
        out = []
        for knobs, us in self._measured.items():
            values = dict(knobs)
            if all(name in values for name in space.names):
                out.append(Observation(tuple((name, values[name]) for name in space.names), us))
        return out

    def _design(self, brief, rng: random.Random) -> str:
        moves = self._moves(brief)
        base = brief.base
        self._observe(base.source, base.geomean_us if strategy.is_ok(base) else None)
        if brief.reference is not None:
            self._observe(brief.reference.source, brief.reference.geomean_us)
        reported = {f.split(":", 1)[0] for f in brief.findings} | set(brief.done)
        mine = _share(brief)
        structural = [m for m in moves if m.title in self._structural_titles(brief) and m.title not in reported
                      and mine(m.title)]
        space = knob_space(base.source)
        observations = self._observations(space)
        # Asked for plans for several lines: a structural move for each line's PLANS_PER_LINE where there
        # are enough, the knob search for the rest; every plan of a round is chosen (plans.mark_chosen).
        wanted = max(PLANS_PER_LINE, brief.wanted // PLANS_PER_LINE * PLANS_PER_LINE)
        rounds = wanted // PLANS_PER_LINE
        slots = wanted - min(len(structural), STRUCTURAL_PER_ROUND * rounds)
        under_way = [_config_of(t) for t in brief.done if t.startswith(SEARCH_TITLE)]
        # Seeded by the prompt's generator as well as the scientist's seed: lines whose prompts differ
        # (each names its own avenue and what the others design) are proposed different configurations.
        configs, method = propose(space, observations, slots * len(AVENUES) if brief.avenue else slots,
                                  self.seed * 1_000_003 + rng.randrange(2**31), exclude=under_way)
        configs = [c for c in configs if mine(f"{SEARCH_TITLE}{describe(c)}")][:slots]
        self.search_ran.add(method)
        best = best_of(observations)
        said = (f"{method} search over {len(space.names)} knobs ({', '.join(space.names)}; {space.size()} raw "
                f"combinations), seed {self.seed}, after {len(observations)} measured configurations"
                + (f"; best so far {best.geomean_us:.2f} us at {describe(dict(best.config))}" if best else ""))
        plans = [{"title": f"{SEARCH_TITLE}{describe(c)}",
                  "rationale": f"{said}. The search proposes this configuration; it is written onto the best "
                               "kernel so far, so the best configuration is never lost.",
                  "changes": [f"set {describe(c)} (the other knobs keep the base's values)"],
                  "predicted_min_pct": -10, "predicted_max_pct": 10, "innovation": 1} for c in configs]
        plans += [{"title": m.title, "rationale": m.rationale, "changes": m.changes,
                   "predicted_min_pct": m.predicted_min_pct, "predicted_max_pct": m.predicted_max_pct,
                   "innovation": m.innovation} for m in structural[:wanted - len(plans)]]
        if not plans:  # knob space exhausted and every structural move tried: the old one-step moves
            # Once every one was tried on this base they are proposed again: the line finds them carried out
            # and turns to another member, or ends the run with nothing left to try, as it would with a model.
            fresh = [m for m in moves if m.title not in reported]
            plans = [{"title": m.title, "rationale": m.rationale, "changes": m.changes,
                      "predicted_min_pct": m.predicted_min_pct, "predicted_max_pct": m.predicted_max_pct,
                      "innovation": m.innovation} for m in fresh or moves][:wanted]
        if not plans:
            raise NothingToPropose(f"offline scientist: no catalogue move applies to {base.id} "
                                   "(no tunable literal and no pattern it knows how to rewrite)")
        avenues = [f"{p['title']}: {_first_sentence(p['rationale'])}" for p in plans]
        return json.dumps({"avenues": avenues, "plans": plans}, indent=1)

    @staticmethod
    def _structural_titles(brief) -> set[str]:
        try:
            src = Source(brief.base.source)
        except SyntaxError:
            return set()
        return {m.title for build in STRUCTURAL_MOVES for m in build(src, brief.shapes)}

    # --- writer: the configuration or the named move as SEARCH/REPLACE blocks -------------------------
    def _write(self, brief, rng: random.Random) -> str:
        title, base = brief.plan.title, brief.base.source
        if title.startswith(SEARCH_TITLE):
            config = _config_of(title)
            new_source = knob_space(base).apply(base, config)
        else:
            move = next((m for m in self._moves(brief) if m.title == title), None)
            if move is None:
                return (f"The offline scientist cannot carry out \"{title}\": it is not one of its catalogue moves "
                        "for this kernel, and it writes no code beyond those.")
            new_source = move.new_source
        start = brief.source or base  # a retry starts from what the first answer left
        edits = edits_between(start, new_source)
        self._parents[_key(new_source)] = base
        return f"Carrying out \"{title}\" in {len(edits)} edit block(s).\n\n{render_edits(edits)}"

    # --- repair: smaller resources, or the parent's knob values --------------------------------------
    def _repair(self, brief, rng: random.Random) -> str:
        if not brief.source:
            return "The offline scientist was given no failing kernel."
        source, message = brief.source, brief.message
        try:
            src = Source(source)
        except SyntaxError as exc:
            return f"The offline scientist only edits knob literals and cannot fix a syntax error (line {exc.lineno})."
        parent = self._parents.get(_key(source))
        if RESOURCE_ERROR.search(message):
            new, what = self._shrink(src)
        elif parent is None:
            return ("The offline scientist only repairs kernels it wrote, by restoring the knob values of the "
                    "kernel they came from, and it did not write this one.")
        else:
            new, what = self._revert(src, Source(parent))
        if new is None:
            return what
        self._parents[_key(new)] = parent if parent is not None else source
        return f"{what}\n\n{render_edits(edits_between(source, new))}"

    @staticmethod
    def _shrink(src: Source) -> tuple[str | None, str]:
        knobs = find_knobs(src)
        values = {k.name.upper(): k.value for k in knobs}
        tiles = [k for k in knobs if k.kind in ("tile", "depth") and allowed(src, k, k.value // 2, values)]
        stages = [k for k in knobs if k.kind == "stages" and allowed(src, k, k.value - 1, values)]
        steps = ([(max(tiles, key=lambda k: k.value), "halve")] if tiles else []) + \
                ([(stages[0], "lower")] if stages else [])
        if not steps:
            return None, ("The kernel ran out of resources, but the offline scientist finds no block size or "
                          "stage count it may lower further.")
        text, said = src.text, []
        for knob, how in steps:
            value = knob.value // 2 if how == "halve" else knob.value - 1
            text = set_knob(Source(text), knob, value)
            said.append(f"{knob.name} {knob.value} -> {value}")
        return text, f"The kernel ran out of resources, so this asks for less: {', '.join(said)}."

    @staticmethod
    def _revert(src: Source, parent: Source) -> tuple[str | None, str]:
        theirs = {k.name: k.value for k in find_knobs(parent)}
        text, said = src.text, []
        for knob in find_knobs(src):
            if knob.name in theirs and theirs[knob.name] != knob.value:
                text = set_knob(Source(text), knob, theirs[knob.name])
                said.append(f"{knob.name} {knob.value} -> {theirs[knob.name]}")
        if not said:
            return None, ("The kernel's knobs already match the kernel it came from, so the failure lies in a "
                          "structural change, which the offline scientist cannot rewrite.")
        return text, f"Restoring the knob values of the kernel this one came from: {', '.join(said)}."

    # --- findings: the lesson the numbers support ------------------------------------------------------
    def _finding(self, brief, rng: random.Random) -> str:
        status = brief.status
        if brief.child is not None:
            self._observe(brief.child.source, brief.child.geomean_us if status == strategy.OK else None)
        elif brief.plan.title.startswith(SEARCH_TITLE) and brief.base is not None:  # it never became a kernel
            config = _config_of(brief.plan.title)
            self._observe(knob_space(brief.base.source).apply(brief.base.source, config), None)
        if status != strategy.OK:
            return (f"The change broke the kernel ({status}), so its constraints need checking before the idea "
                    "is tried again.")
        if brief.measured_pct is None:
            return ("Without a base time the uplift cannot be measured, so this result neither confirms nor "
                    "refutes the idea.")
        pct, low, high = brief.measured_pct, brief.plan.predicted_min_pct, brief.plan.predicted_max_pct
        noise = brief.bench.noise_pct if brief.bench is not None and brief.bench.noise_pct is not None else 1.0
        if brief.bench is not None and brief.bench.interpreted and abs(pct) < 100.0:
            return ("Under the CPU interpreter a difference of this size says nothing about GPU speed, so the idea "
                    "stays untested until it runs on the target GPU.")
        if low <= pct <= high:
            return "The prediction held, so this direction is sound and worth building on."
        if abs(pct) < max(1.0, 2 * noise):
            return "It made no measurable difference, so this is not what limits the kernel on these shapes."
        if pct > high:
            return ("It beat the predicted range, so the kernel is more sensitive to this than assumed and a "
                    "further step the same way is worth trying.")
        if pct > 0:
            return "It helped, but less than predicted, so the gain left in this direction is smaller than assumed."
        return "It made the kernel slower, so the opposite direction or a different idea is the better bet."
