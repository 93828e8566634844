#!/usr/bin/env bash
# The GPU steps a maintainer runs, each within one device command (at most 10 minutes: every step has
# its own time limit, so a step that overruns is cut off and the next one starts):
#   bash benchmarks/gpu_session.sh OUTDIR STEP...     (no STEP: tests evaluator runs model-runs)
# benchmarks/README.md says what each step runs, its settings (environment variables) and its results.
# Logs, JSON results and run databases land in OUTDIR.
set -uo pipefail
steps_known="tests sorttests sortbuilds evaluator clock falserej gpumode throughput campaigns baselines kernelsplit \
callbreakdown runs \
model-runs profile profile-run compose-gemm compose-rows profile-default"
out=${1:?usage: gpu_session.sh OUTDIR [STEP...]; steps: $steps_known}
shift
steps=${*:-tests evaluator runs model-runs}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv | tee "$out/gpu.txt"
# The host too: runs on machines of one kind have differed sixfold in seconds per evaluation.
{ echo "cpus $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg), $(grep -m1 'model name' /proc/cpuinfo)"
  nvidia-smi --query-gpu=compute_mode,persistence_mode,clocks_event_reasons.active --format=csv; } | tee -a "$out/gpu.txt"

# Fold a run database's write-ahead log into its file, so the one file that comes back holds it all.
checkpoint() {
  [ -f "$1" ] && python3 -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute('PRAGMA wal_checkpoint(TRUNCATE)')" "$1"
}

# `kscience show` of the one run in a database, appended to a log.
show_run() {
  python3 -m kscience.cli.main show "$(python3 -m kscience.cli.main runs --db "$1" --json \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')" --db "$1" 2>&1 | tee -a "$2"
}

