#!/usr/bin/env bash
# The GPU tests in one call to the lent machine: the stencil reference's probe, then test files side by side (each
# its own pytest, each under what is left of LIMIT seconds), logs into $OUT. On the device:
#
#   source .whl/setup-device.sh && bash research/gpu_tests.sh 560 tests/test_stencil2d_gpu.py "-n 3 tests/test_cuda_gpu.py"
#
# Each argument after LIMIT is one pytest's arguments; its log is $OUT/gpu-tests-K.log. Prints the probe's table
# and each pytest's outcomes last. Tests side by side share the machine's cores: a timing test may read slower.
set -u
LIMIT=$1
shift
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
timeout 90 python3 research/probe_stencil_reference.py > "$OUT/probe-stencil-reference.txt" 2>&1
left=$((LIMIT - SECONDS - 10))
k=0
for tests in "$@"; do
    k=$((k + 1))
    # shellcheck disable=SC2086  # each argument is a pytest command line of its own
    (timeout -s INT "$left" python3 -m pytest -q -rA --durations=0 -p no:cacheprovider $tests > "$OUT/gpu-tests-$k.log" 2>&1
     echo "rc=$?" >> "$OUT/gpu-tests-$k.log") &
done
wait
cat "$OUT/probe-stencil-reference.txt"
for log in "$OUT"/gpu-tests-*.log; do
    echo "== $log"
    grep -E "^(PASSED|FAILED|ERROR)|passed|failed|^rc=" "$log" | tail -15
done
