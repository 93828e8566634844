"""Timed calls inside a worker (the untrusted side). The judge drives them one at a time.

`prepare` builds the fixed buffers every call uses and runs the warm-up on inputs from seeds
the judge sent for it (warm-up is never timed, so knowing those inputs gains nothing). Each
`call` command then runs exactly one timed call, of a kind the judge chose just before sending
it, on inputs generated from a seed the judge drew that moment from its own OS randomness and
never used before (`timed`), or the same load and timed region with no call at all (`null`,
which tells the judge what its own clock sees around a call that does nothing). No two commands
of an evaluation carry the same seed, so no timed call sees content any earlier call saw: an
answer remembered by content (whatever part of the inputs it is keyed on) is never right for
the next call. The inputs are generated inside the command, so inside the judge's clock, and
copied into the fixed buffers, so every call sees the same pointers, strides and alignment.
A call's output stays where it is until the next command; if the judge decides, after the call
returned, to check it, it reads it then (itself in host memory on the CPU), so no call can know
it will be checked. On the GPU the output is copied, the moment the call returns, into a buffer
the judge owns and reads itself (output_buffer.py), filled before each call with a word the
judge drew, and the copy is waited for before the reply: work still queued then leaves that word
there. Where the driver cannot share such a buffer, a copy is taken within the worker instead and
`sample` reads it: a thread that fixes the returned tensor a moment later is too late, and one
that wants to fix the copy must find it first, inside the same window. Nothing here decides anything: the judge brackets every command
with its own clock and believes these numbers only where that clock agrees.
"""

from __future__ import annotations

import time

import torch

from kscience.evaluate import output_buffer
from kscience.evaluate.clocks import covered_region, settle_garbage_collector
from kscience.evaluate.wire import wire_dtype
from kscience.evaluate.worker.harness import Fault, Harness

_perf_counter = time.perf_counter
_copy, _clone = torch.Tensor.copy_, torch.Tensor.clone  # through the class (see harness.py)
_data_ptr, _stride = torch.Tensor.data_ptr, torch.Tensor.stride
_view, _fill = torch.Tensor.view, torch.Tensor.fill_
_numel, _element_size = torch.Tensor.numel, torch.Tensor.element_size
KINDS = ("timed", "null")


