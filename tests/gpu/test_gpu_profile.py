"""Issue 17 on a real GPU: compile facts of the seeds' compiled kernels, a load_inline build's
resource report, and Nsight Compute counters of a seed on one shape (skipped without ncu)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kscience.evaluate.profile import compile_facts as cf
from kscience.evaluate.profile import ncu
from kscience.problems import load_problem
from kscience.run.profiling import profile_with_ncu

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
ROOT = Path(__file__).parents[2]

RUN_SEED = """
import importlib.util, json, sys
from kscience.problems import load_problem
problem = load_problem(sys.argv[1])
open("seed.py", "w").write(problem.seed_source)
spec = importlib.util.spec_from_file_location("seed", "seed.py")
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
mod.custom_kernel(problem.generate_input(1, "cuda", **problem.benchmarks[0]))
"""


def _run_seed(name: str, tmp_path: Path, cache: Path) -> None:
    env = dict(os.environ, TRITON_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-c", RUN_SEED, name], env=env, cwd=tmp_path, check=True, timeout=300)


@pytest.mark.parametrize("name,tensor_cores", [("matmul", True), ("fp8_blockscale_gemm", True), ("softmax", False)])
def test_compile_facts_of_a_seed_from_its_own_cache(name, tensor_cores, tmp_path):
    cache = tmp_path / "cache"
    _run_seed(name, tmp_path, cache)
    facts = cf.collect(cache)
    assert facts, f"no facts for {name}"
    print(json.dumps([f.to_dict() for f in facts], indent=1))
    for f in facts:
        assert f.arch == "sm_90" and f.num_warps and f.registers and f.spills is not None
        assert f.shared_bytes is not None
    assert any(f.tensor_core for f in facts) == tensor_cores


def test_load_inline_resource_report(tmp_path):
    from torch.utils.cpp_extension import load_inline

    cuda = """
    __global__ void twice(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2; }
    void run(torch::Tensor x) { twice<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), x.numel()); }
    """
    load_inline("kscience_facts_probe", cpp_sources="void run(torch::Tensor x);", cuda_sources=cuda,
                functions=["run"], build_directory=str(tmp_path), verbose=False)
    facts = cf.collect(None, tmp_path)
    assert [f.source for f in facts] == ["load_inline"] and "twice" in facts[0].name
    assert facts[0].registers and facts[0].spills == 0 and facts[0].tensor_core is False


@pytest.mark.skipif(ncu.ncu_path() is None, reason="Nsight Compute (ncu) is not installed")
def test_ncu_profile_of_the_softmax_seed():
    problem = load_problem("softmax")
    result = {"device": {"name": torch.cuda.get_device_name(), "interpreted": False}, "shapes": []}
    out = profile_with_ncu(problem, problem.seed_source, result, say=print)
    assert out is not None, "ncu ran but gave no profile (see the message above)"
    prof = ncu.NcuProfile.from_dict(out["ncu"])
    print(json.dumps(out, indent=1))
    assert prof.kernel_names == ["softmax_kernel"] and len(prof.kernels) == 1  # exactly one profiled call
    assert prof.dram_bytes > 0 and prof.occupancy_pct > 0 and prof.l2_hit_pct is not None
    assert prof.stalls and out["profile_s"] > 0 and out["flag"] is None


def test_a_run_stores_what_a_profiler_saw_of_its_seed(tmp_path):
    """Issue 17 wired into a run: compile facts and speed of light of every evaluation, and with
    --profile ncu (where ncu is installed) the seed's counters, their cost kept beside them."""
    from kscience.run.config import RunConfig
    from kscience.run.driver import Run
    from kscience.record.snapshot import Snapshot
    from kscience.record.store import Store

    store = Store(tmp_path / "k.db")
    run = Run.create(RunConfig(problem="softmax", iterations=0, llm="offline", profile="ncu"), store=store)
    assert run.start(background=False).status == "finished"
    snap = Snapshot.load(store, run.id)
    seed = snap.profile_of[snap.seed.id]
    assert seed.compile_facts and all(f["registers"] for f in seed.compile_facts)
    sol = snap.sol_summary(snap.seed)
    print(json.dumps({"sol": sol, "metrics": {k: v for k, v in snap.metrics().to_dict().items() if "sol" in k or "profile" in k}},
                     indent=1, default=str))
    assert sol is not None and 0 < sol["worst"] <= 1.0
    if ncu.ncu_path() is not None:
        assert seed.ncu["kernels"] and seed.profile_s > 0
        assert snap.metrics().n_profiled == 1  # the seed only: the baselines are timed, not profiled
