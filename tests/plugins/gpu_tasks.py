"""A small cuda workload for the evaluator's tests: FP32 `scale-add` (y = 2x + b) and `matmul` (A @ B)."""

from typing import ClassVar

from hiera_core import UnsupportedArchitecture, hookimpl
from hiera_core.records import Contract, Task

BINDINGS = {
    "scale-add": "torch::Tensor forward(torch::Tensor x, torch::Tensor b);",
    "scale-add-4m": "torch::Tensor forward(torch::Tensor x, torch::Tensor b);",
    "matmul": "torch::Tensor forward(torch::Tensor a, torch::Tensor b);",
    "matmul-2048": "torch::Tensor forward(torch::Tensor a, torch::Tensor b);",
}
SHAPES = {"matmul": [512, 384, 256], "matmul-2048": [2048, 2048, 2048]}
ELEMENTS = {"scale-add": 1 << 20, "scale-add-4m": 1 << 22}

SEEDS = {
    "scale-add": r"""
#include <torch/extension.h>
__global__ void scale_add(const float* x, const float* b, float* y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i] + b[i];
}
torch::Tensor forward(torch::Tensor x, torch::Tensor b) {
    auto y = torch::empty_like(x);
    long n = x.numel();
    scale_add<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
""",
    "matmul": r"""
#include <torch/extension.h>
__global__ void matmul(const float* a, const float* b, float* c, int m, int k, int n) {
    int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= m || col >= n) return;
    float acc = 0.0f;
    for (int i = 0; i < k; i++) acc += a[row * k + i] * b[i * n + col];
    c[row * n + col] = acc;
}
torch::Tensor forward(torch::Tensor a, torch::Tensor b) {
    int m = a.size(0), k = a.size(1), n = b.size(1);
    auto c = torch::empty({m, n}, a.options());
    dim3 block(16, 16), grid((n + 15) / 16, (m + 15) / 16);
    matmul<<<grid, block>>>(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), m, k, n);
    return c;
}
""",
}


class Harness:
    entry = "forward"
    dtype = "float32"
    distributions = ("normal", "uniform-offset")
    tolerance = (1e-4, 1e-4)
    """KernelBench's FP32 tolerance, against an FP64 reference."""

    def __init__(self, task):
        self.task = task

    def correctness_cases(self, remeasure):
        if self.task in ELEMENTS:
            n = ELEMENTS[self.task]
            return [{"label": f"n={n}", "shape": [n]}, {"label": "n=1001", "shape": [1001]}, {"label": "n=1", "shape": [1]}]
        m, k, n = SHAPES[self.task]
        return [{"label": f"{m}x{k}x{n}", "shape": [m, k, n]}, {"label": "33x17x65", "shape": [33, 17, 65]}]

    def seeds(self, remeasure):
        return (11, 12, 13) if remeasure else (1, 2, 3)

    def timing_case(self):
        return self.correctness_cases(False)[0]

    def make_inputs(self, case, seed, distribution):
        import torch

        generator = torch.Generator(device="cuda").manual_seed(seed)

        def sample(*shape):
            x = torch.randn(*shape, generator=generator, device="cuda")
            return x + 0.5 if distribution == "uniform-offset" else x

        if self.task in ELEMENTS:
            return [sample(*case["shape"]), sample(*case["shape"])]
        m, k, n = case["shape"]
        return [sample(m, k), sample(k, n)]

    def reference(self, case, inputs):
        a, b = (t.double() for t in inputs)
        return 2 * a + b if self.task in ELEMENTS else a @ b

    def baseline(self, inputs):
        a, b = inputs
        return 2 * a + b if self.task in ELEMENTS else a @ b


class TinyOps:
    name: ClassVar[str] = "tinyops"
    config_class: ClassVar[None] = None

    def __init__(self, config):
        pass

    def tasks(self):
        return [Task(workload="tinyops", name=name, params={"dtype": "float32"}, description=f"FP32 {name}") for name in BINDINGS]

    def contract(self, task, arch):
        if arch != "cuda":
            raise UnsupportedArchitecture(f"tinyops has only a cuda side, not {arch}")
        declaration = BINDINGS[task.name]
        binding = f'#include <torch/extension.h>\n{declaration}\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{ m.def("forward", &forward); }}\n'
        return Contract(
            source_filename="cuda_source.cu", interface=declaration, files={"cpp_source.cpp": binding}, binding="cpp_source.cpp"
        )

    def seed(self, task, arch):
        return SEEDS["scale-add" if task.name in ELEMENTS else "matmul"], {}, "seed"

    def templates(self, task, arch):
        return []

    def work(self, task, arch):
        if task.name in ELEMENTS:
            return 3 * 4 * ELEMENTS[task.name], 2 * ELEMENTS[task.name]
        m, k, n = SHAPES[task.name]
        return 4 * (m * k + k * n + m * n), 2 * m * k * n

    def harness(self, task, arch):
        return Harness(task.name)


@hookimpl
def hiera_register_workloads():
    return [TinyOps]
