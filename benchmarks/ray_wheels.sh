#!/usr/bin/env bash
# Ray and its dependencies as wheels for the GPU machines (Python 3.12, x86_64, no network there),
# in .whl/ (git-ignored), small enough to travel with the working tree (64 MiB at most):
# Ray's Java jars (30 MiB compressed, unused from Python) are taken out of its wheel.
#   bash benchmarks/ray_wheels.sh && du -sh .whl      # then carry .whl and, there,
#   pip install --no-index --find-links .whl ray   (before scaleout.py --executors local,ray)
set -euo pipefail
cd "$(dirname "$0")/.."
ver=${RAY_VERSION:-2.60.0}
rm -rf .whl && mkdir -p .whl
pip download "ray==$ver" --python-version 3.12 --only-binary=:all: --platform manylinux2014_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -d .whl -q
python3 - "$ver" <<'PY'
import base64, hashlib, pathlib, sys, zipfile
src = next(pathlib.Path(".whl").glob(f"ray-{sys.argv[1]}-*.whl"))
tmp = src.with_suffix(".pruned")
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
    for item in zin.infolist():
        if item.filename.startswith("ray/jars/"):
            continue
        data = zin.read(item)
        if item.filename.endswith(".dist-info/RECORD"):
            data = b"\n".join(l for l in data.splitlines() if not l.startswith(b"ray/jars/")) + b"\n"
        zout.writestr(item, data)
tmp.replace(src)
PY
du -sh .whl
