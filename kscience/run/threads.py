"""Running a coroutine to its end, on this thread or on one of its own, and telling who asked once
it is over. The one place kscience starts a run's thread.

Jupyter's kernel thread already runs an event loop, where `asyncio.run` cannot be used, and must
stay free to handle messages (widget clicks included) while evaluations go on: there the run
gets a thread with its own loop. A shell has no loop running, so the run blocks the main thread
and Ctrl-C reaches it as a cancellation.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Awaitable, Callable


def loop_running_here() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class Background:
    """`main()` (a coroutine function) run once; callbacks registered with `when_over` are called
    with no argument once it has ended, however it ended (at once if it already has)."""

    def __init__(self, main: Callable[[], Awaitable], name: str):
        self._main, self.name = main, name  # the thread's name
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._over = False  # main() has returned or raised: callbacks registered now are called at once
        self._ended = threading.Event()  # ...and every callback has been called
        self._callbacks: list[Callable[[], None]] = []
        self._started = False

    @property
    def started(self) -> bool:
        return self._started

    @property
    def alive(self) -> bool:
        """Started and not yet through: until the last callback has returned, so a caller that waits
        for this to end also sees what the callbacks did (a view's final redraw)."""
        return self._started and not self._ended.is_set()

    def start(self, background: bool | None = None) -> None:
        """On a thread of its own (`background`, or whenever a loop already runs here), else here.
        `background=None` picks a thread exactly when a loop already runs here."""
        with self._lock:
            if self._started:
                raise RuntimeError(f"{self.name} was already started")
            self._started = True
        running_here = loop_running_here()
        if background or running_here:
            self._thread = threading.Thread(target=self._body, name=self.name, daemon=True)
            self._thread.start()
            if background is False:
                self._thread.join()
        else:
            self._body()

    def _body(self) -> None:
        try:
            asyncio.run(self._main())
        finally:
            with self._lock:
                self._over = True
                callbacks, self._callbacks = self._callbacks, []
            try:
                for callback in callbacks:
                    callback()
            finally:
                self._ended.set()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def when_over(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback()` once this has ended; returns a function that cancels the call."""
        with self._lock:
            over = self._over
            if not over:
                self._callbacks.append(callback)
        if over:
            callback()

        def cancel() -> None:
            with self._lock:
                if callback in self._callbacks:
                    self._callbacks.remove(callback)

        return cancel
