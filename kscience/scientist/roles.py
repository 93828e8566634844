"""The scientist's roles: selector, experiment designer, kernel writer, repairer and note-taker.

Following the GPU Kernel Scientist (Andrews & Witteveen, 2025): a selector picks a base kernel
(and a contrasting reference), a designer lists avenues and writes five experiment plans with
predicted uplift and an innovation score, three of them are chosen (most innovative, highest
predicted maximum, highest predicted minimum), and a writer implements each one. A repairer fixes
kernels that fail, and every experiment ends in a finding that compares prediction with measurement.

Every model call goes through `llm.complete`, with prompts filled from `prompts/`: each starts with
the measurement header (how the numbers were measured, on what, how noisy), and the designer,
writer and repairer also get the problem as code and its input contract (`briefing.py`). Each call
carries the `Brief` its prompt was rendered from; the offline scientist answers from that brief in
the formats a model is asked for, so this code path is the same with or without a model.
"""

from __future__ import annotations

import ast
import json
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass

from kscience.scientist.profile_report import split_clause
from kscience.problems.libraries import library_notes
from kscience.scientist.briefing import (Bench, Brief, format_times, problem_source, render_contract,
                                         render_header, shapes_text)
from kscience.record.candidate import uplift_pct
from kscience.record.seen import Seen
from kscience.scientist.edits import apply_edits, extract_code, parse_edits
from kscience.scientist.hardware import Hardware
from kscience.scientist.knowledge import fill_probes
from kscience.scientist.llm.call import LLMError, one_line
from kscience.scientist.measurements import prompt_text as measurements_text
from kscience.scientist.neighbourhood import Neighbourhood, best_line, siblings_text
from kscience.scientist.plans import (CHOOSERS, PLANS_PER_LINE, PLANS_WANTED, Plan, choice_text, mark_chosen,
                                      measured_clause, parse_plans,
                                      predicted_text)
from kscience.scientist.prompt_parts import (asked_line, fit_findings, has_kernel, headroom, kernels_text, lesson,
                                             line_block, selector_member, selector_members)
from kscience.scientist.prompts import load_schema, render
from kscience.scientist.quoting import whole_sentences
from kscience.scientist.rules import Rules
from kscience.scientist.strategy import OK, CandidateView, Selection, ranked, seed_of, tournament, tree_search
from kscience.scientist.verdicts import verdict_block, verdict_clause

__all__ = ["CandidateView", "Selection", "Plan", "Draft", "Scientist", "mark_chosen", "parse_plans",
           "measured_clause"]

STRATEGIES = ("tournament", "tree", "llm")
DEVIATION_CHARS = 800  # a writer's note on what it did otherwise than its plan: whole sentences up to this
DRAFT_ERROR_CHARS = 600  # why a writer's answers could not be used, as its candidate's message
_DEVIATIONS = re.compile(r"^(`{3,})[ \t]*deviations[ \t]*\n(.*?)^\1[ \t]*$", re.S | re.M)


@dataclass
class Draft:
    source: str | None  # full new source, None if writing failed
    mode: str  # "full" | "edits"
    edits_total: int  # SEARCH/REPLACE blocks proposed
    edits_applied: int  # blocks that applied
    error: str | None = None  # one line when source is None
    deviations: str = ""  # the writer's note on what it did otherwise than the plan ("" when it followed it)


@dataclass
class _Attempt:
    """One writer answer, used: the validated source, or what went wrong and how far it got."""

    source: str | None
    mode: str
    total: int
    applied: int
    partial: str  # the source with whatever did apply, which a second try starts from
    problems: list[str]
    deviations: str = ""


def deviations_of(text: str) -> tuple[str, str]:
    """(the answer without its ```deviations blocks, their text as one note of whole sentences)."""
    text = text.replace("\r\n", "\n")
    notes = [m.group(2) for m in _DEVIATIONS.finditer(text)]
    return _DEVIATIONS.sub("", text), whole_sentences(" ".join(notes), DEVIATION_CHARS) if notes else ""


def _use_answer(text: str, against: str) -> _Attempt:
    text, deviations = deviations_of(text)
    attempt = _parse_answer(text, against)
    attempt.deviations = deviations
    return attempt


