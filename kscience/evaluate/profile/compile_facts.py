"""Compile facts of a candidate's kernels, read by the trusted side from the compiled artefacts.

For every Triton kernel in a Triton cache directory: registers per thread, spills, shared
memory, `num_warps`/`num_stages` as compiled, and whether tensor-core instructions appear in the
compiled code (wgmma/mma in PTX, HGMMA/HMMA in SASS on NVIDIA, v_mfma in AMDGCN on ROCm). For
CUDA kernels built otherwise: the CUDA compiler's resource report of each `load_inline` extension and
of each library, cubin or object the candidate built itself into its `KSCIENCE_BUILD_DIR` (nvcc through
subprocess, loaded through ctypes), and where no binary says it, what `ptxas -v` printed (nvcc
`-Xptxas -v`, or load_inline with `verbose=True`: its report in the worker's output or in a `*.log`
or `*.txt` file of the build folder).

Where each number comes from (Triton 3.x writes `<cache>/<hash>/<name>.json` with the compile
metadata, beside `<name>.ptx`/`<name>.cubin` on NVIDIA or `<name>.amdgcn`/`<name>.hsaco` on ROCm):

* NVIDIA: registers and local memory from `cuobjdump --dump-resource-usage` of the cubin (the same
  numbers Triton's launcher reads from the driver: `n_spills` there is local bytes / 4, and so it
  is here); `num_warps`, `num_stages` and the dynamic shared memory Triton requests at launch from
  the JSON metadata; tensor-core use from the PTX (the SASS, `cuobjdump -sass`, for load_inline
  builds, which keep no PTX beside them). cuobjdump is
  the one Triton ships in `triton/backends/nvidia/bin`, or any on PATH; without one, registers and
  spills are None and only the PTX is read.
* CUDA kernels outside Triton: registers, local memory (stack, spills included) and static shared memory
  from `cuobjdump --dump-resource-usage` of the binary, spills as Triton counts them (local bytes / 4);
  from `ptxas -v` the registers, the stack frame as local memory, the spill stores (bytes / 4) and the
  shared memory of each entry function.
* ROCm (unverified on hardware): the AMDGCN text carries the assembler's own report
  (`.vgpr_count`, `.sgpr_count`, `.vgpr_spill_count`, `.sgpr_spill_count`, `.group_segment_fixed_size`).

Under the CPU interpreter Triton compiles nothing and writes no cache: there are no facts, and
`collect` returns an empty list rather than inventing any.

What a candidate could still forge: the worker can write files into its own cache directory, so
a candidate could plant a JSON/PTX/cubin describing a kernel it never ran, or alter one it did.
These facts are therefore advice to the scientist, never a verdict: correctness and time are
judged elsewhere and cannot be moved by them. The judge limits the damage by reading only the
evaluation's private cache (sandbox/workers.Worker reads it as it closes; a warm start copies in only the
entries of the identical source), by reading only regular files inside each entry's folder (a group file's paths are ignored: they could point anywhere on the machine), by
bounding every read, and, when Nsight Compute ran, by `confirm_launched`, which keeps only kernels
whose names the profiler saw launch.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

MAX_FILE_BYTES = 64 << 20  # a planted giant file is skipped, not read
MAX_LOG_BYTES = 1 << 20  # a build log read for ptxas's report
BINARIES = ("*.so", "*.cubin", "*.fatbin", "*.o")  # what a candidate's own build can leave that cuobjdump reads
BUILD_LOGS = ("*.log", "*.txt")
MAX_KERNELS = 256  # an autotuned candidate compiles tens of variants; more is a flood
TOOL_TIMEOUT_S = 30.0

# Tensor-core instructions: PTX (Ampere mma.sync, Hopper wgmma, Blackwell tcgen05), SASS (HMMA,
# IMMA, DMMA on Ampere; HGMMA, QGMMA (fp8), IGMMA on Hopper; UTC*MMA on Blackwell), AMDGCN (MFMA, WMMA).
_PTX_TC = re.compile(r"\b(wgmma\.mma_async|mma\.sync|tcgen05\.mma)\b")
_SASS_TC = re.compile(r"\b(HGMMA|QGMMA|IGMMA|BGMMA|HMMA|IMMA|DMMA|UTC[A-Z]*MMA)\b")
_AMD_TC = re.compile(r"\b(v_mfma_\w+|v_smfmac_\w+|v_wmma_\w+)")
_RESOURCE = re.compile(r"^\s*Function\s+(\S+?):\s*$")
_FIELDS = re.compile(r"([A-Z]+(?:\[\d+\])?):(\d+)")
_SASS_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)\s*$")
_KEY = re.compile(r"[A-Z2-7]{52}")  # Triton's cache key: base32 of a SHA-256, without padding
# ptxas -v: "Compiling entry function 'NAME' for 'sm_90'", "Function properties for NAME", then
# "N bytes stack frame, N bytes spill stores, N bytes spill loads" and "Used N registers, ... N bytes smem, ...".
_PTXAS_ENTRY = re.compile(r"ptxas\b.*Compiling entry function '([^']+)' for '(\w+)'")
_PTXAS_PROPERTIES = re.compile(r"ptxas\b.*Function properties for (.+?)\s*$")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"ptxas\b.*Used (\d+) registers")
_PTXAS_MEMORY = re.compile(r"(\d+)(?:\+(\d+))? bytes (smem|lmem)")


@dataclass
class KernelFacts:
    name: str
    source: str  # "triton" or "load_inline"
    backend: str  # "cuda" or "hip"
    arch: str | None = None  # "sm_90", "gfx942"
    num_warps: int | None = None
    num_stages: int | None = None
    registers: int | None = None  # per thread (VGPRs on ROCm)
    spills: int | None = None  # 32-bit words in local memory (NVIDIA), spilled registers (ROCm)
    shared_bytes: int | None = None  # dynamic shared memory / LDS Triton requests at launch
    static_shared_bytes: int | None = None  # shared memory declared in the binary itself
    local_bytes: int | None = None  # local memory per thread (stack frame, spills included), CUDA outside Triton
    tensor_core: bool | None = None  # None: no compiled code to look at
    tensor_instructions: list[str] = field(default_factory=list)  # distinct opcodes, e.g. "HGMMA"
    artefact: str = ""  # folder or file the facts were read from

    def to_dict(self) -> dict:
        return asdict(self)


def cuobjdump() -> str | None:
    """Triton's bundled cuobjdump (same release as its ptxas), else one on PATH."""
    with contextlib.suppress(ImportError):  # Triton without its NVIDIA backend: the PATH's, if any
        import triton.backends.nvidia as nv

        bundled = Path(nv.__file__).parent / "bin" / "cuobjdump"
        if bundled.is_file():
            return str(bundled)
    return shutil.which("cuobjdump")


