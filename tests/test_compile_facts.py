"""Compile facts read from compiled artefacts: a real Triton cache (compiled on a CPU machine for
sm_90 and gfx942 with `triton.compile(..., target=GPUTarget(...))`, kept in tests/data/triton_cache)."""

import json
import shutil
from pathlib import Path

import pytest

from kscience.evaluate.profile import compile_facts as cf

CACHE = Path(__file__).parent / "data" / "triton_cache"
HOPPER_MM = "NMIJSKHEMPN4W2JHHJBIV22BZCDZNFLS72UT7OTC5GS7KLDWENLQ"
needs_cuobjdump = pytest.mark.skipif(cf.cuobjdump() is None, reason="no cuobjdump (Triton ships one on Linux)")

# Recorded with Triton 3.9's bundled cuobjdump; the second function is edited to spill.
RESOURCE_USAGE = """
Fatbin elf code:
================
arch = sm_90
Resource usage:
 Common:
  GLOBAL:0
 Function mm:
  REG:64 STACK:0 SHARED:1024 LOCAL:0 CONSTANT[0]:568 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function _Z6spillyPfi:
  REG:255 STACK:96 SHARED:0 LOCAL:96 CONSTANT[0]:368 TEXTURE:0 SURFACE:0 SAMPLER:0
"""


@pytest.fixture(scope="module")
def facts():
    return cf.read_triton_cache(CACHE)  # cuobjdump runs per kernel: read the fixture once


def by(facts, backend, name):
    return next(f for f in facts if f.backend == backend and f.name == name)


def test_triton_metadata_and_ptx_of_a_hopper_matmul(facts):
    assert sorted((f.backend, f.name) for f in facts) == [("cuda", "mm"), ("cuda", "rowsum"), ("hip", "mm")]
    mm = by(facts, "cuda", "mm")
    assert (mm.source, mm.arch, mm.num_warps, mm.num_stages, mm.shared_bytes) == ("triton", "sm_90", 4, 3, 16384)
    assert mm.tensor_core is True and "wgmma.mma_async" in mm.tensor_instructions
    rowsum = by(facts, "cuda", "rowsum")
    assert (rowsum.num_warps, rowsum.num_stages, rowsum.tensor_core, rowsum.tensor_instructions) == (8, 1, False, [])
    json.dumps([f.to_dict() for f in facts])  # plain data: it goes to the store as JSON


@needs_cuobjdump
def test_registers_and_spills_from_the_cubin(facts):
    mm, rowsum = by(facts, "cuda", "mm"), by(facts, "cuda", "rowsum")
    assert (mm.registers, mm.spills, mm.static_shared_bytes) == (64, 0, 1024)
    assert (rowsum.registers, rowsum.spills) == (13, 0)


def test_rocm_report_from_amdgcn(facts):
    mm = by(facts, "hip", "mm")
    assert (mm.arch, mm.num_warps, mm.registers, mm.spills, mm.shared_bytes) == ("gfx942", 4, 46, 0, 8192)
    assert mm.tensor_core is True and mm.tensor_instructions == ["v_mfma_f32_32x32x8_bf16"]


def test_resource_report_parsing_counts_spills_as_triton_does():
    usage = cf.parse_resource_usage(RESOURCE_USAGE)
    assert usage["mm"]["REG"] == 64 and usage["mm"]["SHARED"] == 1024
    assert usage["_Z6spillyPfi"]["LOCAL"] // 4 == 24  # local bytes / 4, Triton's n_spills


def test_sass_tensor_opcodes_per_function():
    sass = """
        Function : mm
        /*0a40*/  HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT ;
        /*0a50*/  HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
        Function : plain
        /*0010*/  FFMA R1, R2, R3, R1 ;
    """
    assert cf.parse_sass_tensor_ops(sass) == {"mm": ["HGMMA", "HMMA"], "plain": []}


def test_interpreter_leaves_no_cache_so_no_facts(tmp_path):
    assert cf.collect(tmp_path / "never-created") == []
    assert cf.collect(tmp_path) == []