def _parse_answer(text: str, against: str) -> _Attempt:
    edits, broken = parse_edits(text)
    if edits or broken:
        done = apply_edits(against, edits)
        problems = broken + [f"block {f.block}: {f.reason}" + (f"\n{f.nearest}" if f.nearest else "")
                             for f in done.failures]
        attempt = _Attempt(None, "edits", len(edits) + len(broken), done.applied, done.source, problems)
    else:
        code = extract_code(text)
        if code is None:
            return _Attempt(None, "full", 0, 0, against, ["the answer had neither SEARCH/REPLACE blocks nor a "
                                                          f"python code block (it began: {one_line(text, 100)!r})"])
        attempt = _Attempt(None, "full", 0, 0, code, [])
    if attempt.problems:
        return attempt
    try:
        ast.parse(attempt.partial)
    except SyntaxError as exc:
        attempt.problems.append(f"the result does not parse: line {exc.lineno}: {exc.msg}")
        return attempt
    if attempt.partial.strip() == against.strip():
        attempt.problems.append("the result is identical to the kernel it started from")
        return attempt
    attempt.source = attempt.partial
    return attempt


class Scientist:
    """The five roles. `knowledge` goes to the designer, `code_knowledge` (default: the same) to the
    writer and repairer; `target` is the hardware the kernels are for, `observe` says how the run's
    numbers were measured (the measurement header of every prompt)."""

    def __init__(self, llm, problem, knowledge: str, *, strategy: str = "tournament",
                 seed: int = 0, epsilon: float = 0.2, code_knowledge: str | None = None,
                 target: Hardware | None = None, chooser: str = "paper"):
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown selection strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
        if chooser not in CHOOSERS:
            raise ValueError(f"unknown plan chooser {chooser!r}: use one of {', '.join(CHOOSERS)}")
        self.chooser = chooser  # who picks the three plans carried out (plans.CHOOSERS)
        self.llm, self.problem, self.knowledge = llm, problem, fill_probes(knowledge, None)
        self.code_knowledge = self.knowledge if code_knowledge is None else fill_probes(code_knowledge, None)
        self._notes = (knowledge, knowledge if code_knowledge is None else code_knowledge)  # before probes
        self.target, self.bench = target, None
        self.strategy, self.epsilon = strategy, epsilon
        self.rng = random.Random(seed)
        self.system = render("system.md")
        self._shapes_said: tuple = (None, "")

    @property
    def model_name(self) -> str:
        return self.llm.name

    def observe(self, bench: Bench) -> None:
        """How the numbers the next prompts show were measured; the controller keeps this current. The
        notes' version-dependent claims then show the judging device's probe results."""
        self.bench = bench
        self.knowledge, self.code_knowledge = (fill_probes(text, bench.probes, bench.interpreted)
                                               for text in self._notes)

    def refusal(self, kernels: list[str]) -> str | None:
        """Why this model cannot start on this problem from `kernels`, known without asking it; None: it may."""
        return self.llm.refusal(self.problem, kernels)

    async def preflight(self, kernels: list[str]) -> None:
        """Before anything is timed: can this model work on this problem, starting from `kernels` (the seed,
        then the correct kernels a resumed run already has), and does it answer? LLMError (one line) if not."""
        await self.llm.preflight(self.problem, kernels)

    # --- what every prompt shows -----------------------------------------------------------------
    def _target(self) -> Hardware | None:
        return self.bench.target if self.bench is not None else self.target

    def _interpreted(self) -> bool:
        return self.bench.interpreted if self.bench is not None else bool(self.target and self.target.interpreted)

    def task(self) -> str:
        p = self.problem
        target = self._target()
        return render("task.md", name=p.name, description=p.description, entry=p.entry, rtol=p.rtol, atol=p.atol,
                      sizes=self._shapes_text(), target=target.line() if target else "not named (portable Triton; "
                      "name one with --target)")

    def _shapes_text(self) -> str:
        """Every shape with its sizes and where it runs (kept: building the sizes costs a moment per shape)."""
        judged_on = self.bench.device.line() if self.bench is not None else "the GPU"
        key = (self._interpreted(), judged_on)
        if self._shapes_said[0] != key:
            self._shapes_said = (key, shapes_text(self.problem, key[0], judged_on))
        return self._shapes_said[1]

    def rules(self) -> Rules:
        """What the judge holds this run's kernels to, as the run set it (the problem's defaults before)."""
        if self.bench is not None and self.bench.rules is not None:
            return self.bench.rules
        return Rules.for_problem(self.problem, interpreted=self._interpreted())

    def header(self) -> str:
        return render_header(self.bench)

    def problem_code(self, library_sources: bool = False) -> str:
        """The problem as code, with its rule on calling libraries and (`library_sources`, for the designer
        and the writer) the library kernels it names as source to learn from."""
        p = self.problem
        shown = ("Module constants as run: " + ", ".join(f"{k} = {v!r}" for k, v in p.constants.items()) + "\n"
                 if p.constants else "")
        device = "cpu" if self._interpreted() else "cuda"  # torch calls ROCm devices "cuda" too
        return render("problem.md", source=problem_source(p).rstrip("\n"), constants=shown,
                      contract=render_contract(p, device), libraries=library_notes(p, library_sources))

    def _shapes(self) -> list[dict]:
        p = self.problem
        return [*p.tests, *p.benchmarks, *p.cpu_tests, *p.cpu_benchmarks]

    def _first_task(self, base: CandidateView) -> str:
        return render("first_task.md", entry=self.problem.entry) + "\n" if not has_kernel(base.source) else ""

    async def _ask(self, prompt: str, brief: Brief, schema: dict | None = None) -> str:
        text, _ = await self.llm.complete(prompt, role=brief.role, system=self.system, schema=schema, context=brief)
        return text

    # --- selector ------------------------------------------------------------------------------
    async def select(self, population: list[CandidateView], findings: list[str] = (),
                     taken: Iterable[str] = ()) -> Selection:
        """The base for the next design and a reference; `taken` are the bases other lines are designing
        on right now, built on again only where no other correct member is left."""
        if not population:
            raise ValueError("cannot select from an empty population")
        taken = list(taken)
        if self.strategy == "tournament":
            return tournament(population, taken)
        if self.strategy == "tree":
            return tree_search(population, self.rng, self.epsilon, taken)
        correct = ranked(population)
        if len(correct) <= 1:  # nothing to choose: no call
            only = correct[0] if correct else seed_of(population)
            return Selection(only.id, None, f"{only.id} is the only correct member, so it is the base "
                                            "(no selector call: nothing to choose)")
        return await self._llm_select(population, list(findings), taken)

    async def _llm_select(self, population: list[CandidateView], findings: list[str],
                          taken: list[str]) -> Selection:
        shown = selector_members(population)
        omitted = len(population) - len(shown)
        note = f"\n{omitted} slower or older members are not shown." if omitted else ""
        taken_text = (f"\nOther lines of this run are designing on {', '.join(taken)} right now: choose another "
                      "base where one with comparable promise exists, so the lines explore different kernels.\n"
                      if taken else "")
        prompt = render("selector.md", header=self.header(), task=self.task(), omitted=note,
                        candidates=json.dumps([selector_member(v) for v in shown], indent=1),
                        findings=fit_findings(findings), taken=taken_text)
        brief = Brief("selector", self.bench, self._shapes(), population=shown, findings=findings, taken=taken)
        text = await self._ask(prompt, brief, load_schema("selector.json"))
        try:
            answer = json.loads(text)
        except json.JSONDecodeError as exc:
            raise LLMError(f"selector answer is not JSON: {exc.msg} at line {exc.lineno}") from None
        if not isinstance(answer, dict):
            raise LLMError("selector answer is not a JSON object")
        ids = {v.id for v in population}
        base_id, ref_id = str(answer.get("base_id") or "").strip(), str(answer.get("reference_id") or "").strip()
        if base_id not in ids:
            raise LLMError(f"selector chose unknown base {base_id!r}")
        justification = one_line(answer.get("justification") or "", 600) or "(the selector gave no reason)"
        if ref_id and (ref_id not in ids or ref_id == base_id):
            justification += f" [reference {ref_id!r} ignored: not another member]"
            ref_id = ""
        return Selection(base_id, ref_id or None, justification)

    # --- designer ------------------------------------------------------------------------------
    async def design(self, base: CandidateView, reference: CandidateView | None,
                     findings: list[str], done: Iterable[str] = (), in_flight: Iterable[str] = (), *,
                     wanted: int = PLANS_WANTED, avenue: str = "", others: Iterable[str] = (),
                     neighbourhood: Neighbourhood | None = None) -> list[Plan]:
        """`wanted` plans for the next rounds on `base`; `done` titles the experiments already run on it,
        `in_flight` those other lines of the run are carrying out on it or will soon; `avenue` is the
        direction this line favours and `others` says what other lines are designing right now;
        `neighbourhood` holds the experiments made on the base so far, with their verdicts, and the best."""
        done, in_flight, others = list(done), list(in_flight), list(others)
        done_text = ("\nAlready carried out on this base (will not be run again): "
                     + "; ".join(done) + "\n") if done else ""
        if in_flight:
            done_text += ("\nUnder way on this base in another line of this run (will not be run again): "
                          + "; ".join(in_flight) + "\n")
        if others:
            done_text += ("\nBeing designed right now by other lines of this run (propose something else): "
                          + "; ".join(others) + ".\n")
        carried = (f"{PLANS_PER_LINE} plans will be carried out" if wanted <= PLANS_WANTED else
                   f"The plans will be carried out by {(wanted - PLANS_WANTED) // PLANS_PER_LINE + 1} lines of "
                   f"work, {PLANS_PER_LINE} each")
        around = "(not given)"
        if neighbourhood is not None:
            around = (f"{best_line(neighbourhood.best, base)}\nExperiments made on this base so far, each with its "
                      f"latest verdict:\n{siblings_text(neighbourhood.siblings, base)}")
            if neighbourhood.base_siblings:
                around += (f"\nThe other experiments of the design that produced this base (on its parent "
                           f"`{base.parent_id}`), each with its latest verdict:\n"
                           f"{siblings_text(neighbourhood.base_siblings, None)}")
        prompt = render("designer.md", header=self.header(), task=self.task(), problem=self.problem_code(True),
                        rules=self.rules().text(), neighbourhood=around,
                        knowledge=self.knowledge.strip() or "(none)", kernels=kernels_text(base, reference),
                        first_task=self._first_task(base), findings=fit_findings(findings), done=done_text,
                        headroom=headroom(base), wanted=wanted, avenues=max(10, 2 * wanted),
                        avenue=f"\nFavour this avenue, where it fits the kernel: {avenue}.\n" if avenue else "",
                        choice=choice_text(self.chooser, carried), measurements=measurements_text(),
                        scoring="" if self.chooser == "loop" else
                        "   - `innovation`: 1 for routine retuning up to 10 for an idea new to this kernel.\n")
        brief = Brief("designer", self.bench, self._shapes(), base=base, reference=reference,
                      findings=list(findings), done=[*done, *in_flight], profile=base.profile,
                      wanted=wanted, avenue=avenue, others=others)
        schema = load_schema("designer.json")
        schema["properties"]["avenues"]["description"] = f"{max(10, 2 * wanted)} distinct directions, one line each"
        schema["properties"]["plans"]["description"] = f"{wanted} experiment plans"
        if self.chooser == "loop":  # the designer predicts; it scores nothing the loop would choose by
            item = schema["properties"]["plans"]["items"]
            del item["properties"]["innovation"]
            item["required"].remove("innovation")
        text = await self._ask(prompt, brief, schema)
        return mark_chosen(parse_plans(text, wanted), [*done, *in_flight], self.chooser)

    # --- writer and repair ---------------------------------------------------------------------
    async def _draft(self, prompt: str, brief: Brief, against: str) -> Draft:
        """Ask, use the answer; if it cannot be used, ask once more with what went wrong."""
        answer = await self._ask(prompt, brief)
        first = _use_answer(answer, against)
        if first.source is not None:
            return Draft(first.source, first.mode, first.total, first.applied, deviations=first.deviations)
        note = (f"{first.applied} of {first.total} blocks applied; this is the kernel with them."
                if first.total else "This is the kernel your answer has to change.")
        retry = render("retry.md", original=prompt, answer=answer, problems="\n".join(first.problems),
                       applied_note=note, current=first.partial.rstrip("\n"))
        again = Brief(**{**brief.__dict__, "source": first.partial})
        second = _use_answer(await self._ask(retry, again), first.partial)
        total, applied = first.total + second.total, first.applied + second.applied
        if second.source is not None:
            return Draft(second.source, second.mode, total, applied, deviations=second.deviations)
        more = f" (and {len(second.problems) - 1} more problems)" if len(second.problems) > 1 else ""
        first_line = second.problems[0].split("\n")[0]
        return Draft(None, second.mode, total, applied,
                     error=whole_sentences(f"after one retry: {first_line}{more}", DRAFT_ERROR_CHARS))

    async def write(self, plan: Plan, base: CandidateView, reference: CandidateView | None) -> Draft:
        prompt = render("writer.md", header=self.header(), task=self.task(), problem=self.problem_code(True),
                        rules=self.rules().text(), deviation_chars=DEVIATION_CHARS,
                        knowledge=self.code_knowledge.strip() or "(none)", title=plan.title,
                        rationale=plan.rationale, changes="\n".join(f"- {c}" for c in plan.changes),
                        predicted=predicted_text(plan), kernels=kernels_text(base, reference),
                        first_task=self._first_task(base), entry=self.problem.entry,
                        edit_format=render("edit_format.md"))
        brief = Brief("writer", self.bench, self._shapes(), base=base, reference=reference, plan=plan,
                      profile=base.profile)
        return await self._draft(prompt, brief, base.source)

    async def repair(self, source: str, status: str, message: str, failing_shape: dict | None,
                     attempt: int, coverage: str = "", profile: Seen | None = None) -> Draft:
        prompt = render("repair.md", header=self.header(), task=self.task(), problem=self.problem_code(),
                        rules=self.rules().text(), knowledge=self.code_knowledge.strip() or "(none)", attempt=attempt,
                        verdict=verdict_block(self.problem, status, message, failing_shape, coverage),
                        source=source.rstrip("\n"), edit_format=render("edit_format.md"),
                        profile=line_block(profile))
        brief = Brief("repair", self.bench, self._shapes(), source=source, status=status, message=message,
                      profile=profile)
        return await self._draft(prompt, brief, source)

    # --- findings ------------------------------------------------------------------------------
    async def finding(self, plan: Plan, base: CandidateView, child_status: str,
                      child_geomean_us: float | None, child: CandidateView | None = None,
                      neighbourhood: Neighbourhood | None = None) -> str:
        """The lesson of one experiment, with its whole verdict and its `neighbourhood` (siblings of the same
        design, the best kernel, the findings so far) in view; returned as the finding's one line."""
        message, failing = (child.message, child.failing_shape) if child is not None else ("", None)
        verdict = verdict_clause(child_status, message, failing)
        clause = measured_clause(plan, base.geomean_us, child_status, child_geomean_us, verdict)
        ok = child_status == OK
        pct = uplift_pct(base.geomean_us, child_geomean_us) if ok else None
        hood = neighbourhood or Neighbourhood()
        around = neighbourhood is not None
        deviations = child.deviations if child is not None else ""
        prompt = render("finding.md", header=self.header(), title=plan.title, rationale=plan.rationale,
                        changes="; ".join(plan.changes), base_id=base.id,
                        base_time=f"{base.geomean_us:.2f} us" if base.geomean_us else "no time",
                        base_shapes=format_times(base.shape_times),
                        deviations=f"The writer's note on what it did otherwise than the plan: {deviations}\n"
                        if deviations else "",
                        verdict=verdict_block(self.problem, child_status, message, failing,
                                              child.coverage if child is not None else ""),
                        child_shapes=format_times(child.shape_times) if child is not None else "not recorded",
                        result=clause, measured=f"{pct:+.1f}%" if pct is not None else f"none ({child_status})",
                        predicted=predicted_text(plan), profile=line_block(child.profile if child else None)
                        + asked_line(plan, child),
                        siblings=siblings_text(hood.siblings, base) if around else "- (not given)",
                        best=best_line(hood.best, base) if around else "Current best: not given.",
                        findings=fit_findings(hood.findings) if around else "(not given)")
        brief = Brief("finding", self.bench, plan=plan, base=base, child=child, status=child_status,
                      measured_pct=pct, profile=child.profile if child else None)
        clause += split_clause(child.profile if child is not None and ok else None)
        return f"{plan.title}: {clause}. {lesson(await self._ask(prompt, brief))}".rstrip()
