#!/usr/bin/env bash
# The README's main command at this checkout and at another commit, back to back on one GPU machine, nothing cached:
# timings compare only on the same machine. On the device, with `.dev` carried:
#
#   here:   mkdir -p .dev/before && git archive COMMIT | tar x -C .dev/before
#   there:  source .whl/setup-device.sh && bash research/same_machine.sh .dev/before 440 [after|before]
#
# With a third argument only that run (on an H200 the two do not fit one call: two calls back to back).
# Each run under `timeout -s INT LIMIT`; into $OUT: NAME-stdout.txt (its last line: wall seconds and the GPU),
# NAME-report.md, NAME-judge-overhead.txt (research/judge_overhead.py) and NAME-run.tgz, NAME = after, before.
# The other commit is installed in place of this one and checked to be the one imported (on 2026-12-06 an
# `pip install -e` over the first did not take, and both runs were this code), then this checkout again.
set -u
BEFORE=$1
LIMIT=$2
ONLY=${3:-}

case_study() {  # NAME
    rm -rf ~/.cache/hiera "/tmp/case/$1"
    mkdir -p /tmp/case
    local start=$SECONDS
    timeout -s INT "$LIMIT" hiera --workload stencil2d --run-dir "/tmp/case/$1" > "$OUT/$1-stdout.txt" 2>&1
    echo "CASE $1 rc=$? wall_s=$((SECONDS - start)) $(nvidia-smi --query-gpu=name --format=csv,noheader)" | tee -a "$OUT/$1-stdout.txt"
    cp "/tmp/case/$1/report.md" "$OUT/$1-report.md"
    python3 research/judge_overhead.py "/tmp/case/$1" > "$OUT/$1-judge-overhead.txt" 2>&1
    tar czf "$OUT/$1-run.tgz" -C /tmp/case "$1"
}

install() {  # FOLDER: installed and imported from there, or the script stops
    python3 -m pip uninstall -q -y hiera > /dev/null 2>&1
    python3 -m pip install -q --no-index --no-deps --no-build-isolation -e "$1" > /dev/null 2>&1
    local found
    found=$(cd /tmp && python3 -c 'import hiera_core; print(hiera_core.__file__)')
    case "$found" in
        "$(realpath "$1")"/*) echo "installed: $found" ;;
        *) echo "same_machine: $1 is installed but hiera_core comes from $found" >&2; exit 1 ;;
    esac
}

[ "$ONLY" = before ] || case_study after
if [ "$ONLY" != after ]; then
    install "$BEFORE"
    case_study before
    install .
fi
