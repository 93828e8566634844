"""Input sets the judge builds ahead and holds (the trusted side): each built once, used once.

An evaluation builds a shape's inputs in many places, and some tasks build them slowly: GPU MODE's
pmpp sort builds its numbers row by row from Python, most of a second for its largest shape on an
H100. So the judge keeps the sets it builds before the import to time its own builds
(`Session.build_us`), and while the worker prepares a round (untimed) it builds the inputs of the
round's first timed calls. A held set's seed is drawn like every other (`drive.new_seed`) and
reaches no worker before the one command that uses it: the shape's correctness call, or one of the
first timed calls of a round, which are always read, so their recheck finds the inputs built. The
answers are computed from them here, as from any other set.
"""

from __future__ import annotations

import torch

# A set is held only where its build took this long (a faster one costs less to build again than
# its memory held through the evaluation), and the judge holds at most this many bytes of them.
KEEP_BUILD_S, KEEP_BYTES = 0.005, 2 << 30


def size_of(data: list) -> int:
    return sum(t.numel() * t.element_size() for t in data if isinstance(t, torch.Tensor))


class InputSets:
    def __init__(self):
        self.unsent: dict[str, list[tuple[int, list]]] = {}  # by shape label: (seed, inputs), seed never sent
        self.sent: dict[int, list] = {}  # by seed: inputs of timed calls, held for their recheck
        self.slow: dict[str, int] = {}  # by shape label: the bytes of one set, where building one is slow

    def held_bytes(self) -> int:
        return sum(size_of(d) for sets in self.unsent.values() for _, d in sets) + sum(map(size_of, self.sent.values()))

    def room(self, key: str) -> bool:
        """Whether one more set of `key` (a shape whose builds are slow) fits."""
        return key in self.slow and self.held_bytes() + self.slow[key] <= KEEP_BYTES

    def keep(self, key: str, seed: int, data: list, took_s: float) -> None:
        """A set built before the import in `took_s` seconds, held where that was slow and it fits."""
        if took_s >= KEEP_BUILD_S:
            self.slow[key] = size_of(data)
            if self.room(key):
                self.unsent.setdefault(key, []).append((seed, data))

    def settle(self, key: str, least_s: float) -> None:
        """Once the builds of `key` are timed: where even the quickest was fast (the first one also
        loads kernels), nothing of it is held and its builds are not slow."""
        if least_s < KEEP_BUILD_S:
            self.slow.pop(key, None)
            self.unsent.pop(key, None)

    def take(self, key: str) -> tuple[int, list] | None:
        """A held set of `key` whose seed no command carried yet, taken out for one command; or None."""
        sets = self.unsent.get(key)
        return sets.pop() if sets else None

    def recheck_inputs(self, seed: int) -> list | None:
        """The held inputs of the timed call that carried `seed`, let go; None where none are held."""
        return self.sent.pop(seed, None)
