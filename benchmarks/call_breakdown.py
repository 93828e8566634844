"""What a timed call holds and what a CUDA build's compile facts say, on the device the judge runs on.

Four softmax candidates, each judged on every shape: the Triton seed, a two-launch Triton kernel
(tests/data/two_launch_softmax.py), and the CUDA kernel of `cuda_kernels/softmax_cuda.cu` built two ways,
through `torch.utils.cpp_extension.load_inline` and through nvcc run with `subprocess` into
`KSCIENCE_BUILD_DIR`, loaded with `ctypes` (both with `-Xptxas -v`). For every timed shape: the timed
median beside the judge's breakdown of its median profiled call (before the first kernel, in kernels,
gaps between them, after the last; on a GPU the allocations inside the call); for every candidate, its
compile facts as the prompts show them (registers, spills, shared and local memory, and which artefact
they were read from). The questions a GPU run answers: does the breakdown explain a timed median far
above its kernels' sum, and do CUDA builds get registers and spills as Triton kernels do?

Under the CPU interpreter only the Triton candidates run (load_inline, nvcc and ctypes need a GPU), and
their breakdown is the interpreter's host time: the machinery is checked, not GPU behaviour.

Prints a table; writes benchmarks/results/call-breakdown-<device>-<date>-at-<commit>.json.

    PYTHONPATH=$PWD python3 benchmarks/call_breakdown.py [--out DIR]
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
from pathlib import Path

from kscience.device import detect
from kscience.evaluate.judge.evaluation import evaluate
from kscience.evaluate.profile.compile_facts import KernelFacts
from kscience.evaluate.result import EvalRequest
from kscience.problems import load_problem, shape_label
from kscience.scientist.profile_report import kernel_lines

ROOT = Path(__file__).resolve().parents[1]
CUDA = (Path(__file__).parent / "cuda_kernels" / "softmax_cuda.cu").read_text()
WRAPPER = r"""
#include <ATen/cuda/CUDAContext.h>
#include <torch/extension.h>
torch::Tensor softmax(torch::Tensor x) {
    auto y = torch::empty_like(x);
    launch_row_softmax(x.data_ptr(), y.data_ptr(), x.size(0), x.size(1), at::cuda::getCurrentCUDAStream().stream());
    return y;
}
"""
LOAD_INLINE = f'''
from torch.utils.cpp_extension import load_inline

CUDA = r"""{CUDA}{WRAPPER}"""
_ext = load_inline(name="ks_row_softmax", cpp_sources="torch::Tensor softmax(torch::Tensor x);", cuda_sources=CUDA,
                   functions=["softmax"], extra_cuda_cflags=["-O3", "-Xptxas", "-v"], verbose=True)


def custom_kernel(data):
    (x,) = data
    return _ext.softmax(x)
'''
NVCC_CTYPES = f'''
import ctypes
import hashlib
import os
import shutil
import subprocess

import torch

CUDA = r"""{CUDA}"""


def _library():
    """The kernel's library, built once per source and device into KSCIENCE_BUILD_DIR (kept for a re-judge)."""
    folder = os.environ["KSCIENCE_BUILD_DIR"]
    os.makedirs(folder, exist_ok=True)
    major, minor = torch.cuda.get_device_capability()
    stem = os.path.join(folder, "softmax_" + hashlib.sha256(f"{{CUDA}}{{major}}{{minor}}".encode()).hexdigest()[:16])
    if not os.path.exists(stem + ".so"):
        with open(stem + ".cu", "w") as f:
            f.write(CUDA)
        nvcc = shutil.which("nvcc") or os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")
        done = subprocess.run([nvcc, "-O3", "-shared", "-Xcompiler", "-fPIC", "-Xptxas", "-v",
                               f"-arch=sm_{{major}}{{minor}}", "-o", stem + ".so", stem + ".cu"],
                              capture_output=True, text=True)
        with open(stem + ".log", "w") as f:
            f.write(done.stdout + done.stderr)
        done.check_returncode()
    lib = ctypes.CDLL(stem + ".so")
    lib.launch_row_softmax.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    return lib


_lib = _library()


def custom_kernel(data):
    (x,) = data
    y = torch.empty_like(x)
    _lib.launch_row_softmax(x.data_ptr(), y.data_ptr(), x.shape[0], x.shape[1], torch.cuda.current_stream().cuda_stream)
    return y
'''


def candidates() -> dict[str, tuple[str, bool]]:
    """name -> (source, whether it needs a GPU)."""
    return {"triton seed": (load_problem("softmax").seed_source, False),
            "triton two launches": ((ROOT / "tests" / "data" / "two_launch_softmax.py").read_text(), False),
            "load_inline": (LOAD_INLINE, True), "nvcc + ctypes": (NVCC_CTYPES, True)}


def judged(name: str, source: str) -> dict:
    result = evaluate(EvalRequest(problem="softmax", source=source, shapes="all"))
    shapes = [{"shape": shape_label(s.shape), "time_us": s.time_us, "call": s.call,
               "kernels": [(k["name"], k["launches"], k["us"]) for k in s.kernels]}
              for s in result.shapes if s.phase == "benchmark"]
    facts = [KernelFacts(**f) for f in result.compile_facts]
    return {"name": name, "status": result.status, "message": result.message, "build_s": result.build_s,
            "kernel_profiler": result.kernel_profiler, "shapes": shapes,
            "compile_facts": result.compile_facts, "compile_lines": kernel_lines(facts)}


def _us(x) -> str:
    return "-" if x is None else f"{x:,.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    device = detect()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    rows = []
    for name, (source, needs_gpu) in candidates().items():
        if needs_gpu and device.interpreted:
            rows.append({"name": name, "status": "not run: needs a GPU (and nvcc)", "shapes": [], "compile_lines": []})
        else:
            rows.append(judged(name, source))
        print(f"{name}: {rows[-1]['status']}", flush=True)
    print(f"\n{'candidate':<20} {'shape':<18} {'timed':>11} {'call':>11} {'before 1st':>11} {'kernels':>11} "
          f"{'gaps':>9} {'after':>9} {'launches':>8} {'allocs':>7}")
    for r in rows:
        for s in r["shapes"]:
            c = s["call"] or {}
            allocs = f"{c['allocations']}" if c.get("allocations") is not None else "-"
            print(f"{r['name']:<20} {s['shape']:<18} {_us(s['time_us']):>11} {_us(c.get('call_us')):>11} "
                  f"{_us(c.get('before_first_us')):>11} {_us(c.get('kernels_us')):>11} {_us(c.get('gaps_us')):>9} "
                  f"{_us(c.get('after_last_us')):>9} {c.get('launches', '-'):>8} {allocs:>7}")
    for r in rows:
        print(f"\n{r['name']}: {r['status']}" + (f" ({r['message']})" if r.get("message") and r["status"] != "ok" else ""))
        for line in r["compile_lines"] or ["- compile facts: none"]:
            print(f"  {line}")
    stem = f"call-breakdown-{re.sub(r'[^A-Za-z0-9]+', '_', device.name)}-{datetime.date.today()}-at-{commit}"
    out = Path(args.out) / f"{stem}.json"
    out.write_text(json.dumps({"device": device.name, "interpreted": device.interpreted, "commit": commit,
                               "date": datetime.date.today().isoformat(), "candidates": rows}, indent=1))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