class Timer:
    """One shape's fixed buffers, from `prepare` to `finish`. Slotted and watched like the harness
    (see harness.Harness): what runs between a call's return and the judge's read is only this
    class's and the harness's own methods."""

    __slots__ = ("h", "shape", "cap", "work", "copied", "setup_s", "last", "kept", "copy_outputs", "judges", "word")
    FIXED = ("h", "shape", "cap", "work", "copied", "copy_outputs", "judges", "word")

    def __init__(self, h: Harness, cmd: dict, handed=None):
        h.watch("timer", None, ())  # the previous shape's buffers are let go before these are made
        self.h, self.shape, self.cap = h, cmd["shape"], cmd["max_output_bytes"]
        t0 = _perf_counter()
        warm_seeds = list(cmd["seeds"])
        # Fixed addresses for every call: each call's new inputs are copied into these, so the
        # candidate sees the same pointers, strides and alignment whatever the numbers.
        self.work = h.inputs(warm_seeds[0], self.shape)
        self.copied = [i for i in range(len(self.work)) if i not in h.outputs and type(self.work[i]) is torch.Tensor]
        # Each warm-up set is built once and cycled through (the first is a copy of the fixed
        # buffers as built): a GPU MODE sort builds its numbers row by row from Python, and one
        # build of its largest shape takes most of a second.
        warm_sets = [[_clone(x) if type(x) is torch.Tensor else x for x in self.work]]
        warm_sets += [h.inputs(seed, self.shape) for seed in warm_seeds[1:min(cmd["warmup"], len(warm_seeds))]]
        self.setup_s = _perf_counter() - t0
        self.last: torch.Tensor | None = None
        self.kept: torch.Tensor | None = None  # the copy `sample` reads, when the judge asked for copies
        self.copy_outputs = bool(cmd.get("copy_outputs"))
        self.judges = self._map_judges_buffer(cmd.get("keep_bytes"), handed)
        self.word = cmd.get("keep_word") if type(cmd.get("keep_word")) is int else 0  # what "not written" looks like
        h.watch("timer", self, self.FIXED)  # before the warm-up runs candidate code
        for w in range(cmd["warmup"]):
            self.load(warm_sets[w % len(warm_sets)])
            out = h.invoke(self.work, self.cap)
            h.sync()
            h.poison(out)
        del warm_sets
        settle_garbage_collector()  # what compiling on the warm-up made
        h.verify()

    @staticmethod
    def _map_judges_buffer(nbytes, handed) -> output_buffer.Mapping | None:
        """The judge's output buffer for this shape (output_buffer.py), where it sent one."""
        if not nbytes:
            return None
        if type(nbytes) is not int or nbytes <= 0 or handed is None:
            raise Fault("rejected", "malformed prepare command")
        try:
            return output_buffer.open_fd(output_buffer.receive_fd(handed), nbytes, torch.cuda.current_device())
        except (output_buffer.DriverError, OSError) as exc:
            raise Fault("runtime_error", f"could not map the judge's output buffer: {exc}") from None

    def load(self, source: list) -> None:
        for i in self.copied:
            _copy(self.work[i], source[i])
        self.h.restore_nested(self.work, source)
        for i in self.h.outputs:
            self.h.poison(self.work[i])
        if self.judges is not None:  # the judge reads this call's output from there
            _fill(_view(self.judges.tensor, torch.int32), self.word)
        if self.h.l2 is not None:
            self.h.l2.clear()
        self.h.sync()

    def call(self, cmd: dict) -> dict:
        """One command: load, time one call. Its output stays held (`Harness.sample`) until the next."""
        h = self.h
        self.release()
        kind = cmd.get("kind")
        if kind not in KINDS:
            raise Fault("rejected", "malformed call command")
        source = h.inputs(int(cmd["seed"]), self.shape)  # new content, null calls included (same path)
        self.load(source)
        del source  # a generated set is released before the call, as nothing else is allocated then
        event_us, host_us, out = self.timed_call(kind != "null")
        # The copy the judge will read is taken first, before the integrity check gives any thread
        # the candidate left running more time to write the output.
        if self.judges is not None:
            self.hand_over(out)
        kept = _clone(out) if out is not None and self.copy_outputs else None
        h.verify()
        reply = {"event_us": event_us, "host_us": host_us}
        if out is not None:
            h.not_a_view(out, self.work)  # an input handed back from a timed call is no answer either
            self.kept = kept
            self.last, h.held = out, [out if self.kept is None else self.kept]
            # Where the output lies. The judge reads host memory itself; on the GPU it asks for
            # the bytes at ranges it draws (`sample`) before anything else runs here.
            reply["out"] = {"ptr": _data_ptr(out), "shape": list(out.shape), "strides": list(_stride(out)),
                            "dtype": wire_dtype(out.dtype), "device": out.device.type}
        return reply

    def hand_over(self, out: torch.Tensor | None) -> None:
        """The output's bytes, contiguous, into the judge's buffer, waited for: the judge reads them
        as soon as the reply arrives. One too large for it is left out (the judge refuses it). A null
        call (None) writes the buffer and waits as well, so that the judge's brackets of both kinds
        hold the same extra turn on the GPU: beside a busy neighbour each turn waits for a time slice
        (an H100 estimated an honest 28 us kernel at 2.4 ms when only timed calls took it)."""
        nbytes = 0 if out is None else _numel(out) * _element_size(out)
        if out is None:
            _fill(_view(self.judges.tensor, torch.int32), self.word)
        elif nbytes <= self.judges.nbytes:
            _copy(_view(_view(self.judges.tensor[:nbytes], out.dtype), out.shape), out)
        self.h.sync()

    def release(self) -> None:
        """The previous call's output: poisoned (no later call may find it) and no longer held."""
        for t in (self.last, self.kept):  # freed memory holding an answer is poisoned first
            if t is not None:
                self.h.poison(t)
        self.last, self.kept, self.h.held = None, None, []

    def timed_call(self, run: bool) -> tuple[float, float, torch.Tensor | None]:
        """(event us, host us, output) of one call, or of an empty region when not `run`; on the
        GPU inside the cover every region has (`clocks.covered_region`)."""
        h = self.h
        if h.on_gpu:
            event, host, out = covered_region(h.flush, lambda: h.invoke(self.work, self.cap, pack=False) if run else None)
            return event, host, h.pack_output(out, self.cap)  # several outputs are packed untimed
        h0 = _perf_counter()
        out = h.invoke(self.work, self.cap, pack=False) if run else None
        host = (_perf_counter() - h0) * 1e6
        return host, host, h.pack_output(out, self.cap)

    def finish(self) -> None:
        self.release()
        self.h.watch("timer", None, ())  # nothing holds the buffers once the worker drops this timer
        self.h.sync()
        if self.judges is not None:
            self.judges.close()
