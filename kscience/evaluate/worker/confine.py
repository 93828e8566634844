"""Restrictions a worker puts on itself before any candidate code runs (the untrusted side).

Landlock (Linux >= 5.13, unprivileged) confines this process and everything it starts, and
cannot be lifted once applied:

* files (ABI 1+): the rest of the filesystem becomes read-only; the candidate may write only
  in its sandbox folder (which holds its private compile caches) and the few device nodes GPU
  runtimes open for writing. The user's home, the project, /tmp and cgroupfs are out of reach.
  It may read anything but what the judge names: other sandboxes, the kept compile caches, the
  run's database, a queue folder (`readable_everywhere_but`).
* TCP (ABI 4+): no connecting or binding, even where no network namespace could be made.
* scopes (ABI 6+): no signals to processes outside the sandbox (the judge, the user's shell)
  and no connecting to abstract UNIX sockets of processes outside it.

A seccomp filter then takes userfaultfd away, whether asked for by its system call or through
/dev/userfaultfd (the USERFAULTFD_IOC_NEW ioctl): memory whose faults a candidate resolves at
will could stall any reader of it, the judge's reads of worker memory included.

Where the kernel lacks Landlock (or an ABI level) the worker runs without that layer and says
so in the evaluation's device record; process groups, the scrubbed environment, the memory
watchdog and (where available) namespaces still hold.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import resource
import struct

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # same numbers on x86-64 and arm64
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
UNREADABLE_VAR = "KSCIENCE_WORKER_UNREADABLE"  # paths a worker may not read, os.pathsep-separated

# Filesystem rights (ABI v1): those that change something, and reading files and listing folders.
# Executing stays allowed everywhere (what runs must still be read, and reads are ruled).
_WRITE_FILE, _READ_FILE, _READ_DIR, _REMOVE_DIR, _REMOVE_FILE = 1 << 1, 1 << 2, 1 << 3, 1 << 4, 1 << 5
_MAKE_RIGHTS = sum(1 << b for b in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
_REFER, _TRUNCATE = 1 << 13, 1 << 14  # ABI 2 and 3
_FILE_RIGHTS = _WRITE_FILE | _TRUNCATE | _READ_FILE  # the only rights that apply to a single file
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def set_limits(max_file_bytes: int = 1 << 30, max_open_files: int = 4096) -> None:
    """No core dumps (they would be slow and large), bounded file sizes and descriptors."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    cap = min(max_open_files, hard) if hard != resource.RLIM_INFINITY else max_open_files
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, cap), cap))


def landlock_abi() -> int:
    """The Landlock ABI version this kernel offers (0 when none): what a worker will apply."""
    abi = ctypes.CDLL(None, use_errno=True).syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(abi, 0)


def _within(path: str, roots) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def readable_everywhere_but(hidden: list[str]) -> list[str]:
    """Landlock only grants, so "all but `hidden`" is built from grants: the paths readable with
    everything below them that together cover every path that exists now outside `hidden`. A
    folder above a hidden path is not granted itself (a grant would reach below it), so it cannot
    be listed, and an entry made in it later is not readable; each of its entries but the hidden
    one is granted. The worker's imports are found by then (its finders listed their folders)."""
    hidden = [os.path.realpath(h) for h in hidden]
    granted, todo = [], ["/"]
    while todo:
        path = todo.pop()
        if _within(path, hidden):
            continue
        if not any(h != path and _within(h, [path]) for h in hidden):
            granted.append(path)
            continue
        try:
            names = os.listdir(path)
        except OSError:
            continue
        for name in names:
            entry = os.path.join(path, name)
            if os.path.islink(entry):  # a rule binds the link's target, which must be outside every hidden path
                target = os.path.realpath(entry)
                if not _within(target, hidden) and not any(_within(h, [target]) for h in hidden):
                    granted.append(target)
            else:
                todo.append(entry)
    return granted