def test_planted_files_cannot_make_the_reader_leave_the_entry(tmp_path):
    """A candidate writes in its cache: group paths pointing elsewhere, symlinks and junk are ignored."""
    entry = tmp_path / "cache" / "X"
    shutil.copytree(CACHE / HOPPER_MM, entry)
    (entry / "__grp__mm.json").write_text(json.dumps({"child_paths": {"mm.ptx": "/etc/passwd"}}))
    (entry / "mm.ptx").unlink()
    (entry / "mm.ptx").symlink_to(CACHE / "N73T53X2ZVYWIFFM7QLHZRDBNGB23LFNNKIYKBUZQA3M2QHNUMXQ" / "rowsum.ptx")
    junk = tmp_path / "cache" / "Y"
    junk.mkdir()
    (junk / "k.json").write_text("{not json")
    facts = cf.read_triton_cache(tmp_path / "cache")
    assert [f.name for f in facts] == ["mm"]
    assert "wgmma.mma_async" not in facts[0].tensor_instructions  # the symlinked PTX was not read


def test_only_kernels_the_profiler_saw_launch(facts):
    kept = cf.confirm_launched(facts, ["rowsum", "void at::native::vectorized_elementwise_kernel<4>(int)"])
    assert [f.name for f in kept] == ["rowsum"]
    assert cf.confirm_launched(facts, ["mm_persistent"]) == []  # a prefix is not the kernel


def test_triton_36_metadata_recorded_on_an_h100():
    """The fp8 seed's cache entry as Triton 3.6 wrote it on an H100 (JSON and PTX; no cubin kept)."""
    (f,) = cf.read_triton_cache(Path(__file__).parent / "data" / "triton36_cache")
    assert (f.name, f.arch, f.num_warps, f.num_stages, f.shared_bytes) == ("fp8_blockscale_gemm_kernel", "sm_90",
                                                                            4, 4, 106496)
    assert f.tensor_core is True and f.tensor_instructions == ["wgmma.mma_async"]
    assert f.registers is None and f.spills is None  # they live in the cubin only


KERNEL = '''
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

@triton.jit
def rowsum(x, out, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out + tl.program_id(0), tl.sum(tl.load(x + tl.program_id(0) * N + offs).to(tl.float32), 0))

src = ASTSource(fn=rowsum, signature={"x": "*bf16", "out": "*fp32", "N": "constexpr"}, constexprs={"N": 256})
triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 2})
'''


def test_a_gpu_worker_compiles_into_its_own_cache_and_facts_are_read_from_it(tmp_path):
    from kscience.evaluate.sandbox import compile_cache

    dirs = compile_cache.private_dirs(tmp_path)
    assert dirs["TRITON_CACHE_DIR"].startswith(str(tmp_path))  # inside the worker's own folder
    entry = Path(dirs["TRITON_CACHE_DIR"]) / ("A" * 52)
    entry.mkdir(parents=True)
    (entry / "k.json").write_text(json.dumps({"name": "k", "num_warps": 4, "num_stages": 3, "shared": 1024,
                                               "target": {"backend": "cuda", "arch": 90}}))
    (entry / "k.ptx").write_text("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16")
    (facts,) = cf.collect(dirs["TRITON_CACHE_DIR"], dirs["TORCH_EXTENSIONS_DIR"])
    assert (facts.name, facts.num_warps, facts.num_stages, facts.tensor_core) == ("k", 4, 3, True)


# --- CUDA kernels built outside Triton: load_inline, nvcc through subprocess, ptxas -v -------------------
CUDA_BUILDS = Path(__file__).parent / "data" / "cuda_builds"


def test_ptxas_verbose_reports_each_entry_function_and_skips_device_functions():
    report = cf.parse_ptxas_verbose((CUDA_BUILDS / "ptxas_v.txt").read_text())
    assert list(report) == ["_Z11gelu_kernelPKfPfi", "tiled_gemm(float const*, float const*, float*, int, int, int)",
                            "_Z8spillingPfi"]  # _Z6tanhapf is a device function, no kernel
    assert report["_Z11gelu_kernelPKfPfi"] == {"arch": "sm_90", "stack": 0, "spill_stores": 0, "spill_loads": 0,
                                               "registers": 18}
    assert report["tiled_gemm(float const*, float const*, float*, int, int, int)"]["shared"] == 8192
    spilling = {f.name: f for f in cf.ptxas_facts((CUDA_BUILDS / "ptxas_v.txt").read_text())}["_Z8spillingPfi"]
    assert (spilling.source, spilling.registers, spilling.spills, spilling.local_bytes) == ("ptxas", 255, 45, 256)


def test_cuobjdump_resource_usage_of_an_nvcc_library():
    usage = cf.parse_resource_usage((CUDA_BUILDS / "cuobjdump_res_usage.txt").read_text())
    assert usage["_Z8spillingPfi"]["REG"] == 255 and usage["_Z8spillingPfi"]["LOCAL"] == 256
    assert usage["_Z11gelu_kernelPKfPfi"] == {"REG": 18, "STACK": 0, "SHARED": 0, "LOCAL": 0, "CONSTANT[0]": 368,
                                              "TEXTURE": 0, "SURFACE": 0, "SAMPLER": 0}


