"""Time per launched kernel: what each kernel a correct candidate launches costs, per timed shape.

A kernel that launches a cast and a GEMM gets one time per shape from the timed calls; this pass
splits it. After a shape's timed calls, outside them, the judge asks the worker (`kernels`
command) for a few calls of the candidate under a profiler, and keeps per kernel name how many
times it launched per call and its time per call. It also keeps what each profiled call held
(`call_breakdown`): the call's length, when each of its kernels ran within it, and on a GPU the
allocations the call made (torch.cuda.memory_stats around it), from which the judge computes the time
before the first kernel, the time in kernels, the gaps between them and the time after the last. A
timed median far above the kernels' sum is then explained, or not, by the call's own host work:

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
MAX_SPANS = 2048  # kernel intervals kept per profiled call; a call that launches more keeps its first
MAX_ERROR = 2000  # a profiler's error, whole lines up to this much (the scientist quotes it whole)
CALL_MARK = "kscience::call"  # the profiler range around each profiled call, found again in its records
CALLS = (3, 1)  # profiled calls per shape: (GPU, CPU interpreter), after one warm-up call on a GPU
LIMIT_S = (60.0, 300.0)
GPU_PROFILER = "torch.autograd.profiler (CUPTI kernel records)"
CPU_PROFILER = "Triton interpreter launches (host clock)"


# --- the worker's side ---------------------------------------------------------------------------
def _allocations() -> list[int] | None:
    """(allocations made, bytes allocated, cudaMalloc calls) so far in this process; None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    stats = torch.cuda.memory_stats()
    return [int(stats.get(k, 0)) for k in ("allocation.all.allocated", "allocated_bytes.all.allocated",
                                          "segment.all.allocated")]


def _cuda_launches(call, calls: int) -> tuple[dict[str, list], list]:
    # torch.autograd.profiler, not its wrapper torch.profiler.profile: the wrapper's first session
    # imports torch._inductor to read one setting, which cost 4-6 s of every evaluation on an H100
    # (the profiler_cost.py probe, benchmarks/README.md); both collect the same CUPTI kernel records.
    from torch.autograd import DeviceType
    from torch.autograd.profiler import profile, record_function

    allocated = []
    with profile(use_cpu=True, use_device="cuda", use_kineto=True) as prof:
        for i in range(calls):
            before = _allocations()
            with record_function(f"{CALL_MARK}{i}"):
                call()
            after = _allocations()
            allocated.append([b - a for a, b in zip(before, after)] if before and after else None)
    seen: dict[str, list] = {}
    ranges, spans = {}, []
    for e in prof.function_events:
        if e.name.startswith(CALL_MARK):  # the host's range; its copy on the GPU's timeline is no kernel
            if e.device_type != DeviceType.CUDA and e.name[len(CALL_MARK):].isdigit():
                ranges[int(e.name[len(CALL_MARK):])] = (e.time_range.start, e.time_range.end)
        elif e.device_type == DeviceType.CUDA:
            rec = seen.setdefault(e.name, [0, 0.0])
            rec[0] += 1
            rec[1] += e.time_range.elapsed_us()
            spans.append((e.time_range.start, e.time_range.end))
    per_call = []
    for i in range(calls):  # the GPU's clock and the host's share one timeline in the profiler's records
        start, end = ranges.get(i, (0.0, 0.0))
        inside = sorted((a - start, b - start) for a, b in spans if start <= a < end)[:MAX_SPANS]
        per_call.append([end - start, [list(x) for x in inside], allocated[i]])
    return seen, per_call


