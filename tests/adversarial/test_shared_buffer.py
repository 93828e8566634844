"""The judge's own memory that the worker maps (evaluate/shared_buffer.py, judge/buffers.py), in the parts
that run without a GPU: the descriptor's way to the worker, the host kind (a sealed memfd), the worker's
copy of an output into it, the judge's own write of a call's inputs and fill, and its read, which must
find an output not yet written when `done` came. The device kind (the driver's allocation, export and
mapping across the worker's namespaces) is tested in tests/gpu/test_gpu_outside.py."""

import os
import socket
import types

import pytest
import torch

from kscience.evaluate import shared_buffer, staging
from kscience.evaluate.judge.buffers import ShapeBuffers
from kscience.evaluate.judge.compare import BLOCK_BYTES, sample_ranges
from kscience.evaluate.worker.timing import Timer


def test_a_descriptor_sent_to_the_worker_is_the_same_open_file():
    judge, worker = socket.socketpair()
    r, w = os.pipe()
    try:
        shared_buffer.send_fd(judge, w)
        got = shared_buffer.receive_fd(worker)
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
        with pytest.raises(shared_buffer.DriverError, match=f"got {count}"):
            shared_buffer.receive_fd(worker)
        assert len(os.listdir("/proc/self/fd")) == before  # every descriptor that came was closed
    finally:
        for fd in (r, w):
            os.close(fd)
        judge.close()
        worker.close()


def test_host_memory_is_shared_both_ways_and_cannot_change_size():
    judges = shared_buffer.create(4096, None)
    workers = shared_buffer.open_fd(shared_buffer.export(judges), 4096, None)
    try:
        judges.tensor[:4] = torch.tensor([1, 2, 3, 4], dtype=torch.uint8)
        assert workers.tensor[:4].tolist() == [1, 2, 3, 4]
        workers.tensor[100] = 9  # the worker's copy of an output lands in the judge's mapping
        assert int(judges.tensor[100]) == 9
        fd = shared_buffer.export(judges)
        try:
            with pytest.raises(PermissionError):  # sealed: the judge's reads of its mapping can never fault
                os.ftruncate(fd, 0)
        finally:
            os.close(fd)
    finally:
        workers.close()
        judges.close()


def test_a_worker_asking_for_more_than_the_judge_made_is_refused():
    judges = shared_buffer.create(4096, None)
    try:
        with pytest.raises(shared_buffer.DriverError, match="holds 4096 bytes, not 8192"):
            shared_buffer.open_fd(shared_buffer.export(judges), 8192, None)
    finally:
        judges.close()


def _buffers(out_bytes: int, data=None) -> ShapeBuffers:
    stage = None
    if data is not None:
        form, _ = staging.stageable(data, "cpu")
        leaves = staging.leaves(data)
        stage = (form, staging.places(leaves), leaves)
    return ShapeBuffers(out_bytes, None, False, stage, None)


def test_the_judges_load_writes_the_inputs_and_fills_its_output_buffer():
    data = [torch.randn(8, 16), {"w": torch.randn(5, 3).t(), "n": 3}]
    buffers = _buffers(1024, data)
    try:
        new = [torch.randn(8, 16), torch.randn(5, 3).t()]
        buffers.load(new)
        assert all(torch.equal(v, n) for v, n in zip(buffers.views, new))
        assert bool((buffers.output.tensor.view(torch.int32) == buffers.word).all())
    finally:
        buffers.close()


def test_an_output_never_written_is_found_by_the_judges_own_read():
    buffers = _buffers(256 << 10)
    try:
        buffers.load(None)
        ranges = sample_ranges(256 << 10, 8)
        assert buffers.unwritten(buffers.read(ranges), ranges)
    finally:
        buffers.close()


def test_an_output_written_in_part_is_found_when_the_part_left_is_read():
    buffers = _buffers(4 * BLOCK_BYTES)
    try:
        buffers.load(None)
        buffers.output.tensor[:3 * BLOCK_BYTES] = 7  # the last block's copy had not landed yet
        ranges = [[0, 4 * BLOCK_BYTES]]
        assert buffers.unwritten(buffers.read(ranges), ranges)
        assert not buffers.unwritten(buffers.read([[0, 3 * BLOCK_BYTES]]), [[0, 3 * BLOCK_BYTES]])
    finally:
        buffers.close()


def test_only_runs_of_several_words_count_as_unwritten():
    buffers = _buffers(1024)
    try:
        word = buffers.word
        raw = torch.tensor([word] * 3, dtype=torch.int32).view(torch.uint8)
        assert not buffers.unwritten(raw, [[0, 12]])  # a tiny output is judged by its values instead
        raw = torch.tensor([1, word, word, word, word], dtype=torch.int32).view(torch.uint8)
        assert not buffers.unwritten(raw, [[0, 20]])  # the aligned words [1, word, word, word]: written
        assert buffers.unwritten(raw, [[0, 4], [4, 16]])
    finally:
        buffers.close()


def _timer(nbytes: int, synced: list) -> Timer:
    timer = object.__new__(Timer)
    timer.h = types.SimpleNamespace(sync=lambda: synced.append(True))
    timer.judges = types.SimpleNamespace(tensor=torch.full((nbytes,), 7, dtype=torch.uint8), nbytes=nbytes)
    timer.dummy = torch.zeros(nbytes, dtype=torch.uint8)
    return timer


def test_the_worker_copies_a_strided_output_whole_into_the_buffer_and_waits_for_it():
    synced = []
    timer = _timer(1 << 16, synced)
    out = torch.randn(64, 32).t()  # not contiguous
    timer.hand_over(out)
    n = out.numel() * 4
    assert torch.equal(timer.judges.tensor[:n].view(torch.float32).view(32, 64), out) and synced
    timer.hand_over(torch.randn(1 << 15))  # larger than the buffer: left out, the judge refuses it
    assert torch.equal(timer.judges.tensor[:n].view(torch.float32).view(32, 64), out)


def test_a_null_call_copies_a_dummy_of_the_buffers_size_and_waits_as_a_timed_call_does():
    synced = []
    timer = _timer(4096, synced)
    timer.hand_over(None)
    assert synced and bool((timer.judges.tensor == 0).all())
