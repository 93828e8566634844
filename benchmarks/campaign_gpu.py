"""Campaigns and re-timing on a GPU, through the CLI exactly as a user would run them.

Step `campaign`: one database, two campaigns: the five built-ins with the offline scientist, and
three KernelBench level-1-style files (written here; the matmul shrunk with --set N=...) with a
scripted loopback OpenAI-compatible model (tests/scripted_kernel_model.py: no model API is
reachable on the GPU machine) that answers each writer with a correct ModelNew. Then each
campaign's report (text, JSON) and figure.

Step `retime`: a copy of the H100 offline-run database kept in benchmarks/results/ (the original
is left as it was), every run's seed, baselines and best `--top` kernels judged again on this GPU,
and the comparison (carry-over, ratios, rank lists, Kendall tau).

    python3 benchmarks/campaign_gpu.py [campaign] [retime] [--out benchmarks/results] [--top 1] [--iterations 2]

The KernelBench half needs the `openai` SDK (kscience[openai]), which the GPU image lacks; without
it that half is skipped with a message. Its wheels for Python 3.12 (5.6 MB), fetched into the
git-ignored `.whl/` and installed there with `pip install --no-index --target /tmp/site .whl/*.whl`:
openai==3.54.0 httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5 pydantic==2.14.3
pydantic-core==2.50.4 annotated-types==0.8.0 typing-inspection==0.4.5 distro==1.9.0 jiter==0.19.0
sniffio==1.3.1 (the image has anyio, h11, idna, typing-extensions).
On an H100, about 5 minutes for `campaign` and 3 for `retime` (evaluations took 8 s on average
there). Results: OUT/campaign-<device>-<date>.{db,md,json,png}, OUT/retime-<device>-<date>.{db,md,json}.
"""

from __future__ import annotations

import argparse
import importlib.util
import datetime
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # this checkout's kscience; the scripted loopback model

BUILTINS = "fp8_blockscale_gemm,matmul,rmsnorm,softmax,swiglu"
H100_DB = ROOT / "benchmarks" / "results" / "offline-runs-NVIDIA_H100_80GB_HBM3-2026-11-22.db"

