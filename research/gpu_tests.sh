#!/usr/bin/env bash
# The GPU tests in one call to the lent machine: the stencil reference's probe, then test files side by side (each
# its own pytest, each under what is left of LIMIT seconds), logs into $OUT. On the device:
#
#   source .whl/setup-device.sh && bash research/gpu_tests.sh 560 tests/test_stencil2d_gpu.py "-n 3 tests/test_cuda_gpu.py"
#
# Each argument after LIMIT is one pytest's arguments; its log is $OUT/gpu-tests-K.log. Prints the probe's table
# and each pytest's outcomes last. Tests side by side share the machine's cores: a timing test may read slower.
# Each test's name is in the log as it starts, and a test still running after 240 s leaves every thread's stack
# there (faulthandler_timeout): a call cut short says where it was.
set -u
LIMIT=$1
shift
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
timeout 90 python3 research/probe_stencil_reference.py > "$OUT/probe-stencil-reference.txt" 2>&1
left=$((LIMIT - SECONDS - 40))
k=0
for tests in "$@"; do
    k=$((k + 1))
    # each argument is a pytest command line of its own, read as the shell reads one (-k 'a or b' stays one word);
    # a pytest asked to stop (SIGINT) that has not ended 30 s later is killed
    (eval "set -- $tests"
     PYTHONUNBUFFERED=1 timeout -s INT -k 30 "$left" python3 -m pytest -v -rA --durations=0 -o faulthandler_timeout=240 \
         -p no:cacheprovider "$@" > "$OUT/gpu-tests-$k.log" 2>&1
     echo "rc=$?" >> "$OUT/gpu-tests-$k.log") &
done
wait
cat "$OUT/probe-stencil-reference.txt"
for log in "$OUT"/gpu-tests-*.log; do
    echo "== $log"
    grep -E "^(PASSED|FAILED|ERROR)|passed|failed|^rc=" "$log" | tail -15
done