def _interpreted_launches(call, calls: int) -> tuple[dict[str, list], list]:
    from triton.runtime import interpreter

    original = interpreter.GridExecutor.__call__
    seen: dict[str, list] = {}
    spans: list = []

    def timed(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            t1 = time.perf_counter()
            rec = seen.setdefault(getattr(self.fn, "__name__", "?"), [0, 0.0])
            rec[0] += 1
            rec[1] += (t1 - t0) * 1e6
            spans.append((t0, t1))

    interpreter.GridExecutor.__call__ = timed
    per_call = []
    try:
        for _ in range(calls):
            del spans[:]
            start = time.perf_counter()
            call()
            end = time.perf_counter()
            per_call.append([(end - start) * 1e6, [[(a - start) * 1e6, (b - start) * 1e6] for a, b in spans][:MAX_SPANS],
                             None])  # host memory: no allocator statistics to read
    finally:
        interpreter.GridExecutor.__call__ = original
    return seen, per_call


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
        seen, per_call = (_cuda_launches if gpu else _interpreted_launches)(call, calls)
    except Exception as exc:  # the profiler, not the candidate: a reason, not a fault
        # bounded for the channel, with room for the judge to end its own bound at a line (parse_reply)
        return {"error": f"{type(exc).__name__}: {exc}"[:4 * MAX_ERROR], "profiler": GPU_PROFILER if gpu else CPU_PROFILER}
    finally:
        harness.give_back_memory()
    return {"calls": calls, "profiler": GPU_PROFILER if gpu else CPU_PROFILER,
            "kernels": [[name[:MAX_NAME], n, us] for name, (n, us) in seen.items()], "per_call": per_call}


# --- the judge's side ----------------------------------------------------------------------------
def _whole(text: str, limit: int) -> str:
    """`text` within `limit` characters, ending at a line or sentence where it has to be cut."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    end = max(cut.rfind("\n"), cut.rfind(". "))
    return (cut[:end + 1].rstrip() if end > 0 else cut.rsplit(" ", 1)[0]) + f" [cut at {limit} characters]"


def parse_reply(reply: dict) -> tuple[list[dict], str]:
    """(kernels per call, costliest first; a note, "" when none) from a worker's reply, whose form is
    checked: anything malformed gives no kernels and says so."""
    if reply.get("error"):
        return [], (f"per-kernel times unavailable ({str(reply.get('profiler'))[:60]}): "
                    f"{_whole(str(reply['error']), MAX_ERROR)}")
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


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def call_breakdown(call_us: float, spans: list[list[float]]) -> dict:
    """What one call held, from its length and its kernels' [start, end] within it (us from the call's
    start): the time before the first kernel, in kernels (their union: kernels on two streams at once count
    once), in gaps between them and after the last, and how many ran. Spans are clipped to the call."""
    clipped = sorted((min(max(a, 0.0), call_us), min(max(b, 0.0), call_us)) for a, b in spans)
    merged: list[list[float]] = []
    for a, b in clipped:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, max(a, b)])
    busy = sum(b - a for a, b in merged)
    gaps = sum(nxt[0] - cur[1] for cur, nxt in zip(merged, merged[1:]))
    return {"call_us": round(call_us, 3), "before_first_us": round(merged[0][0] if merged else call_us, 3),
            "kernels_us": round(busy, 3), "gaps_us": round(gaps, 3),
            "after_last_us": round(call_us - merged[-1][1] if merged else 0.0, 3), "launches": len(spans)}


def parse_calls(reply: dict) -> dict:
    """The median profiled call's breakdown (by its length), with the allocations it made where the worker
    could count them and how many calls were profiled; {} when the reply holds none or is malformed."""
    rows = reply.get("per_call")
    if not isinstance(rows, list) or not rows or len(rows) != reply.get("calls"):
        return {}
    calls = []
    for row in rows:
        if not (isinstance(row, list) and len(row) == 3 and _number(row[0]) and row[0] >= 0
                and isinstance(row[1], list) and len(row[1]) <= MAX_SPANS):
            return {}
        spans = row[1]
        if not all(isinstance(x, list) and len(x) == 2 and _number(x[0]) and _number(x[1]) and x[0] <= x[1]
                   for x in spans):
            return {}
        allocated = row[2]
        if allocated is not None and not (isinstance(allocated, list) and len(allocated) == 3
                                          and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                                  for n in allocated)):
            return {}
        calls.append((row[0], spans, allocated))
    call_us, spans, allocated = sorted(calls, key=lambda c: c[0])[(len(calls) - 1) // 2]
    out = dict(call_breakdown(call_us, spans), calls=len(calls))
    if allocated is not None:
        out.update(allocations=allocated[0], allocated_bytes=allocated[1], cuda_mallocs=allocated[2])
    return out


def measure(session, timed: list, seed_of) -> str:
    """Per-kernel times of every timed shape (`timed`: (ShapeResult, output cap) pairs), written into
    each ShapeResult's `kernels`, and what its median profiled call held into its `call`; returns what
    measured them, or why they are missing. `seed_of()` gives a seed the worker has never seen. A
    candidate fault here raises the session's Verdict, with no shape keeping a breakdown."""
    said = ""
    try:
        for res, cap in timed:
            session.ask({"cmd": "kernels", "shape": res.shape, "seed": seed_of(), "max_output_bytes": cap},
                        "kernels", res.shape, limit_s=LIMIT_S[session.cpu])
            reply = session.reply("kernels", res.shape)
            res.kernels, note = parse_reply(reply)
            res.call = {} if note else parse_calls(reply)
            if note:
                return note  # the same profiler fails the same way on the next shape
            said = str(reply.get("profiler"))[:60]
    except BaseException:
        for res, _ in timed:
            res.call = {}
        raise
    return said
