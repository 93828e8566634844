"""A clock for tests of the judge's timing loop (drive.py): time passes only when a fake call says so,
and the session and buffers that loop talks to, with nothing behind them."""

import contextlib
import types

import torch

from kscience.evaluate import staging


class FakeClock:
    """time.monotonic and time.perf_counter that advance only when a call 'runs'."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        return self.now

    perf_counter = monotonic


class FakeSession:
    """What drive.run_calls needs of a session. A timed call's `done` comes after `call_s(n)` seconds of
    the fake clock (n: the timed calls so far); the judge's own builds take `build_s` each."""

    problem = types.SimpleNamespace(output_args=(), check=None)
    device = types.SimpleNamespace(torch_device="cpu")

    def __init__(self, clock: FakeClock, call_s, build_s: float = 0.0):
        self.clock, self.call_s, self.build_s = clock, call_s, build_s
        self.kind, self.n, self.built, self.asked = None, 0, [], []

    def inputs(self, seed, shape):
        self.clock.now += self.build_s
        self.built.append(seed)
        return [torch.zeros(4)]

    def ask(self, cmd, phase, shape):
        self.kind = cmd.get("kind")
        self.asked.append(cmd)

    @contextlib.contextmanager
    def phase(self, name):
        yield

    def reply(self, phase, shape, expect="ok"):
        if expect == "done":
            if self.kind == "timed":
                self.n += 1
                self.clock.now += self.call_s(self.n)
            return {"status": "done"}
        took = self.call_s(self.n) * 1e6 if self.kind == "timed" else 1.0
        return {"status": "ok", "event_us": took, "host_us": took + 10, "out": {"shape": [4], "dtype": "float32"}}

    def hold_for_recheck(self, shape, seed, data):
        pass


class FakeBuffers:
    """A shape's buffers that hold nothing: staged (the judge writes each call's inputs) or not."""

    template = [torch.zeros(4)]
    form = staging.stageable(template, "cpu")[0]

    def __init__(self, staged: bool = True):
        self.staged = staged

    def load(self, sources):
        pass

    def read(self, ranges):
        return torch.zeros(sum(n for _, n in ranges), dtype=torch.uint8)

    def unwritten(self, raw, ranges):
        return False