def test_a_build_folders_logs_and_the_workers_output_give_facts_once_per_kernel(tmp_path):
    from kscience.evaluate.sandbox import compile_cache

    dirs = compile_cache.private_dirs(tmp_path)
    build = Path(dirs[compile_cache.BUILD_DIR_VAR])
    build.mkdir(parents=True)
    lines = (CUDA_BUILDS / "ptxas_v.txt").read_text().splitlines()
    (build / "gelu.log").write_text("\n".join(lines[:5]))  # the first kernel's report, as nvcc wrote it
    output = "[stderr] " + "\n[stderr] ".join(lines)  # the whole report again, in what the worker printed
    facts = cf.collect(dirs["TRITON_CACHE_DIR"], dirs["TORCH_EXTENSIONS_DIR"], build_dir=build, logs=(output,))
    assert sorted(f.name for f in facts) == sorted(cf.parse_ptxas_verbose("\n".join(lines)))
    assert all(f.source == "ptxas" for f in facts)


@needs_cuobjdump
def test_a_cubin_in_the_build_folder_is_read_by_cuobjdump(tmp_path):
    """A cubin the candidate built itself (here Triton's sm_90 cubin of `mm`, copied) is read like a
    load_inline build, and ptxas's report of the same kernel adds nothing."""
    cubin = next((CACHE / HOPPER_MM).glob("*.cubin"))
    shutil.copyfile(cubin, tmp_path / "mm.cubin")
    report = "ptxas info    : Compiling entry function 'mm' for 'sm_90'\nptxas info    : Used 99 registers"
    (facts,) = cf.read_build_dir(tmp_path, (report,))
    assert (facts.name, facts.source, facts.registers, facts.spills, facts.static_shared_bytes) == (
        "mm", "build", 64, 0, 1024)


def test_compile_facts_of_a_cuda_build_reach_the_prompt():
    from kscience.record.seen import Seen
    from kscience.scientist.profile_report import render_profile

    text = render_profile(Seen(compile_facts=cf.ptxas_facts((CUDA_BUILDS / "ptxas_v.txt").read_text())))
    assert ("- _Z8spillingPfi (ptxas -v report, sm_90): 255 registers/thread; SPILLS 45 words to local memory; "
            "256 B local memory per thread; 0 B shared") in text
    assert "compile facts: none" not in text


def test_what_cuda_13_printed_and_cuobjdump_read_of_a_real_nvcc_build():
    (name, rec), = cf.parse_ptxas_verbose((CUDA_BUILDS / "ptxas_v_cuda13.txt").read_text()).items()
    assert name == "_Z11row_softmaxPK13__nv_bfloat16PS_i"
    assert rec == {"arch": "sm_90", "stack": 0, "spill_stores": 0, "spill_loads": 0, "registers": 29, "shared": 1024}
    usage = cf.parse_resource_usage((CUDA_BUILDS / "cuobjdump_res_usage_cuda13.txt").read_text())
    assert usage[name]["REG"] == 29 and usage[name]["LOCAL"] == 0 and usage[name]["SHARED"] == 2048


@needs_cuobjdump
def test_a_real_nvcc_library_in_the_build_folder_gives_its_kernels_facts(tmp_path):
    """The library nvcc built from benchmarks/cuda_kernels/softmax_cuda.cu is kept in tests/data only as its
    recorded reports; where this machine has nvcc, build it again and read it as the judge would."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc on this machine")
    import subprocess

    source = Path(__file__).parents[1] / "benchmarks" / "cuda_kernels" / "softmax_cuda.cu"
    done = subprocess.run([nvcc, "-O3", "-shared", "-Xcompiler", "-fPIC", "-Xptxas", "-v", "-arch=sm_90", "-o",
                           str(tmp_path / "softmax.so"), str(source)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-600:]
    (facts,) = cf.read_build_dir(tmp_path, (done.stdout + done.stderr,))  # ptxas's report adds nothing more
    (said,) = cf.parse_ptxas_verbose(done.stdout + done.stderr).values()
    assert (facts.source, facts.arch, facts.spills, facts.local_bytes) == ("build", "sm_90", 0, 0)
    assert facts.registers == said["registers"]  # the binary and the compiler's own report agree
