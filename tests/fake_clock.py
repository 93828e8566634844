"""A clock for tests of the judge's timing loop (drive.py): time passes only when a fake call says so."""


class FakeClock:
    """time.monotonic and time.perf_counter that advance only when a call 'runs'."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        return self.now

    perf_counter = monotonic
