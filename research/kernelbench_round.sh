#!/usr/bin/env bash
# One GPU call of the paper's experiment (issue 35; docs/results/kernelbench-model-2026-12-05/README.md): each suite
# named (STRATEGY/LEVEL) goes on where it stands (round 0 measures the rooflines and seeds and posts the first
# requests; a later call evaluates what the answers made); STRATEGY/LEVEL/TASK runs that one task of the suite alone
# (a task too large to be judged beside the suite's other runs). Each is stopped with SIGINT before LIMIT seconds so
# that it resumes where it stood. On the device, with `.whl` and `kb` carried:
#
#   source .whl/setup-device.sh && bash research/kernelbench_round.sh LIMIT STRATEGY/LEVEL[/TASK] ...
#
# They share the call's time in order, each under what is left; into $OUT: kernelbench-round.tgz (the suites'
# folders and exchange/, to unpack over the experiment's folder here) and each one's log.
set -u
LIMIT=$1
shift
HOME_DIR=docs/results/kernelbench-model-2026-12-05
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
for item in "$@"; do
    IFS=/ read -r strategy level task <<< "$item"
    sample=$([ "$level" = 3 ] && echo 4 || echo 10)  # the experiment's sample: 10, 10 and 4 tasks
    left=$((LIMIT - SECONDS - 20))
    [ "$left" -gt 30 ] || { echo "ROUND $item not started: ${left}s left"; continue; }
    if [ -n "$task" ]; then
        what=(--task "$task" --run-dir "$HOME_DIR/suites/$strategy/l$level/$task")
    else
        what=(--all-tasks --set "workload.kernelbench.sample=$sample" --run-dir "$HOME_DIR/suites/$strategy/l$level"
              --set executor.local.runs=4)
    fi
    log="$OUT/round-${item//\//-}.log"
    start=$SECONDS
    timeout -s INT "$left" hiera run --config "$HOME_DIR/hiera.toml" --workload kernelbench --strategy "$strategy" \
        --set "workload.kernelbench.level=$level" "${what[@]}" > "$log" 2>&1
    echo "ROUND $item rc=$? wall_s=$((SECONDS - start))" | tee -a "$log"
    tail -n 25 "$log"
done
tar czf "$OUT/kernelbench-round.tgz" -C "$HOME_DIR" suites exchange
