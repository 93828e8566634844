"""Nsight Compute on demand: hardware counters of one candidate on one shape, outside any timing.

`profile(...)` runs `kscience.evaluate.profile.entry` (one warm-up call, then exactly one
profiled call between cudaProfilerStart/Stop) under `ncu`, and parses ncu's own CSV report in
this, the trusted, process. The profiled process is a plain subprocess: nothing it reports is
read; only ncu's log file is, which ncu writes into a folder the candidate is not told of.
Profiling replays each kernel many times (one pass per counter group), so it costs seconds; that
cost is measured (`profile_s`) and never enters a kernel's time, which only the judge measures.

Metrics come from ncu's stock sections (they choose the right counters for each architecture)
plus a few explicit counters, read back with `--page raw`: every collected metric becomes a CSV
column, with a units row under the header and one row per profiled kernel. The parser looks each
quantity up under the names ncu has used for it on Ampere and Hopper, so a missing name is an
absent number, never a failure.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kscience.evaluate import lifeline
from kscience.evaluate.sandbox import leftovers
from kscience.evaluate.sandbox.workers import worker_env

SECTIONS = ("SpeedOfLight", "MemoryWorkloadAnalysis", "ComputeWorkloadAnalysis", "Occupancy",
            "WarpStateStats", "LaunchStats")
# Named explicitly as well (all seen in an H100 report), so the headline numbers do not depend on
# which section a given ncu version files them under; the SASS counts give fp32 FLOPs.
METRICS = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum", "dram__bytes.sum.per_second",
           "sm__throughput.avg.pct_of_peak_sustained_elapsed", "sm__warps_active.avg.pct_of_peak_sustained_active",
           "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active", "lts__t_sector_hit_rate.pct",
           "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
           "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
           "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum")
DEFAULT_TIMEOUT_S = 300.0
TOP_STALLS = 3

# Each quantity under the names ncu gives it, first found wins.
_DRAM_PCT = ("dram__throughput.avg.pct_of_peak_sustained_elapsed",
             "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed")
_DRAM_RATE = ("dram__bytes.sum.per_second",)
_SM_PCT = ("sm__throughput.avg.pct_of_peak_sustained_elapsed",)
_OCCUPANCY = ("sm__warps_active.avg.pct_of_peak_sustained_active",)
_L2_HIT = ("lts__t_sector_hit_rate.pct",)
_DURATION = ("gpu__time_duration.sum",)
_TENSOR_PIPE = re.compile(r"^sm__pipe_tensor\w*_cycles_active\.avg\.pct_of_peak_sustained_active$")
# Stall families, most to least preferred; one family is used throughout so the values compare.
_STALL_FAMILIES = (
    re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$"),
    re.compile(r"^smsp__average_warp_latency_issue_stalled_(\w+?)\.ratio$"),
    re.compile(r"^smsp__warp_issue_stalled_(\w+?)_per_warp_active\.pct$"),
    re.compile(r"^smsp__pcsamp_warps_issue_stalled_(\w+?)(?:\.sum)?$"),
)
_NOT_STALLS = ("selected", "not_selected")  # eligible warps that lost the pick: not stalled
_UNIT_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_TIME_NS = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9}

_missing_said = False


class NcuError(Exception):
    """An ncu run that produced no usable report. One line."""


@dataclass
class KernelLaunch:
    name: str
    duration_ns: float | None = None
    grid: str = ""
    block: str = ""


@dataclass
class NcuProfile:
    kernels: list[KernelLaunch] = field(default_factory=list)  # in launch order, one per launch
    gpu_time_us: float | None = None  # sum of kernel durations under the profiler (clocks locked to base)
    dram_bytes: float | None = None  # read + write, all kernels
    dram_bandwidth: float | None = None  # bytes/s achieved, duration-weighted over kernels
    dram_pct: float | None = None  # of peak DRAM throughput
    sm_pct: float | None = None  # SM throughput (the busiest SM pipe) of peak
    tensor_pipe_pct: float | None = None  # busiest tensor pipe, of peak while active
    occupancy_pct: float | None = None  # achieved warps of the maximum
    l2_hit_pct: float | None = None
    fp32_flops: float | None = None  # from CUDA-core fadd/fmul/ffma counts; tensor-core work is not in it
    stalls: list[tuple[str, float]] = field(default_factory=list)  # top reasons, largest first
    stall_unit: str = ""  # what the stall values are (a ratio per issue, % of warps, or samples)
    profile_s: float = 0.0  # wall seconds the profile cost
    shape: dict = field(default_factory=dict)

    @property
    def kernel_names(self) -> list[str]:
        return sorted({k.name for k in self.kernels})

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "NcuProfile":
        d = dict(d)
        d["kernels"] = [KernelLaunch(**k) for k in d.get("kernels", [])]
        d["stalls"] = [tuple(s) for s in d.get("stalls", [])]
        return cls(**d)


def ncu_path() -> str | None:
    return shutil.which("ncu") or next((str(p) for p in sorted(Path("/usr/local").glob("cuda*/bin/ncu"))), None)


def available(say=print) -> bool:
    """Whether ncu can be run here; the first time it cannot, says so (once per process)."""
    global _missing_said
    if ncu_path():
        return True
    if not _missing_said:
        _missing_said = True
        say("profile ncu: Nsight Compute (ncu) is not on PATH; candidates are not profiled")
    return False


def command(ncu: str, log_file: str | Path, entry_args: list[str], python: str = sys.executable) -> list[str]:
    """The ncu command line of `profile`. The H100 reports in tests/data/ncu were recorded with
    `--set full` in place of these sections and metrics (a superset) and auto units; `parse` reads both."""
    cmd = [ncu, "--csv", "--page", "raw", "--print-units", "base", "--profile-from-start", "off",
           "--target-processes", "all", "--log-file", str(log_file)]
    for s in SECTIONS:
        cmd += ["--section", s]
    cmd += ["--metrics", ",".join(METRICS)]
    return cmd + [python, "-m", "kscience.evaluate.profile.entry", *entry_args]


def profile(problem: str, source: str, shape: dict, *, overrides: dict | None = None, gpu: int | None = None,
            timeout_s: float = DEFAULT_TIMEOUT_S, say=print) -> NcuProfile | None:
    """Counters of `source` on one `shape` of `problem`; None without ncu. Raises NcuError on a failed run."""
    if not available(say):
        return None
    t0 = time.monotonic()
    # Named and marked as a worker's are, so that this process's guardian (and, failing it, the next
    # command) ends the profiled processes and removes the folders should this process die.
    leftovers.guard()
    prefix, root = leftovers.folder_prefix(), leftovers.sandbox_root()
    with tempfile.TemporaryDirectory(prefix=f"{prefix}ncu-", dir=root) as trusted, \
            tempfile.TemporaryDirectory(prefix=f"{prefix}profile-", dir=root) as work:
        log = Path(trusted) / "report.csv"
        (Path(work) / "candidate.py").write_text(source)
        args = ["--problem", problem, "--source", str(Path(work) / "candidate.py"), "--shape", json.dumps(shape),
                "--overrides", json.dumps(overrides or {})]
        env = dict(worker_env(Path(work), gpu, False, secrets.token_hex(8)),
                   **{leftovers.OWNER_VAR: lifeline.owner_tag()})
        # A session of its own: on a timeout the profiled process dies with ncu, not only ncu.
        proc = subprocess.Popen(command(ncu_path(), log, args), cwd=work, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise NcuError(f"ncu ran past {timeout_s:.0f}s on shape {shape}") from None
        text = log.read_text(errors="replace") if log.is_file() else ""
        if proc.returncode != 0 or '"ID"' not in text:
            tail = (err or out or text).strip().splitlines()[-1:] or ["no output"]
            raise NcuError(f"ncu failed (exit {proc.returncode}): {tail[0][:300]}")
    result = parse(text)
    result.profile_s, result.shape = round(time.monotonic() - t0, 3), dict(shape)
    return result


def _number(text: str) -> float | None:
    text = text.strip().replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None


def _scale(unit: str) -> float:
    """Factor to base units: bytes, durations in ns, rates per second. ncu writes "ns", "byte/s",
    "Mbyte" (auto units) or "nsecond", "byte/second" (--print-units base): both are read."""
    num, _, den = unit.partition("/")
    if num in _TIME_NS:
        return _TIME_NS[num]
    factor = _UNIT_PREFIX.get(num[:-4], 1.0) if num.endswith("byte") else 1.0
    return factor * 1e9 / _TIME_NS[den] if den in _TIME_NS else factor


def read_rows(text: str) -> list[dict[str, float | str]]:
    """The report's kernel rows, metric values converted to base units (durations in ns)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise NcuError("no ncu CSV report found (expected a header row starting with \"ID\")")
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, units, body = rows[0], rows[1] if len(rows) > 1 else [], rows[2:]
    if units and units[0].strip():  # no units row: the report was printed without one
        body, units = rows[1:], [""] * len(header)
    out = []
    for row in body:
        if len(row) != len(header):
            continue
        rec: dict[str, float | str] = {}
        for name, unit, value in zip(header, units + [""] * len(header), row):
            v = _number(value) if "__" in name else None
            rec[name] = v * _scale(unit) if v is not None else value
        out.append(rec)
    return out


