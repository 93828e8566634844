"""Memory the judge owns and the worker maps (both sides): where timed calls' inputs come from, and
where their outputs go, so that the judge writes the one and reads the other itself.

The judge allocates, exports a file descriptor and hands it over a UNIX socket of the worker's
(`send_fd`); the worker maps it (`open_fd`). Only the judge allocates: it never maps anything the
worker made. Two kinds, one interface (`tensor`, a uint8 view of `nbytes`; `close`):

* on a GPU, device memory from the driver's virtual-memory API (`cuMemCreate`, exported as a POSIX
  file descriptor). The judge reads and writes it in its own CUDA context, which waits for none of
  the worker's work. A legacy IPC handle (`cudaIpcGetMemHandle`) would not do: the driver refuses one
  from a process in another PID namespace, which every worker is;
* in host memory (the CPU interpreter, and a GPU whose driver lacks that API, such as ROCm's), a
  sealed memfd: the worker can write its bytes but can neither shrink nor grow it, so no read of the
  judge's own mapping can fault.

`supported(ordinal)` says whether device memory can be shared; the judge decides it before any
candidate code exists, from its own driver.
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import mmap
import os
import socket

import torch

_PINNED, _POSIX_FD, _ON_DEVICE, _READ_WRITE = 1, 1, 1, 3  # CUmemAllocationType, handle type, location, access
_VMM_SUPPORTED, _FD_SUPPORTED = 102, 103  # CU_DEVICE_ATTRIBUTE_* of the virtual-memory API and fd export


class DriverError(Exception):
    """A driver call failed: its name and CUresult."""


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compression", ctypes.c_ubyte), ("rdma", ctypes.c_ubyte), ("usage", ctypes.c_ushort),
                ("reserved", ctypes.c_ubyte * 4)]


class _Prop(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [("type", ctypes.c_int), ("handle_types", ctypes.c_int), ("location", _Location),
                ("win32", ctypes.c_void_p), ("flags", _AllocFlags)]


class _Access(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_u64, _size, _int = ctypes.c_uint64, ctypes.c_size_t, ctypes.c_int
_SIGNATURES = {
    "cuInit": [ctypes.c_uint],
    "cuDeviceGet": [ctypes.POINTER(_int), _int],
    "cuDeviceGetAttribute": [ctypes.POINTER(_int), _int, _int],
    "cuMemGetAllocationGranularity": [ctypes.POINTER(_size), ctypes.POINTER(_Prop), _int],
    "cuMemCreate": [ctypes.POINTER(_u64), _size, ctypes.POINTER(_Prop), _u64],
    "cuMemExportToShareableHandle": [ctypes.c_void_p, _u64, _int, _u64],
    "cuMemImportFromShareableHandle": [ctypes.POINTER(_u64), ctypes.c_void_p, _int],
    "cuMemAddressReserve": [ctypes.POINTER(_u64), _size, _size, _u64, _u64],
    "cuMemMap": [_u64, _size, _size, _u64, _u64],
    "cuMemSetAccess": [_u64, _size, ctypes.POINTER(_Access), _size],
    "cuMemUnmap": [_u64, _size],
    "cuMemRelease": [_u64],
    "cuMemAddressFree": [_u64, _size],
}


@functools.lru_cache(maxsize=1)
def _driver():
    """libcuda with the signatures above, or None (ROCm, no NVIDIA driver)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        for name, args in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, _int
    except (OSError, AttributeError):
        return None
    return lib


def _call(name: str, *args) -> None:
    code = getattr(_driver(), name)(*args)
    if code:
        raise DriverError(f"{name} failed (CUresult {code})")


def _device(ordinal: int) -> int:
    dev = _int()
    _call("cuInit", 0)
    _call("cuDeviceGet", ctypes.byref(dev), ordinal)
    return dev.value


def supported(ordinal: int) -> bool:
    """Whether this process's driver can allocate on GPU `ordinal` and export as a file descriptor."""
    if _driver() is None:
        return False
    try:
        dev, value = _device(ordinal), _int()
        for attribute in (_VMM_SUPPORTED, _FD_SUPPORTED):
            _call("cuDeviceGetAttribute", ctypes.byref(value), attribute, dev)
            if value.value != 1:
                return False
    except DriverError:
        return False
    return True


