"""One evaluation's conversation with its disposable worker, seen from the trusted side.

A `Session` owns the worker and the channel to it: it sends commands, reads replies within each
phase's limit, builds inputs and computes answers, and times a shape (judge-driven calls, stopped
by the median's precision); checking.py compares what comes back with the answers. Every reply
must carry the sequence number of the command it answers and arrive within the phase's limit;
anything else on the channel is a rejection. Anything wrong ends the
evaluation with a `Verdict`, which `evaluation.evaluate` turns into the result. Times the worker
reports are believed only after the checks in `crosscheck`.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable

import torch

from kscience.device import Device
from kscience.evaluate import result as R
from kscience.evaluate import shared_buffer, staging
from kscience.evaluate.judge import checking, contexts, crosscheck, drive, measure
from kscience.evaluate.judge.buffers import ShapeBuffers, flush_buffer
from kscience.evaluate.judge.builds import Builds
from kscience.evaluate.judge.compare import BLOCK_BYTES, sample_ranges
from kscience.evaluate.judge.driving import Look
from kscience.evaluate.judge.input_sets import InputSets
from kscience.evaluate.judge.phases import Phases, doing
from kscience.evaluate.judge.verdict import Verdict
from kscience.evaluate.sandbox.spares import spares_held, start_worker
from kscience.evaluate.sandbox.workers import default_rss_limit
from kscience.evaluate.wire import ChannelTimeout, ProtocolError, recv_json, recv_ranges, recv_tensor, send_json
from kscience.problems import Problem, shape_label
from kscience.redact import redact

# Phase limits in seconds: (GPU, CPU interpreter). The interpreter is orders of magnitude slower.
LIMITS = {"start": (120.0, 120.0), "pristine": (120.0, 300.0), "import": (120.0, 120.0), "check": (60.0, 300.0),
          "time": (120.0, 300.0)}
# Steps that run no candidate code (the worker starting and loading the problem, its null calls before the
# import): the step limit, which bounds the candidate, does not apply to them.
HARNESS_STEPS = ("start", "pristine")
TARGET_RSE = 0.005  # stop timing a shape once the median's relative standard error is below 0.5%
TIME_CAP_S = (0.5, 2.0)  # most seconds of timed calls per shape, by the judge's brackets
MIN_N, MAX_N = (10, 3), (2000, 20)
WARMUP = (3, 1)
NULLS = (6, 5)  # calls per shape that do nothing: what the judge's clock sees around no work
PRISTINE_NULLS = (30, 5)  # and before the import, on a worker that holds no candidate code (measure.py)
CHECKS = (3, 3)  # timed calls read and rechecked per shape: about CHECKS * (1 + ln(n / CHECKS)) of n
WARM_SETS = 2  # input sets the warm-up cycles through (never timed); one where a build is slow (input_sets.py)
# A shape whose calls take seconds (GPU MODE's linalg: 9.6 s per call of an eigendecomposition of
# 640 matrices on an H100) is timed as GPU MODE's own eval.py times it: the correctness call just
# made on that shape is its warm-up, and timing stops after FEW_N calls once they add up to ENOUGH_S.
SLOW_CALL_S = 1.0
FEW_N, ENOUGH_S = 3, 10.0
# A shape whose calls cost mostly the building of their inputs (the judge's own build time at least
# drive.BUILT_SHARE of the median timed bracket: GPU MODE's sort builds 10,000 rows from Python for
# a sort of 5 ms) is timed with this many calls and null calls at the least (GPU, CPU): each timed call
# costs a build.
BUILT_N, BUILT_NULLS = (3, MIN_N[1]), (3, NULLS[1])
# The judge builds each timed shape's inputs up to this many times before the import, the least
# counting (the first pays for loading kernels, milliseconds), and no more once BUILDS_S have passed:
# one build of a second or more is mostly its own work.
BUILDS, BUILDS_S = 3, 1.0
# Where a build is slow those sets are held and used later (input_sets.py).
BYE_WAIT_S = 10.0


class Session:
    """One evaluation: a worker, its channel, its limits and the clock that runs out."""

    def __init__(self, problem: Problem, device: Device, gpu: int | None, timeout_s: float | None,
                 keep_spare: bool, step_limit_s: float | None = None, on_phase: Callable[[str], None] | None = None,
                 build_limit_s: float | None = None):
        self.problem, self.device, self.gpu = problem, device, gpu
        self.phases = Phases(on_phase)  # where its seconds go, and what it is doing now
        self.cpu = int(device.interpreted)
        self.deadline = time.monotonic() + timeout_s if timeout_s else math.inf
        self.worker = start_worker(gpu, device.interpreted, default_rss_limit(), keep_spare)
        self.ranges: list[list[list[int]]] = []  # byte ranges of the last `sample` command
        self.worker_info: dict = {}
        self.last_reply: dict = {}  # the worker's last in-order reply (a failed import's names its sandbox)
        self.seq = 0
        self.used_seeds: set[int] = set()  # every seed sent to the worker: no content is ever sent twice
        self.timeout_s, self.step_limit_s = timeout_s, step_limit_s
        self.phase_limit, self.phase_end, self.by_deadline, self.by_step = 0.0, math.inf, False, False
        # Compilers running in the worker let a step run on past its limit, up to the build limit (builds.py)
        self.builds = Builds(self.worker.pids, build_limit_s or R.BUILD_LIMIT_S)
        self.imported = False  # the worker said it imported the candidate: its builds are done
        self.builds_us: dict[str, float] = {}  # by shape label: the judge's own time to build its inputs
        self.sets = InputSets()  # sets built ahead, each for one command (input_sets.py)
        self.check_call_s = 0.0  # the judge's clock around the last correctness call, the worker's input build included
        self.output_bytes = 0  # the size of the last checked output: the timed calls' outputs must have it
        self.pristine: dict[str, crosscheck.Empty] = {}  # by shape label: null calls before the import
        self.inputs_said: dict[str, str] = {}  # by shape label: how its timed calls get their inputs
        # Whether the judge's memory that the worker maps (shared_buffer.py) can be device memory: decided
        # here, from the judge's own driver, before any candidate code exists. Where not (the CPU; a GPU
        # without the driver's virtual-memory API), outputs go through host memory and nothing is staged.
        self.ordinal = None if self.cpu else torch.cuda.current_device()
        self.shared_device = self.ordinal is not None and shared_buffer.supported(self.ordinal)
        self.flush = None if self.cpu else flush_buffer(device.l2_bytes)  # the judge's own flush (buffers.py)

    # --- the channel -------------------------------------------------------------------------
    def ask(self, cmd: dict, phase: str, shape: dict | None = None, limit_s: float | None = None) -> None:
        """Send a command; its replies must arrive before the phase's limit (or `limit_s`) runs out, or
        the step limit where that is shorter. Seconds a compiler runs in the worker do not count
        against either, up to the build limit (`_deadline`)."""
        self.seq += 1
        limit_s = LIMITS[phase][self.cpu] if limit_s is None else limit_s
        self.by_step = bool(self.step_limit_s) and self.step_limit_s < limit_s and phase not in HARNESS_STEPS
        limit_s = self.step_limit_s if self.by_step else limit_s
        now = time.monotonic()
        left = self.deadline - now
        self.by_deadline = left < limit_s  # the evaluation's own limit, not the phase's, runs out first
        self.phase_limit = max(min(limit_s, left), 0.0)
        self.phase_end = now + self.phase_limit
        self.builds.step(now)
        with self._channel_errors(phase, shape):
            send_json(self.worker.channel, dict(cmd, seq=self.seq), self._deadline)

    def _deadline(self) -> float:
        """When the current step runs out (`Builds.step_end`: its limit, moved on while a compiler runs in
        the worker), the evaluation's own limit regardless. The channel asks at every look (wire.py)."""
        return min(self.builds.step_end(self.phase_end, time.monotonic()), self.deadline)

    def reply(self, phase: str, shape: dict | None = None, expect: str = "ok") -> dict:
        with self._channel_errors(phase, shape):
            msg = recv_json(self.worker.channel, self._deadline, self.worker.alive)
        self._in_order(msg, phase, shape)
        self.last_reply = msg
        if msg.get("status") != expect:
            status = msg.get("status") if msg.get("status") in R.STATUSES[1:] else R.REJECTED
            raise Verdict(status, R.bounded(redact(str(msg.get("message", f"unexpected reply {str(msg)[:80]}"))), 1000),
                          shape)
        return msg

    def tensor(self, phase: str, shape: dict, max_bytes: int) -> torch.Tensor:
        with self._channel_errors(phase, shape):
            head, t = recv_tensor(self.worker.channel, max_bytes, self._deadline, self.worker.alive)
        self._in_order(head, phase, shape)
        return t

    def sample(self, phase: str, shape: dict, like: list[torch.Tensor], whole: bool = False,
               blocks: int | None = None, edges: bool = False) -> list[torch.Tensor | None]:
        """The worker's held tensors at byte ranges drawn now (kept in `self.ranges`), one per
        tensor in `like`, which gives the dtype and shape each must have; None where it has not.
        `whole`: every byte, not a sample; `blocks`: how many blocks (see compare.sample_ranges);
        `edges`: the first tensor's first and last blocks too (where partial tiles go wrong)."""
        sizes = [t.numel() * t.element_size() for t in like]
        self.ranges = [([[0, n]] if n else []) if whole else sample_ranges(n, blocks) for n in sizes]
        if edges and sizes and self.ranges[0] != [[0, sizes[0]]]:
            self.ranges[0] = _with_edges(self.ranges[0], sizes[0])
        # Everything the candidate started except the process that answers stays stopped while
        # the held tensors are read, so no process it left running can change them meanwhile.
        with self.worker.frozen(keep_serving=True):
            return self._sampled(phase, shape, like)

    def _sampled(self, phase: str, shape: dict, like: list[torch.Tensor]) -> list[torch.Tensor | None]:
        self.ask({"cmd": "sample", "ranges": self.ranges}, phase, shape)
        looks = []
        for t, ranges in zip(like, self.ranges):
            with self._channel_errors(phase, shape):
                head, raw = recv_ranges(self.worker.channel, sum(n for _, n in ranges), self._deadline,
                                        self.worker.alive)
            self._in_order(head, phase, shape)
            right = head.get("dtype") == str(t.dtype).removeprefix("torch.") and head.get("shape") == list(t.shape)
            looks.append(raw if right and raw.numel() == sum(n for _, n in ranges) else None)
        return looks

    def _in_order(self, msg: dict, phase: str, shape) -> None:
        if msg.get("seq") != self.seq:
            self.worker.kill()
            raise Verdict(R.REJECTED, f"out-of-order message on the result channel during {phase}", shape)

    @contextlib.contextmanager
    def _channel_errors(self, phase: str, shape):
        try:
            yield
        except ChannelTimeout:
            self.worker.kill()
            raise Verdict(R.TIMEOUT, self._timeout_text(phase), shape) from None
        except ProtocolError as exc:
            self.worker.kill()
            raise Verdict(R.REJECTED, f"broken protocol on the result channel during {phase}: {exc}", shape) from None
        except (EOFError, OSError):
            raise Verdict(R.CRASHED, f"{self._death()} during {phase}", shape) from None

    def _timeout_text(self, phase: str) -> str:
        """Which limit ran out, as it was set, and in which phase: "the evaluation's 3 s limit ran out
        while timing", never the seconds that happened to be left of it."""
        what, b = doing(phase), self.builds
        if b.ran_out(what):
            return b.ran_out(what)
        built = f" (after {b.step_seconds:.0f} s of building, which the limit does not count)" if b.step_seconds >= 1 else ""
        if self.by_deadline:
            return f"timed out: the evaluation's {_seconds(self.timeout_s)} limit ran out while {what}{built}"
        if self.by_step:
            return (f"timed out: the {_seconds(self.phase_limit)} limit per step set for this evaluation ran out "
                    f"while {what}{built}")
        return f"timed out: the judge's {_seconds(self.phase_limit)} limit for {what} ran out{built}"

    def _death(self) -> str:
        self.worker.kill()
        return self.worker.memory_cap_hit() or self.worker.exit_description()

    def echo(self) -> None:
        """One round trip before the job: the worker is up and answering (a spare has been for a while)."""
        self.ask({"cmd": "echo"}, "start")
        self.reply("start", expect="echo")

    def finish(self) -> None:
        """The closing handshake: the next message must be the acknowledgement of `bye`."""
        self.ask({"cmd": "bye"}, "closing", limit_s=BYE_WAIT_S)
        self.reply("closing", expect="bye")

    # --- answers -----------------------------------------------------------------------------
    def inputs(self, seed: int, shape: dict) -> list:
        """One set of `shape`'s inputs, finished: building them on the GPU (queued work) must not run on
        into the bracket of the call that gets them, which a null call's bracket would not hold."""
        with self.phase("inputs"):
            data = list(self.problem.generate_input(seed, self.device.torch_device, **shape))
            if not self.cpu:
                torch.cuda.synchronize()
            return data

    def build_us(self, shape: dict) -> float:
        """The judge's own least time to build `shape`'s inputs and copy them once, as it does for every
        timed call it stages, measured before the candidate is imported (judge/evaluation.py), so no
        candidate code can have slowed it: it decides which shapes' calls are mostly their builds
        (drive.BUILT_SHARE) and which shapes' sets are worth holding (input_sets.py)."""
        key = shape_label(shape)
        if key not in self.builds_us:
            best, stop = math.inf, time.monotonic() + BUILDS_S
            for _ in range(BUILDS):
                t0 = time.perf_counter()
                seed = drive.new_seed(self.used_seeds)
                data = self.inputs(seed, shape)
                for t in data:
                    if isinstance(t, torch.Tensor):
                        t.clone()  # staging copies each set once
                if not self.cpu:
                    torch.cuda.synchronize()
                took = time.perf_counter() - t0
                best = min(best, took)
                self.sets.keep(key, seed, data, took)
                if time.monotonic() > stop:
                    break
            self.builds_us[key] = best * 1e6
            self.sets.settle(key, best)
        return self.builds_us[key]

    def expected(self, data: list) -> torch.Tensor:
        """The answer, computed here and nowhere else."""
        with self.phase("reference"):
            return self.problem.ref_kernel(self.problem.call_data(data))

    def give_back_memory(self) -> None:
        """This process's allocator cache back to the GPU, before the worker runs on it: a
        reference can leave tens of GiB there (docs/evaluation.md, "The allocator's cache")."""
        if not self.cpu:
            torch.cuda.empty_cache()

    # --- timing ------------------------------------------------------------------------------
    def buffers_for(self, shape: dict, output_bytes: int, staged: bool = True) -> ShapeBuffers:
        """The judge's buffers for timing `shape` (buffers.py), its inputs staged where they can be."""
        stage, why = None, "built by the worker from a seed: the judge cannot share device memory here"
        if staged and (self.cpu or self.shared_device):
            seed = drive.new_seed(self.used_seeds)
            template = self.inputs(seed, shape)
            form, why = staging.stageable(template, self.device.torch_device)
            if form is not None:
                leaves = staging.leaves(template, staging.poisoned(self.problem))
                stage, why = (form, staging.places(leaves), leaves), "staged by the judge"
            else:
                why = f"built by the worker from a seed: {why}"
        elif not staged:
            why = "built by the worker from a seed: a set of its inputs had another form than the first"
        self.inputs_said[shape_label(shape)] = why
        try:
            return ShapeBuffers(output_bytes, self.ordinal, self.shared_device, stage, self.flush)
        except (shared_buffer.DriverError, OSError) as exc:  # most likely a GPU the worker filled
            raise Verdict(R.REJECTED, f"the judge could not allocate its buffers for the timed calls: {exc}",
                          shape) from None

    def pristine_nulls(self, shape: dict) -> None:
        """Null calls of `shape` on the worker before the candidate is imported (`pristine`): what an empty
        call costs where no candidate code can bend it. Their output is a dummy of the answer's size."""
        with self.phase("reference"):
            size = checking.answer_or_size(self, self.inputs(drive.new_seed(self.used_seeds), shape), shape)
        out_bytes = size.numel() * size.element_size()
        del size
        self.give_back_memory()
        plan = drive.Plan(0, PRISTINE_NULLS[self.cpu], 0, 0, math.inf, TARGET_RSE, 0, 0, ENOUGH_S)
        buffers = self.buffers_for(shape, out_bytes)
        try:
            with spares_held(self.worker):  # as while the shape is timed
                rnd = self._pristine_round(shape, plan, buffers, out_bytes)
        finally:
            buffers.close()
        self.pristine[shape_label(shape)] = crosscheck.Empty.of([c.window_us for c in rnd])

    def _pristine_round(self, shape: dict, plan: drive.Plan, buffers: ShapeBuffers, out_bytes: int) -> list:
        buffers.send(self.worker.fd_socket)
        self.ask(dict(buffers.prepare_fields(), cmd="prepare", shape=shape, seeds=[drive.new_seed(self.used_seeds)],
                      warmup=0, max_output_bytes=max(out_bytes, 1)), "pristine", shape)
        self.reply("pristine", shape)
        saved, self.output_bytes = self.output_bytes, out_bytes
        try:
            calls, _ = drive.run_calls(self, shape, plan, buffers, self.used_seeds, out_bytes, phase="pristine")
        finally:
            self.output_bytes = saved
        return calls

    def time(self, res: R.ShapeResult, cap: int) -> None:
        """Time a checked benchmark shape into `res` (measure.py), or end with a Verdict."""
        c = self.cpu
        build_us, key = self.build_us(res.shape), shape_label(res.shape)
        # the correctness call just made on this shape, less building its inputs inside that call
        slow = not c and self.check_call_s - build_us / 1e6 > SLOW_CALL_S
        ready = []  # the sets left of those built before the import go to the first timed calls
        while (kept := self.sets.take(key)) is not None:
            ready.append(kept)
            self.sets.sent[kept[0]] = kept[1]
        warm_sets = 1 if key in self.sets.slow else WARM_SETS  # a second warm-up set would cost a slow build
        plan = drive.Plan(0 if slow else WARMUP[c], NULLS[c], MIN_N[c], MAX_N[c], TIME_CAP_S[c], TARGET_RSE,
                          CHECKS[c], FEW_N if not c else MIN_N[c], ENOUGH_S, ready, build_us,
                          BUILT_N[c], BUILT_NULLS[c])
        self.give_back_memory()  # what checking the shape left in this process's allocator
        pristine = self.pristine.get(key, crosscheck.Empty.of([]))
        floor = self.device.floor_seconds(self.problem.flops(**res.shape), self.problem.bytes_moved(**res.shape),
                                          self.problem.precision) * 1e6
        staged = True
        while True:
            buffers = self.buffers_for(res.shape, self.output_bytes, staged)
            try:
                with spares_held(self.worker):
                    problem = measure.time_shape(self, res, cap, plan, warm_sets, buffers, pristine, floor)
                break
            except drive.Restage:
                if not staged:
                    raise
                staged = False  # this shape's calls are built by the worker, from seeds
            except drive.Unreadable as exc:
                raise Verdict(R.WRONG_ANSWER, str(exc), res.shape) from None
            except drive.Unfinished as exc:
                self.worker.kill()
                raise Verdict(R.REJECTED, str(exc), res.shape) from None
            finally:
                buffers.close()
                self.sets.sent.clear()  # held sets no read asked for
        res.inputs = self.inputs_said.get(key, "")
        if problem:
            raise Verdict(R.REJECTED, problem, res.shape)
        res.floor_us = floor or None
        problem = crosscheck.floor_problem(res.time_us, floor)  # events below it were not taken (measure.py)
        if problem:  # the judge's own estimate, within its precision of the floor: the floor is what it allows
            res.message = "; ".join(m for m in (res.message, f"the judge's estimate of {res.time_us:,.2f} us lay below "
                                                f"the physical floor: the floor is recorded") if m)
            res.time_us = floor

    def hold_for_recheck(self, shape: dict, seed: int, data: list) -> None:
        """A read timed call's inputs, kept for its recheck where the shape's builds are slow and they fit
        (input_sets.py); elsewhere the recheck builds them again from the seed."""
        if self.sets.room(shape_label(shape)):
            self.sets.sent[seed] = data

    def others_on_gpu(self) -> int | None:
        """Contexts on this evaluation's GPU that neither the judge nor the worker holds (see
        contexts.py); None where that cannot be known."""
        if self.gpu is None or self.device.interpreted:
            return None
        return contexts.others(self.gpu, self.worker.pids())

    def recheck(self, look: Look, shape: dict) -> None:
        """A timed call's output, as the judge read it right after the call, against the answer."""
        checking.recheck(self, look, shape)

    def close(self, keep_cache: bool = False) -> None:
        self.flush = None  # the judge keeps no GPU memory between evaluations
        self.give_back_memory()
        self.worker.close(keep_cache)

    def phase(self, name: str):
        """A block timed as phase `name` (phases.py): where an evaluation's seconds go."""
        return self.phases.timed(name)


def _with_edges(ranges: list[list[int]], nbytes: int) -> list[list[int]]:
    """`ranges` (whole BLOCK_BYTES blocks) with the first and last block of `nbytes` added."""
    last = (nbytes - 1) // BLOCK_BYTES * BLOCK_BYTES
    wanted = {tuple(r) for r in ranges} | {(0, min(BLOCK_BYTES, nbytes)), (last, nbytes - last)}
    return [list(r) for r in sorted(wanted)]


def _seconds(s: float) -> str:
    """0.5 s, 3 s, 120 s: a limit as it was given, never rounded to 0."""
    return f"{s:.3g} s"

