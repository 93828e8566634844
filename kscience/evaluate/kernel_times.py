"""Time per launched kernel: what each kernel a correct candidate launches costs, per timed shape.

A kernel that launches a cast and a GEMM gets one time per shape from the timed calls; this pass
splits it. After a shape's timed calls, outside them, the judge asks the worker (`kernels`
command) for a few calls of the candidate under a profiler, and keeps per kernel name how many
times it launched per call and its time per call:

* on a GPU: the kernel records of torch's autograd profiler with Kineto (CUPTI), the GPU's own start
  and end of every kernel, memcpy and memset in the worker;
* under the CPU interpreter: every Triton launch (`GridExecutor.__call__`) by the host clock,
  which is what an interpreted kernel costs.

The records come from the candidate's process, so they are advice to the scientist, like the compile
facts, never a verdict: the judge bounds and checks their form, and the time that counts is the
judge's own. A profiler that fails (CUPTI missing, a confined process it cannot start in) leaves a
one-line reason instead of times.
"""

from __future__ import annotations

import math
import time

MAX_KERNELS = 24  # distinct names kept per shape, the costliest first; more is a flood
MAX_NAME = 200
CALLS = (3, 1)  # profiled calls per shape: (GPU, CPU interpreter), after one warm-up call on a GPU
LIMIT_S = (60.0, 300.0)
GPU_PROFILER = "torch.autograd.profiler (CUPTI kernel records)"
CPU_PROFILER = "Triton interpreter launches (host clock)"


# --- the worker's side ---------------------------------------------------------------------------
def _cuda_launches(call, calls: int) -> dict[str, list]:
    # torch.autograd.profiler, not its wrapper torch.profiler.profile: the wrapper's first session
    # imports torch._inductor to read one setting, which cost 4-6 s of every evaluation on an H100
    # (benchmarks/probes/profiler_cost.py); both collect the same CUPTI kernel records.
    from torch.autograd import DeviceType
    from torch.autograd.profiler import profile

    with profile(use_cpu=True, use_device="cuda", use_kineto=True) as prof:
        for _ in range(calls):
            call()
    seen: dict[str, list] = {}
    for e in prof.function_events:
        if e.device_type == DeviceType.CUDA:
            rec = seen.setdefault(e.name, [0, 0.0])
            rec[0] += 1
            rec[1] += e.time_range.elapsed_us()
    return seen


def _interpreted_launches(call, calls: int) -> dict[str, list]:
    from triton.runtime import interpreter

    original = interpreter.GridExecutor.__call__
    seen: dict[str, list] = {}

    def timed(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            rec = seen.setdefault(getattr(self.fn, "__name__", "?"), [0, 0.0])
            rec[0] += 1
            rec[1] += (time.perf_counter() - t0) * 1e6

    interpreter.GridExecutor.__call__ = timed
    try:
        for _ in range(calls):
            call()
    finally:
        interpreter.GridExecutor.__call__ = original
    return seen


def record(harness, cmd: dict) -> dict:
    """The worker's answer to `kernels`: the candidate called on the judge's inputs under a profiler.
    A fault of the candidate's call raises (the worker reports it as for any call); a profiler that
    cannot run answers with `error` instead of kernels."""
    data = harness.inputs(cmd["seed"], cmd["shape"])
    gpu = harness.on_gpu
    calls = CALLS[0 if gpu else 1]

    def call():
        harness.invoke(data, cmd["max_output_bytes"])
        harness.sync()

    if gpu:
        call()  # a kernel compiled or autotuned on first use would be profiled too
    try:
        seen = (_cuda_launches if gpu else _interpreted_launches)(call, calls)
    except Exception as exc:  # the profiler, not the candidate: a reason, not a fault
        return {"error": f"{type(exc).__name__}: {exc}"[:300], "profiler": GPU_PROFILER if gpu else CPU_PROFILER}
    finally:
        harness.give_back_memory()
    return {"calls": calls, "profiler": GPU_PROFILER if gpu else CPU_PROFILER,
            "kernels": [[name[:MAX_NAME], n, us] for name, (n, us) in seen.items()]}


# --- the judge's side ----------------------------------------------------------------------------
def parse_reply(reply: dict) -> tuple[list[dict], str]:
    """(kernels per call, costliest first; a note, "" when none) from a worker's reply, whose form is
    checked: anything malformed gives no kernels and says so."""
    if reply.get("error"):
        return [], f"per-kernel times unavailable ({str(reply.get('profiler'))[:60]}): {str(reply['error'])[:300]}"
    calls, rows = reply.get("calls"), reply.get("kernels")
    if not isinstance(calls, int) or isinstance(calls, bool) or calls < 1 or not isinstance(rows, list):
        return [], "per-kernel times: malformed reply from the worker"
    out = []
    for row in rows[:MAX_KERNELS * 8]:
        if not (isinstance(row, list) and len(row) == 3 and isinstance(row[0], str) and isinstance(row[1], int)
                and not isinstance(row[1], bool) and isinstance(row[2], (int, float))):
            return [], "per-kernel times: malformed reply from the worker"
        name, n, us = row
        if n < 1 or not math.isfinite(us) or us < 0:
            return [], "per-kernel times: malformed reply from the worker"
        out.append({"name": name[:MAX_NAME], "launches": round(n / calls, 3), "us": round(us / calls, 3)})
    out.sort(key=lambda k: -k["us"])
    return out[:MAX_KERNELS], ""


def measure(session, timed: list, seed_of) -> str:
    """Per-kernel times of every timed shape (`timed`: (ShapeResult, output cap) pairs), written into
    each ShapeResult's `kernels`; returns what measured them, or why they are missing. `seed_of()`
    gives a seed the worker has never seen. A candidate fault here raises the session's Verdict."""
    said = ""
    for res, cap in timed:
        session.ask({"cmd": "kernels", "shape": res.shape, "seed": seed_of(), "max_output_bytes": cap},
                    "kernels", res.shape, limit_s=LIMIT_S[session.cpu])
        reply = session.reply("kernels", res.shape)
        res.kernels, note = parse_reply(reply)
        if note:
            return note  # the same profiler fails the same way on the next shape
        said = str(reply.get("profiler"))[:60]
    return said
