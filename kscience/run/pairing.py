"""Same-host pairs, as a run judges them: a composite beside the best, and the best beside its close contenders
from other hosts (the rule is kscience.run.confirm), one pair at a time.

Where the executor judges requests in batches (a queue), a pair alone would cost a round trip of its own, so
the pairs are settled by one job at a time held to go out with the run's next evaluation (kscience.run.held);
what is still held when the run's work ends is recorded as skipped, and a best still to be confirmed is
marked unconfirmed, saying why.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from kscience.evaluate import result as R
from kscience.run import confirm
from kscience.run.held import Held, Job
from kscience.run.journal import Journal, Stopping
from kscience.run.verdict import Verdict
from kscience.run.slot_use import SlotUse
from kscience.record.candidate import Candidate

# Judging's evaluation of a candidate whose request (its tag, its slot or None) was submitted as `future`
Judge = Callable[[Candidate, int, str, int | None, object], Awaitable[Verdict]]


class Pairing:
    """`judge` waits for one request submitted here (Judging's `_judge`), `request(cand, tag)` makes one, and
    `record_verdict(cand, result)` stores and announces a verdict."""

    def __init__(self, executor, *, journal: Journal, stopping: Stopping, use: SlotUse, held: Held, batches: bool,
                 judge: Judge, request: Callable[[Candidate, str], R.EvalRequest],
                 record_verdict: Callable[[Candidate, Verdict], Candidate]):
        self.executor, self.journal, self.stopping, self.use, self.held = executor, journal, stopping, use, held
        self.batches, self.judge, self.request, self.record_verdict = batches, judge, request, record_verdict
        self._confirming = asyncio.Lock()  # one same-host confirmation at a time
        self.pairs = 0  # pairs submitted for confirmation this session
        self._pairing = False  # a job settling same-host pairs is held or running (one at a time)
        self._to_pair: set[str] = set()  # composites still to be judged beside the best
        self._pair_tries: dict[tuple[str, str], int] = {}  # pairs that landed on two hosts, and how often

    async def after_verdict(self, cand: Candidate, line: int) -> Candidate:
        """After `cand`'s verdict: a composite judged beside the best, then the best settled against its
        close contenders from other hosts; one at a time, or where the executor batches, held to travel with
        the next evaluation. Returns cand as stored."""
        journal = self.journal
        if self.batches:
            self._hold_pairs(journal.candidate(cand.id))
            return journal.candidate(cand.id)
        async with self._confirming:
            rival = confirm.rival(journal.candidate(cand.id), journal.candidates())
            if rival is not None:
                await self._confirm(journal.candidate(cand.id), rival, line)
        await self.settle(confirm.ROUNDS, line)
        return journal.candidate(cand.id)

    async def settle(self, rounds: int, line: int = 0) -> None:
        """Judge the best beside its close contenders from other hosts, at most `rounds` pairs."""
        async with self._confirming:
            for _ in range(rounds):
                pair = confirm.unsettled(self.journal.candidates())
                if pair is None:
                    break
                await self._confirm(*pair, line)

    async def finish(self, rounds: int) -> None:
        """At the end of a session: the best settled against close contenders from other hosts, at most `rounds`
        pairs. Where the executor batches, nothing more goes out alone: held work is recorded as skipped, an
        unsettled best as unconfirmed, and what travelled with the last evaluations comes back with them."""
        if not self.batches:
            await self.settle(rounds)
            return
        why = "the run's work ended before it could go out with an evaluation"
        await self.held.finish(why)
        self._pairs_skipped(why)  # a pair no job was held for (a best settled by the last pair sent)

    async def _confirm(self, cand: Candidate, best: Candidate, line: int) -> Candidate:
        """Judge `cand` and the current best again, submitted at once, until both verdicts come from one
        host (at most confirm.TRIES pairs); store those figures in place of the earlier ones."""
        for _ in range(confirm.TRIES):
            judged = await self._pair(cand, best, line)
            if judged is not None:
                return judged
        return self.record_verdict(cand, confirm.unconfirmed(cand, confirm.TRIES))

    async def _pair(self, cand: Candidate, best: Candidate, line: int) -> Candidate | None:
        """One pair of `_confirm`: `cand` as stored once both verdicts came from one host, else None."""
        self.journal.stage("confirm", cand.iteration, f"{cand.id} beside {best.id} on one host", line)
        self.pairs += 1
        tag = f"confirm {cand.id} vs {best.id} #{self.pairs}"  # a new request, not an earlier one's answer
        # Two slots held (none where they travel with an evaluation), then both requests go out together.
        slots = [] if self.batches else await self.use.queued_for_slots(cand, line, min(2, self.use.capacity))
        try:
            self.stopping.check()
            futures = [self.executor.submit(self.request(c, tag)) for c in (cand, best)]
        except BaseException:
            for slot in slots:
                self.use.slots.give(slot)
            raise
        mine, theirs = await asyncio.gather(
            self.judge(cand, line, tag, slots[0] if slots else None, futures[0]),
            self.judge(best, line, tag, slots[1] if len(slots) > 1 else None, futures[1]))
        if mine.result.judged_on.host != theirs.result.judged_on.host:
            return None
        self.journal.record_result(best.id, confirm.confirmed(theirs, cand, mine.result, best))
        return self.record_verdict(cand, confirm.confirmed(mine, best, theirs.result, cand))

    # --- held for the next evaluation (Executor.batches) -----------------------------------------
    def _hold_pairs(self, composite: Candidate | None = None) -> None:
        """The pairs to judge on one host (each composite beside the best, then the best beside its closest
        contender from another host) are settled by one job at a time, held to go out with the next evaluation;
        `composite` is a verdict just recorded that may need its pair."""
        if composite is not None and confirm.rival(composite, self.journal.candidates()) is not None:
            self._to_pair.add(composite.id)
        if not self._pairing and (self._to_pair or confirm.unsettled(self.journal.candidates())):
            self._pairing = True
            self.held.hold(Job("the same-host pairs", self._next_pair, self._pairs_skipped))

    async def _next_pair(self) -> None:
        """One pair, sent with the evaluation that released this job; the job is held again while any is left."""
        journal = self.journal
        try:
            pair, composite = None, None
            while self._to_pair and pair is None:
                composite = journal.candidate(self._to_pair.pop())
                rival = confirm.rival(composite, journal.candidates())
                pair = (composite, rival) if rival is not None else None
            pair = pair or confirm.unsettled(journal.candidates())
            if pair is not None and await self._pair(*pair, 0) is None:  # landed on two hosts
                key = (pair[0].id, pair[1].id)
                self._pair_tries[key] = self._pair_tries.get(key, 0) + 1
                if self._pair_tries[key] >= confirm.TRIES:
                    first = journal.candidate(pair[0].id)
                    self.record_verdict(first, confirm.unconfirmed(first, confirm.TRIES))
                elif composite is not None and pair[0].id == composite.id:
                    self._to_pair.add(composite.id)  # again, with the next evaluation
        finally:
            self._pairing = False
        self._hold_pairs()

    def _pairs_skipped(self, why: str) -> None:
        """The run ended before the held pairs went out: the composites waiting for theirs, and a best with a close
        contender from another host, are marked unconfirmed, saying why."""
        for cand_id in sorted(self._to_pair):
            self._unconfirmed(cand_id, why)
        self._to_pair.clear()
        pair = confirm.unsettled(self.journal.candidates())
        if pair is not None:
            self._unconfirmed(pair[0].id, why)

    def _unconfirmed(self, cand_id: str, why: str) -> None:
        cand = self.journal.candidate(cand_id)
        if not cand.notes.get("unconfirmed") and not cand.notes.get("slower_than"):
            self.record_verdict(cand, confirm.skipped(cand, why))
