"""Timed calls inside a worker (the untrusted side). The judge drives them one at a time and clocks
each one itself; nothing here decides anything.

`prepare` makes the fixed buffers every call of a shape uses and runs the warm-up on inputs from seeds
the judge sent for it (warm-up is never timed). Where the judge stages the shape's inputs
(staging.py), the fixed input tensors are views into the judge's own buffer, at the places and
strides it named: before each call the judge writes that call's new inputs there itself, and flushes
the L2, inside its clock, so the worker never builds them and the candidate meets them only once the
judge's clock runs. Otherwise (inputs that are objects, or off the evaluation device) each `call`
carries a seed and the worker builds the inputs from it, copies them into its own fixed buffers and
overwrites a flush buffer of its own after them (a weaker clock: docs/evaluation.md).

Each `call` runs exactly one call of the candidate (`timed`), or the same region with nothing in it
(`null`, which tells the judge what its clock sees around no work). On the GPU the call sits between
two CUDA events and a device-wide synchronisation; its output is then copied into the judge's output
buffer (shared_buffer.py), whose copy is waited for, and only then does the worker answer `done`: the
judge stops its clock there and reads the output from its own memory. A null call copies a dummy of
the output's size, so both kinds carry the same harness work. After `done` the worker checks its own
integrity and says what the call returned and its events: advice the judge weighs against its own
clock (judge/measure.py), and work done then is outside every clock but can change nothing the judge
has already read.
"""

from __future__ import annotations

import copy
import time

import torch

from kscience.evaluate import shared_buffer, staging
from kscience.evaluate.clocks import flush_bytes, gpu_region, settle_garbage_collector
from kscience.evaluate.wire import wire_dtype
from kscience.evaluate.worker.harness import Fault, Harness

_perf_counter = time.perf_counter
_copy, _clone = torch.Tensor.copy_, torch.Tensor.clone  # through the class (see harness.py)
_view, _zero = torch.Tensor.view, torch.Tensor.zero_
_numel, _element_size = torch.Tensor.numel, torch.Tensor.element_size
KINDS = ("timed", "null")


