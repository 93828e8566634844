"""Parsing Nsight Compute's raw CSV report, the command line it is recorded with, and a machine without ncu."""

from pathlib import Path

import pytest

from kscience.evaluate.profile import ncu

DATA = Path(__file__).parent / "data" / "ncu"
RECORDED = sorted(DATA.glob("h100_*.csv"))  # recorded on an H100 with ncu.command(...)


def test_documented_layout_units_weights_and_names():
    p = ncu.parse((DATA / "documented_format.csv").read_text())
    assert [k.name for k in p.kernels] == ["matmul_kernel", "add_bias"]
    assert [k.duration_ns for k in p.kernels] == [90_000.0, 10_000.0]  # usecond -> ns
    assert p.gpu_time_us == pytest.approx(100.0)
    # Mbyte and Kbyte to bytes, thousands separators dropped: 100.5e6 + 16e6 + 33,554.432e3 + 16,000e3
    assert p.dram_bytes == pytest.approx(166_054_432.0)
    # duration-weighted over the two kernels (0.9 and 0.1)
    assert p.dram_bandwidth == pytest.approx(0.9 * 1.5e12 + 0.1 * 3e12)
    assert p.dram_pct == pytest.approx(0.9 * 45.2 + 0.1 * 90)
    assert p.sm_pct == pytest.approx(0.9 * 60.1 + 0.1 * 20)
    assert p.occupancy_pct == pytest.approx(0.9 * 12.4 + 0.1 * 80)
    assert p.l2_hit_pct == pytest.approx(0.9 * 81.3 + 0.1 * 40)
    assert p.tensor_pipe_pct == pytest.approx(0.9 * 72.5)  # the busiest tensor pipe (gmma on Hopper)
    assert p.fp32_flops == pytest.approx(1000 + 4_194_304)
    # one stall family; "selected" is not a stall; largest first
    assert [r for r, _ in p.stalls] == ["long_scoreboard", "barrier", "wait"]
    assert p.stalls[0][1] == pytest.approx(0.9 * 3.25 + 0.1 * 5.0, abs=1e-3)
    assert p.stall_unit == "warp cycles per issued instruction"
    again = ncu.NcuProfile.from_dict(p.to_dict())
    assert again == p and again.kernel_names == ["add_bias", "matmul_kernel"]


def test_recorded_h100_reports_are_all_there():
    assert [p.name for p in RECORDED] == ["h100_fp8_blockscale_gemm_full_raw.csv", "h100_softmax_full_raw.csv"]


def test_recorded_h100_softmax():
    """The built-in softmax seed, m=n=4096, on an H100 (ncu --csv --page raw --set full; auto units)."""
    p = ncu.parse((DATA / "h100_softmax_full_raw.csv").read_text())
    assert [(k.name, k.duration_ns, k.grid, k.block) for k in p.kernels] == \
        [("softmax_kernel", 20_320.0, "(4096, 1, 1)", "(256, 1, 1)")]
    assert p.dram_bytes == 33_568_256 + 13_084_928  # dram__bytes_read.sum + dram__bytes_write.sum
    assert p.dram_bandwidth == pytest.approx(2_295_924_409_448.82)  # byte/s
    assert p.dram_pct == 68.61  # gpu__dram_throughput: Hopper has no dram__throughput
    assert (p.sm_pct, p.tensor_pipe_pct, p.occupancy_pct, p.l2_hit_pct) == (58.97, 0.0, 87.43, 51.18)
    assert p.stalls[0] == ("long_scoreboard", 7.58) and all(r != "not_selected" for r, _ in p.stalls)
    assert p.fp32_flops is None  # --set full collects only per-cycle rates of these counters


def test_recorded_h100_fp8_gemm():
    p = ncu.parse((DATA / "h100_fp8_blockscale_gemm_full_raw.csv").read_text())
    assert p.kernel_names == ["fp8_blockscale_gemm_kernel"] and p.gpu_time_us == pytest.approx(166.4)
    assert p.tensor_pipe_pct == 26.5 and p.occupancy_pct == 11.73 and p.l2_hit_pct == 90.04
    assert p.dram_bytes == 18_643_712 + 4_662_272


