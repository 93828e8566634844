"""Speed-of-light arithmetic on hand-computed numbers, --stop-at-sol, the lazy-kernel flag, and the
profile block a prompt shows."""

from pathlib import Path

import pytest

from kscience.device import Peaks, peaks_for
from kscience.evaluate.profile import compile_facts as cf
from kscience.evaluate.profile import ncu
from kscience.problems import load_problem
from kscience.record.rows import ProfileRow
from kscience.record.seen import Seen
from kscience.scientist.profile_report import render_headroom, render_profile
from kscience.problems.roofline import ShapeSol, not_doing_the_work, result_sol, shape_sol, stop_at_sol, summary

TOY = Peaks(1e12, {"bf16": 1e15, "fp32": 1e14})  # 1 TB/s, 1 PFLOP/s bf16
H100 = peaks_for("NVIDIA H100 80GB HBM3")
SQUARE = {"m": 4096, "n": 4096, "k": 4096}


def test_one_shape_by_hand():
    # 1e12 FLOPs at 1e15/s: 1000 us; 5e8 bytes at 1e12 B/s: 500 us. Measured 2000 us.
    s = shape_sol({"m": 1}, 2000.0, 1e12, 5e8, TOY, "bf16")
    assert (s.compute_fraction, s.memory_fraction, s.bound, s.floor_us) == (0.5, 0.25, "compute", 1000.0)
    assert s.fraction == 0.5
    m = shape_sol({"m": 1}, 100.0, 1e9, 5e7, TOY, "fp32")  # 10 us of fp32 compute, 50 us of memory
    assert m.bound == "memory" and m.fraction == pytest.approx(0.5) and m.compute_fraction == pytest.approx(0.1)
    assert shape_sol({"m": 1}, 100.0, 0.0, 0.0, TOY, "bf16") is None  # no declared work, no bound


def test_matmul_on_an_h100_from_a_stored_result():
    problem = load_problem("matmul")
    result = {"device": {"name": "NVIDIA H100 80GB HBM3", "interpreted": False},
              "shapes": [{"shape": SQUARE, "phase": "benchmark", "time_us": 200.0},
                         {"shape": SQUARE, "phase": "test", "time_us": None}]}
    (s,) = result_sol(problem, result)
    # 2*4096^3 FLOPs / 989e12 FLOP/s = 138.97 us; 2*3*4096^2 bytes / 3.35e12 B/s = 30.05 us
    assert s.floor_us == pytest.approx(138.968, rel=1e-4)
    assert s.compute_fraction == pytest.approx(0.69484, rel=1e-4)
    assert s.memory_fraction == pytest.approx(0.15024, rel=1e-4)
    assert s.bound == "compute"
    assert result_sol(problem, dict(result, device={"name": "cpu", "interpreted": True})) == []
    assert result_sol(problem, dict(result, device={"name": "Some GPU", "interpreted": False})) == []


def test_summary_and_stop_at_sol():
    sols = [shape_sol({"i": i}, t, 1e12, 0.0, TOY, "bf16") for i, t in enumerate((1250.0, 2000.0, 1100.0))]
    s = summary(sols)
    assert s.worst == 0.5 and s.worst_shape == {"i": 1} and s.median == pytest.approx(0.8) and s.n_shapes == 3
    assert stop_at_sol(sols, 0.5) and not stop_at_sol(sols, 0.6)
    assert not stop_at_sol(sols, None) and not stop_at_sol([], 0.1) and summary([]) is None
    with pytest.raises(ValueError, match="fraction"):
        stop_at_sol(sols, 80)


def test_not_doing_the_work_by_dram_bytes():
    problem = load_problem("matmul")
    need = problem.bytes_moved(**SQUARE)  # 100,663,296 bytes
    assert not_doing_the_work(problem, SQUARE, 0.9 * need, None) is None
    flag = not_doing_the_work(problem, SQUARE, 0.01 * need, None)
    assert flag.startswith("not doing the work") and "1%" in flag
    assert not_doing_the_work(problem, SQUARE, None, 1.0) is None  # bf16 work is not in fp32 counts


def test_profile_block_for_a_prompt():
    facts = [f for f in cf.read_triton_cache(Path(__file__).parent / "data" / "triton_cache") if f.backend == "cuda"]
    prof = ncu.parse((Path(__file__).parent / "data" / "ncu" / "documented_format.csv").read_text())
    prof.shape, prof.profile_s = SQUARE, 4.25
    stored = ProfileRow(candidate_id="c", run_id="r", compile_facts=[f.to_dict() for f in facts], ncu=prof.to_dict(),
                        sol=[ShapeSol(SQUARE, 200.0, 138.968, 0.69484, 0.15024, "compute").to_dict()], flag=None,
                        profile_s=4.25, updated=0.0)
    text = render_profile(Seen.of(stored, None))  # read back from the stored form
    lines = text.splitlines()
    assert lines[0] == "Profile of this kernel:"
    assert lines[1].startswith("- mm (Triton, sm_90): 4 warps, 3 stages")
    assert "16 KiB shared" in lines[1] and "tensor cores: yes (" in lines[1]
    assert "tensor cores: NO" in lines[2]
    assert "Nsight Compute on m=4096,n=4096,k=4096: 2 kernel launch(es) per call" in text
    assert "profiling took 4.2 s, outside any timing" in text
    assert "DRAM 1650 GB/s (50% of peak)" in text and "tensor pipe 65%" in text
    assert "top warp stalls: long_scoreboard 3.425" in text
    assert text.endswith("Headroom: 69% of the compute bound on shape m=4096,n=4096,k=4096 "
                         "(up to 1.4x faster possible there); median 69% of speed of light over 1 shape(s).")
    if cf.cuobjdump():
        assert "64 registers/thread; no spills" in lines[1]


def test_profile_block_without_a_gpu():
    text = render_profile(Seen(flag="not doing the work: x"))
    assert "compile facts: none" in text and "WARNING: not doing the work" in text
    assert render_headroom([]).startswith("Headroom: unknown")


def test_recorded_h100_seeds_do_the_work():
    """The built-in seeds' counters on an H100 against what their problems need: not flagged."""
    data = Path(__file__).parent / "data" / "ncu"
    for name, shape, path in (("softmax", {"m": 4096, "n": 4096}, "h100_softmax_full_raw.csv"),
                              ("fp8_blockscale_gemm", {"m": 1024, "n": 7168, "k": 2048},
                               "h100_fp8_blockscale_gemm_full_raw.csv")):
        p = ncu.parse((data / path).read_text())
        assert not_doing_the_work(load_problem(name), shape, p.dram_bytes, p.fp32_flops) is None
        assert not_doing_the_work(load_problem(name), shape, p.dram_bytes / 10, None) is not None