class Timer:
    """One shape's fixed buffers, from `prepare` to `finish`. Slotted and watched like the harness
    (see harness.Harness): what runs between a call's return and `done` is only this class's and the
    harness's own methods."""

    __slots__ = ("h", "shape", "cap", "work", "copied", "setup_s", "judges", "inputs", "staged",
                 "nested", "dummy", "flush")
    FIXED = ("h", "shape", "cap", "work", "copied", "judges", "inputs", "staged", "nested", "dummy", "flush")

    def __init__(self, h: Harness, cmd: dict, handed=None):
        h.watch("timer", None, ())  # the previous shape's buffers are let go before these are made
        self.h, self.shape, self.cap = h, cmd["shape"], cmd["max_output_bytes"]
        t0 = _perf_counter()
        warm_seeds = list(cmd["seeds"])
        # Fixed addresses for every call: the candidate sees the same pointers, strides and alignment
        # whatever the numbers.
        self.work = h.inputs(warm_seeds[0], self.shape)
        # Which memory each buffer is in is the judge's word (`*_on_device`), not a flag of this process's.
        ordinal = torch.cuda.current_device() if torch.cuda.is_available() else None
        self.judges = _map(handed, cmd.get("output_buffer_bytes"), cmd.get("outputs_on_device"), ordinal, "output")
        out_bytes = cmd.get("output_bytes")
        if type(out_bytes) is not int or not 0 <= out_bytes <= self.judges.nbytes:
            raise Fault("rejected", "malformed prepare command")
        self.dummy = torch.zeros(out_bytes, dtype=torch.uint8, device=h.device.torch_device)
        self.staged = cmd.get("staged")
        self.inputs, self.nested, self.copied, self.flush = None, {}, [], None
        if self.staged is not None:
            self.inputs = _map(handed, cmd.get("staged_bytes"), cmd.get("staged_on_device"), ordinal, "input")
            self._view_inputs()
        else:
            self.copied = [i for i in range(len(self.work)) if i not in h.outputs and type(self.work[i]) is torch.Tensor]
            if h.on_gpu:  # inputs built here land in the L2: overwritten before each call (the judge flushes staged ones)
                self.flush = torch.empty(flush_bytes(h.device.l2_bytes) // 4, dtype=torch.int32, device="cuda")
        # Each warm-up set is built once and cycled through (the first is a copy of the fixed buffers as
        # built): a GPU MODE sort builds its numbers row by row from Python, most of a second a build.
        warm_sets = [[_clone(x) if type(x) is torch.Tensor else copy.deepcopy(x) for x in self.work]]
        warm_sets += [h.inputs(seed, self.shape) for seed in warm_seeds[1:min(cmd["warmup"], len(warm_seeds))]]
        self.setup_s = _perf_counter() - t0
        h.watch("timer", self, self.FIXED)  # before the warm-up runs candidate code
        for w in range(cmd["warmup"]):
            self._load_built(warm_sets[w % len(warm_sets)])
            out = h.invoke(self.work, self.cap)
            h.sync()
            h.poison(out)
        del warm_sets
        settle_garbage_collector()  # what compiling on the warm-up made
        h.verify()

    def _view_inputs(self) -> None:
        """The staged inputs as views into the judge's buffer, at the places it named, with the strides
        they were built with; what they hold now is the fixed buffers' own first set."""
        h, places = self.h, self.staged
        fixed = staging.leaves(self.work, h.outputs)
        if not isinstance(places, list) or len(places) != len(fixed) or not all(
                isinstance(p, list) and len(p) == 2 and all(type(v) is int and v >= 0 for v in p) for p in places):
            raise Fault("rejected", "malformed prepare command")
        for (offset, span), t in zip(places, fixed):
            if span != staging.span_bytes(t) or offset + span > self.inputs.nbytes or offset % staging.ALIGN:
                raise Fault("rejected", "the judge's staging places do not fit this shape's inputs")
        views = staging.views(self.inputs, places, fixed)
        staging.write(views, fixed)
        self.work = staging.replace_leaves(self.work, views, h.outputs)
        # Containers are rebuilt around the same views for every call: a call may change them (advance a
        # cache, replace an item), and what it changed must not reach the next call.
        self.nested = {i: x for i, x in enumerate(self.work) if type(x) is not torch.Tensor and i not in h.outputs
                       and staging.leaves([x])}

    def _load_built(self, source: list) -> None:
        """Inputs the worker built (warm-up, or a shape the judge does not stage) into the fixed buffers."""
        if self.staged is not None:
            views = staging.leaves(self.work, self.h.outputs)
            for view, t in zip(views, staging.leaves(source, self.h.outputs)):
                _copy(view, t)
        else:
            for i in self.copied:
                _copy(self.work[i], source[i])
            self.h.restore_nested(self.work, source)
        self._before_call()

    def _before_call(self) -> None:
        for i, template in self.nested.items():
            self.work[i] = staging.rebuild(template)
        for i in self.h.outputs:
            self.h.poison(self.work[i])
        if self.h.l2 is not None:
            self.h.l2.clear()
        if self.flush is not None:
            _zero(self.flush)
        self.h.sync()

    def call(self, cmd: dict, send) -> dict:
        """One command: load, one call, its output into the judge's buffer, `done` sent through `send`;
        returns what the call returned and its clocks, for the message after `done`."""
        h = self.h
        kind = cmd.get("kind")
        if kind not in KINDS or (kind == "timed" and h.fn is None):
            raise Fault("rejected", "malformed call command")
        if self.staged is not None:
            self._before_call()  # the judge wrote this call's inputs into the views before sending it
        else:
            source = h.inputs(int(cmd["seed"]), self.shape)  # new content, null calls included (same path)
            self._load_built(source)
            del source  # released before the call, as nothing else is allocated then
        event_us, host_us, out = self.timed_call(kind == "timed")
        self.hand_over(out)
        send()  # `done`: the judge's clock stops here and it reads its buffer
        h.verify()
        reply = {"event_us": event_us, "host_us": host_us}
        if out is None:  # the same tail as a timed call's poisoning below, running on into the next bracket
            h.poison(self.dummy)
        else:
            h.not_a_view(out, self.work)  # an input handed back from a timed call is no answer either
            reply["out"] = {"shape": list(out.shape), "dtype": wire_dtype(out.dtype), "device": out.device.type}
            # Poisoned now (no later call may find it in freed memory), not when the next call comes: by then
            # the judge has written the next call's inputs, an output handed out zeroed among them.
            h.poison(out)
        return reply

    def hand_over(self, out: torch.Tensor | None) -> None:
        """The output's bytes, contiguous, into the judge's buffer, waited for (the judge reads them on
        `done`); a null call's dummy likewise, so both kinds carry the same copy. An output too large for
        the buffer is left out: the judge refuses it."""
        source = self.dummy if out is None else out
        nbytes = _numel(source) * _element_size(source)
        if nbytes <= self.judges.nbytes:
            target = self.judges.tensor[:nbytes]
            _copy(target if out is None else _view(_view(target, out.dtype), out.shape), source)
        self.h.sync()

    def timed_call(self, run: bool) -> tuple[float, float, torch.Tensor | None]:
        """(event us, host us, output) of one call, or of an empty region when not `run`."""
        h = self.h
        call = (lambda: h.invoke(self.work, self.cap, pack=False)) if run else (lambda: None)
        if h.on_gpu:
            event, host, out = gpu_region(call)
            return event, host, h.pack_output(out, self.cap)  # several outputs are packed untimed
        h0 = _perf_counter()
        out = call()
        host = (_perf_counter() - h0) * 1e6
        return host, host, h.pack_output(out, self.cap)

    def finish(self) -> None:
        self.h.watch("timer", None, ())  # nothing holds the buffers once the worker drops this timer
        self.h.sync()
        self.work, self.nested = [], {}
        for mapping in (self.inputs, self.judges):
            if mapping is not None:
                mapping.close()


def _map(handed, nbytes, on_device, ordinal, what: str) -> shared_buffer.Shared:
    """A buffer of the judge's (shared_buffer.py) from the next descriptor it sent: device memory on the
    evaluation's GPU where it says so, host memory otherwise."""
    if type(nbytes) is not int or nbytes <= 0 or handed is None:
        raise Fault("rejected", "malformed prepare command")
    try:
        return shared_buffer.open_fd(shared_buffer.receive_fd(handed), nbytes, ordinal if on_device else None)
    except (shared_buffer.DriverError, OSError, ValueError) as exc:
        raise Fault("runtime_error", f"could not map the judge's {what} buffer: {exc}") from None
