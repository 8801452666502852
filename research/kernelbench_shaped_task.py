"""A launch-bound KernelBench task to measure on: the test suite's level-2 `1_Gemm_ReLU_Scaling` at batch 128,
1024 -> 512 features, and the expert's fused candidate for it (a cuBLAS GEMM and one pointwise kernel, the winner
of `hiera --workload kernelbench --task 1_Gemm_ReLU_Scaling ... --rounds 1 --population 2` on the H200, 35 us a
call). No GPU needed.

    python3 research/kernelbench_shaped_task.py ROOT SOURCE

writes the task's checkout to ROOT (for `--set workload.kernelbench.root=ROOT --set workload.kernelbench.level=2`)
and the candidate to SOURCE (for `hiera eval SOURCE --workload kernelbench --task 1_Gemm_ReLU_Scaling --arch cuda
--space libraries_pytorch ...`; docs/results/timer-cover-h200-2026-12-02).
"""

import re
import shutil
import sys
from pathlib import Path

from hiera_workloads.kernelbench.workload import KernelBench, KernelBenchConfig

TASKS = Path(__file__).resolve().parent.parent / "tests" / "plugins" / "kernelbench_tasks"


def main() -> None:
    root, source = Path(sys.argv[1]), Path(sys.argv[2])
    shutil.copytree(TASKS, root, dirs_exist_ok=True)
    task_file = root / "KernelBench" / "level2" / "1_Gemm_ReLU_Scaling.py"
    task_file.write_text(re.sub(r"batch_size, in_features, out_features = .*",
                                "batch_size, in_features, out_features = 128, 1024, 512", task_file.read_text()))
    workload = KernelBench(KernelBenchConfig(root=str(root), level=2))
    [task] = [t for t in workload.tasks() if t.name == "1_Gemm_ReLU_Scaling"]
    template = workload.templates(task, "cuda")[0]
    params = {**template.defaults(), "fuse_pointwise": True}
    source.write_text(template.render(params))
    print(f"{task_file}: batch 128, 1024 -> 512; {source}: {template.describe(params)}")


if __name__ == "__main__":
    main()