def _read_text(path: Path) -> str | None:
    if not path.is_file() or path.is_symlink() or path.stat().st_size > MAX_FILE_BYTES:
        return None
    return path.read_text(errors="replace")


def _tool(args: list[str]) -> str:
    """stdout of a toolkit command, or "" when it is missing, fails or hangs."""
    tool = cuobjdump()
    if tool is None:
        return ""
    try:
        done = subprocess.run([tool, *args], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout if done.returncode == 0 else ""


def parse_resource_usage(text: str) -> dict[str, dict[str, int]]:
    """`cuobjdump --dump-resource-usage` output -> {function: {"REG": 64, "LOCAL": 0, "SHARED": 1024, ...}}.
    With several architectures in one binary, the last one listed wins (they agree on names)."""
    out, current = {}, None
    for line in text.splitlines():
        m = _RESOURCE.match(line)
        if m:
            current = m.group(1)
            continue
        if current and "REG:" in line:
            out[current] = {k: int(v) for k, v in _FIELDS.findall(line)}
            current = None
    return out


def parse_ptxas_verbose(text: str) -> dict[str, dict[str, int | str]]:
    """`ptxas -v` output -> {entry function: {"arch", "registers", "stack", "spill_stores", "spill_loads",
    "shared", "local"}} (the fields it printed). Device functions' properties are not kernels and are left out;
    an entry compiled for several architectures keeps the last one listed."""
    out: dict[str, dict] = {}
    entry = described = None
    for line in text.splitlines():
        m = _PTXAS_ENTRY.search(line)
        if m:
            entry = described = m.group(1)
            out[entry] = {"arch": m.group(2)}
            continue
        m = _PTXAS_PROPERTIES.search(line)
        if m:
            described = m.group(1)
            continue
        m = _PTXAS_FRAME.search(line)
        if m and described in out:
            out[described].update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
            continue
        m = _PTXAS_USED.search(line)
        if m and entry in out:
            out[entry]["registers"] = int(m.group(1))
            for first, second, kind in _PTXAS_MEMORY.findall(line):
                out[entry]["shared" if kind == "smem" else "local"] = int(first) + int(second or 0)
            entry = None
    return {name: rec for name, rec in out.items() if "registers" in rec}


def ptxas_facts(text: str) -> list[KernelFacts]:
    """KernelFacts of every entry function a `ptxas -v` report names."""
    return [KernelFacts(name=name, source="ptxas", backend="cuda", arch=str(rec["arch"]),
                        registers=rec["registers"], spills=rec.get("spill_stores", 0) // 4,
                        static_shared_bytes=rec.get("shared", 0),
                        local_bytes=max(rec.get("stack", 0), rec.get("local", 0)))
            for name, rec in sorted(parse_ptxas_verbose(text).items())]


def parse_sass_tensor_ops(text: str) -> dict[str, list[str]]:
    """`cuobjdump -sass` output -> {function: sorted distinct tensor-core opcodes}."""
    out: dict[str, set] = {}
    current = None
    for line in text.splitlines():
        m = _SASS_FUNCTION.match(line)
        if m:
            current = m.group(1)
            out.setdefault(current, set())
        elif current:
            out[current].update(_SASS_TC.findall(line))
    return {k: sorted(v) for k, v in out.items()}


def _amdgcn_value(text: str, key: str) -> int | None:
    m = re.search(rf"^\s*\.{re.escape(key)}:\s*(\d+)", text, re.M)
    return int(m.group(1)) if m else None


def _ptx_tensor_ops(ptx: str) -> list[str]:
    return sorted(set(_PTX_TC.findall(ptx)))


def read_triton_entry(folder: Path) -> KernelFacts | None:
    """Facts of one cache entry (a `<hash>` folder), or None when it holds no compiled kernel."""
    metas = [p for p in sorted(folder.glob("*.json")) if not p.name.startswith("__grp__")]
    for meta_path in metas:
        text = _read_text(meta_path)
        try:
            meta = json.loads(text) if text else None
        except json.JSONDecodeError:
            meta = None
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
            continue
        stem = meta_path.stem
        target = meta.get("target") if isinstance(meta.get("target"), dict) else {}
        backend = str(target.get("backend", "cuda"))
        arch = target.get("arch")
        facts = KernelFacts(name=meta["name"], source="triton", backend=backend,
                            arch=(f"sm_{arch}" if isinstance(arch, int) else str(arch) if arch else None),
                            num_warps=_int(meta.get("num_warps")), num_stages=_int(meta.get("num_stages")),
                            shared_bytes=_int(meta.get("shared")), artefact=str(folder))
        if backend == "hip":
            _read_amdgcn(facts, folder / f"{stem}.amdgcn")
        else:
            _read_cuda(facts, folder / f"{stem}.ptx", folder / f"{stem}.cubin")
        return facts
    return None


def _read_cuda(facts: KernelFacts, ptx_path: Path, cubin_path: Path) -> None:
    if cubin_path.is_file() and not cubin_path.is_symlink() and cubin_path.stat().st_size <= MAX_FILE_BYTES:
        usage = parse_resource_usage(_tool(["--dump-resource-usage", str(cubin_path)])).get(facts.name)
        if usage:
            facts.registers, facts.static_shared_bytes = usage.get("REG"), usage.get("SHARED")
            facts.spills = usage.get("LOCAL", 0) // 4  # as Triton's launcher counts them
    # Tensor-core use from the PTX: ptxas turns each mma/wgmma into HMMA/HGMMA (short of deleting dead
    # code), and disassembling the cubin instead (cuobjdump -sass) costs a second or more per kernel.
    ptx = _read_text(ptx_path)
    if ptx is not None:
        ops = _ptx_tensor_ops(ptx)
        facts.tensor_core, facts.tensor_instructions = bool(ops), ops


def _read_amdgcn(facts: KernelFacts, path: Path) -> None:
    text = _read_text(path)
    if text is None:
        return
    facts.registers = _amdgcn_value(text, "vgpr_count")
    vgpr, sgpr = _amdgcn_value(text, "vgpr_spill_count"), _amdgcn_value(text, "sgpr_spill_count")
    facts.spills = None if vgpr is None and sgpr is None else (vgpr or 0) + (sgpr or 0)
    facts.static_shared_bytes = _amdgcn_value(text, "group_segment_fixed_size")
    ops = sorted(set(_AMD_TC.findall(text)))
    facts.tensor_core, facts.tensor_instructions = bool(ops), ops


def read_triton_cache(cache_dir: str | Path, keys: list[str] | None = None) -> list[KernelFacts]:
    """Facts of the kernels in a Triton cache directory (only the entries named by `keys` when
    given), sorted by kernel name; [] where there is none."""
    root = Path(cache_dir)
    if not root.is_dir():
        return []
    folders = [root / k for k in keys] if keys is not None else sorted(root.iterdir())
    out = []
    for folder in (p for p in folders if p.is_dir() and not p.is_symlink()):
        facts = read_triton_entry(folder)
        if facts is not None:
            out.append(facts)
        if len(out) >= MAX_KERNELS:
            break
    return sorted(out, key=lambda f: (f.name, f.num_warps or 0, f.num_stages or 0))


def read_extension(so_path: str | Path, source: str = "load_inline") -> list[KernelFacts]:
    """The compiler's resource report of a built binary (one record per device function): a load_inline
    extension, or (`source` "build") a library, cubin or object the candidate built itself."""
    path = Path(so_path)
    if not path.is_file() or path.is_symlink() or path.stat().st_size > MAX_FILE_BYTES:
        return []
    report = _tool(["--dump-resource-usage", str(path)])
    usage = parse_resource_usage(report)
    tensor = parse_sass_tensor_ops(_tool(["-sass", str(path)])) if usage else {}
    arch = (re.findall(r"^arch = (\w+)", report, re.M) or [None])[-1]  # the last listed, as the usage is
    return [KernelFacts(name=name, source=source, backend="cuda", arch=arch, registers=u.get("REG"),
                        spills=u.get("LOCAL", 0) // 4, static_shared_bytes=u.get("SHARED"), local_bytes=u.get("LOCAL"),
                        tensor_core=bool(tensor.get(name)) if name in tensor else None,
                        tensor_instructions=tensor.get(name, []), artefact=str(path))
            for name, u in sorted(usage.items())]


def _files(root: Path, patterns: tuple[str, ...]) -> list[Path]:
    found = sorted({p for pattern in patterns for p in root.rglob(pattern)})
    return [p for p in found if p.is_file() and not p.is_symlink()][:MAX_KERNELS]


def read_build_dir(build_dir: str | Path, logs: tuple[str, ...] = ()) -> list[KernelFacts]:
    """Facts of the CUDA kernels a candidate built itself into `build_dir`: each binary's resource report,
    then for entry functions no binary described, what `ptxas -v` printed in `logs` (the worker's output) or
    in the folder's build logs."""
    root = Path(build_dir) if build_dir else None
    facts = []
    if root is not None and root.is_dir():
        for path in _files(root, BINARIES):
            facts += read_extension(path, "build")
        logs = (*logs, *(p.read_text(errors="replace") for p in _files(root, BUILD_LOGS)
                         if p.stat().st_size <= MAX_LOG_BYTES))
    return facts + ptxas_only(facts, "\n".join(logs))


def ptxas_only(known: list[KernelFacts], text: str) -> list[KernelFacts]:
    """What `ptxas -v` reported in `text` of the kernels `known` does not describe already."""
    described = {f.name for f in known if f.registers is not None}
    return [f for f in ptxas_facts(text) if f.name not in described]


def collect(triton_cache: str | Path | None, extensions_dir: str | Path | None = None, *,
            keys: list[str] | None = None, since: float | None = None, build_dir: str | Path | None = None,
            logs: tuple[str, ...] = ()) -> list[KernelFacts]:
    """Everything one evaluation compiled or loaded: call after its worker is gone.

    `keys`: only these Triton entries (None: the whole cache, which is right for a cache private to
    the evaluation, as every worker's is). `since`: only load_inline builds written at or
    after this time.time() (a build reused unchanged from an earlier evaluation was reported there).
    `build_dir`: the folder the candidate's own builds went to (KSCIENCE_BUILD_DIR); `logs`: the worker's
    output, where a build's `ptxas -v` report lands.
    """
    facts = read_triton_cache(triton_cache, keys) if triton_cache else []
    if extensions_dir and Path(extensions_dir).is_dir():
        builds = [p for p in sorted(Path(extensions_dir).rglob("*.so")) if since is None or p.stat().st_mtime >= since]
        for so in builds[:MAX_KERNELS]:
            facts += read_extension(so)
    built = read_build_dir(build_dir, ()) if build_dir else []
    return facts + built + ptxas_only(facts + built, "\n".join(logs))


def confirm_launched(facts: list[KernelFacts], launched: list[str]) -> list[KernelFacts]:
    """Only the kernels the profiler saw launch (names as Nsight Compute prints them may carry a
    C++ signature or template arguments around the bare name)."""
    def seen(name: str) -> bool:
        return any(k == name or re.search(rf"(^|[^\w]){re.escape(name)}([^\w]|$)", k) for k in launched)
    return [f for f in facts if seen(f.name)]


def _int(x) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None
