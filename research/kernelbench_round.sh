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
#
# LIMIT counts from this script's start, not the call's (.whl/setup-device.sh takes its share before): 520 under a
# 600 s call. A run is asked to stop (SIGINT) 60 s before its share ends and killed 45 s later: a suite stopping with
# builds and judges under way ends them as they are, which took more than the 80 s left on 2026-12-07, and the
# call's limit then killed everything before the tarball was written. So the tarball is also written every
# SNAPSHOT_S seconds while the runs go on (what a killed call brings back; a trajectory's torn last line is dropped
# on resume), and the device's own copy of the folder is gone after the call: only what is under $OUT comes back.
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
    left=$((LIMIT - SECONDS - 60 - 45))  # its SIGINT, then its kill 45 s later, 60 s before LIMIT
    [ "$left" -gt 30 ] || { echo "ROUND $item not started: ${left}s left"; continue; }
    if [ -n "$task" ]; then
        what=(--task "$task" --run-dir "$HOME_DIR/suites/$strategy/l$level/$task")
    else
        what=(--all-tasks --set "workload.kernelbench.sample=$sample" --run-dir "$HOME_DIR/suites/$strategy/l$level"
              --set executor.local.runs=4)
    fi
    log="$OUT/round-${item//\//-}.log"
    start=$SECONDS
    timeout -s INT -k 45 "$left" hiera run --config "$HOME_DIR/hiera.toml" --workload kernelbench --strategy "$strategy" \
        --set "workload.kernelbench.level=$level" "${what[@]}" > "$log" 2>&1
    echo "ROUND $item rc=$? wall_s=$((SECONDS - start))" | tee -a "$log"
    tail -n 25 "$log"
done
stop_snapshots
snapshot
echo "end $(date -u +%T): $SECONDS s"
