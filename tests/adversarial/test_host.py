"""The host: processes that leave the session, memory held outside the process group, compile
caches planted for another candidate or grown without bound, a channel frame built to crash the
judge's parser, and what every verdict says about the isolation it ran under.

The worker's reaper adopts every orphan (PID 1 of its namespace, or a child subreaper), so a
`setsid` double fork stays in the process tree the judge walks; where a cgroup can be made, the
kernel caps memory on the whole tree. Each evaluation compiles into its own caches.
"""

import contextlib
import os
import threading
import time
from pathlib import Path

import pytest

from kscience.evaluate.judge import evaluation
from kscience.evaluate.judge.evaluation import evaluate
from kscience.evaluate.result import CRASHED, OK, REJECTED, WRONG_ANSWER, EvalRequest
from kscience.evaluate.sandbox import compile_cache, workers
from kscience.evaluate.sandbox.cgroup import Cgroup
from kscience.evaluate.wire import MAX_JSON_DEPTH, Channel, ProtocolError, json_depth, recv_json

_OK_CALL = """
def custom_kernel(data):
    return honest(data[0])
"""

# A grandchild in a session of its own whose parent has exited: outside the process group, an
# orphan. It allocates and touches HOG_BYTES, says so on a pipe, and then holds them.
_SETSID_HOG = """
import os
import time

HOG_BYTES = {hog}

def start_hog():
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            hog = bytearray(b"\\x01") * HOG_BYTES
            os.write(w, b"x")
            time.sleep(120)
        os._exit(0)
    os.close(w)
    os.read(r, 1)  # returns early if the kernel killed the hog

start_hog()

def custom_kernel(data):
    time.sleep(0.3)  # time for a watchdog's scan, where no cgroup caps memory
    return honest(data[0])
"""


def _cgroup_here() -> bool:
    group = Cgroup.create(f"kscience-probe-{os.getpid()}", 2**30, 64)
    if group:
        group.remove()
    return group is not None


@pytest.mark.parametrize("cap", ["cgroup", "watchdog"])
def test_a_setsid_child_cannot_hold_memory_past_the_cap(judge, monkeypatch, cap):
    # The attack: 2.15 GiB held by a setsid child under a 1 GiB cap, verdict ok.
    if cap == "cgroup" and not _cgroup_here():
        pytest.skip("no writable cgroup (v2 with memory and pids delegated, or v1 memory) on this machine")
    monkeypatch.setenv("KSCIENCE_SANDBOX_CGROUP", "1" if cap == "cgroup" else "0")
    monkeypatch.setenv("KSCIENCE_WORKER_RSS_BYTES", str(2**30))
    result = judge(_SETSID_HOG.format(hog=3 * 2**29))
    assert result.status == CRASHED, result.message
    assert "memory cap" in result.message
    assert result.confinement["memory_cap"] == ("cgroup" if cap == "cgroup" else "watchdog over the process tree")


@pytest.mark.parametrize("namespaces", ["1", "0"])
def test_a_double_forked_setsid_child_without_the_token_does_not_survive(judge, monkeypatch, namespaces):
    # Out of the session, the process group and the evaluation token, its parent gone. Without
    # a PID namespace (and without a cgroup) only the subreaper keeps it in reach.
    monkeypatch.setenv("KSCIENCE_SANDBOX_NAMESPACES", namespaces)
    monkeypatch.setenv("KSCIENCE_SANDBOX_CGROUP", "0")
    monkeypatch.setattr(evaluation, "weak_points", lambda: [])  # a missing namespace is the point here
    workers.namespaces_available.cache_clear()
    try:
        marker = f"{int.from_bytes(os.urandom(3), 'big') + 10**7}.5"
        result = judge(f"""
            import os

            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    os.execve("/bin/sleep", ["sleep", "{marker}"], {{}})
                os._exit(0)
            """, _OK_CALL)
        assert result.status == OK, result.message
        assert result.confinement["reaper"] == ("pid 1 of the namespace" if namespaces == "1" else "subreaper")
        assert not _running(marker)  # the reaper killed it when the worker ended
    finally:
        workers.namespaces_available.cache_clear()