def restrict(writable: list[str], unreadable: list[str] = ()) -> str:
    """Apply every Landlock layer the kernel offers: writes only to `writable`, reads anywhere
    but `unreadable` (what is writable stays readable, inside an unreadable path too).

    Returns what was applied, e.g. "landlock v6 (files, reads, tcp, scopes)", or why Landlock is off.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    abi = landlock_abi()
    if abi < 1:
        return f"landlock off (kernel says errno {ctypes.get_errno()})"
    reads = _READ_FILE | _READ_DIR if unreadable else 0
    fs = _WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE_RIGHTS | (_REFER if abi >= 2 else 0) | \
        (_TRUNCATE if abi >= 3 else 0) | reads
    net = _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0
    scoped = _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL if abi >= 6 else 0
    attr = _RulesetAttr(fs, net, scoped)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8  # the struct grew with the ABI; older kernels want less
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return f"landlock off (create_ruleset errno {ctypes.get_errno()})"
    readable = readable_everywhere_but(list(unreadable)) if reads else []
    rules = [(p, fs) for p in writable] + [(p, reads) for p in readable]
    try:
        for path, rights in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # gone since it was listed, or never made
            try:
                allowed = rights if os.path.isdir(path) else rights & _FILE_RIGHTS
                rule = _PathBeneathAttr(allowed, fd)
                if allowed and libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule),
                                            ctypes.c_uint32(0)):
                    return f"landlock off (add_rule {path} errno {ctypes.get_errno()})"
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0):
            return f"landlock off (no_new_privs errno {ctypes.get_errno()})"
        if libc.syscall(_SYS_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)):
            return f"landlock off (restrict_self errno {ctypes.get_errno()})"
    finally:
        os.close(ruleset)
    layers = ["files"] + (["reads"] if reads else []) + (["tcp"] if net else []) + (["scopes"] if scoped else [])
    return f"landlock v{abi} ({', '.join(layers)})"


# seccomp: (audit arch, userfaultfd, ioctl) per machine; x86-64 also refuses the x32 numbers.
_SECCOMP_ARCH = {"x86_64": (0xC000003E, 323, 16), "aarch64": (0xC00000B7, 282, 29)}
_USERFAULTFD_IOC_NEW = 0xAA00  # _IO(0xAA, 0x00), the device's one ioctl
_X32_BIT = 0x40000000
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _bpf(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def no_userfaultfd() -> str:
    """Install the seccomp filter (needs no_new_privs, which Landlock already set); say what was done."""
    machine = _SECCOMP_ARCH.get(platform.machine())
    if machine is None:
        return f"seccomp off (no filter for {platform.machine()})"
    arch, nr_userfaultfd, nr_ioctl = machine
    deny = _RET_ERRNO | errno.EPERM
    prog = b"".join([
        _bpf(_LD_W_ABS, 4),                      # seccomp_data.arch
        _bpf(_JEQ_K, arch, 1, 0),
        _bpf(_RET_K, deny),                      # another ABI (32-bit calls) is not for candidates
        _bpf(_LD_W_ABS, 0),                      # seccomp_data.nr
        _bpf(_JGE_K, _X32_BIT, 5, 0),            # the x32 numbers of the same calls
        _bpf(_JEQ_K, nr_userfaultfd, 4, 0),
        _bpf(_JEQ_K, nr_ioctl, 1, 0),
        _bpf(_RET_K, _RET_ALLOW),
        _bpf(_LD_W_ABS, 24),                     # args[1], low word: the ioctl's request (an int to the kernel)
        _bpf(_JEQ_K, _USERFAULTFD_IOC_NEW, 0, 1),
        _bpf(_RET_K, deny),
        _bpf(_RET_K, _RET_ALLOW),
    ])
    buf = ctypes.create_string_buffer(prog)
    fprog = _SockFprog(len(prog) // 8, ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) or \
            libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0):
        return f"seccomp off (errno {ctypes.get_errno()})"
    return "seccomp (no userfaultfd)"
