"""A problem's files as data, so a problem travels with its evaluation requests.

A KernelBench file or a GPU MODE directory is named by a path, which holds the problem only on the
machine that loaded it. `pack(locator)` reads its files once (a KernelBench file; a GPU MODE directory
with every file in it and the helpers its task.yml names from beside it, such as `../utils.py`) into a
plain dict that crosses a queue folder or a Ray cluster inside the request:

    {"digest": sha256 over every file's name and bytes, "locator": the problem's path relative to
     the files' common folder, "files": {relative path: base64 of its bytes}}

`unpack(bundle)` is the judging machine's side: it checks every name and the digest, writes the files
once into `KSCIENCE_CACHE/problems/DIGEST/` (default ~/.cache/kscience/problems) and returns the path to
load the problem from there. The folder is named by the content, so two runs of one problem share it,
an edited file is a new folder, and a folder already there is the same content and is used as it is.
Built-in problems travel with the package and are not packed. A baseline's source (kscience.run.baselines)
loads the problem by the run's path, through `loaded_copy`: in the worker that judges it, the problem as
unpacked there.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import secrets
import shutil
from pathlib import Path, PurePosixPath

from kscience.problems import kind_for, loaded_here
from kscience.problems.spec import ProblemError

_DIGEST = re.compile(r"[0-9a-f]{64}")
MAX_BYTES = 16 * 2**20  # a problem is source and configuration: more than this is not one to send per request


def cache_root() -> Path:
    """Where unpacked problems live on a judging machine."""
    return Path(os.environ.get("KSCIENCE_CACHE", Path.home() / ".cache" / "kscience")) / "problems"


def digest(locator: str, files: dict[str, bytes]) -> str:
    h = hashlib.sha256(f"locator {locator}\n".encode())
    for name in sorted(files):
        h.update(f"file {name} {hashlib.sha256(files[name]).hexdigest()}\n".encode())
    return h.hexdigest()


def pack(locator: str) -> dict | None:
    """The files of the problem at `locator`, as `unpack` takes them; None for a built-in name."""
    kind = kind_for(locator)  # ProblemError where it names no problem
    if kind.in_package:
        return None  # it travels with the package
    path = Path(locator).expanduser().resolve()
    files = kind.files(path)
    # The common folder is above the problem's own path, so the problem keeps its name (a file's stem, a folder's name).
    root = Path(os.path.commonpath([str(path.parent), *(str(f.parent) for f in files)]))
    try:
        data = {f.relative_to(root).as_posix(): f.read_bytes() for f in files}
    except OSError as exc:
        raise ProblemError(f"{locator}: cannot read {exc.filename}: {exc.strerror}") from None
    size = sum(len(b) for b in data.values())
    if size > MAX_BYTES:
        raise ProblemError(f"{locator}: its files hold {size / 2**20:.1f} MiB, more than the {MAX_BYTES // 2**20} MiB "
                           "a problem may send with each evaluation request")
    relative = path.relative_to(root).as_posix()
    return {"digest": digest(relative, data), "locator": relative,
            "files": {name: base64.b64encode(b).decode("ascii") for name, b in sorted(data.items())}}


def _safe_name(name) -> str:
    """A relative path that stays inside the folder it is written to; ProblemError otherwise."""
    if not isinstance(name, str) or not name or "\\" in name or "\0" in name:
        raise ProblemError(f"a problem's file has an unusable name {name!r}")
    parts = PurePosixPath(name).parts
    if PurePosixPath(name).is_absolute() or any(p in ("..", ".", "") for p in parts) or name != "/".join(parts):
        raise ProblemError(f"a problem's file name {name!r} would leave its folder")
    return name


def _decoded(bundle) -> tuple[str, str, dict[str, bytes]]:
    if not isinstance(bundle, dict) or not isinstance(bundle.get("files"), dict):
        raise ProblemError("the request's problem files are not a {digest, locator, files} mapping")
    locator = _safe_name(bundle.get("locator"))
    try:
        files = {_safe_name(name): base64.b64decode(text, validate=True) for name, text in bundle["files"].items()}
    except (binascii.Error, TypeError, ValueError):
        raise ProblemError("the request's problem files are not base64 text") from None
    if sum(len(b) for b in files.values()) > MAX_BYTES:
        raise ProblemError(f"the request's problem files hold more than {MAX_BYTES // 2**20} MiB")
    claimed = bundle.get("digest")
    if claimed != digest(locator, files):
        raise ProblemError("the request's problem files do not match their digest")
    return claimed, locator, files


def unpack(bundle: dict, root: Path | None = None) -> str:
    """Write the problem's files under `root` (default `cache_root()`) once and return its path there.
    ProblemError for a bundle whose names leave its folder or whose digest does not match its files."""
    key, locator, files = _decoded(bundle)
    root = Path(root or cache_root())
    folder = root / key
    if not folder.is_dir():
        root.mkdir(parents=True, exist_ok=True)
        building = root / f".{key}.{secrets.token_hex(4)}.tmp"
        for name, data in files.items():
            target = building / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        try:
            os.rename(building, folder)  # whole or not at all; another judge may have written it meanwhile
        except OSError:
            shutil.rmtree(building, ignore_errors=True)
            if not folder.is_dir():
                raise
    return str(folder / locator)


def loaded_copy(locator: str) -> str:
    """The problem at the run's path `locator`, as this process has it: the unpacked copy of a problem of that
    name that this process loaded (a worker loads the problem its request carried before it imports the
    candidate), else `locator` itself."""
    name = Path(locator).name
    for path in reversed(loaded_here()):
        copy = Path(path)
        if copy.name == name and any(_DIGEST.fullmatch(part) for part in copy.parent.parts):
            return path
    return locator