def _running(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                found.append(int(entry))
        except OSError:
            continue
    return found


def test_every_process_but_the_server_is_stopped_while_outputs_are_read(judge, monkeypatch):
    # A setsid grandchild runs from the start; while the judge reads the held outputs, every
    # process of the worker except the one answering must be stopped, that grandchild included.
    seen = []
    frozen = workers.Worker.frozen

    @contextlib.contextmanager
    def checking_frozen(self, keep_serving=False):
        with frozen(self, keep_serving) as done:
            serving = self.serving_pid()
            others = self.pids() - {serving}
            states = {pid: Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split() for pid in others}
            seen.append((serving, {pid: (st[0], int(st[3])) for pid, st in states.items()}))  # state, session
            yield done

    monkeypatch.setattr(workers.Worker, "frozen", checking_frozen)
    result = judge("""
        import os
        import time

        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                while True:
                    time.sleep(0.001)
            os._exit(0)
        """, _OK_CALL)
    assert result.status == OK, result.message
    assert seen, "the judge read outputs without freezing the worker"
    for serving, others in seen:
        assert serving is not None
        assert all(state == "T" for state, _ in others.values()), others
        sessions = {session for _, session in others.values()}
        assert len(sessions) >= 2, others  # the setsid grandchild was among those stopped


# --- compile caches ------------------------------------------------------------------------
_PLANT = """
import os

for var in ("TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR"):
    root = os.environ[var]
    found = os.path.exists(os.path.join(root, "victim_ext", "planted.txt"))
    print(var, "inside sandbox", root.startswith(os.getcwd()), "found planted", found)
    os.makedirs(os.path.join(root, "victim_ext"), exist_ok=True)
    with open(os.path.join(root, "victim_ext", "planted.txt"), "w") as f:
        f.write("x" * {size})
"""

_LOOK = """
import os

for var in ("TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR"):
    found = os.path.exists(os.path.join(os.environ[var], "victim_ext", "planted.txt"))
    print(var, "found planted", found)
"""


@pytest.fixture
def cache_store(tmp_path, monkeypatch):
    monkeypatch.setenv("KSCIENCE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_planted_build_does_not_reach_another_candidate(judge, cache_store):
    planter = judge(_PLANT.format(size=10), _OK_CALL)
    assert planter.status == OK, planter.message
    assert "inside sandbox True" in planter.stdout_tail and "found planted True" not in planter.stdout_tail
    victim = judge(_LOOK, _OK_CALL)
    assert victim.status == OK, victim.message
    assert "found planted False" in victim.stdout_tail and "found planted True" not in victim.stdout_tail
    # Only the planter's own source gets its files back: a warm start keyed by source.
    again = judge(_PLANT.format(size=10), _OK_CALL)
    assert again.stdout_tail.count("found planted True") == 2, again.stdout_tail


def test_compile_cache_writes_do_not_persist_past_their_size_cap(judge, cache_store, monkeypatch):
    monkeypatch.setattr(compile_cache, "ENTRY_BYTES", 2**20)
    result = judge(_PLANT.format(size=2**20), _OK_CALL)  # 2 MiB over both caches: over the cap
    assert result.status == OK, result.message
    kept = [p for p in cache_store.rglob("*") if p.is_file()] if cache_store.exists() else []
    assert kept == []


def test_a_candidate_whose_import_failed_leaves_nothing_in_the_cache(judge, cache_store):
    result = judge(_PLANT.format(size=10), "raise RuntimeError('half built')\n")
    assert result.status != OK
    assert not cache_store.exists() or not any(p.is_file() for p in cache_store.rglob("*"))


def test_a_wrong_candidates_finished_build_is_kept_for_its_own_source_only(judge, cache_store):
    # Its import (its build) finished, then its answers were wrong: a repair or a re-judge of the same
    # source starts from its build, and no other source ever sees it.
    wrong = """
        def custom_kernel(data):
            return torch.zeros_like(data[0])
        """
    assert judge(_PLANT.format(size=10), wrong).status != OK
    assert any(p.is_file() for p in cache_store.rglob("*"))
    again = judge(_PLANT.format(size=10), wrong)
    assert "found planted True" in again.stdout_tail
    other = judge(_PLANT.format(size=10), _OK_CALL)
    assert "found planted True" not in other.stdout_tail


# --- the judge's parser ----------------------------------------------------------------------
def test_a_frame_of_deeply_nested_brackets_is_rejected_not_a_judge_crash(judge):
    result = judge("""
        import json
        import os
        import struct

        def custom_kernel(data):
            body = b"[" * 200000 + b"]" * 200000
            for name in os.listdir("/proc/self/fd"):
                try:
                    if int(name) > 2 and os.readlink(f"/proc/self/fd/{name}").startswith("pipe:"):
                        os.write(int(name), struct.pack("<Q", len(body)) + body)
                except OSError:
                    continue
            return honest(data[0])
        """)
    assert result.status == REJECTED, result.message
    assert "nested 200000 deep" in result.message


def test_the_parser_measures_nesting_before_it_parses():
    ours, theirs = os.pipe()
    channel = Channel(ours, theirs, nonblocking=True)
    try:
        for frame, depth in ((b'{"a": "[[[[", "b": [[1], [2]]}', 3), (b"[" * 200000 + b"]" * 200000, 200000)):
            assert json_depth(frame) == depth or depth <= json_depth(frame) <= MAX_JSON_DEPTH
            writer = threading.Thread(target=channel.send, args=(frame, time.monotonic() + 30))
            writer.start()  # the frame is larger than a pipe holds: written while it is read
            if depth <= MAX_JSON_DEPTH:
                assert recv_json(channel, time.monotonic() + 30)["b"] == [[1], [2]]
            else:
                with pytest.raises(ProtocolError, match="nested 200000 deep"):
                    recv_json(channel, time.monotonic() + 30)
            writer.join()
    finally:
        channel.close()


# --- a GPU MODE task whose data is one bare tensor ----------------------------------------------
BARE = Path(__file__).resolve().parents[1] / "data" / "gpumode" / "bare_input"


@pytest.mark.parametrize("body, status", [("return data * 2 + 1", OK), ("return data * 2", WRONG_ANSWER)])
def test_a_bare_tensor_input_reaches_the_candidate_whole(gpumode_modules, body, status):
    source = f"def custom_kernel(data):\n    assert type(data).__name__ == 'Tensor', type(data)\n    {body}\n"
    result = evaluate(EvalRequest(problem=str(BARE), source=source))
    assert result.status == status, result.message


# --- confinement in the verdict ----------------------------------------------------------------
def test_every_verdict_names_its_confinement(judge):
    result = judge(_OK_CALL)
    assert result.status == OK, result.message
    for layer in ("landlock", "namespaces", "cgroup", "reaper", "memory_cap", "env_filter", "compile_cache"):
        assert layer in result.confinement, layer
    assert result.confinement["weak"] == [] and result.confinement["allowed_weak"] is False


def test_a_machine_without_a_layer_refuses_to_run_unless_asked(judge, monkeypatch):
    missing = ["Landlock (the candidate could write anywhere the user can)"]
    monkeypatch.setattr(evaluation, "weak_points", lambda: missing)
    ran = 'print("candidate ran")\n' + _OK_CALL
    refused = judge(ran)
    assert refused.status == REJECTED and "refusing to run unconfined" in refused.message
    assert "candidate ran" not in refused.stdout_tail
    allowed = judge(ran, allow_weak_confinement=True)
    assert allowed.status == OK, allowed.message
    assert allowed.confinement["weak"] == missing and allowed.confinement["allowed_weak"] is True
