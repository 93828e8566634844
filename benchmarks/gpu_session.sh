#!/usr/bin/env bash
# The single-GPU checks the issues ask for, runnable as one command or step by step (a device
# command may run 10 minutes at most, so a step that overruns is cut off and the next one starts):
#   bash benchmarks/gpu_session.sh OUTDIR [tests] [evaluator] [runs] [model-runs] [profile]
#   (none named: tests, evaluator, runs, model-runs)
# model-runs: two iterations on every built-in (offline) and on a KernelBench level-1 and level-2 file
# (the offline scientist must refuse them before any timing; then a scripted model writes the kernels).
# profile: compile facts and Nsight Compute metrics of every built-in seed.
# Logs, JSON results and the run database land in OUTDIR. Figures are then made anywhere with
#   python -m kscience.jupyter.report --db OUTDIR/offline-runs.db --figures-dir figures
# The two-GPU scale-out measurement is separate: python3 benchmarks/scaleout.py on two GPUs.
set -uo pipefail
out=${1:?usage: gpu_session.sh OUTDIR [tests] [evaluator] [runs] [model-runs]}
shift
steps=${*:-tests evaluator runs model-runs}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv | tee "$out/gpu.txt"
for step in $steps; do
  case $step in
    tests) timeout "${TESTS_S:-300}" python3 -m pytest -v -rfEs --tb=short tests/gpu 2>&1 | tee "$out/gpu-tests.log" ;;
    evaluator) timeout "${EVALUATOR_S:-420}" python3 benchmarks/evaluator.py --repeats "${REPEATS:-3}" --out "$out" \
                 2>&1 | tee "$out/evaluator.log" ;;
    runs) timeout "${RUNS_S:-540}" python3 benchmarks/offline_runs.py --iterations "${ITERATIONS:-2}" \
            --db "$out/offline-runs.db" --out "$out" 2>&1 | tee "$out/offline-runs.log"
          # Fold the write-ahead log into the database file, so the one file that comes back holds it all.
          python3 -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute('PRAGMA wal_checkpoint(TRUNCATE)')" \
            "$out/offline-runs.db" ;;
    profile) timeout "${PROFILE_S:-540}" python3 benchmarks/profile_seeds.py --out "$out" 2>&1 \
               | tee "$out/profile-seeds.log" ;;
    model-runs) timeout "${MODEL_RUNS_S:-570}" python3 benchmarks/model_runs.py --iterations "${ITERATIONS:-2}" \
                  ${ONLY:+--only "$ONLY"} --db "$out/model-runs.db" --out "$out" 2>&1 | tee -a "$out/model-runs.log"
                python3 -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute('PRAGMA wal_checkpoint(TRUNCATE)')" \
                  "$out/model-runs.db" ;;
    *) echo "unknown step $step (tests, evaluator, runs, model-runs, profile)" >&2; exit 2 ;;
  esac
done
