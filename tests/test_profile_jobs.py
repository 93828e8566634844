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
        j.profile_s = 1e9  # profiling has had far more than its share of slot time
        j._queued = 1  # an evaluation waits for the slot
        job = asyncio.create_task(j._slot_for_profile())
        await asyncio.sleep(0.5)
        assert not job.done()  # the free slot is the evaluation's
        j._queued = 0  # it took the slot and finished: nothing waits now
        assert await asyncio.wait_for(job, 2) == 0

    asyncio.run(scenario())


def test_within_its_share_a_profile_job_goes_even_with_evaluations_queued():
    async def scenario():
        j = judging()
        await asyncio.sleep(0.3)  # some slot time has passed; profiling has taken none of it
        j._queued = 3
        assert j.profile_s <= profiling.PROFILE_SHARE * (j.capacity * 0.3)
        assert await asyncio.wait_for(j._slot_for_profile(), 2) == 0
        j._free.put_nowait(0)
        j.profile_s = 0.2  # more than 10% of the ~0.3 s of slot time so far
        job = asyncio.create_task(j._slot_for_profile())
        await asyncio.sleep(0.5)
        assert not job.done()
        job.cancel()

    asyncio.run(scenario())
