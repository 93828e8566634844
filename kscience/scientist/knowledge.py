"""The scientist's knowledge base: short markdown notes placed in front of the experiment designer.

kscience ships four notes in `kscience/scientist/knowledge/` (read via importlib.resources):
`triton` (the language), `hopper` (CUDA, H100/H200), `cdna3` (ROCm, MI300X) and
`fp8_blockscale_gemm` (the problem). A user adds their own by passing folders of `*.md` files.

`topics` says what the run is about (a device kind such as "cuda"/"rocm", a device name, a problem
name); package notes matching a topic come first, then the user's notes, then the remaining package
notes, those sharing a word with the problem's name first; whole notes are dropped from the end to stay
within `budget_chars`, never cut in the middle. Without topics every package note counts as relevant.
`knowledge_for` picks the notes of one run: the designer's (the problem's own note, then the target's
and the language's, then the rest) and the writer's (only the notes about the language, the problem
and the target hardware: what matters for writing the code). Where the target's vendor is known, notes
for the other vendor's hardware are left out (an H200 run carries no AMD notes). A prompt's knowledge ends
with the notes left out and why.
"""

from __future__ import annotations

import re
from importlib.resources import files
from pathlib import Path
from typing import Iterable

__all__ = ["KnowledgeError", "load_knowledge", "list_notes", "knowledge_for", "fill_probes"]

DEFAULT_BUDGET_CHARS = 32000  # the three notes of one target (language, GPU, problem) fit whole
_ORDER = ("triton", "hopper", "cdna3", "fp8_blockscale_gemm")  # package notes, most general first
_ALIASES = {  # words a caller is likely to have (device kind or name) -> the note that covers it
    "cuda": "hopper", "nvidia": "hopper", "h100": "hopper", "h200": "hopper", "sm90": "hopper",
    "rocm": "cdna3", "hip": "cdna3", "amd": "cdna3", "mi300": "cdna3", "mi300x": "cdna3",
    "mi325x": "cdna3", "gfx942": "cdna3", "cpu": "triton", "interpreter": "triton",
}
HARDWARE = {"hopper": "cuda", "cdna3": "rocm"}  # notes about one vendor's GPUs, by the device kind they serve
VENDOR = {"cuda": "NVIDIA (CUDA)", "rocm": "AMD (ROCm)"}
_SAME_WORK = {"matmul": "gemm", "mm": "gemm", "linear": "gemm", "bmm": "gemm"}  # a problem's words, as notes say them


# A version-dependent claim in a note: `{{probe:NAME}}` stands where the judging device's result of
# probe NAME (kscience.evaluate.profile.probes) goes.
_PROBE = re.compile(r"\{\{probe:(\w+)\}\}")


def fill_probes(text: str, probes: dict | None, interpreted: bool = False) -> str:
    """The notes with each `{{probe:NAME}}` replaced by what that probe found on the judging device, or
    by why the claim is unchecked (no GPU, or no result yet)."""
    def one(m: re.Match) -> str:
        found = (probes or {}).get(m.group(1))
        if found:
            return f"[checked on the judging device: {found}]"
        why = "the CPU interpreter compiles no GPU code" if interpreted else "no probe result from the judging device yet"
        return f"[version-dependent, not checked here: {why}; read the compiled PTX before relying on it]"
    return _PROBE.sub(one, text)


class KnowledgeError(Exception):
    """A knowledge folder that does not exist or cannot be read."""


def _package_notes() -> list[tuple[str, str]]:
    folder = files("kscience.scientist").joinpath("knowledge")
    notes = {p.name: p.read_text(encoding="utf-8") for p in folder.iterdir() if p.name.endswith(".md")}
    rank = {f"{stem}.md": i for i, stem in enumerate(_ORDER)}
    return sorted(notes.items(), key=lambda item: (rank.get(item[0], len(rank)), item[0]))


def _user_notes(extra_dirs: Iterable[str | Path]) -> list[tuple[str, str]]:
    notes = []
    if isinstance(extra_dirs, (str, Path)):  # one folder given bare, not in a list
        extra_dirs = [extra_dirs]
    for d in extra_dirs:
        folder = Path(d).expanduser()
        if not folder.is_dir():
            raise KnowledgeError(f"knowledge folder not found: {folder}")
        try:
            notes += [(p.name, p.read_text(encoding="utf-8", errors="replace"))
                      for p in sorted(folder.glob("*.md")) if p.is_file()]
        except OSError as exc:
            raise KnowledgeError(f"cannot read knowledge folder {folder}: {exc.strerror or exc}") from None
    return notes


def _matches(note_name: str, topic: str) -> bool:
    """Topics like `fp8_blockscale_gemm`, `fp8`, `cuda` or `NVIDIA H100 80GB HBM3` select a note."""
    stem = note_name.removesuffix(".md").lower()
    words = [w for w in re.split(r"[^a-z0-9]+", topic.lower()) if w]
    return "_".join(words) == stem or any(w in stem.split("_") or _ALIASES.get(w) == stem for w in words)


def hardware_of(note_name: str) -> str | None:
    """The device kind a note is about ("cuda", "rocm"), from its name; None for one about no vendor's GPUs."""
    words = [w for w in re.split(r"[^a-z0-9]+", note_name.removesuffix(".md").lower()) if w]
    for w in ["_".join(words), *words]:
        kind = HARDWARE.get(w) or HARDWARE.get(_ALIASES.get(w, "")) or (w if w in VENDOR else None)
        if kind:
            return kind
    return None


