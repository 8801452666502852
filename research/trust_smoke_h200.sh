#!/usr/bin/env bash
# H200 smoke of the judge's batch figure (2026-12-03): the case study's ring kernel and the seed through `hiera eval`,
# the judge's timing line and verdict each; then the cuda adversarial GPU test file. Output under $OUT.
set -u
python3 - <<'PY'
from hiera_workloads.stencil2d.cuda import CudaStencilTemplate
t = CudaStencilTemplate(radius=3, steps=1)
open("/tmp/ring.cu", "w").write(t.render({**t.defaults(), "tiling": "ring", "ring_columns": 2, "ring_threads": 128,
    "strip_rows": 120, "ring_stages": 4, "boundary": "split", "vector_loads": True}))
open("/tmp/seed.cu", "w").write(t.render(t.defaults()))
PY
for k in ring seed; do
  /usr/bin/time -f "$k wall %e s" hiera eval /tmp/$k.cu --workload stencil2d --arch cuda --space pure_cuda --out $OUT/$k \
      --set evaluator.cuda-profile.enabled=false > $OUT/$k.txt 2>&1
  tail -3 $OUT/$k.txt; grep -h "timing:\|phases:" $OUT/$k/judge.log 2>/dev/null | cut -c1-600
  grep -rh "timing_bound\|latency_ms\|reason" $OUT/$k/*.json 2>/dev/null | head -5 | cut -c1-400
done
