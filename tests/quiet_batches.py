"""A fake executor that judges in batches, as batch jobs each started on a fresh machine do: requests
wait until none has come for QUIET_S, then the whole batch goes out at once (`judge_batch`)."""

import threading
from abc import abstractmethod
import time
from concurrent.futures import Future

from kscience.evaluate.executors.base import Executor
from test_loop import FakeExecutor


class QuietBatches(Executor):
    QUIET_S = 0.25  # well above the gap between two submissions that belong together, on a loaded machine

    def __init__(self):
        self.inner = FakeExecutor(capacity=2, delay_s=0.01)
        self.pending: list[tuple] = []
        self.last_submit = 0.0
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._thread = threading.Thread(target=self._dispatch, daemon=True)
        self._thread.start()

    @property
    def capacity(self):
        return 2

    def submit(self, request):
        future: Future = Future()
        with self._lock:
            self.pending.append((request, future))
            self.last_submit = time.monotonic()
        return future

    @abstractmethod
    def judge_batch(self, batch: list[tuple]) -> None:
        """Set every (request, future) of one batch's future."""

    def _dispatch(self):
        while not self._stop.wait(0.005):
            with self._lock:
                if not self.pending or time.monotonic() - self.last_submit < self.QUIET_S:
                    continue
                batch, self.pending = self.pending, []
            self.judge_batch(batch)

    def shutdown(self):
        self._stop.set()
        self._thread.join(5)
        self.inner.shutdown()
