#!/usr/bin/env bash
# One GPU call of the paper's experiment (issue 35; docs/results/kernelbench-model-2026-12-05/README.md): each suite
# named (STRATEGY/LEVEL) goes on where it stands (round 0 measures the rooflines and seeds and posts the first
# requests; a later call evaluates what the answers made); STRATEGY/LEVEL/TASK runs that one task of the suite alone
# (a task too large to be judged beside the suite's other runs). Each is stopped with SIGINT before LIMIT seconds so
# that it resumes where it stood. On the device, with `.whl` and `kb` carried:
#
#   source .whl/setup-device.sh && bash research/kernelbench_round.sh 550 STRATEGY/LEVEL[/TASK] ...
#
# They share the call's time in order, each under what is left; into $OUT: kernelbench-round.tgz (the suites'
# folders and exchange/, to unpack over the experiment's folder here) and each one's log.
#
# LIMIT counts from this script's start, not the call's (.whl/setup-device.sh takes its share before: ~7 s on a warm
# machine, ~40 s on a fresh one): 550 under a 600 s call. A run is asked to stop (SIGINT) 40 s before its share ends
# and killed 20 s later: a suite's stop kills its builds, profiles and judges under way and ended each run within
# 2 s on an H100 (three calls, 2026-12-07; before ce7e5f0 and 5cc4a06 a stop ended nothing, and margins of 105 s
# left ~180 s of every call unused). The tarball is also written every SNAPSHOT_S seconds while the runs go on
# (what a killed call brings back; a trajectory's torn last line is dropped on resume), and the device's own copy
# of the folder is gone after the call: only what is under $OUT comes back.
set -u
LIMIT=$1
shift
HOME_DIR=docs/results/kernelbench-model-2026-12-05
SNAPSHOT_S=${SNAPSHOT_S:-45}
snapshot() {
    tar czf "$OUT/kernelbench-round.tgz.part" -C "$HOME_DIR" suites exchange 2> /dev/null \
        && mv "$OUT/kernelbench-round.tgz.part" "$OUT/kernelbench-round.tgz"
}
(while sleep "$SNAPSHOT_S"; do snapshot; done) > /dev/null 2>&1 &
SNAPSHOTS=$!
stop_snapshots() { pkill -P $SNAPSHOTS 2> /dev/null; kill $SNAPSHOTS 2> /dev/null; wait $SNAPSHOTS 2> /dev/null; }
trap stop_snapshots EXIT
echo "start $(date -u +%T)"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
for item in "$@"; do
    IFS=/ read -r strategy level task <<< "$item"
    sample=$([ "$level" = 3 ] && echo 4 || echo 10)  # the experiment's sample: 10, 10 and 4 tasks
    left=$((LIMIT - SECONDS - 20 - 20))  # its SIGINT, then its kill 20 s later, 20 s before LIMIT
    [ "$left" -gt 30 ] || { echo "ROUND $item not started: ${left}s left"; continue; }
    if [ -n "$task" ]; then
        what=(--task "$task" --run-dir "$HOME_DIR/suites/$strategy/l$level/$task")
    else
        what=(--all-tasks --set "workload.kernelbench.sample=$sample" --run-dir "$HOME_DIR/suites/$strategy/l$level"
              --set executor.local.runs=4)
    fi
    log="$OUT/round-${item//\//-}.log"
    start=$SECONDS
    timeout -s INT -k 20 "$left" hiera run --config "$HOME_DIR/hiera.toml" --workload kernelbench --strategy "$strategy" \
        --set "workload.kernelbench.level=$level" "${what[@]}" > "$log" 2>&1
    echo "ROUND $item rc=$? wall_s=$((SECONDS - start))" | tee -a "$log"
    tail -n 25 "$log"
done
stop_snapshots
snapshot
echo "end $(date -u +%T): $SECONDS s"
