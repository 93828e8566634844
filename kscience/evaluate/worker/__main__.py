"""The untrusted side's process: `python -m kscience.evaluate.worker IN_FD OUT_FD LIFELINE_FD FD_SOCKET`.

Started by `sandbox.workers.Worker`. Inside its own PID namespace the process is PID 1, which the
kernel shields from most signals (even an `abort()` would not end it as expected) and which
inherits every orphan; elsewhere it makes itself a child subreaper, which also inherits every
orphan below it. Either way it forks first and stays behind only to reap, to kill what the
worker left behind once the worker has ended, and to report how the real worker ended, as an
exit code of 128 + signal number; it also watches the judge's lifeline (lifeline.py), so the
worker's tree ends the moment the judge does, however the judge died. The worker then moves the
channel to unpredictable descriptor numbers, confines itself (Landlock, then a seccomp filter),
and answers the judge's commands:

  echo                  -> (before the job only) an acknowledgement
  the job               -> the problem loaded, the device set up, no candidate yet: `loaded`
  prepare, call, finish -> as below; before `import` only null calls, on a worker that holds no candidate
                           code, so the judge learns what an empty call costs where nothing can bend it
  import                -> the candidate imported: `ready`
  check {shape, seed}   -> the whole output of one call on fresh inputs; that output and the
                           inputs the candidate may not write are then held for `sample`
  prepare {shape, seeds} -> fixed buffers made (views into the judge's staging buffer where it stages
                           the inputs), warm-up run; the judge's buffers mapped from the descriptors it
                           sent on FD_SOCKET (timing.py)
  call {kind[, seed]}   -> one call (see timing.py): `done` once its output is in the judge's buffer,
                           then what it returned and its events
  finish                -> the last output poisoned, the device synchronised
  sample {ranges}       -> the held tensors' bytes at the judge's ranges, one frame each
  bye                   -> an acknowledgement, then exit

Every reply echoes the command's sequence number. The verdict is always the judge's.
"""

from __future__ import annotations

import os
import sys


def _reap_until(child: int, judge_lifeline: int) -> None:
    """The reaper's whole job: collect every exit below it until the worker's own, then kill
    whatever the worker left behind (orphans re-parent here, `setsid` or not) and exit. Should
    the judge die first (any signal, SIGKILL too), the same at once: nobody is left to ask."""
    from kscience.evaluate.lifeline import watch
    from kscience.evaluate.proctree import kill_children_until_none

    def judge_gone():
        kill_children_until_none()
        os._exit(137)  # as PID 1 of the namespace, the kernel kills whatever is still in it

    watch(judge_lifeline, judge_gone)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(1)
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            kill_children_until_none()
            os._exit(128 - code if code < 0 else code)


