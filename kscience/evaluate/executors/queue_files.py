"""The files of an evaluation queue: what a run and a `kscience worker` exchange through a directory.

    DIR/requests/ID.json   written by the run: {"kind": "kscience-request", "id", "nonce",
                           "source_sha256", "request": EvalRequest fields, "submitted"}
    DIR/claims/ID.json     a request a worker has taken (moved there by an atomic rename, so
                           two workers never take the same one); ID.holder names the worker
    DIR/results/ID.json    written by the worker: {"kind": "kscience-result", "id", "nonce",
                           "source_sha256", "result": EvalResult fields | "problem_error": text,
                           "worker": {host, pid}, "finished"}
    DIR/ledger/ID.json     the run's record of each request it made (id, nonce, digest), kept
                           so that a resumed run waits for what it asked before and a result
                           nobody asked for is recognised as such
    DIR/refused/NAME       files refused, each with NAME.why beside it saying why

Every file is written to a temporary name and renamed into place, so a reader sees either
nothing or the whole file, on the machine that wrote it and after any copy that renames
(rsync does). Everything is plain JSON: the candidate's source, the full verdict and the device.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
import secrets
from pathlib import Path

from kscience.evaluate.result import STATUSES, EvalRequest, EvalResult, ShapeResult

log = logging.getLogger("kscience.queue")

REQUEST_KIND, RESULT_KIND = "kscience-request", "kscience-result"
FOLDERS = ("requests", "claims", "results", "ledger", "refused")
POLL_S = 1.0  # how often either side (the run, a worker) looks at the directory for what is new
LEASE_S = 120.0  # a worker's claim not renewed for this long goes back in the queue
_ID = re.compile(r"^[0-9a-f]{32}$")
_NONCE = re.compile(r"^[0-9a-f]{32}$")


class QueueFileError(ValueError):
    """A queue file that is not what it claims to be: the message says why, in one line."""


def prepare(root: Path) -> Path:
    root = Path(root).expanduser()
    for folder in FOLDERS:
        (root / folder).mkdir(parents=True, exist_ok=True)
    return root


def new_id() -> str:
    return secrets.token_hex(16)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def request_key(request: EvalRequest) -> str:
    """Identical requests (same candidate, same source, same settings) share one entry."""
    return digest(json.dumps(dataclasses.asdict(request), sort_keys=True))


def write_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except UnicodeDecodeError:
        raise QueueFileError("not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise QueueFileError(f"not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise QueueFileError("not a JSON object")
    return data


def queue_files(folder: Path) -> list[Path]:
    """Complete files of a folder, oldest first (temporary files start with a dot)."""
    files = []
    for p in folder.glob("*.json"):
        if p.name.startswith("."):
            continue
        try:
            files.append((p.stat().st_mtime, p))
        except FileNotFoundError:  # taken by someone else meanwhile
            continue
    return [p for _, p in sorted(files)]


def refuse(root: Path, path: Path, why: str) -> None:
    """Move a file out of the way, with its reason beside it, and say so once."""
    target = root / "refused" / f"{path.stem}-{secrets.token_hex(3)}{path.suffix}"
    try:
        os.replace(path, target)
    except FileNotFoundError:
        return
    target.with_name(target.name + ".why").write_text(why + "\n")
    log.warning("refused %s: %s (moved to %s)", path, why, target)


def _envelope(data: dict, kind: str, path: Path | None) -> tuple[str, str, str]:
    if data.get("kind") != kind:
        raise QueueFileError(f"not a {kind} file")
    ident, nonce, sha = data.get("id"), data.get("nonce"), data.get("source_sha256")
    if not (isinstance(ident, str) and _ID.match(ident)):
        raise QueueFileError("missing or malformed id")
    if path is not None and path.stem != ident:
        raise QueueFileError(f"file name {path.name} does not match its id {ident}")
    if not (isinstance(nonce, str) and _NONCE.match(nonce)) or not isinstance(sha, str):
        raise QueueFileError("missing or malformed nonce or source digest")
    return ident, nonce, sha


def parse_request(data: dict, path: Path | None = None) -> tuple[str, str, EvalRequest]:
    ident, nonce, sha = _envelope(data, REQUEST_KIND, path)
    fields = data.get("request")
    if not isinstance(fields, dict) or not isinstance(fields.get("source"), str) \
            or not isinstance(fields.get("problem"), str):
        raise QueueFileError("the request has no problem or source")
    try:
        request = EvalRequest(**fields)
    except TypeError as exc:
        raise QueueFileError(f"malformed request: {exc}") from None
    if digest(request.source) != sha:
        raise QueueFileError("the source does not match its digest")
    return ident, nonce, request


def request_file(ident: str, nonce: str, request: EvalRequest, submitted: float) -> dict:
    return {"kind": REQUEST_KIND, "id": ident, "nonce": nonce, "source_sha256": digest(request.source),
            "request": dataclasses.asdict(request), "submitted": submitted}


def result_file(ident: str, nonce: str, request: EvalRequest, outcome: EvalResult | str, worker: dict,
                finished: float) -> dict:
    """`outcome` is the verdict, or the text of a problem error (a broken problem raises here too)."""
    body = {"result": outcome.to_dict()} if isinstance(outcome, EvalResult) else {"problem_error": outcome}
    return {"kind": RESULT_KIND, "id": ident, "nonce": nonce, "source_sha256": digest(request.source), **body,
            "worker": worker, "finished": finished}


def parse_result(data: dict, path: Path | None = None) -> tuple[str, str, str, EvalResult | str]:
    """(id, nonce, source digest, verdict or problem-error text); QueueFileError when malformed."""
    ident, nonce, sha = _envelope(data, RESULT_KIND, path)
    if isinstance(data.get("problem_error"), str):
        return ident, nonce, sha, data["problem_error"]
    return ident, nonce, sha, _verdict(data.get("result"))


_NUMBER = (int, float, type(None))
# What JSON may hold for each annotation of the result dataclasses, which declare the fields.
_JSON_TYPES = {"str": str, "bool": bool, "int": int, "int | None": (int, type(None)), "float": (int, float),
               "float | None": _NUMBER,
               "dict": dict, "dict | None": (dict, type(None)), "list": list, "list[ShapeResult]": list}
_SHAPE_TYPES = {f.name: _JSON_TYPES[f.type] for f in dataclasses.fields(ShapeResult)}
_RESULT_TYPES = {f.name: _JSON_TYPES[f.type] for f in dataclasses.fields(EvalResult)}


def _typed(d: dict, types: dict, what: str) -> None:
    unknown = set(d) - set(types)
    if unknown:
        raise QueueFileError(f"{what} has unknown fields {sorted(unknown)}")
    for name, kind in types.items():
        if name in d and not isinstance(d[name], kind):
            raise QueueFileError(f"{what} field {name!r} has the wrong type")


def _verdict(d) -> EvalResult:
    if not isinstance(d, dict) or "status" not in d or "message" not in d:
        raise QueueFileError("no verdict (status and message)")
    _typed(d, _RESULT_TYPES, "the verdict")
    if d["status"] not in STATUSES:
        raise QueueFileError(f"unknown status {d['status']!r}")
    for s in d.get("shapes", []):
        if not isinstance(s, dict):
            raise QueueFileError("a shape result is not an object")
        _typed(s, _SHAPE_TYPES, "a shape result")
        if not {"shape", "ok", "phase"} <= set(s):
            raise QueueFileError("a shape result lacks shape, ok or phase")
    result = EvalResult.from_dict(d)
    if result.ok and not (result.geomean_us is None or result.geomean_us > 0):
        raise QueueFileError("an ok verdict with an impossible geomean")
    if not result.device:
        raise QueueFileError("the verdict does not say which device it ran on")
    return result