def _shares_a_word(note_name: str, problem: str) -> bool:
    """A note whose name shares a word with the problem's ("22_Matmul_Scale..." and fp8_blockscale_gemm)."""
    def words(text: str) -> set[str]:
        return {_SAME_WORK.get(w, w) for w in re.split(r"[^a-z0-9]+", text.lower()) if w and not w.isdigit()}
    return bool(words(note_name.removesuffix(".md")) & words(problem))


def _demote(text: str) -> str:
    """Push a note's own headings two levels below its `## <filename>` header (not inside code)."""
    lines, fenced = text.strip().splitlines(), False
    for i, line in enumerate(lines):
        fenced ^= line.lstrip().startswith("```")
        if not fenced and re.match(r"#{1,4} ", line):
            lines[i] = "##" + line
    return "\n".join(lines)


def _fit(sections: list[tuple[str, str]], budget: int, excluded: list[tuple[str, str]] = ()) -> str:
    """Join `## name` sections in priority order, whole: a note that does not fit in what is left of
    the budget is left out entirely (never cut); the notes left out, for the budget or (`excluded`, with
    the reason) before it, are named at the end."""
    out, left, used = [], [], 0
    for name, text in sections:
        block = f"## {name}\n\n{_demote(text)}\n"
        sep = "\n" if out else ""
        if used + len(sep) + len(block) <= budget:
            out.append(sep + block)
            used += len(sep) + len(block)
        else:
            left.append(name)
    text = "".join(out)
    said = [f"{name} ({why})" for name, why in excluded]
    if left:
        said.append(f"{', '.join(left)} (whole, to stay within {budget} chars)")
    if said:
        marker = f"\n[knowledge: left out: {'; '.join(said)}]"
        if len(text) + len(marker) > budget:
            marker = f"\n[knowledge: {len(left) + len(excluded)} note(s) left out whole]"
        if len(text) + len(marker) <= budget:
            text += marker
    return text


def load_knowledge(extra_dirs: Iterable[str | Path] = (), topics: list[str] | None = None,
                   budget_chars: int = DEFAULT_BUDGET_CHARS, only_relevant: bool = False,
                   target_kind: str | None = None, problem: str = "") -> str:
    """Every package note plus every `*.md` in `extra_dirs`, each whole under `## <filename>`, at most
    `budget_chars` long: package notes matching `topics` first (in the order of the topics), then the
    user's, then the rest unless `only_relevant` (those sharing a word with `problem` first); notes that
    do not fit are left out whole. With `target_kind` "cuda" or "rocm", notes for the other vendor's
    hardware are left out, and said to be."""
    package = _package_notes()
    user = _user_notes(extra_dirs)
    if topics is None:
        ordered = package + user
    else:
        relevant: list[tuple[str, str]] = []
        for topic in (str(t) for t in topics if t):
            relevant += [n for n in package if _matches(n[0], topic) and n not in relevant]
        rest = sorted((n for n in package if n not in relevant), key=lambda n: not _shares_a_word(n[0], problem))
        ordered = relevant + user + rest
    excluded = []
    if target_kind in VENDOR:
        other = [n for n in ordered if hardware_of(n[0]) not in (None, target_kind)]
        excluded = [(name, f"about {VENDOR[hardware_of(name)]} hardware; the target is {VENDOR[target_kind]}")
                    for name, _ in other]
        ordered = [n for n in ordered if n not in other]
    if only_relevant and topics is not None:
        excluded += [(name, "not about the language, this problem or the target") for name, _ in ordered
                     if (name, _) not in relevant and (name, _) not in user]
        ordered = [n for n in ordered if n in relevant or n in user]
    return _fit(ordered, max(int(budget_chars), 0), excluded)


def list_notes(extra_dirs: Iterable[str | Path] = ()) -> list[tuple[str, int]]:
    """(filename, characters) of every note load_knowledge would draw on, package notes first."""
    return [(name, len(text)) for name, text in _package_notes() + _user_notes(extra_dirs)]


def knowledge_for(extra_dirs: Iterable[str | Path], target_topics: list[str], problem: str,
                  budget_chars: int = DEFAULT_BUDGET_CHARS) -> tuple[str, str]:
    """(the designer's knowledge, the writer's and repairer's) for a run on `target_topics` (a device
    kind and name, e.g. ["cuda", "NVIDIA H100 80GB HBM3"], the kind first as Hardware.topics gives them)
    and the problem named `problem`."""
    # Only a note named after the problem is about it: a word such as "gemm" in a KernelBench file's
    # name must not pull another problem's note into the writer's, whose notes are only the relevant
    # ones; the designer still sees such a note first among the rest.
    own = [problem] if any(name == f"{problem}.md" for name, _ in _package_notes()) else []
    kind = target_topics[0] if target_topics else None
    designer = load_knowledge(extra_dirs, topics=[*own, *target_topics, "triton"], budget_chars=budget_chars,
                              target_kind=kind, problem=problem)
    writer = load_knowledge(extra_dirs, topics=["triton", *own, *target_topics], budget_chars=budget_chars,
                            only_relevant=True, target_kind=kind, problem=problem)
    return designer, writer
