#!/usr/bin/env bash
# One GPU call of the paper's experiment (issue 35; docs/results/kernelbench-model-2026-12-05/README.md): each suite
# named goes on where it stands (round 0 measures the rooflines and seeds and posts the first requests; a later call
# evaluates what the answers made), stopped with SIGINT before LIMIT seconds so that it resumes where it stood.
# On the device, with `.whl` and `kb` carried:
#
#   source .whl/setup-device.sh && bash research/kernelbench_round.sh LIMIT STRATEGY/LEVEL ...
#
# The suites share the call's time in order, each under what is left; into $OUT: kernelbench-round.tgz (the suites'
# folders and exchange/, to unpack over the experiment's folder here) and each suite's log.
set -u
LIMIT=$1
shift
HOME_DIR=docs/results/kernelbench-model-2026-12-05
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
for suite in "$@"; do
    strategy=${suite%/*}
    level=${suite#*/}
    sample=$([ "$level" = 3 ] && echo 4 || echo 10)  # the experiment's sample: 10, 10 and 4 tasks
    left=$((LIMIT - SECONDS - 20))
    [ "$left" -gt 30 ] || { echo "ROUND $suite not started: ${left}s left"; continue; }
    start=$SECONDS
    timeout -s INT "$left" hiera run --config "$HOME_DIR/hiera.toml" --workload kernelbench --all-tasks \
        --strategy "$strategy" --set "workload.kernelbench.level=$level" --set "workload.kernelbench.sample=$sample" \
        --run-dir "$HOME_DIR/suites/$strategy/l$level" --set executor.local.runs=4 \
        > "$OUT/round-$strategy-l$level.log" 2>&1
    echo "ROUND $suite rc=$? wall_s=$((SECONDS - start))" | tee -a "$OUT/round-$strategy-l$level.log"
    tail -n 25 "$OUT/round-$strategy-l$level.log"
done
tar czf "$OUT/kernelbench-round.tgz" -C "$HOME_DIR" suites exchange 2>/dev/null || tar czf "$OUT/kernelbench-round.tgz" -C "$HOME_DIR" suites
