"""No full garbage collection inside the judge's brackets: a process that compiled with
torch.compile holds hundreds of thousands of objects, and one collection walking them adds its
pause to a single bracket, which the judge's estimate (a difference of brackets) then carries."""

import gc

from kscience.evaluate.judge import drive
from kscience.evaluate.result import OK

from fake_clock import FakeBuffers, FakeClock, FakeSession


def test_the_worker_freezes_what_exists_before_its_timed_calls(judge):
    result = judge("""
        import gc
        import sys

        def _timed():
            f = sys._getframe(1)
            while f is not None and f.f_code.co_name != "timed_call":
                f = f.f_back
            return f is not None

        def custom_kernel(data):
            if _timed():
                print("frozen objects:", gc.get_freeze_count(), flush=True)
            return honest(data[0])
        """, shapes="benchmarks")
    assert result.status == OK, result.message
    counts = [int(line.split(":")[1]) for line in result.stdout_tail.splitlines() if line.startswith("frozen")]
    assert counts and min(counts) > 10_000  # torch alone is tens of thousands of objects


class _Session(FakeSession):
    """Answers every call at once and notes whether the collector could run meanwhile."""

    def ask(self, cmd, phase, shape):
        super().ask(cmd, phase, shape)
        self.collecting.append(gc.isenabled())


def test_the_judge_collects_no_garbage_while_it_drives_timed_calls():
    session = _Session(FakeClock(), lambda n: 0.0)
    session.collecting = []
    plan = drive.Plan(warmup=0, nulls=2, min_n=3, max_n=3, max_seconds=1.0, target_rse=1.0, checks=0,
                      few_n=3, enough_s=1.0)
    assert gc.isenabled()
    calls, _ = drive.run_calls(session, {}, plan, FakeBuffers(staged=False), used=set(), out_bytes=1024)
    assert len(calls) == 5 and session.collecting and not any(session.collecting)
    assert gc.isenabled()
