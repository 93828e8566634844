"""Probes: small fixed kernels the judge compiles and runs on its own device to check what the
knowledge notes say depends on the compiler version (which instruction a `tl.dot` becomes, how exact
it is). Each probe runs once per device and Triton version; its one-line result is cached on disk and
sent with every verdict (`EvalResult.device["probes"]`), and the notes show it in place of their
`{{probe:NAME}}` markers (kscience.scientist.knowledge.fill_probes).

Trusted code only: no candidate is involved. Under the CPU interpreter nothing is compiled, so there
is no result and the notes say the claim is unchecked.

    python -m kscience.evaluate.profile.probes      # run every probe here and print the results
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path

import torch

from kscience.device import Device, detect, versions

SIDE, BLOCK_K = 128, 128  # one tile: a 128x128 output over 128-deep K blocks
K_CHAIN = 4096  # the long case: 32 blocks accumulated in one chain (acc = tl.dot(a, b, acc))
_TC = re.compile(r"\b(wgmma\.mma_async|mma\.sync|tcgen05\.mma)\b")


def cache_file(device: Device) -> Path:
    """Where this device's probe results are kept, per device name and Triton version."""
    key = re.sub(r"[^A-Za-z0-9.]+", "_", f"{device.name}-triton-{versions().get('triton')}")
    return Path(os.environ.get("KSCIENCE_CACHE", Path.home() / ".cache" / "kscience")) / "probes" / f"{key}.json"


def results(device: Device | None = None, run=None) -> dict[str, str]:
    """{probe name: one line of what it found} for `device` (default: this process's), from the cache
    or run now (`run`: a function returning that dict, default `run_all`); {} under the interpreter."""
    device = device or detect()
    if device.interpreted:
        return {}
    path = cache_file(device)
    with contextlib.suppress(OSError, ValueError, TypeError):  # none cached yet, or a broken file: probe again
        return dict(json.loads(path.read_text()))
    found = (run or run_all)()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(found, indent=1))
    except OSError:  # a read-only cache costs a rerun next time, nothing else
        pass
    return found


def run_all() -> dict[str, str]:
    out = {}
    for name, probe in PROBES.items():
        try:
            out[name] = probe()
        except Exception as exc:  # a probe that cannot run says so: its claim stays unchecked
            out[name] = f"not checked: the probe failed ({type(exc).__name__}: {str(exc)[:200]})"
    return out


def _fp8_dot_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def fp8_dot_probe(a_ptr, b_ptr, c_ptr, K, IMPRECISE: tl.constexpr, WIDEN: tl.constexpr, FRESH: tl.constexpr,
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
        acc = tl.zeros((BM, BN), tl.float32)
        for k in range(0, K, BK):
            a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])  # A [M, K], K-contiguous
            b = tl.load(b_ptr + rn[None, :] * K + (k + rk)[:, None])  # B^T stored [N, K]: K-major, as wgmma wants
            if WIDEN:
                a, b = a.to(tl.float16), b.to(tl.float16)
            if FRESH:  # a fresh dot per 128-deep block, added in fp32 (promotion every block, DeepSeek-V3 style)
                acc += tl.dot(a, b, max_num_imprecise_acc=IMPRECISE)
            else:
                acc = tl.dot(a, b, acc, max_num_imprecise_acc=IMPRECISE)
        tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)

    return fp8_dot_probe


def fp8_dot() -> str:
    """Which instruction an fp8 e4m3 `tl.dot` becomes with each `max_num_imprecise_acc`, and its largest
    error against float64 over K = 128 and over a K = 4096 chain."""
    kernel = _fp8_dot_kernel()
    gen = torch.Generator(device="cpu").manual_seed(0)
    parts = []
    for label, imprecise, widen in (("max_num_imprecise_acc=0", 0, False), ("=32", 32, False),
                                    ("default", None, False), ("widened to fp16", None, True)):
        found = []
        for k, fresh in ((BLOCK_K, False), (K_CHAIN, False), (K_CHAIN, True)):
            a = torch.randn(SIDE, k, generator=gen).clamp(-4, 4).to(torch.float8_e4m3fn)
            b = torch.randn(SIDE, k, generator=gen).clamp(-4, 4).to(torch.float8_e4m3fn)
            c = torch.empty(SIDE, SIDE, device="cuda")
            compiled = kernel[(1,)](a.cuda(), b.cuda(), c, k, IMPRECISE=imprecise, WIDEN=widen, FRESH=fresh,
                                    BM=SIDE, BN=SIDE, BK=BLOCK_K, num_warps=4)
            want = a.double() @ b.double().T
            err = (c.cpu().double() - want).abs().max().item()
            if k == BLOCK_K:
                ops = sorted(set(_TC.findall(compiled.asm.get("ptx", ""))))
                found.append(f"{'/'.join(ops) or 'no tensor-core instruction'}, err {err:.2g} at K=128")
            else:
                found.append(f"{err:.2g} at K=4096 {'(fresh dot per block)' if fresh else '(one chain)'}")
        parts.append(f"{label} -> " + ", ".join(found))
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return (f"Triton {versions().get('triton')} on {props.name} (sm_{props.major}{props.minor}), "
            f"{SIDE}x{SIDE} fp8 e4m3 tl.dot, num_warps 4, largest abs error against float64 of the same fp8 "
            f"values (inputs randn clamped to +-4): " + "; ".join(parts))


PROBES = {"fp8_dot": fp8_dot}


if __name__ == "__main__":
    for name, text in run_all().items():
        print(f"{name}: {text}")
