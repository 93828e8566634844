"""The process Nsight Compute profiles: one shape of one candidate, called once between
cudaProfilerStart and cudaProfilerStop (ncu runs with `--profile-from-start off`).

Untrusted: it runs candidate code and nothing it prints is believed; the trusted side reads
only ncu's report. One warm-up call first compiles and autotunes outside the profiled range,
so the report holds the kernels of exactly one steady-state call.

    python -m kscience.evaluate.profile.entry --problem matmul --source cand.py --shape '{"m": 4096, ...}'
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys

import torch

from kscience.device import detect
from kscience.problems import load_problem


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="profile_entry")
    ap.add_argument("--problem", required=True)
    ap.add_argument("--source", required=True, help="candidate file")
    ap.add_argument("--shape", required=True, help="JSON keyword arguments of generate_input")
    ap.add_argument("--overrides", default="{}")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args(argv)
    problem = load_problem(args.problem, json.loads(args.overrides))
    device = detect()
    if device.interpreted:
        print("profile_entry: no GPU, nothing to profile", file=sys.stderr)
        return 2
    spec = importlib.util.spec_from_file_location("candidate", args.source)
    module = importlib.util.module_from_spec(spec)
    sys.modules["candidate"] = module
    spec.loader.exec_module(module)
    if problem.kind.builds_model:
        model = problem.make_model(getattr(module, problem.entry), args.seed).to(device.torch_device)

        def fn(data):
            with torch.no_grad():
                return model(*data)
    else:
        fn = getattr(module, problem.entry)
    data = list(problem.generate_input(args.seed, device.torch_device, **json.loads(args.shape)))
    fn(data)  # compile, autotune and warm up outside the profiled range
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    fn(data)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
