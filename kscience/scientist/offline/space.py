"""The knob space a seed declares: which literals are tunable, the values each may take, and which
combinations are legal.

The knobs are the module-level integer constants and launch keywords `moves.find_knobs` finds
(BLOCK_*, GROUP_*, NUM_WARPS, NUM_STAGES, ...). Each one's values are the powers of two of its
kind's range (the rules of the knowledge notes: tl.dot dimensions 16..256, 1..16 warps, launch
groups 1..32) or 1..5 pipeline stages where the kernel loops; the kernel's own static asserts cap
them (BLOCK_N <= BLOCK_K in the fp8 GEMM), and a literal marked as fixed by the problem (the fp8
scale block, which pins BLOCK_K) keeps its value. A combination is legal when every knob passes
`moves.legal` given the others: the accumulator must fit the registers of the warps, a tl.dot
output tile keeps both sides within 64..256, and the operand tiles of all pipeline stages fit the
shared memory of one SM.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from functools import cached_property

from kscience.scientist.offline.kernel_source import Source
from kscience.scientist.offline.moves import Knob, caps, find_knobs, legal, set_knob

POW2_RANGE = {  # kind -> (smallest, largest) power of two the search tries
    "tile": (16, 256), "depth": (16, 256), "group": (1, 32), "warps": (1, 16), "count": (1, 64),
}
STAGES = range(1, 6)
NON_DOT_TILE_SPAN = 8  # without tl.dot a block may be large (a whole row); search within x/÷8 of the seed's
ENUMERATE_UP_TO = 1000  # spaces up to this many raw combinations are listed exactly (larger ones are sampled)


def _pow2s(low: int, high: int) -> list[int]:
    return [1 << e for e in range(low.bit_length() - 1, high.bit_length()) if low <= 1 << e <= high]


@dataclass
class KnobSpace:
    src: Source
    knobs: list[Knob]  # the tunable ones, in source order
    values: dict[str, list[int]]  # knob name -> candidate values, ascending

    @property
    def names(self) -> list[str]:
        return [k.name for k in self.knobs]

    def config_of(self, src: Source) -> dict[str, int] | None:
        """The values `src` gives the space's knobs, or None when it lacks one of them."""
        found = {k.name: k.value for k in find_knobs(src)}
        if any(name not in found for name in self.names):
            return None
        return {name: found[name] for name in self.names}

    @cached_property
    def _declared(self) -> dict[str, int]:
        return {k.name.upper(): k.value for k in find_knobs(self.src)}

    def is_legal(self, config: dict[str, int]) -> bool:
        values = {**self._declared, **{name.upper(): v for name, v in config.items()}}
        return all(config[k.name] in self.values[k.name] and legal(self.src, k, config[k.name], values)
                   for k in self.knobs)

    def size(self) -> int:
        n = 1
        for name in self.names:
            n *= len(self.values[name])
        return n

    def legal_configs(self) -> list[dict[str, int]] | None:
        """Every legal configuration, or None when the space is too large to list."""
        if self.size() > ENUMERATE_UP_TO:
            return None
        configs = (dict(zip(self.names, combo)) for combo in itertools.product(*(self.values[n] for n in self.names)))
        return [c for c in configs if self.is_legal(c)]

    def random_config(self, rng: random.Random, tries: int = 200) -> dict[str, int] | None:
        for _ in range(tries):
            config = {name: rng.choice(self.values[name]) for name in self.names}
            if self.is_legal(config):
                return config
        return None

    def neighbours(self, config: dict[str, int]) -> list[dict[str, int]]:
        """Legal configurations one step away: one knob moved to the next value up or down."""
        out = []
        for name in self.names:
            options = self.values[name]
            i = options.index(config[name]) if config[name] in options else None
            for j in ((i - 1, i + 1) if i is not None else ()):
                if 0 <= j < len(options):
                    trial = dict(config, **{name: options[j]})
                    if self.is_legal(trial):
                        out.append(trial)
        return out

    def apply(self, source: str, config: dict[str, int]) -> str:
        """`source` with every knob of `config` set (knobs it lacks are left alone)."""
        text = source
        for name, value in config.items():
            knob = next((k for k in find_knobs(Source(text)) if k.name == name), None)
            if knob is not None and knob.value != value:
                text = set_knob(Source(text), knob, value)
        return text


def knob_space(source: str) -> KnobSpace:
    """The space of `source`'s tunable knobs (SyntaxError for a source that is not Python)."""
    src = Source(source)
    uses_dot = "tl.dot(" in src.text
    knobs, values = [], {}
    for knob in find_knobs(src):
        if knob.fixed:
            continue
        if knob.kind == "stages":
            options = list(STAGES) if src.has_loop() else [knob.value]
        elif knob.kind in ("tile", "depth") and not uses_dot:
            options = _pow2s(max(16, knob.value // NON_DOT_TILE_SPAN), knob.value * NON_DOT_TILE_SPAN)
        else:
            options = _pow2s(*POW2_RANGE[knob.kind])
        cap = caps(src).get(knob.name.upper())
        options = sorted({v for v in options if cap is None or v <= cap} | {knob.value})
        if len(options) > 1:
            knobs.append(knob)
            values[knob.name] = options
    return KnobSpace(src, knobs, values)


def describe(config: dict[str, int]) -> str:
    return ", ".join(f"{name}={value}" for name, value in config.items())