def _become_subreaper() -> None:
    """PR_SET_CHILD_SUBREAPER (Linux 3.4+): orphans below this process re-parent to it, not to init."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)


def _hide(fd: int) -> int:
    """Move a channel descriptor to an unpredictable high number that children do not inherit."""
    import fcntl
    import resource
    import secrets

    ceiling = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    low = 64 + secrets.randbelow(max(ceiling - 128, 1))
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, low)
    os.close(fd)
    return moved


def _writable_paths() -> list[str]:
    """The sandbox folder, the compile caches (sandbox/compile_cache.private_dirs), the device nodes GPU runtimes open for writing, and
    this process's own thread entries in /proc (the CUDA driver will not initialise without
    writing there)."""
    import glob

    caches = [os.environ.get(var, "") for var in ("TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR", "KSCIENCE_BUILD_DIR")]
    for d in caches:
        if d:
            os.makedirs(d, exist_ok=True)
    devices = ["/dev/null", "/dev/zero", "/dev/full", "/dev/dri", "/dev/kfd"] + glob.glob("/dev/nvidia*")
    return [os.getcwd(), "/proc/self/task"] + [d for d in caches if d] + [d for d in devices if os.path.exists(d)]


def serve(in_fd: int, out_fd: int, fd_socket: int) -> None:
    import socket

    from kscience.evaluate import clocks, kernel_times, library_rule, shared_buffer, staging, wire
    from kscience.evaluate.wire import Channel, recv_json, send_json
    from kscience.evaluate.worker import confine, harness, integrity, timing
    from kscience.evaluate.worker.harness import Harness, call_fault

    confine.set_limits()
    ch = Channel(_hide(in_fd), _hide(out_fd), nonblocking=False)
    handed = socket.socket(fileno=_hide(fd_socket))  # descriptors from the judge (shared_buffer.py)
    unreadable = [p for p in os.environ.get(confine.UNREADABLE_VAR, "").split(os.pathsep) if p]
    sandbox = f"{confine.restrict(_writable_paths(), unreadable)}, {confine.no_userfaultfd()}"
    harness.warm_compiler()  # a spare does this before its job exists
    job = recv_json(ch)
    while job.get("cmd") == "echo":
        send_json(ch, {"status": "echo", "seq": job.get("seq")})
        job = recv_json(ch)
    seq = job.get("seq")
    try:
        # Every kscience.evaluate module this process runs is watched (tests/test_worker_integrity.py).
        watched = [clocks, confine, harness, integrity, kernel_times, library_rule, shared_buffer, staging, timing,
                   wire, sys.modules[__name__]]
        h = Harness(job, watched)
    except BaseException as exc:
        f = call_fault(exc)  # the sandbox is reported here too: the verdict's confinement line names it
        send_json(ch, {"status": f.status, "message": str(f), "seq": seq, "sandbox": sandbox})
        return
    send_json(ch, {"status": "loaded", "seq": seq, "sandbox": sandbox, "waiting": h.waiting})
    timer = None
    while True:
        cmd = recv_json(ch)
        seq = cmd.get("seq")
        if cmd.get("cmd") == "bye":
            send_json(ch, {"status": "bye", "seq": seq})
            return
        try:
            if cmd.get("cmd") == "import" and h.fn is None and timer is None:
                h.import_candidate()
                send_json(ch, {"status": "ready", "seq": seq, "setup_s": h.setup_s})
            elif cmd.get("cmd") == "check" and h.fn is not None:
                h.check(ch, cmd)
            elif cmd.get("cmd") == "prepare":
                timer = None  # the previous shape's buffers go before this shape's are made
                timer = timing.Timer(h, cmd, handed)
                send_json(ch, {"status": "ok", "seq": seq, "setup_s": timer.setup_s})
            elif cmd.get("cmd") == "call" and timer is not None:
                said = timer.call(cmd, lambda: send_json(ch, {"status": "done", "seq": seq}))
                send_json(ch, dict(said, status="ok", seq=seq))
            elif cmd.get("cmd") == "finish" and timer is not None:
                timer.finish()
                timer = None
                h.give_back_memory()
                send_json(ch, {"status": "ok", "seq": seq})
            elif cmd.get("cmd") == "kernels" and timer is None and h.fn is not None:  # a correct, timed candidate
                send_json(ch, dict(kernel_times.record(h, cmd), status="ok", seq=seq))
            elif cmd.get("cmd") == "sample":
                h.sample(ch, cmd)
                if timer is None:  # a checked call's output, read
                    h.give_back_memory()
            else:
                return
        except BaseException as exc:  # a fault surfacing at synchronize() lands here too
            f = call_fault(exc)
            send_json(ch, {"status": f.status, "message": str(f), "seq": seq})
            if f.status in ("crashed", "rejected"):
                return


if __name__ == "__main__":
    in_fd, out_fd, judge_lifeline, fd_socket = (int(a) for a in sys.argv[1:5])
    # PID 1 of a namespace adopts orphans anyway; elsewhere the reaper asks the kernel to. The
    # fork happens either way: the judge takes the reaper's first child for the serving process.
    if os.getpid() != 1:
        _become_subreaper()
    child = os.fork()
    if child:
        for fd in (in_fd, out_fd, fd_socket):
            os.close(fd)
        _reap_until(child, judge_lifeline)
    os.close(judge_lifeline)
    serve(in_fd, out_fd, fd_socket)
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: candidate atexit hooks and threads get no say
