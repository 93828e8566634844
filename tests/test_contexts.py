"""Counting other processes' contexts on a GPU (contexts.py), without a GPU: the driver's count is
faked, the reading of /proc is real."""

import os

import kscience.evaluate.judge.contexts as contexts


def test_a_process_holds_a_file_while_it_has_it_open(tmp_path):
    path = tmp_path / "nvidia0"
    path.write_text("")
    prefix = str(tmp_path / "nvidia")
    with open(path):
        assert contexts.holds(os.getpid(), prefix)
    assert not contexts.holds(os.getpid(), prefix)
    assert not contexts.holds(2**22 + 1, prefix)  # no such process (above the largest pid)


def test_others_are_the_drivers_count_less_the_judge_and_the_worker(monkeypatch):
    monkeypatch.setattr(contexts, "listed", lambda gpu: 4)
    holding = {os.getpid(), 111}  # the judge and the worker's serving process; 222 is a helper without one
    monkeypatch.setattr(contexts, "holds", lambda pid: pid in holding)
    assert contexts.others(0, {111, 222}) == 2
    # A candidate's children that hold the device are the worker's own: never counted as others.
    holding |= {222}
    assert contexts.others(0, {111, 222}) == 1


def test_without_the_drivers_count_the_answer_is_unknown(monkeypatch):
    monkeypatch.setattr(contexts, "_nvml", lambda: None)
    contexts._device.cache_clear()
    assert contexts.listed(0) is None and contexts.others(0, {os.getpid()}) is None
    contexts._device.cache_clear()