def test_no_report_and_no_kernels_are_clear_errors():
    with pytest.raises(ncu.NcuError, match="no ncu CSV report"):
        ncu.parse("==PROF== ERROR: Failed to profile\n")
    header = (DATA / "documented_format.csv").read_text().splitlines()[4:6]
    with pytest.raises(ncu.NcuError, match="launched none"):
        ncu.parse("\n".join(header))


def test_command_line_is_the_recorded_one():
    cmd = ncu.command("ncu", "/tmp/r.csv", ["--problem", "matmul"], python="python")
    assert cmd[:12] == ["ncu", "--csv", "--page", "raw", "--print-units", "base", "--profile-from-start", "off",
                        "--target-processes", "all", "--log-file", "/tmp/r.csv"]
    assert cmd.count("--section") == len(ncu.SECTIONS)
    assert cmd[-5:] == ["python", "-m", "kscience.evaluate.profile.entry", "--problem", "matmul"]


def test_without_ncu_it_says_so_once_and_profiles_nothing(monkeypatch):
    monkeypatch.setattr(ncu, "ncu_path", lambda: None)
    monkeypatch.setattr(ncu, "_missing_said", False)
    said = []
    for _ in range(3):
        assert ncu.profile("softmax", "source", {"m": 1, "n": 1}, say=said.append) is None
    assert len(said) == 1 and "ncu" in said[0] and "not on PATH" in said[0]


def test_the_profiled_entry_refuses_to_run_without_a_gpu(tmp_path, capsys):
    from kscience.evaluate.profile import entry
    from kscience.problems import load_problem

    (tmp_path / "seed.py").write_text(load_problem("softmax").seed_source)
    code = entry.main(["--problem", "softmax", "--source", str(tmp_path / "seed.py"),
                               "--shape", '{"m": 4, "n": 8}'])
    assert code == 2 and "no GPU" in capsys.readouterr().err


def _fake_ncu(tmp_path, body: str) -> str:
    """A stand-in for ncu: a script that finds --log-file in its arguments, then does `body`."""
    script = tmp_path / "ncu"
    script.write_text("#!/bin/bash\nwhile [ $# -gt 0 ]; do [ \"$1\" = --log-file ] && log=$2; shift; done\n" + body)
    script.chmod(0o755)
    return str(script)


def test_profile_runs_ncu_reads_its_log_and_measures_the_cost(tmp_path, monkeypatch):
    fake = _fake_ncu(tmp_path, f'cp {DATA / "h100_softmax_full_raw.csv"} "$log"\n')
    monkeypatch.setattr(ncu, "ncu_path", lambda: fake)
    p = ncu.profile("softmax", "source", {"m": 4096, "n": 4096}, timeout_s=60)
    assert p.kernel_names == ["softmax_kernel"] and p.shape == {"m": 4096, "n": 4096} and p.profile_s > 0


def test_a_failed_or_hung_ncu_is_a_one_line_error(tmp_path, monkeypatch):
    fake = _fake_ncu(tmp_path, 'echo "==ERROR== ERR_NVGPUCTRPERM - no permission to access counters" >&2; exit 1\n')
    monkeypatch.setattr(ncu, "ncu_path", lambda: fake)
    with pytest.raises(ncu.NcuError, match=r"ncu failed \(exit 1\): ==ERROR== ERR_NVGPUCTRPERM"):
        ncu.profile("softmax", "source", {"m": 1, "n": 1}, timeout_s=60)
    hung = _fake_ncu(tmp_path, "sleep 30 & wait\n")
    monkeypatch.setattr(ncu, "ncu_path", lambda: hung)
    with pytest.raises(ncu.NcuError, match="ran past 1s"):
        ncu.profile("softmax", "source", {"m": 1, "n": 1}, timeout_s=1)