class _Interface:
    """What torch.as_tensor needs to view device memory it does not own."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 2}


class Mapping:
    """`nbytes` of one allocation (`handle`) mapped into this process on GPU `ordinal`; `tensor`
    views them as uint8 (valid until `close`). Owns its reference to the allocation from the start:
    where mapping fails, it releases that reference before the error goes on."""

    def __init__(self, handle: int, nbytes: int, ordinal: int):
        self.handle, self.nbytes, self.ptr = handle, nbytes, 0
        ptr = _u64()
        try:
            _call("cuMemAddressReserve", ctypes.byref(ptr), nbytes, 0, 0, 0)
            self.ptr = ptr.value
            _call("cuMemMap", self.ptr, nbytes, 0, handle, 0)
            access = _Access(_Location(_ON_DEVICE, _device(ordinal)), _READ_WRITE)
            _call("cuMemSetAccess", self.ptr, nbytes, ctypes.byref(access), 1)
            self.tensor = torch.as_tensor(_Interface(self.ptr, nbytes), device=torch.device("cuda", ordinal))
        except Exception:
            self.close()
            raise

    def at(self, offset: int, nbytes: int) -> torch.Tensor:
        """`nbytes` from `offset` as a uint8 tensor of its own (its storage starts there: a candidate
        handed a view of it finds storage offset 0, as with any tensor it is handed)."""
        return torch.as_tensor(_Interface(self.ptr + offset, nbytes), device=self.tensor.device)

    def close(self) -> None:
        """Unmapped and released here; the memory goes once every process has released it."""
        self.tensor = None
        if self.ptr:
            _driver().cuMemUnmap(self.ptr, self.nbytes)
            _driver().cuMemAddressFree(self.ptr, self.nbytes)
            self.ptr = 0
        if self.handle:
            _driver().cuMemRelease(self.handle)
            self.handle = 0


class HostMapping:
    """`nbytes` of a sealed memfd mapped into this process; `tensor` views them as uint8."""

    def __init__(self, fd: int, nbytes: int):
        self.nbytes = nbytes
        self._map = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.fd = fd  # the judge's: exported as copies; the worker closes its own once mapped
        self.tensor = torch.frombuffer(self._map, dtype=torch.uint8)

    def at(self, offset: int, nbytes: int) -> torch.Tensor:
        """`nbytes` from `offset` as a uint8 tensor of its own (see Mapping.at)."""
        if not nbytes:
            return torch.empty(0, dtype=torch.uint8)
        return torch.frombuffer(self._map, dtype=torch.uint8, count=nbytes, offset=offset)

    def close(self) -> None:
        self.tensor = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        try:
            self._map.close()
        except BufferError:  # a view of it is still alive somewhere: the mapping goes with the last one
            pass


_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


def _host(nbytes: int) -> HostMapping:
    fd = os.memfd_create("kscience-judge", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, max(nbytes, 1))
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
        return HostMapping(fd, max(nbytes, 1))
    except BaseException:
        os.close(fd)
        raise


def _prop(dev: int) -> _Prop:
    return _Prop(_PINNED, _POSIX_FD, _Location(_ON_DEVICE, dev))


Shared = Mapping | HostMapping


def create(nbytes: int, ordinal: int | None) -> Shared:
    """The judge's mapping of a new allocation of at least `nbytes`: on GPU `ordinal`, or in host memory
    where `ordinal` is None (`export` hands it on)."""
    if ordinal is None:
        return _host(nbytes)
    prop, grain = _prop(_device(ordinal)), _size()
    _call("cuMemGetAllocationGranularity", ctypes.byref(grain), ctypes.byref(prop), 0)
    size = max(-(-nbytes // grain.value), 1) * grain.value
    handle = _u64()
    _call("cuMemCreate", ctypes.byref(handle), size, ctypes.byref(prop), 0)
    return Mapping(handle.value, size, ordinal)


def export(mapping: Shared) -> int:
    """A new file descriptor for the allocation behind `mapping`; the caller closes it once sent."""
    if isinstance(mapping, HostMapping):
        return os.dup(mapping.fd)
    fd = _int(-1)
    _call("cuMemExportToShareableHandle", ctypes.byref(fd), mapping.handle, _POSIX_FD, 0)
    return fd.value


def open_fd(fd: int, nbytes: int, ordinal: int | None) -> Shared:
    """The worker's mapping of the allocation a judge exported as `fd` (closed here): device memory on
    GPU `ordinal`, host memory where it is None."""
    if ordinal is None:
        try:
            if nbytes < 1 or os.fstat(fd).st_size < nbytes:
                raise DriverError(f"the judge's buffer holds {os.fstat(fd).st_size} bytes, not {nbytes}")
            mapping = HostMapping(fd, nbytes)
        except BaseException:
            os.close(fd)
            raise
        mapping.fd = None
        os.close(fd)
        return mapping
    handle = _u64()
    try:
        _call("cuMemImportFromShareableHandle", ctypes.byref(handle), ctypes.c_void_p(fd), _POSIX_FD)
    finally:
        os.close(fd)
    return Mapping(handle.value, nbytes, ordinal)


def send_fd(sock: socket.socket, fd: int) -> None:
    """One descriptor over the judge's end of the worker's descriptor socket (never blocks for long:
    one byte a round, into a buffer the worker empties)."""
    socket.send_fds(sock, [b"k"], [fd])


def receive_fd(sock: socket.socket) -> int:
    """The one descriptor the judge sent on the worker's end; anything else is a protocol fault."""
    _, fds, _, _ = socket.recv_fds(sock, 1, 4)
    if len(fds) != 1:
        for fd in fds:
            os.close(fd)
        raise DriverError(f"expected one descriptor from the judge, got {len(fds)}")
    return fds[0]
