"""kscience.run.threads.Background: the one way a run gets a thread of its own."""

import asyncio
import threading

import pytest

from kscience.run.threads import Background


def test_a_callback_registered_before_start_is_called_once_when_the_thread_ends():
    release, calls = threading.Event(), []

    async def main():
        await asyncio.get_running_loop().run_in_executor(None, release.wait, 5)

    task = Background(main, name="kscience-test")
    task.when_over(lambda: calls.append("over"))
    task.start(background=True)
    assert task.alive and calls == []
    release.set()
    task.join(5)
    assert not task.alive and calls == ["over"]
    task.when_over(lambda: calls.append("late"))  # already over: called at once
    assert calls == ["over", "late"]
    with pytest.raises(RuntimeError, match="already started"):
        task.start()


def test_without_a_running_loop_it_runs_here_and_a_failure_still_tells_who_asked():
    calls, here = [], threading.get_ident()

    async def main():
        calls.append(threading.get_ident() == here)
        raise ValueError("boom")

    task = Background(main, name="kscience-test")
    task.when_over(lambda: calls.append("over"))
    with pytest.raises(ValueError, match="boom"):
        task.start()
    assert calls == [True, "over"]


def test_inside_a_running_loop_it_moves_to_a_thread_and_a_cancelled_callback_is_not_called():
    calls = []

    async def main():
        calls.append(threading.current_thread().name)

    async def cell():
        task = Background(main, name="kscience-cell")
        cancel = task.when_over(lambda: calls.append("over"))
        cancel()
        task.start()  # a loop runs here: must not block it, nor call asyncio.run on it
        task.join(5)

    asyncio.run(cell())
    assert calls == ["kscience-cell"]


def test_it_counts_as_alive_until_its_callbacks_have_returned():
    in_callback, release = threading.Event(), threading.Event()

    async def main():
        pass

    def slow_callback():
        in_callback.set()
        release.wait(5)

    task = Background(main, name="kscience-test")
    task.when_over(slow_callback)
    task.start(background=True)
    assert in_callback.wait(5)
    assert task.alive  # a waiter must not return before a view's final redraw
    release.set()
    task.join(5)
    assert not task.alive
