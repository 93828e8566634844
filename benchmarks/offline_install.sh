#!/usr/bin/env bash
# Installs the optional baseline libraries (Liger-Kernel, QuACK and what QuACK needs) on a machine with no
# network, into a virtual environment that sees the system's torch and Triton:
#   bash benchmarks/offline_install.sh VENV WHEEL_DIR... [-- SPLIT_PART...]
# Each WHEEL_DIR holds wheels fetched elsewhere (`pip download liger-kernel quack-kernels
# "nvidia-cutlass-dsl[cu13]" --python-version 3.12 --only-binary=:all: -d DIR`). A wheel too large to carry
# in one device command (nvidia-cutlass-dsl-libs-cu13, 92 MB) comes as the parts of one xz-compressed tar of
# its package folder (`tar cf - nvidia_cutlass_dsl | xz | split -b 34000000`), carried in two commands and
# given after `--` in order. Then `PATH=VENV/bin:$PATH` makes `python3` the environment's.
# A virtual environment, not `pip install --target`: the CUTLASS DSL puts its packages on the path with a
# .pth file, which Python reads only in a site-packages folder.
set -euo pipefail
venv=${1:?usage: offline_install.sh VENV WHEEL_DIR... [-- SPLIT_PART...]}
shift
dirs=() parts=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do dirs+=("$1"); shift; done
[ $# -gt 0 ] && shift
parts=("$@")
python3 -m venv --without-pip "$venv"
site=$("$venv/bin/python3" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# The system's packages (torch, Triton, pip) after the environment's own: where the system's python3 is
# itself a virtual environment, --system-site-packages would reach only the interpreter's base folders.
python3 -c 'import sys; print("\n".join(p for p in sys.path if p.endswith(("site-packages", "dist-packages"))))' \
  > "$site/system-python.pth"
wheels=()
for d in "${dirs[@]}"; do wheels+=("$d"/*.whl); done
# pip from the system's site-packages installs into the environment it runs in
"$venv/bin/python3" -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check "${wheels[@]}"
if [ ${#parts[@]} -gt 0 ]; then
  cat "${parts[@]}" | xz -dc | tar xf - -C "$site"
fi
"$venv/bin/python3" - <<'EOF'
import importlib
for name in ("liger_kernel", "cutlass", "cutlass.cute", "quack"):
    try:
        importlib.import_module(name)
        print(f"{name}: imports")
    except Exception as exc:  # say what is missing and go on: a run names each missing library in one line
        print(f"{name}: does not import ({type(exc).__name__}: {str(exc)[:160]})")
EOF
