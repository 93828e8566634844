"""The judge's own buffer for timed outputs on the GPU (evaluate/output_buffer.py), in the parts that
run without one: the descriptor's way to the worker, the worker's copy into the buffer, and the
judge's read of it, which must find an output not yet written when the reply came. The GPU half
(the driver's allocation, export and mapping across the worker's namespaces) is in
tests/gpu/test_gpu_outside.py."""

import math
import os
import socket
import types

import pytest
import torch

from kscience.evaluate import output_buffer
from kscience.evaluate.judge import drive
from kscience.evaluate.judge.compare import BLOCK_BYTES
from kscience.evaluate.worker.timing import Timer

WORD = 0x5A3C_71E9 & 0x7FFF_FFFF


def _session(nbytes: int, check=None):
    keep = types.SimpleNamespace(tensor=torch.zeros(nbytes, dtype=torch.uint8), nbytes=nbytes)
    keep.tensor.view(torch.int32).fill_(WORD)  # what the worker writes there as it loads a call's inputs
    return types.SimpleNamespace(keep=keep, fill_word=WORD, problem=types.SimpleNamespace(check=check))


def _write(session, out: torch.Tensor, upto: int | None = None) -> None:
    raw = out.contiguous().view(-1).view(torch.uint8)
    upto = raw.numel() if upto is None else upto
    session.keep.tensor[:upto] = raw[:upto]


def _read(session, shape: list) -> drive.Look:
    """A float32 output of `shape`, read as drive._read reads a timed call's output on the GPU."""
    nbytes = 4 * math.prod(shape)
    return drive._read_own_buffer(session, shape, torch.float32, nbytes, seed=7, kind="timed")


def test_a_descriptor_sent_to_the_worker_is_the_same_open_file():
    judge, worker = socket.socketpair()
    r, w = os.pipe()
    try:
        output_buffer.send_fd(judge, w)
        got = output_buffer.receive_fd(worker)
        assert got != w
        os.write(got, b"k")
        assert os.read(r, 1) == b"k"
        os.close(got)
    finally:
        for fd in (r, w):
            os.close(fd)
        judge.close()
        worker.close()


@pytest.mark.parametrize("count", [0, 2])
def test_a_message_without_exactly_one_descriptor_is_refused_and_leaks_none(count):
    judge, worker = socket.socketpair()
    r, w = os.pipe()
    try:
        before = len(os.listdir("/proc/self/fd"))
        socket.send_fds(judge, [b"k"], [w] * count)
        with pytest.raises(output_buffer.DriverError, match=f"got {count}"):
            output_buffer.receive_fd(worker)
        assert len(os.listdir("/proc/self/fd")) == before  # every descriptor that came was closed
    finally:
        for fd in (r, w):
            os.close(fd)
        judge.close()
        worker.close()


def test_an_output_never_written_is_found_by_the_judges_own_read():
    out = torch.randn(64, 1024)  # 256 KiB: read at sampled blocks
    session = _session(out.numel() * 4)
    with pytest.raises(drive.Unfinished, match="not yet written when its reply came"):
        _read(session, list(out.shape))


def test_an_output_written_in_part_is_found_when_the_part_left_is_read():
    out = torch.randn(4 * BLOCK_BYTES // 4)  # four blocks, read whole where the problem checks it itself
    session = _session(out.numel() * 4, check=lambda *a: (True, ""))
    _write(session, out, upto=3 * BLOCK_BYTES)  # the last block's copy had not landed yet
    with pytest.raises(drive.Unfinished):
        _read(session, list(out.shape))


def test_a_written_output_is_read_as_written():
    out = torch.randn(300, 1000)
    session = _session(out.numel() * 4 + 4096)  # the buffer is rounded up to the driver's granularity
    _write(session, out)
    look = _read(session, list(out.shape))
    flat = out.view(-1).view(torch.uint8)
    assert look.seed == 7 and look.shape == [300, 1000] and look.dtype == "float32"
    assert torch.equal(look.raw, torch.cat([flat[o:o + n] for o, n in look.ranges]))


def test_an_output_larger_than_the_checked_one_is_unreadable():
    session = _session(4096)
    with pytest.raises(drive.Unreadable, match="larger than the checked output"):
        _read(session, [2048])


def test_only_ranges_of_several_words_count_as_unwritten():
    raw = torch.tensor([WORD] * 3, dtype=torch.int32).view(torch.uint8)
    assert not drive.unwritten(raw, [[0, 12]], WORD)  # a tiny output is judged by its values instead
    raw = torch.tensor([1, WORD, WORD, WORD, WORD], dtype=torch.int32).view(torch.uint8)
    assert not drive.unwritten(raw, [[0, 20]], WORD)  # the aligned words [1, WORD, WORD, WORD]: written
    assert drive.unwritten(raw, [[0, 4], [4, 16]], WORD)


def test_the_worker_copies_a_strided_output_whole_into_the_buffer_and_waits_for_it():
    synced = []
    timer = _timer(1 << 16, synced)
    out = torch.randn(64, 32).t()  # not contiguous
    timer.hand_over(out)
    n = out.numel() * 4
    assert torch.equal(timer.judges.tensor[:n].view(torch.float32).view(32, 64), out) and synced
    timer.hand_over(torch.randn(1 << 15))  # larger than the buffer: left out, the judge refuses it
    assert torch.equal(timer.judges.tensor[:n].view(torch.float32).view(32, 64), out)


def _timer(nbytes: int, synced: list) -> Timer:
    timer = object.__new__(Timer)
    timer.h = types.SimpleNamespace(sync=lambda: synced.append(True), outputs=[], l2=None,
                                    restore_nested=lambda work, source: None)
    timer.judges = types.SimpleNamespace(tensor=torch.full((nbytes,), 7, dtype=torch.uint8), nbytes=nbytes)
    timer.copied, timer.work, timer.word = [], [], WORD
    return timer


def test_loading_a_calls_inputs_fills_the_buffer_with_the_judges_word_and_waits():
    synced = []
    timer = _timer(4096, synced)
    timer.load([])
    assert synced and bool((timer.judges.tensor.view(torch.int32) == WORD).all())


def test_a_null_call_writes_the_buffer_and_waits_as_a_timed_call_does():
    synced = []
    timer = _timer(4096, synced)
    timer.hand_over(None)
    assert synced and bool((timer.judges.tensor.view(torch.int32) == WORD).all())
