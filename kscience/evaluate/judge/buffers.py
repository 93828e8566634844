"""The judge's own memory around one shape's timed calls (the trusted side): where each call's inputs
come from, where its output goes, and the cache flush between calls.

* The output buffer (shared_buffer.py): the worker copies each call's output into it before it answers
  `done`; the judge reads it from its own mapping. Before each call the judge fills it with a word of
  its own, so an output not yet written when `done` came still holds that word (`unwritten`).
* The staging buffer, where the shape's inputs can be staged (staging.py): the fixed input tensors the
  candidate sees are views into it, and before each call the judge writes that call's inputs there.
* The flush (GPU): the judge overwrites a buffer of its own, twice the L2, after writing the inputs,
  so every call reads its inputs from memory, whatever the worker does.

All of it runs in `load`, inside the judge's clock for the call, in the judge's own process and CUDA
context, and is the same for a timed and a null call: the worker cannot skip any of it, and none of it
is charged to the candidate, since the judge subtracts what null calls cost (measure.py).
"""

from __future__ import annotations

import os
import secrets

import torch

from kscience.evaluate import shared_buffer, staging
from kscience.evaluate.clocks import cuda_driver, flush_bytes

# A fill word is taken for unwritten where this many aligned words in a row still hold it (a 31-bit
# random word: an honest output holds it four times in a row with odds of 2^-124). Outputs shorter than
# that prove nothing either way and are judged by their values.
UNWRITTEN_WORDS = 4


class ShapeBuffers:
    """One shape's buffers. `ordinal`: the GPU's (None on the CPU); `shared_device`: whether that GPU
    can share device memory (else the output buffer is host memory and nothing is staged); `stage`:
    (skeleton, places, template inputs) where the shape's inputs are staged, else None; `flush`: the
    judge's flush buffer on a GPU."""

    def __init__(self, output_bytes: int, ordinal: int | None, shared_device: bool, stage, flush):
        on_device = ordinal is not None and shared_device
        self.on_device, self.ordinal, self.flush = on_device, ordinal, flush
        self.word = secrets.randbits(31) | 1 << 30  # never a plain zero or -1
        self.out_bytes = output_bytes  # a right output's size, which a null call's dummy has too
        self.output = shared_buffer.create(_round(output_bytes), ordinal if on_device else None)
        self.staging = None
        self.form, self.places, self.views, self.template = None, None, [], []
        try:
            if stage is not None:
                self.form, self.places, template = stage
                self.staging = shared_buffer.create(_round(staging.size_of(self.places)), ordinal if on_device else None)
                self.views = staging.views(self.staging, self.places, template)
                self.template = template
        except BaseException:
            self.close()
            raise
        self._reset_l2 = _l2_reset() if ordinal is not None else None

    @property
    def staged(self) -> bool:
        return self.staging is not None

    def prepare_fields(self) -> dict:
        """What the worker's `prepare` needs to map these buffers (the descriptors go by `send`)."""
        fields = {"output_bytes": self.out_bytes, "output_buffer_bytes": self.output.nbytes,
                  "outputs_on_device": self.on_device, "staged": self.places}
        if self.staging is not None:
            fields.update(staged_bytes=self.staging.nbytes, staged_on_device=self.on_device)
        return fields

    def send(self, sock) -> None:
        """A descriptor of each buffer to the worker, output first (as timing.Timer maps them)."""
        for mapping in (self.output, self.staging):
            if mapping is None:
                continue
            fd = shared_buffer.export(mapping)
            try:
                shared_buffer.send_fd(sock, fd)
            finally:
                os.close(fd)

    def load(self, sources: list[torch.Tensor] | None) -> None:
        """Inside the judge's clock, before a call: persisting L2 lines reset, the call's inputs written
        (`sources`, in staging order; None where the worker builds them), the output buffer filled with
        the word, the L2 flushed after the inputs, and all of it waited for."""
        if self._reset_l2 is not None:
            self._reset_l2()
        if sources is not None:
            staging.write(self.views, sources)
        self.output.tensor[:self.output.nbytes // 4 * 4].view(torch.int32).fill_(self.word)
        if self.ordinal is not None:
            if sources is not None:  # the worker flushes after inputs it built itself (timing.py)
                self.flush.zero_()
            torch.cuda.synchronize()

    def read(self, ranges: list[list[int]]) -> torch.Tensor:
        """The output buffer's bytes at `ranges`, from the judge's own mapping, on the host."""
        flat = self.output.tensor
        return torch.cat([flat[o:o + n] for o, n in ranges]).cpu() if ranges else torch.empty(0, dtype=torch.uint8)

    def unwritten(self, raw: torch.Tensor, ranges: list[list[int]]) -> bool:
        """Whether any UNWRITTEN_WORDS aligned words of the read ranges still hold only the fill word."""
        offset = 0
        for start, n in ranges:
            skip = -start % 4  # the fill is aligned to the buffer, not to the range
            words = max(n - skip, 0) // 4 // UNWRITTEN_WORDS * UNWRITTEN_WORDS
            if words:
                rows = raw[offset + skip:offset + skip + words * 4].view(torch.int32).view(-1, UNWRITTEN_WORDS)
                if bool((rows == self.word).all(1).any()):
                    return True
            offset += n
        return False

    def close(self) -> None:
        self.views, self.template = [], []
        for mapping in (self.staging, self.output):
            if mapping is not None:
                mapping.close()
        self.staging = None


def _round(nbytes: int) -> int:
    return max(-(-nbytes // staging.ALIGN), 1) * staging.ALIGN


def _l2_reset():
    """The driver's reset of persisting L2 lines to normal, from the judge's context (the worker resets
    its own as well); None where there is no such call (ROCm, no driver library)."""
    cuda = cuda_driver()
    reset = getattr(cuda, "cuCtxResetPersistingL2Cache", None) if cuda is not None else None
    if reset is None:
        return None

    return reset  # its result is not weighed: the worker's own reset and its integrity check stand beside it


def flush_buffer(l2_bytes: int) -> torch.Tensor:
    """The judge's flush buffer for a GPU evaluation (clocks.flush_bytes)."""
    return torch.empty(flush_bytes(l2_bytes) // 4, dtype=torch.int32, device="cuda")
