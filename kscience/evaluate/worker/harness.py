"""What a worker does with a candidate (the untrusted side): import it, call it, hand back outputs.

The harness never holds an expected answer. It builds inputs from seeds the judge sends,
poisons output buffers before each call and the returned output after it has been copied
(so no later call finds an old answer in freed memory), and refuses anything but a plain
strided tensor on the evaluation device. Every primitive it relies on is bound, and recorded
by `Integrity`, before the candidate's first line runs.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import importlib.util
import math
import os
import sys
import time
import traceback

import torch

from kscience.evaluate import staging
from kscience.evaluate.clocks import (CPU_THREADS_VAR, cuda_driver, settle_garbage_collector, spin_while_waiting,
                                      waiting_mode)
from kscience.evaluate.library_rule import install_traps
from kscience.evaluate.wire import Channel, ranges_bytes, send_json, send_tensor, tensor_bytes, wire_dtype
from kscience.evaluate.worker.integrity import Integrity
from kscience.problems import outputs as packed
from kscience.problems.device_map import mapped_device

_perf_counter = time.perf_counter
_sleep = time.sleep
_Tensor = torch.Tensor
_type = type
# Tensor methods are called through the class, never through the object: a candidate can set an
# attribute named `clone` or `numel` on the very tensor it returns (or on an input it was given),
# and a call through the object would run the candidate's function instead.
_fill, _is_float = torch.Tensor.fill_, torch.Tensor.is_floating_point
_numel, _element_size = torch.Tensor.numel, torch.Tensor.element_size
_storage, _storage_ptr = torch.Tensor.untyped_storage, torch.UntypedStorage.data_ptr

_CUDA_FAULT_WORDS = ("illegal memory access", "device-side assert", "CUDA error", "HIP error",
                     "unspecified launch failure", "misaligned address", "illegal instruction")
GPU_MEMORY_FRACTION = 0.9  # leave the trusted process room to compute its reference answers
_PERSISTING_L2_LIMIT = 0x06  # CU_LIMIT_PERSISTING_L2_CACHE_SIZE


def _holds_tensor(x, depth: int = 0) -> bool:
    if isinstance(x, torch.Tensor):
        return True
    if depth > 3:
        return False
    if isinstance(x, dict):
        return any(_holds_tensor(v, depth + 1) for v in x.values())
    if isinstance(x, (tuple, list)):
        return any(_holds_tensor(v, depth + 1) for v in x)
    return hasattr(x, "__dict__") and any(_holds_tensor(v, depth + 1) for v in vars(x).values())


class Fault(Exception):
    """A failure to report as a status: `status` is one of the result statuses."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status


def one_line(exc: BaseException) -> str:
    text = f"{_type(exc).__name__}: {exc}".strip().splitlines()
    if not text:
        return _type(exc).__name__
    return text[0] if len(text[0]) <= 800 else text[0][:780] + f" [… {len(text[0]) - 780:,} more characters]"


def call_fault(exc: BaseException) -> Fault:
    """An exception from candidate code: a GPU fault poisons the context, so it ends the worker."""
    if isinstance(exc, Fault):
        return exc
    msg = one_line(exc)
    tb = traceback.extract_tb(exc.__traceback__)
    where = next((f" (candidate.py line {f.lineno})" for f in reversed(tb) if f.filename.endswith("candidate.py")), "")
    if any(w in str(exc) for w in _CUDA_FAULT_WORDS):
        return Fault("crashed", f"GPU fault: {msg}")
    return Fault("runtime_error", msg + where)


class _PersistingL2:
    """The driver's persisting-L2 reservation: pinned lines would survive the cache flush."""

    def __init__(self):
        import ctypes

        self._cuda = cuda_driver()
        self._value, self._zero = ctypes.c_size_t(), ctypes.c_size_t(0)
        self._byref = ctypes.byref
        self.clear()

    def clear(self) -> None:
        if self._cuda is not None:
            self._cuda.cuCtxSetLimit(_PERSISTING_L2_LIMIT, self._zero)
            self._cuda.cuCtxResetPersistingL2Cache()

    def reserved(self) -> int:
        if self._cuda is None or self._cuda.cuCtxGetLimit(self._byref(self._value), _PERSISTING_L2_LIMIT):
            return 0
        return int(self._value.value)


