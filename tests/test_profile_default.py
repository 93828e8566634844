"""The profiler on by default (`--profile auto`, Nsight Compute where the judging machine has it), off
with `--profile none`; the prompt's profile block from a recorded Nsight Compute report; compile facts
once per kernel, its specialisations summarised."""

from pathlib import Path

import torch

from kscience.device import Device
from kscience.evaluate.profile import ncu
from kscience.evaluate.profile.compile_facts import KernelFacts
from kscience.run import profiling
from kscience.cli.main import build_parser
from kscience.run.config import RunConfig
from kscience.record.seen import Seen
from kscience.scientist.profile_report import render_profile

NCU_DATA = Path(__file__).parent / "data" / "ncu"


def test_auto_is_the_default_and_none_turns_it_off():
    assert RunConfig(problem="softmax").profile == "auto"
    assert build_parser().parse_args(["run", "softmax", "--profile", "none"]).profile == "none"
    assert profiling.resolve_profiler("none") == (None, None) and profiling.resolve_profiler(None) == (None, None)


def test_auto_leaves_the_question_of_ncu_to_the_judging_machine(monkeypatch):
    # No GPU and no ncu on the machine that runs the model: with queue:DIR or Ray the candidates are judged
    # (and profiled) elsewhere, so the run asks and the judging machine answers (profile/job.py).
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(ncu, "ncu_path", lambda: None)
    for setting in ("auto", "ncu"):
        used, said = profiling.resolve_profiler(setting, judged_here=False)
        assert used == setting and "where the judging machine has it" in said and "--profile none" in said
        assert f"within {profiling.PROFILE_SHARE:.0%} of slot time" in said
    # Judged here under the CPU interpreter, which has no counters to read: auto is off without a word, while
    # --profile ncu, asked for, says why it is off.
    assert profiling.resolve_profiler("auto") == (None, None)
    used, said = profiling.resolve_profiler("ncu")
    assert used is None and "ncu) is not on PATH" in said
    # On a machine with a GPU and no ncu, auto says once that it is off, and how to turn it on.
    monkeypatch.setattr(profiling, "detect", lambda: Device("cuda", "NVIDIA H100", 50 * 2**20, None))
    used, said = profiling.resolve_profiler("auto")
    assert used is None and "not on PATH of this machine, which judges the candidates" in said
    monkeypatch.setattr(ncu, "ncu_path", lambda: "/usr/local/cuda/bin/ncu")
    assert profiling.resolve_profiler("auto")[0] == "auto"


def test_the_profile_block_gives_stalls_tensor_pipe_memory_and_occupancy_from_a_recorded_report():
    prof = ncu.parse((NCU_DATA / "h100_fp8_blockscale_gemm_full_raw.csv").read_text())
    block = render_profile(Seen(ncu=prof))
    assert "top warp stalls: " in block and "tensor pipe 26%" in block and "achieved occupancy 12%" in block
    assert "DRAM" in block and len(block.splitlines()) <= 6


def facts(**kw) -> KernelFacts:
    base = dict(name="matmul_kernel", source="triton", backend="cuda", arch="sm_90", num_warps=8, num_stages=3,
                registers=168, spills=0, shared_bytes=98304, tensor_core=True, tensor_instructions=["HGMMA"])
    return KernelFacts(**{**base, **kw})


def test_compile_facts_come_once_per_kernel_with_specialisations_summarised():
    same = render_profile(Seen(compile_facts=[facts(), facts(), facts(), facts(name="add_bias", tensor_core=False,
                                                                               tensor_instructions=[])]))
    lines = [line for line in same.splitlines() if line.startswith("- ")]
    assert len(lines) == 2
    assert lines[0].startswith("- matmul_kernel (Triton, sm_90): 8 warps, 3 stages; 168 registers/thread")
    assert lines[0].endswith("[3 identical specialisations]") and "tensor cores: NO" in lines[1]
    mixed = render_profile(Seen(compile_facts=[facts(), facts(num_warps=4, registers=96, spills=12,
                                                              tensor_instructions=["HMMA"])]))
    (line,) = [x for x in mixed.splitlines() if x.startswith("- ")]
    assert "2 specialisations" in line and "4-8 warps" in line and "96-168 registers/thread" in line
    assert "SPILLS up to 12 words" in line and "tensor cores: yes (HGMMA, HMMA)" in line