def parse(text: str) -> NcuProfile:
    rows = read_rows(text)
    if not rows:
        raise NcuError("the ncu report lists no kernels: the candidate launched none while profiled")
    kernels = [KernelLaunch(name=str(r.get("Kernel Name", "?")), duration_ns=_first(r, _DURATION),
                            grid=str(r.get("Grid Size", "")), block=str(r.get("Block Size", ""))) for r in rows]
    weights = [k.duration_ns or 0.0 for k in kernels]
    if not any(weights):
        weights = [1.0] * len(rows)

    def mean(names) -> float | None:
        return _weighted([_first(r, names) for r in rows], weights)

    tensor = [max((v for k, v in r.items() if _TENSOR_PIPE.match(k) and isinstance(v, float)), default=None)
              for r in rows]
    reads, writes = _sum(rows, "dram__bytes_read.sum"), _sum(rows, "dram__bytes_write.sum")
    fadd, fmul, ffma = (_sum(rows, f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum")
                        for op in ("fadd", "fmul", "ffma"))
    stalls, unit = _stalls(rows, weights)
    total_ns = sum(k.duration_ns for k in kernels if k.duration_ns is not None)
    return NcuProfile(
        kernels=kernels, gpu_time_us=total_ns / 1e3 if total_ns else None,
        dram_bytes=None if reads is None and writes is None else (reads or 0.0) + (writes or 0.0),
        dram_bandwidth=mean(_DRAM_RATE), dram_pct=mean(_DRAM_PCT), sm_pct=mean(_SM_PCT),
        tensor_pipe_pct=_weighted(tensor, weights), occupancy_pct=mean(_OCCUPANCY), l2_hit_pct=mean(_L2_HIT),
        fp32_flops=None if None in (fadd, fmul, ffma) else fadd + fmul + 2 * ffma,
        stalls=stalls, stall_unit=unit)


def _first(row: dict, names) -> float | None:
    return next((row[n] for n in names if isinstance(row.get(n), float)), None)


def _sum(rows: list[dict], name: str) -> float | None:
    values = [r[name] for r in rows if isinstance(r.get(name), float)]
    return sum(values) if values else None


def _weighted(values: list, weights: list[float]) -> float | None:
    pairs = [(v, w) for v, w in zip(values, weights) if v is not None]
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if pairs and total else None


def _stalls(rows: list[dict], weights: list[float]) -> tuple[list[tuple[str, float]], str]:
    units = {0: "warp cycles per issued instruction", 1: "cycles per instruction", 2: "% of active warps",
             3: "PC samples"}
    for i, family in enumerate(_STALL_FAMILIES):
        reasons: dict[str, list] = {}
        for r in rows:
            for name, value in r.items():
                m = family.match(name)
                if m and isinstance(value, float) and m.group(1) not in _NOT_STALLS \
                        and not m.group(1).endswith("_not_issued"):
                    reasons.setdefault(m.group(1), [None] * len(rows))
        if not reasons:
            continue
        for j, r in enumerate(rows):
            for name, value in r.items():
                m = family.match(name)
                if m and m.group(1) in reasons and isinstance(value, float):
                    reasons[m.group(1)][j] = value
        agg = {k: _weighted(v, weights) for k, v in reasons.items()}
        top = sorted(((k, round(v, 3)) for k, v in agg.items() if v), key=lambda kv: -kv[1])[:TOP_STALLS]
        return top, units[i]
    return [], ""