sweep=${SWEEP:-benchmarks/results/gpumode-sweep-NVIDIA_H100_80GB_HBM3-2026-11-24.md}
for step in $steps; do
  case $step in
    tests) # HALF=1 or 2: one half each, for two GPUs side by side (252 s and 208 s on an H200, 2026-11-27)
           case ${HALF:-} in
             1) files="attacks host keep_every_win kernel_split profile library_baselines" ;;
             2) files="honest outside lifetime" ;;
             *) files="" ;;
           esac
           targets=tests/gpu
           [ -n "$files" ] && targets=$(for f in $files; do printf 'tests/gpu/test_gpu_%s.py ' "$f"; done)
           # shellcheck disable=SC2086  # one word per test file
           timeout "${TESTS_S:-540}" python3 -m pytest -v -rfEs --tb=short --durations=12 $targets \
             --deselect tests/gpu/test_gpu_gpumode_sort.py 2>&1 | tee "$out/gpu-tests${HALF:+-half-$HALF}.log" ;;
    sorttests) # GPU MODE's published sorts, five evaluations each: 17-76 s an evaluation on an H100;
               # SORT_K=pmpp_v2 or SORT_K="not pmpp_v2" for one of the two (about 150 s each on an H200)
               timeout "${SORT_S:-570}" python3 -m pytest -v -s -rfEs --tb=short tests/gpu/test_gpu_gpumode_sort.py \
                 ${SORT_K:+-k "$SORT_K"} 2>&1 | tee "$out/gpu-sort-tests${SORT_K:+-${SORT_K// /-}}.log" ;;
    sortbuilds) timeout "${SORTBUILDS_S:-540}" python3 benchmarks/input_builds.py -n "${SORTBUILDS_N:-4}" \
                  ${TASK:+--task "$TASK"} --out "$out" 2>&1 | tee "$out/input-builds.log" ;;
    evaluator) timeout "${EVALUATOR_S:-420}" python3 benchmarks/evaluator.py --repeats "${REPEATS:-3}" \
                 ${PROBLEMS:+--problems "$PROBLEMS"} --out "$out" \
                 2>&1 | tee "$out/evaluator.log" ;;
    clock) timeout "${CLOCK_S:-560}" python3 benchmarks/clock_precision.py --repeats "${REPEATS:-5}" --out "$out" \
             2>&1 | tee "$out/clock-precision.log" ;;
    falserej) timeout "${FALSEREJ_S:-560}" python3 benchmarks/false_rejections.py --count "${COUNT:-1000}" \
                --time-limit "${FALSEREJ_LIMIT:-420}" --per-gpu "${PER_GPU:-3}" ${ADD_TO:+--add-to "$ADD_TO"} ${NEIGHBOUR:+--neighbour} \
                ${KB:+--kernelbench "$KB"} ${TRIAL:+--trial "$TRIAL"} \
                ${REFK:+--gpumode "$REFK" --sweep "$sweep"} --out "$out" 2>&1 \
                | tee "$out/false-rejections.log" ;;
    gpumode) timeout "${GPUMODE_S:-560}" python3 benchmarks/gpumode_sweep.py --repo "${REFK:?set REFK to a reference-kernels extract}" \
               ${RESUME:+--resume "$RESUME"} ${ONLY:+--only "$ONLY"} ${LIMIT:+--time-limit "$LIMIT"} --budget "${BUDGET:-480}" \
               --out "$out" 2>&1 | tee "$out/gpumode-sweep.log" ;;
    throughput) timeout "${THROUGHPUT_S:-570}" python3 benchmarks/search_throughput.py --lines "${LINES:-1,8}" \
                  ${WINDOW:+--window "$WINDOW"} ${GPUS:+--gpus "$GPUS"} --db "$out/search-throughput.db" \
                  --out "$out/search-throughput.json" 2>&1 | tee "$out/search-throughput.log"
                checkpoint "$out/search-throughput.db" ;;
    campaigns) dbs=${DBS:-$out/campaign-throughput}
               timeout "${CAMPAIGNS_S:-570}" python3 benchmarks/campaign_throughput.py --modes "${MODES:-all,one}" \
                 --dbs "$dbs" --deadline "${DEADLINE:-540}" ${GPUS:+--gpus "$GPUS"} \
                 ${ONE_FROM:+--one-at-a-time-from "$ONE_FROM"} --out "$out/campaign-throughput.json" 2>&1 \
                 | tee -a "$out/campaign-throughput.log"
               for db in "$dbs"/*.db; do checkpoint "$db"; done ;;
    baselines) timeout "${BASELINES_S:-560}" python3 benchmarks/library_baselines.py --part "${PART:-baselines}" \
                 ${PROBLEMS:+--problems "$PROBLEMS"} ${COMPILE:+--compile} ${EVALUATIONS:+--evaluations "$EVALUATIONS"} \
                 ${GPUS:+--gpus "$GPUS"} ${GPUS_PER_RUN:+--gpus-per-run "$GPUS_PER_RUN"} ${RUN_LIMIT:+--time-limit "$RUN_LIMIT"} \
                 --db "$out/library-runs.db" --out "$out" 2>&1 | tee "$out/library-baselines.log"
               for db in "$out"/library-runs-*.db; do checkpoint "$db"; done ;;
    kernelsplit) timeout "${KERNELSPLIT_S:-540}" python3 benchmarks/kernel_split.py --out "$out" 2>&1 \
                   | tee "$out/kernel-split.log"
                 for db in "$out"/kernel-split-*.db; do checkpoint "$db"; done ;;
    callbreakdown) timeout "${CALLBREAKDOWN_S:-540}" python3 benchmarks/call_breakdown.py --out "$out" 2>&1 \
                     | tee "$out/call-breakdown.log" ;;
    runs) timeout "${RUNS_S:-540}" python3 benchmarks/offline_runs.py --iterations "${ITERATIONS:-2}" \
            --db "$out/offline-runs.db" --out "$out" 2>&1 | tee "$out/offline-runs.log"
          checkpoint "$out/offline-runs.db" ;;
    model-runs) timeout "${MODEL_RUNS_S:-570}" python3 benchmarks/model_runs.py --iterations "${ITERATIONS:-2}" \
                  ${ONLY:+--only "$ONLY"} --db "$out/model-runs.db" --out "$out" 2>&1 | tee -a "$out/model-runs.log"
                checkpoint "$out/model-runs.db" ;;
    profile) timeout "${PROFILE_S:-540}" python3 benchmarks/profile_seeds.py --out "$out" 2>&1 \
               | tee "$out/profile-seeds.log" ;;
    profile-run) rm -f "$out/profile-run.db"*
                 timeout "${PROFILE_RUN_S:-540}" python3 -m kscience.cli.main run softmax --llm offline --iterations 1 \
                   --profile ncu --db "$out/profile-run.db" 2>&1 | tee "$out/profile-run.log"
                 checkpoint "$out/profile-run.db"
                 show_run "$out/profile-run.db" "$out/profile-run.log"
                 python3 benchmarks/profile_cost.py --db "$out/profile-run.db" --out "$out/profile-run-cost.json" \
                   2>&1 | tee -a "$out/profile-run.log" ;;
    compose-gemm|compose-rows|profile-default)
      case $step in
        compose-gemm) problems=${PROBLEMS:-fp8_blockscale_gemm,matmul}; flags="--iterations ${ITERATIONS:-10} --profile none" ;;
        compose-rows) problems=${PROBLEMS:-softmax,rmsnorm,swiglu}; flags="--iterations ${ITERATIONS:-10} --profile none" ;;
        profile-default) problems=softmax; flags="--iterations 1 --profile auto" ;;
      esac
      timeout "${COMPOSE_S:-570}" python3 benchmarks/composition.py --problems "$problems" $flags \
        --budget "$(( ${COMPOSE_S:-570} - 45 ))" --db "$out/composition.db" --out "$out" 2>&1 | tee -a "$out/composition.log"
      checkpoint "$out/composition.db" ;;
    *) echo "unknown step $step (steps: $steps_known)" >&2
       exit 2 ;;
  esac
done
