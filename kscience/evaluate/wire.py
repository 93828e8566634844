"""The channel between the trusted judge and an untrusted worker: framed JSON and raw bytes.

A frame is an 8-byte little-endian length followed by that many bytes. Nothing from the
worker is ever unpickled: a candidate that controls the worker could otherwise run code in
the trusted process. Tensors travel as a JSON header plus a frame of raw bytes, rebuilt only
for dtypes on an allow-list and only at the size the header promised.

The judge reads with a deadline and a size cap on every frame, so a worker that announces a
frame and then stalls, or announces an enormous one, can neither hang nor bloat the trusted
process; and it measures a JSON frame's nesting before parsing it, so 200,000 nested brackets
are a protocol violation rather than a RecursionError in the judge. The worker side uses plain
blocking descriptors.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import select
import struct
import time
from typing import Callable

import numpy
import torch

DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn,
    torch.float8_e4m3fnuz, torch.float8_e5m2, torch.float8_e5m2fnuz, torch.int64, torch.int32,
    torch.int16, torch.int8, torch.uint8, torch.bool)}

_LENGTH = struct.Struct("<Q")
Deadline = float | Callable[[], float]  # a monotonic time, or a function giving the current one
MAX_JSON_BYTES = 8 * 2**20  # a timing reply with thousands of floats is well under this
MAX_JSON_DEPTH = 16  # kscience's messages nest at most three deep
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')  # brackets inside strings are not nesting
_CHUNK = 1 << 20
PIPE_BYTES = 1 << 20  # an unprivileged process may ask for up to /proc/sys/fs/pipe-max-size, 1 MiB by default
_POLL_SLICE_S = 0.25  # how often a blocked read looks at whether the worker is still alive


class ProtocolError(Exception):
    """The peer sent something that is not a well-formed frame or message."""


class ChannelTimeout(Exception):
    """The deadline passed before a whole frame arrived (or could be written)."""


def wire_dtype(dtype: torch.dtype) -> str | None:
    """The name a dtype travels under, or None when it may not cross the channel."""
    name = str(dtype).removeprefix("torch.")
    return name if name in DTYPES else None


def widen_pipe(fd: int) -> None:
    """Give a pipe PIPE_BYTES of buffer where the kernel allows it (Linux's default is 64 KiB):
    a large output then crosses in a few reads and writes instead of thousands."""
    with contextlib.suppress(OSError, AttributeError):
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)


class Channel:
    """One read descriptor and one write descriptor carrying length-prefixed frames."""

    def __init__(self, read_fd: int, write_fd: int, nonblocking: bool):
        self.read_fd, self.write_fd = read_fd, write_fd
        self.nonblocking = nonblocking
        if nonblocking:
            os.set_blocking(read_fd, False)
            os.set_blocking(write_fd, False)

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)

    # --- writing -----------------------------------------------------------------------------
    def send(self, payload, deadline: Deadline = math.inf) -> None:
        view = memoryview(payload).cast("B")
        self._write_all(memoryview(_LENGTH.pack(view.nbytes)), deadline)
        self._write_all(view, deadline)

    def _write_all(self, view: memoryview, deadline: Deadline) -> None:
        while view.nbytes:
            try:
                n = os.write(self.write_fd, view[:_CHUNK])
            except BlockingIOError:  # only a non-blocking descriptor says so: wait until there is room
                self._wait(self.write_fd, select.POLLOUT, deadline, None)
                continue
            view = view[n:]

    # --- reading -----------------------------------------------------------------------------
    def recv(self, max_bytes: int, deadline: Deadline = math.inf, alive: Callable[[], bool] | None = None) -> bytearray:
        """One frame's payload. EOFError when the peer is gone; ProtocolError when it is too big."""
        (length,) = _LENGTH.unpack(self._read_exact(_LENGTH.size, deadline, alive))
        if length > max_bytes:
            raise ProtocolError(f"a frame of {length} bytes exceeds the {max_bytes}-byte limit")
        return self._read_exact(length, deadline, alive)

    def _read_exact(self, n: int, deadline: Deadline, alive) -> bytearray:
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            try:  # read first and wait only when the pipe is empty: a big tensor arrives pipe-full by pipe-full
                k = os.readv(self.read_fd, [view[got:got + _CHUNK]])
            except BlockingIOError:
                self._wait(self.read_fd, select.POLLIN, deadline, alive)
                continue
            if k == 0:
                raise EOFError("channel closed")
            got += k
        return buf

    @staticmethod
    def _wait(fd: int, event: int, deadline: Deadline, alive) -> None:
        """Until `fd` is ready. `deadline`: a monotonic time, or a function giving it, asked at every
        look (the judge moves a step's deadline on while the worker builds: judge/builds.py)."""
        poller = select.poll()
        poller.register(fd, event | select.POLLHUP | select.POLLERR)
        while True:
            left = (deadline() if callable(deadline) else deadline) - time.monotonic()
            if left <= 0:
                raise ChannelTimeout("deadline passed")
            if poller.poll(min(left, _POLL_SLICE_S) * 1000):
                return
            if alive is not None and not alive():
                # The worker is dead yet nothing arrived: descendants it left may still hold the
                # pipe open, so waiting for end-of-file could take forever.
                raise EOFError("worker gone")


def send_json(ch: Channel, obj: dict, deadline: Deadline = math.inf) -> None:
    ch.send(json.dumps(obj).encode(), deadline)


def json_depth(raw: bytes) -> int:
    """How deep a JSON text's brackets nest, counted without a parser (which would recurse).
    Exact for anything nested beyond MAX_JSON_DEPTH; within it, possibly an overestimate."""
    openers = raw.count(b"[") + raw.count(b"{")
    if openers <= MAX_JSON_DEPTH:  # kscience's own messages: no need to look closer
        return openers
    chars = numpy.frombuffer(_JSON_STRING.sub(b'""', bytes(raw)), dtype=numpy.uint8)
    opens = (chars == ord("[")) | (chars == ord("{"))
    closes = (chars == ord("]")) | (chars == ord("}"))
    return int(numpy.cumsum(opens.astype(numpy.int64) - closes).max(initial=0))


def recv_json(ch: Channel, deadline: Deadline = math.inf, alive=None) -> dict:
    raw = ch.recv(MAX_JSON_BYTES, deadline, alive)
    if (depth := json_depth(raw)) > MAX_JSON_DEPTH:
        raise ProtocolError(f"malformed message: nested {depth} deep (at most {MAX_JSON_DEPTH})")
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ProtocolError(f"malformed message: {type(exc).__name__}: {str(exc)[:120]}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("malformed message: not a JSON object")
    return obj


_detach = torch.Tensor.detach  # through the class: an attribute set on a candidate's tensor is never called


def host_copy(flat: torch.Tensor) -> memoryview:
    """A private host copy of a flat uint8 tensor's bytes (the worker side). From a GPU the copy
    lands in page-locked memory: a pageable copy of an 88 MB output took 60-70 ms on an H100
    host, several times the bus's speed, and an evaluation copies hundreds of outputs."""
    if not flat.numel():
        return memoryview(b"")
    if flat.device.type == "cpu":
        return memoryview(flat.clone().numpy())
    try:
        host = torch.empty(flat.numel(), dtype=torch.uint8, pin_memory=True)
    except RuntimeError:  # no page-locked memory to be had: the pageable copy is as correct
        return memoryview(flat.to("cpu", copy=True).numpy())
    host.copy_(flat)
    return memoryview(host.numpy())


def tensor_bytes(t: torch.Tensor) -> tuple[dict, memoryview]:
    """A plain tensor's header and a private host copy of its bytes (the worker side)."""
    t = _detach(t).contiguous()
    return {"dtype": wire_dtype(t.dtype), "shape": list(t.shape)}, host_copy(t.reshape(-1).view(torch.uint8))


def ranges_bytes(t: torch.Tensor, ranges: list) -> tuple[dict, memoryview]:
    """A tensor's header and a host copy of its bytes at the judge's [offset, length] ranges.
    Ranges past the end come back short, which the judge treats as a wrong-sized tensor."""
    flat = _detach(t).contiguous().reshape(-1).view(torch.uint8)
    picked = torch.cat([flat[int(o):int(o) + int(n)] for o, n in ranges]) if ranges else flat[:0]
    return {"dtype": wire_dtype(t.dtype), "shape": list(t.shape)}, host_copy(picked)


def send_tensor(ch: Channel, header: dict, raw: memoryview) -> None:
    send_json(ch, header)
    ch.send(raw)


def recv_tensor(ch: Channel, max_bytes: int, deadline: Deadline = math.inf, alive=None) -> tuple[dict, torch.Tensor]:
    """(header, tensor) from the worker; any inconsistency is a ProtocolError."""
    head = recv_json(ch, deadline, alive)
    dtype = DTYPES.get(str(head.get("dtype")))
    shape = head.get("shape")
    if dtype is None or not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
        raise ProtocolError(f"bad tensor header: {str(head)[:200]}")
    numel = math.prod(shape)
    itemsize = torch.empty((), dtype=dtype).element_size()
    if numel * itemsize > max_bytes:
        raise ProtocolError(f"a tensor of shape {shape} is larger than any answer could be")
    data = ch.recv(numel * itemsize, deadline, alive)
    if len(data) != numel * itemsize:
        raise ProtocolError(f"tensor of shape {shape} {dtype} came with {len(data)} bytes")
    if numel == 0:
        return head, torch.empty(shape, dtype=dtype)
    return head, torch.frombuffer(data, dtype=torch.uint8).view(dtype).reshape(shape)


def recv_ranges(ch: Channel, n_bytes: int, deadline: Deadline = math.inf, alive=None) -> tuple[dict, torch.Tensor]:
    """(header, flat uint8 bytes) of a tensor read at ranges totalling exactly `n_bytes`."""
    head = recv_json(ch, deadline, alive)
    if str(head.get("dtype")) not in DTYPES or not isinstance(head.get("shape"), list):
        raise ProtocolError(f"bad tensor header: {str(head)[:200]}")
    data = ch.recv(n_bytes, deadline, alive)
    if len(data) != n_bytes:
        return head, torch.empty(0, dtype=torch.uint8)  # short: the tensor was not the size expected
    return head, torch.frombuffer(data, dtype=torch.uint8) if n_bytes else torch.empty(0, dtype=torch.uint8)
