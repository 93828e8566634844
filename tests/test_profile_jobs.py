"""Profiling never delays a child (issue 39, item 3): a profile job takes a slot only when no evaluation
waits for one, or while profiling has taken less than PROFILE_SHARE of the slots' time."""

import asyncio
import threading

from kscience.run import profiling
from kscience.run.journal import Stopping
from kscience.run.judging import Judging


class OneSlot:
    capacity = 1


def judging() -> Judging:
    return Judging(OneSlot(), journal=None, stopping=Stopping(threading.Event()), budget=None, problem=None,
                   changed=asyncio.Event(), profile="auto")


def test_a_profile_job_waits_while_an_evaluation_is_queued_once_over_its_share():
    async def scenario():
        j = judging()
        j.slots.profile_s = 1e9  # profiling has had far more than its share of slot time
        (held,) = j.slots.take_now(j.use)  # an evaluation holds the one slot
        evaluation = j.slots.wait(j.use, expected_s=1.0)  # and another waits for it
        job = asyncio.create_task(j.profiles.slot_for_profile())
        await asyncio.sleep(0.3)
        j.slots.give(held)
        assert evaluation.done() and evaluation.result() == [0]  # the freed slot is the evaluation's
        await asyncio.sleep(0.3)
        assert not job.done()
        j.slots.give(0)  # it finished: nothing waits now
        assert await asyncio.wait_for(job, 2) == 0

    asyncio.run(scenario())


def test_within_its_share_a_profile_job_goes_ahead_of_queued_evaluations():
    async def scenario():
        j = judging()
        (held,) = j.slots.take_now(j.use)
        queued = [j.slots.wait(j.use, expected_s=1.0) for _ in range(3)]
        await asyncio.sleep(0.3)  # some slot time has passed; profiling has taken none of it
        assert j.slots.profile_s <= profiling.PROFILE_SHARE * (j.slots.capacity * 0.3)
        job = asyncio.create_task(j.profiles.slot_for_profile())
        await asyncio.sleep(0.05)
        j.slots.give(held)
        assert await asyncio.wait_for(job, 2) == 0 and not any(q.done() for q in queued)
        j.slots.profile_s = 0.2  # more than 10% of the ~0.3 s of slot time so far
        second = asyncio.create_task(j.profiles.slot_for_profile())
        await asyncio.sleep(0.05)
        j.slots.give(0)
        assert queued[0].done() and not second.done()  # over its share: the evaluation goes first
        second.cancel()

    asyncio.run(scenario())
