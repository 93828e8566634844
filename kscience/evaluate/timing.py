"""The timed loop inside a worker (the untrusted side).

Per call: copy one input set into fixed buffers, poison the outputs, queue a cache flush, then
time the call with CUDA events and with a device-synchronised host clock (host clock alone on
the CPU). Inputs rotate through sets the judge seeded; at moments drawn from the OS's
randomness a call gets a brand-new set instead, so the judge can compare calls on inputs seen
before with calls on inputs never seen (a cache keyed on input contents shows as a gap). The
judge rechecks the output of one randomly chosen call per rotated set and of every fresh call;
which call is kept is decided after it returned, so no call can know it will be checked.
"""

from __future__ import annotations

import math
import secrets
import time
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # the harness calls into this module: here its type is only named
    from kscience.evaluate.harness import Harness

_perf_counter = time.perf_counter
_randbelow = secrets.randbelow
_randbits = secrets.randbits
_sqrt = math.sqrt
_Event = torch.cuda.Event
_synchronize = torch.cuda.synchronize
_gpu_spin = getattr(torch.cuda, "_sleep", None)  # a kernel that busy-waits for a number of GPU cycles
IDLE_SAMPLES = 25
# After the flush the GPU spins this many cycles more (about 0.15 ms at 2 GHz) before the start
# event: the flush alone (tens of microseconds on HBM3) is shorter than a Python launch on a
# busy host, and any launch time not covered lands inside the event time.
COVER_CYCLES = 300_000


def idle_gap_us() -> float:
    """Host time minus event time of an empty timed region: the clocks' fixed disagreement."""
    gaps = []
    for _ in range(IDLE_SAMPLES):
        start, end = _Event(enable_timing=True), _Event(enable_timing=True)
        _synchronize()
        h0 = _perf_counter()
        start.record()
        end.record()
        _synchronize()
        gaps.append((_perf_counter() - h0) * 1e6 - start.elapsed_time(end) * 1e3)
    return sorted(gaps)[len(gaps) // 2]


class _Loop:
    """One shape's timed loop: its input sets, its fixed buffers and the calls it times."""

    def __init__(self, h: Harness, cmd: dict):
        self.h, self.cmd = h, cmd
        self.shape, self.cap = cmd["shape"], cmd["max_output_bytes"]
        t0 = _perf_counter()
        self.pool = [h.inputs(s, self.shape) for s in cmd["seeds"]]
        self.work = h.inputs(cmd["seeds"][0], self.shape)  # fixed addresses; contents change per call
        self.setup_s = _perf_counter() - t0
        self.copied = [i for i in range(len(self.work)) if i not in h.outputs and type(self.work[i]) is torch.Tensor]

    def load(self, source: list) -> None:
        for i in self.copied:
            self.work[i].copy_(source[i])
        for i in self.h.outputs:
            self.h.poison(self.work[i])
        if self.h.l2 is not None:
            self.h.l2.clear()
        self.h.sync()

    def timed_call(self) -> tuple[float, float, torch.Tensor]:
        """(event us, host us, output) of one call.

        The cache flush, then a short spin, are queued just before the start event (the flush as
        `triton.testing.do_bench` does), so the GPU is busy while the host launches the candidate
        and launch latency stays out of the event time. Their GPU time, measured by their own
        events, is taken out of the host time, which otherwise spans them, the call and a
        device-wide synchronisation.
        """
        h = self.h
        if h.on_gpu:
            before, start, end = (_Event(enable_timing=True) for _ in range(3))
            h0 = _perf_counter()
            before.record()
            h.flush.zero_()
            if _gpu_spin is not None:
                _gpu_spin(COVER_CYCLES)
            start.record()
            out = h.invoke(self.work, self.cap)
            end.record()
            _synchronize()  # device-wide: work hidden on side streams lands inside the host time
            host = (_perf_counter() - h0) * 1e6 - before.elapsed_time(start) * 1e3
            return start.elapsed_time(end) * 1e3, host, out
        h0 = _perf_counter()
        out = h.invoke(self.work, self.cap)
        host = (_perf_counter() - h0) * 1e6
        return host, host, out

    def run(self) -> tuple[dict, list]:
        h, cmd, pool = self.h, self.cmd, self.pool
        for w in range(cmd["warmup"]):
            self.load(pool[w % len(pool)])
            out = h.invoke(self.work, self.cap)
            h.sync()
            h.poison(out)
        h.verify()
        seen = {w % len(pool) for w in range(cmd["warmup"])}
        events, hosts, kinds = [], [], []
        kept_sets: dict[int, torch.Tensor] = {}
        kept_fresh: list[tuple[int, torch.Tensor]] = []
        calls_per_set = [0] * len(pool)
        fresh_left, rotation, settled, repeated = cmd["fresh"], 0, False, False
        total = total_sq = generating_s = 0.0
        t_loop = _perf_counter()
        while True:
            fresh = fresh_left > 0 and (settled or (len(events) > 0 and _randbelow(4) == 0))
            if fresh:
                seed, t_gen = _randbits(31), _perf_counter()
                source, kind = h.inputs(seed, self.shape), "fresh"
                generating_s += _perf_counter() - t_gen
            else:
                j = rotation % len(pool)
                rotation += 1
                source, kind = pool[j], ("repeat" if j in seen else "first")
                seen.add(j)
            self.load(source)
            # A fresh set is released before the call, so the allocator looks as it does for repeats.
            del source
            ev, host, out = self.timed_call()
            h.verify()
            events.append(ev)
            hosts.append(host)
            kinds.append(kind)
            repeated = repeated or kind == "repeat"
            total, total_sq = total + ev, total_sq + ev * ev
            # Keep-or-not is drawn only now, after the call returned.
            if fresh:
                kept_fresh.append((seed, out.clone()))
                fresh_left -= 1
            else:
                calls_per_set[j] += 1
                if _randbelow(calls_per_set[j]) == 0:  # one uniformly chosen call per set (reservoir)
                    kept_sets[j] = out.clone()
            h.poison(out)
            del out
            n, spent = len(events), _perf_counter() - t_loop - generating_s  # making inputs is not timing
            mean = total / n
            var = max(total_sq / n - mean * mean, 0.0)
            rse = _sqrt(var / n) / mean if n > 1 and mean > 0 else 1.0
            settled = settled or n >= cmd["max_n"] or spent > cmd["max_seconds"] or \
                (n >= cmd["min_n"] and rse < cmd["target_rse"])
            if settled and fresh_left == 0 and rotation >= len(pool) and repeated:
                break
        h.sync()
        kept = [({"set": j}, t) for j, t in sorted(kept_sets.items())] + [({"fresh": s}, t) for s, t in kept_fresh]
        reply = {"events_us": events, "hosts_us": hosts, "kinds": kinds, "loop_s": _perf_counter() - t_loop,
                 "setup_s": self.setup_s, "kept": [tag for tag, _ in kept]}
        return reply, [t for _, t in kept]


def time_shape(h: Harness, cmd: dict) -> tuple[dict, list]:
    """Run the timed loop for one shape: (reply fields, outputs kept for the judge's recheck)."""
    return _Loop(h, cmd).run()