LEVEL1 = {  # in the form of KernelBench level 1 (19_ReLU, 47_Sum_reduction, 1_Square_matrix_multiplication_)
    "19_ReLU": ("ReLU", "return torch.relu(x)", "batch_size = 16\ndim = 16384\n",
                "[torch.randn(batch_size, dim)]", "[]", ""),
    "47_Sum_reduction_over_a_dimension": ("Sum over dim 1, kept", "return torch.sum(x, dim=self.dim, keepdim=True)",
                                          "batch_size = 16\ndim1 = 256\ndim2 = 256\nreduce_dim = 1\n",
                                          "[torch.randn(batch_size, dim1, dim2)]", "[reduce_dim]", "dim"),
    "1_Square_matrix_multiplication_": ("C = A @ B, square", "return torch.matmul(A, B)", "N = 2048\n",
                                        "[torch.randn(N, N), torch.randn(N, N)]", "[]", ""),
}
SOLUTIONS = {
    "19_ReLU": '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        _relu[(triton.cdiv(n, 4096),)](x, y, n, BLOCK=4096)
        return y
''',
    "47_Sum_reduction_over_a_dimension": '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return x.sum(self.dim, keepdim=True)
''',
    "1_Square_matrix_multiplication_": '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, A, B):
        return A @ B
''',
}


def level1_file(name: str) -> str:
    doc, body, sizes, inputs, init, attr = LEVEL1[name]
    args = ", A, B" if "A, B" in body else ", x"
    init_fn = (f"    def __init__(self, {attr}):\n        super().__init__()\n        self.{attr} = {attr}\n\n"
               if attr else "")
    return (f'"""{doc}"""\nimport torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n{init_fn}'
            f"    def forward(self{args}):\n        {body}\n\n\n{sizes}\n\ndef get_inputs():\n    return {inputs}\n\n\n"
            f"def get_init_inputs():\n    return {init}\n")


def kscience(*args: str, out: Path | None = None) -> subprocess.CompletedProcess:
    print("$ kscience " + " ".join(args), flush=True)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    done = subprocess.run([sys.executable, "-m", "kscience.cli.main", *args], text=True, stdout=subprocess.PIPE,
                          stderr=None, env=dict(os.environ, PYTHONPATH=path, PYTHONUNBUFFERED="1"))
    if out is not None:
        out.write_text(done.stdout)
    print(done.stdout[-4000:], flush=True)
    return done


def campaign_ids(db: Path) -> list[str]:
    return [r[0] for r in sqlite3.connect(db).execute("SELECT id FROM campaigns ORDER BY created")]


def checkpoint(db: Path) -> None:
    """Fold the write-ahead log into the file, so the one file that comes back holds everything."""
    sqlite3.connect(db).execute("PRAGMA wal_checkpoint(TRUNCATE)")


def step_campaign(out: Path, stem: str, n_size: int, iterations: int) -> None:
    db = out / f"{stem}.db"
    level1 = out / f"{stem}-level1"
    level1.mkdir(parents=True, exist_ok=True)
    for name in LEVEL1:
        (level1 / f"{name}.py").write_text(level1_file(name))
    kscience("campaign", BUILTINS, "--iterations", str(iterations), "--llm", "offline", "--name", "built-ins offline",
             "--db", str(db))
    if importlib.util.find_spec("openai") is None:  # the scripted model is reached through the real SDK
        print("campaign_gpu: the openai SDK is missing: KernelBench half skipped (pip install openai)", flush=True)
    else:
        from scripted_kernel_model import ScriptedKernelModel

        os.environ.setdefault("OPENAI_API_KEY", "scripted-loopback")
        with ScriptedKernelModel(SOLUTIONS) as model:
            kscience("campaign", str(level1), "--iterations", "1", "--strategy", "tournament",
                     "--llm", "openai:scripted", "--base-url", model.base_url, "--set", f"N={n_size}",
                     "--name", "KernelBench level-1 style, scripted model", "--db", str(db))
    checkpoint(db)
    reports = []
    for i, cid in enumerate(campaign_ids(db)):
        text = kscience("report", cid, "--db", str(db), "--figure", str(out / f"{stem}-{i + 1}.png"))
        reports.append(text.stdout)
        reports_json = kscience("report", cid, "--db", str(db), "--json")
        (out / f"{stem}-{i + 1}.json").write_text(reports_json.stdout)
    (out / f"{stem}.md").write_text("# Campaigns\n\n" + "\n\n".join(f"```\n{r}```" for r in reports))


def step_retime(out: Path, stem: str, top: int, source: Path) -> None:
    db = out / f"{stem}.db"
    shutil.copyfile(source, db)  # the kept original stays as it was (opening it would migrate it)
    runs = [r[0] for r in sqlite3.connect(db).execute("SELECT id FROM runs ORDER BY created")]
    texts, comps = [], []
    for run_id in runs:
        kscience("retime", run_id, "--top", str(top), "--db", str(db))
        texts.append(kscience("retime", run_id, "--show", "--db", str(db)).stdout)
        comps.extend(json.loads(kscience("retime", run_id, "--show", "--json", "--db", str(db)).stdout or "[]"))
    checkpoint(db)
    (out / f"{stem}.md").write_text(f"# Re-timing of {source.name}\n\n" + "\n".join(f"```\n{t}```" for t in texts))
    (out / f"{stem}.json").write_text(json.dumps(comps, indent=2))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("steps", nargs="*", help="campaign, retime (default: both)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--top", type=int, default=1, help="best K candidates of each run to re-time (default 1)")
    ap.add_argument("--n", type=int, default=1024, help="N of the square matmul file (--set N=...)")
    ap.add_argument("--iterations", type=int, default=2, help="design rounds of the built-ins' offline runs")
    ap.add_argument("--source-db", default=str(H100_DB), help="the database to re-time")
    args = ap.parse_args()
    args.steps = args.steps or ["campaign", "retime"]
    unknown = set(args.steps) - {"campaign", "retime"}
    if unknown:
        ap.error(f"unknown step {sorted(unknown)[0]} (campaign, retime)")
    from kscience.device import detect

    device = re.sub(r"[^\w.-]+", "_", detect().name).strip("_")
    stamp = datetime.date.today().isoformat()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if "campaign" in args.steps:
        step_campaign(out, f"campaign-{device}-{stamp}", args.n, args.iterations)
    if "retime" in args.steps:
        step_retime(out, f"retime-{device}-{stamp}", args.top, Path(args.source_db))
    return 0


if __name__ == "__main__":
    sys.exit(main())
