"""Compile caches a candidate can neither poison for others nor grow without bound (the trusted side).

Each evaluation gets its own Triton cache and torch-extensions folder inside the worker's sandbox
folder, deleted with it. A shared cache would let one candidate plant a build under a name
another candidate uses: `load_inline(name="ext")` reuses whatever library sits in
`TORCH_EXTENSIONS_DIR/ext` when ninja finds it newer than the sources, so an innocent candidate
would run the planted code. Triton's cache is keyed by a hash of the kernel, which a candidate
can compute and fill with anything too.

Warm starts stay where they are sound: once an evaluation's worker has imported the candidate (its
builds are done, whatever its verdict), the judge copies (never links) the private caches into a
store keyed by a hash of the candidate's source and the device,
and the next evaluation of the very same source starts from a copy of them. Only that source's
own evaluations ever write its entry, so the only code a planted file can reach is code that
wrote it. Entries are capped in size; the store as a whole is trimmed, oldest use first.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from pathlib import Path

ENTRY_BYTES = 512 * 2**20  # a larger private cache is not kept
_GROUP_BYTES = 1 << 20  # a Triton group file lists a handful of paths
STORE_BYTES = int(os.environ.get("KSCIENCE_CACHE_BYTES", 4 * 2**30))  # the whole store, trimmed oldest first


def store_root() -> Path:
    """Where kept caches live (`KSCIENCE_CACHE`, default ~/.cache/kscience), written by the judge only."""
    return Path(os.environ.get("KSCIENCE_CACHE", Path.home() / ".cache" / "kscience")) / "by-source"


BUILD_DIR_VAR = "KSCIENCE_BUILD_DIR"  # where a candidate's own builds (nvcc through subprocess, ctypes) go to be kept


def private_dirs(workdir: Path) -> dict[str, str]:
    """The environment that points a worker's compilers at its own folder: Triton's cache, torch's
    extensions, and a folder for builds the candidate runs itself (told to it as BUILD_DIR_VAR)."""
    base = workdir / ".compile-cache"
    return {"TRITON_CACHE_DIR": str(base / "triton"), "TORCH_EXTENSIONS_DIR": str(base / "torch_extensions"),
            BUILD_DIR_VAR: str(base / "build")}


def key(source: str, device_label: str) -> str:
    return hashlib.sha256(f"{device_label}\0{source}".encode()).hexdigest()


def _regular_files(root: Path):
    """Plain files below root, never following a link a candidate may have left."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in filenames:
            path = Path(dirpath) / name
            if path.is_file() and not path.is_symlink():
                yield path


def _copy_tree(src: Path, dst: Path, limit: int) -> bool:
    """Copy regular files only; False (and nothing left at dst) when they add up to more than limit."""
    total = 0
    try:
        for path in _regular_files(src):
            total += path.stat().st_size
            if total > limit:
                raise OverflowError
            target = dst / path.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target, follow_symlinks=False)
        return True
    except (OSError, OverflowError):
        shutil.rmtree(dst, ignore_errors=True)
        return False


def seed(workdir: Path, entry: str) -> bool:
    """Fill a worker's private caches from the store's entry for this source; whether one existed."""
    kept = store_root() / entry
    if not kept.is_dir():
        return False
    with contextlib.suppress(OSError):
        os.utime(kept)  # recently used: trimmed last
    if not _copy_tree(kept, workdir / ".compile-cache", ENTRY_BYTES):
        return False
    _rebase_groups(Path(private_dirs(workdir)["TRITON_CACHE_DIR"]))
    return True


def _rebase_groups(triton_dir: Path) -> None:
    """Point Triton's group files at this copy. A group (`__grp__NAME.json`) lists its compiled
    files by absolute path, which named the folder of the evaluation that compiled them; Triton
    treats a group whose files are missing as a miss, so without this every warm start recompiled
    (three specialisations of the fp8 seed, 2 s of each evaluation on an H100). A file is only
    ever looked for beside its group, so nothing outside this copy can be named."""
    for group in triton_dir.glob("*/__grp__*.json"):
        try:
            if group.stat().st_size > _GROUP_BYTES:
                raise ValueError("oversized group file")
            data = json.loads(group.read_text())
            children = {name: str(group.parent / Path(str(path)).name)
                        for name, path in data["child_paths"].items()}
            if any(Path(c).name in ("", ".", "..") for c in children.values()):
                raise ValueError("a child outside its group's folder")
            group.write_text(json.dumps(dict(data, child_paths=children)))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            group.unlink(missing_ok=True)  # unreadable: Triton compiles this kernel afresh


def keep(workdir: Path, entry: str) -> None:
    """After an evaluation whose worker imported the candidate and is dead: its private caches become
    the store's entry (the first to finish writes it; a racing copy is dropped)."""
    src, root = workdir / ".compile-cache", store_root()
    final = root / entry
    if not src.is_dir() or final.exists():
        return
    staging = root / f".{entry}.{os.getpid()}.partial"
    root.mkdir(parents=True, exist_ok=True)
    if _copy_tree(src, staging, ENTRY_BYTES):
        try:
            staging.rename(final)  # atomic: a reader sees a whole entry or none
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
    _trim(root)


def _trim(root: Path) -> None:
    entries = []
    for d in root.iterdir():
        if d.is_dir() and not d.name.startswith("."):
            size = sum(p.stat().st_size for p in _regular_files(d))
            entries.append((d.stat().st_mtime, size, d))
    total = sum(size for _, size, _ in entries)
    for _, size, d in sorted(entries):
        if total <= STORE_BYTES:
            break
        shutil.rmtree(d, ignore_errors=True)
        total -= size