def warm_compiler() -> None:
    """Triton's once-per-process costs, paid while a spare worker waits for its job instead of in
    the first call of the evaluation: it hashes its own 400 MB library into every cache key, and
    its first launch imports modules it loads lazily. On an H100 host the two took 0.7-1.1 s of
    the first checked call. Nothing here touches the GPU or runs candidate code."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return  # the interpreter compiles nothing
    try:
        import triton.compiler.compiler as compiler
        import triton.runtime.cache as cache
    except ImportError:
        return
    key = getattr(cache, "triton_key", None) or getattr(compiler, "triton_key", None)
    if key is not None:
        key()  # cached for the life of the process
    with contextlib.suppress(ImportError):  # imported by a call's first specialisation (Triton 3.6)
        importlib.import_module("triton.experimental.gluon")


class Harness:
    """One candidate, imported into this worker, and everything needed to call it safely.

    Slotted: a method cannot be shadowed by an attribute set on the instance (the candidate can
    reach the instance through the garbage collector or its caller's frame), and the slots fixed
    once the harness is built are checked on the instance as the module's functions are (`FIXED`)."""

    __slots__ = ("setup_s", "device", "problem", "on_gpu", "outputs", "l2", "waiting", "job",
                 "held", "settle_s", "first_read_at", "_violation", "watch", "verify", "fn")
    FIXED = ("device", "problem", "on_gpu", "outputs", "l2", "_violation", "watch", "verify")

    def __init__(self, job: dict, harness_modules: list):
        """Everything but the candidate: the device, the problem, the traps and the integrity snapshot.
        The judge times empty calls on this pristine worker before `import_candidate` runs any of it."""
        from kscience.device import detect
        from kscience.problems import load_problem

        # Where the import's seconds go, by this worker's clock: reported for diagnosis, never weighed.
        self.setup_s: dict[str, float] = {}
        t0 = _perf_counter()
        self.device = detect()
        t0 = self._lap("device", t0)
        self.problem = load_problem(job["problem"], job.get("overrides") or {}, job.get("probed"))
        t0 = self._lap("problem", t0)
        self.on_gpu = not self.device.interpreted
        if not self.on_gpu and os.environ.get(CPU_THREADS_VAR, "").isdigit():
            torch.set_num_threads(max(1, int(os.environ[CPU_THREADS_VAR])))  # before the candidate runs
        # Outputs poisoned before every call; a zeroed one (its zeros are part of the task) is
        # restored from its inputs instead, as every input is (timing.Timer copies all the others).
        self.outputs = staging.poisoned(self.problem)
        self.l2, self.waiting, self.job, self.fn = None, "none", job, None
        self.held: list[torch.Tensor] = []  # tensors the judge has yet to sample (see `sample`)
        self.settle_s, self.first_read_at = 0.0, 0.0  # the second look waits this long after the first
        if self.on_gpu:
            spin_while_waiting(context_exists=False)
            torch.cuda.set_per_process_memory_fraction(GPU_MEMORY_FRACTION)
            torch.zeros(1, device="cuda")
            torch.cuda.synchronize()  # the context now exists, so the driver calls below apply to it
            spin_while_waiting(context_exists=True)
            self.waiting = waiting_mode()
            self.l2 = _PersistingL2()
        t0 = self._lap("gpu", t0)  # the context
        # The problem's forbidden library calls, trapped before the integrity snapshot so the traps are
        # what it holds (evaluate/library_rule.py)
        install_traps(tuple(job.get("forbidden") or ()))
        # Bound on the instance before the candidate runs: patching the classes later changes
        # neither the check nor what it checks with (and the patch itself is then found).
        integrity = Integrity(harness_modules + [packed])
        self._violation, self.watch, self.verify = integrity.violation, integrity.watch, self._verify
        self.watch("harness", self, self.FIXED)
        self._lap("integrity", t0)

    def import_candidate(self) -> None:
        """The candidate's first line runs here, and everything after it is in its reach."""
        t0 = _perf_counter()
        self.fn = self._import_candidate(self.job["source"], self.job.get("weight_seed", 0))
        settle_garbage_collector()
        self.verify()
        self._lap("candidate", t0)

    def _lap(self, step: str, since: float) -> float:
        """Records the seconds of one import step in `setup_s`; returns when the next one starts."""
        now = _perf_counter()
        self.setup_s[step] = now - since
        return now

    def _import_candidate(self, source: str, weight_seed: int):
        path = os.path.join(os.getcwd(), "candidate.py")  # Triton's @jit reads the source from a real file
        with open(path, "w") as f:
            f.write(source)
        try:
            compile(source, "candidate.py", "exec")
        except SyntaxError as exc:
            raise Fault("compile_error", f"SyntaxError: {exc.msg} (candidate.py line {exc.lineno})") from None
        spec = importlib.util.spec_from_file_location("candidate", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["candidate"] = module
        try:
            with self.candidate_device():
                spec.loader.exec_module(module)
        except BaseException as exc:  # SystemExit at import is a compile error too, not the worker's exit
            raise Fault("compile_error", f"import failed: {one_line(exc)}") from None
        entry = self.problem.entry
        if not callable(getattr(module, entry, None)):
            signature = "" if self.problem.kind.builds_model else "(data)"
            raise Fault("compile_error", f"candidate defines no {entry}{signature}")
        if self.problem.kind.builds_model:
            try:
                model = self.problem.make_model(getattr(module, entry), weight_seed).to(self.device.torch_device)
            except BaseException as exc:
                raise Fault("compile_error", f"{entry}(...) failed: {one_line(exc)}") from None

            def run_model(data):
                with torch.no_grad():
                    return model(*data)

            return run_model
        return getattr(module, entry)

    def candidate_device(self):
        """Where there is no GPU, a published solution that says `.to('cuda')` or `device='cuda'`
        (amd-mla-decode's) gets the CPU, as the task's own code does (device_map.py). The mapping
        only rewrites device arguments, and is gone before the integrity check runs. On a GPU
        nothing is mapped."""
        return mapped_device(self.device.torch_device)

    # --- primitives shared with the timing loop ----------------------------------------------
    def _verify(self) -> None:
        """Reject a candidate that has rewired what the harness measures with."""
        found = self._violation()
        if found is None and self.l2 is not None and self.l2.reserved():
            found = "candidate reserved persisting L2 cache, which survives the flush between timed calls"
        if found:
            raise Fault("rejected", found)

    def inputs(self, seed: int, shape: dict) -> list:
        return list(self.problem.generate_input(seed, self.device.torch_device, **shape))

    def guarded(self, data: list) -> list[int]:
        """Indices of inputs the candidate must leave untouched."""
        return [i for i, t in enumerate(data) if i not in self.problem.output_args and _type(t) is _Tensor]

    @staticmethod
    def restore_nested(work: list, source: list) -> None:
        """Members of the data that hold tensors inside a dict, list or object (bioml-trimul's weights,
        amd-mla-decode's KV cache, which the call itself advances) come afresh from `source` for
        every call; plain tensors are copied into fixed buffers by the caller."""
        for i, x in enumerate(source):
            if _type(x) is not _Tensor and _holds_tensor(x):
                work[i] = copy.deepcopy(x)

    @staticmethod
    def poison(t: torch.Tensor) -> None:
        _fill(t, math.nan if _is_float(t) else -1)

    def sync(self) -> None:
        if self.on_gpu:
            torch.cuda.synchronize()

    def invoke(self, data: list, max_bytes: int, pack: bool = True):
        """Call the candidate; anything but a plain dense tensor on the right device (or a tuple,
        list or dict of them, packed into one, see problems/outputs.py) is a fault. `pack=False`
        leaves a structure as it came, for a timed call to pack once its clocks have stopped."""
        try:
            with self.candidate_device():
                out = self.fn(self.problem.call_data(data))
        except BaseException as exc:
            raise call_fault(exc) from None
        if packed.is_structure(out) and self.problem.several_outputs:
            _, keys, members = packed.members(out)
            if not members or len(members) > packed.MAX_MEMBERS or None in keys:
                raise Fault("wrong_answer", f"custom_kernel returned a {_type(out).__name__} of {len(members)} items"
                                            + (" with keys that are not plain strings" if None in keys else ""))
            for i, (key, member) in enumerate(zip(keys, members)):
                self._one_output(member, max_bytes, f"{_type(out).__name__} member {key or i}: ")
                self.not_a_view(member, data)
            return self.pack_output(out, max_bytes) if pack else out
        self._one_output(out, max_bytes, "")
        return out

    def pack_output(self, out, max_bytes: int) -> torch.Tensor:
        """A structure `invoke` accepted, as the one tensor the judge reads; a tensor as it is."""
        if not packed.is_structure(out):
            return out
        out = packed.pack(out)
        self._one_output(out, max_bytes, "")
        return out

    def _one_output(self, out, max_bytes: int, where: str) -> None:
        if _type(out) is not _Tensor:
            raise Fault("runtime_error", f"{where}custom_kernel returned {_type(out).__name__}, not a plain torch.Tensor")
        if out.layout != torch.strided:
            raise Fault("wrong_answer", f"{where}output has layout {out.layout}, not a dense (strided) tensor")
        if out.device.type != self.device.torch_device:
            raise Fault("wrong_answer", f"{where}output on {out.device.type}, expected {self.device.torch_device}")
        if wire_dtype(out.dtype) is None or (where and out.dtype not in packed.DTYPES):
            raise Fault("wrong_answer", f"{where}output dtype {out.dtype} is not a kernel result type")
        if _numel(out) * _element_size(out) > max_bytes:
            raise Fault("wrong_answer", f"{where}output of shape {tuple(out.shape)} is far larger than the answer")

    def not_a_view(self, out: torch.Tensor, data: list) -> None:
        """An input handed back is no computed output (outputs handed out in `data` may be)."""
        for i in self.guarded(data):
            if _numel(data[i]) and _numel(out) and _storage_ptr(_storage(out)) == _storage_ptr(_storage(data[i])):
                raise Fault("wrong_answer", f"returned a view of input {i} instead of a computed output")

    # --- the check and sample commands ------------------------------------------------------
    def check(self, ch: Channel, cmd: dict) -> None:
        """One call on fresh inputs: the whole output now; a second look at it, and at the guarded
        inputs, when the judge's `sample` command says which bytes to read."""
        data = self.inputs(cmd["seed"], cmd["shape"])
        for i in self.outputs:
            self.poison(data[i])
        t0 = _perf_counter()
        out = self.invoke(data, cmd["max_output_bytes"])
        self.sync()
        call_s = _perf_counter() - t0
        self.verify()
        guarded = self.guarded(data)
        self.not_a_view(out, data)
        send_json(ch, {"status": "ok", "seq": cmd["seq"], "inputs": guarded})
        whole = cmd.get("whole_output", True)  # else the judge reads it only at ranges it draws (`sample`)
        if whole:
            header, raw = tensor_bytes(out)
            send_tensor(ch, dict(header, seq=cmd["seq"]), raw)
        # Work still landing after the call returned (a thread, a forked process, a side stream)
        # shows up as a difference between this read and the next; the judge compares them.
        self.held, self.settle_s = [out] + [data[i] for i in guarded], min(max(call_s, 0.01), 0.05) if whole else 0.0
        self.first_read_at = _perf_counter()

    def give_back_memory(self) -> None:
        """The allocator's cache back to the GPU, once a checked call was read or a shape's timed
        calls are over: the judge computes the next answers on the same GPU, which a reference can
        need tens of GiB of (docs/evaluation.md, "The allocator's cache"). Never between timed calls,
        whose allocations it would time."""
        if self.on_gpu:
            torch.cuda.empty_cache()

    def sample(self, ch: Channel, cmd: dict) -> None:
        """The held tensors' bytes at the judge's ranges, one frame each; then they are let go."""
        _sleep(max(0.0, self.settle_s - (_perf_counter() - self.first_read_at)))  # the round trip counts
        self.sync()
        ranges = cmd.get("ranges")
        if not isinstance(ranges, list) or len(ranges) != len(self.held):
            raise Fault("rejected", "malformed sample command")
        payload = [ranges_bytes(t, r) for t, r in zip(self.held, ranges)]
        if self.held:  # the checked call's output (or a kept copy): no later call may find it
            self.poison(self.held[0])
        self.held, self.settle_s = [], 0.0
        for header, raw in payload:
            send_tensor(ch, dict(header, seq=cmd["seq"]), raw)
