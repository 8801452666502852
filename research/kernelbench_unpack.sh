#!/usr/bin/env bash
# After the experiment's GPU calls (issue 35; docs/results/kernelbench-model-2026-12-05/README.md), here: unpack each
# call's tarball over the experiment's folder, taking from each only the suites that call ran (a tarball holds every
# suite, the others as they stood when the call began) and every call's exchange/ (the requests it posted); delete
# the runs' lock files; list the requests that wait for an answer. Run it once, right after the calls and before any
# answer is given (a tarball's requests are those its call posted; answered here, they would come back). Calls in the
# order they ran (a later call's copy of a suite replaces an earlier one's); KB_HOME: another copy of the folder.
#
#   bash research/kernelbench_unpack.sh /work/.device/2/kernelbench-round.tgz:hiera \
#       /work/.device/3/kernelbench-round.tgz:cudaforge /work/.device/4/kernelbench-round.tgz:hiera
set -eu
HOME_DIR=${KB_HOME:-docs/results/kernelbench-model-2026-12-05}
for item in "$@"; do
    tarball=${item%%:*}
    suites=${item#*:}
    unpacked=$(mktemp -d)
    tar -xzf "$tarball" -C "$unpacked"
    for suite in ${suites//,/ }; do
        cp -a "$unpacked/suites/$suite/." "$HOME_DIR/suites/$suite/"
    done
    cp -a "$unpacked/exchange/." "$HOME_DIR/exchange/"
    rm -rf "$unpacked"
done
find "$HOME_DIR" -name '*.lock' -delete
hiera exchange pending --dir "$HOME_DIR/exchange"
