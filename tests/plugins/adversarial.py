"""Hostile cuda candidates for the tinyops tasks, one per known evaluation hack (eval.md §3), with the
outcome the evaluator must give each: (task, space, source, outcome kind, words the reason must hold)."""

HEAD = "#include <torch/extension.h>\n"
ELEMENTWISE = r"""
__global__ void scale_add(const float* x, const float* b, float* y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i] + b[i];
}
"""
LAUNCH = "scale_add<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), n);"

CANDIDATES = {
    # (a) reuse a cached result: computes once, then returns the same tensor
    "cached-result": (
        "scale-add",
        "pure_cuda",
        HEAD
        + ELEMENTWISE
        + r"""
torch::Tensor cache;
torch::Tensor forward(torch::Tensor x, torch::Tensor b) {
    if (cache.defined() && cache.numel() == x.numel()) return cache;
    auto y = torch::empty_like(x); long n = x.numel();
    """
        + LAUNCH
        + r"""
    cache = y; return y;
}""",
        "incorrect",
        "max abs error",
    ),
    # (b) modify an input
    "zeroes-input": (
        "scale-add",
        "pure_cuda",
        HEAD
        + ELEMENTWISE
        + r"""
torch::Tensor forward(torch::Tensor x, torch::Tensor b) {
    auto y = torch::empty_like(x); long n = x.numel();
    """
        + LAUNCH
        + r"""
    cudaMemsetAsync(b.data_ptr<float>(), 0, n * sizeof(float));
    return y;
}""",
        "incorrect",
        "was modified",
    ),
    # (c) compute on a side stream
    "side-stream": (
        "scale-add",
        "pure_cuda",
        HEAD
        + ELEMENTWISE
        + r"""
torch::Tensor forward(torch::Tensor x, torch::Tensor b) {
    auto y = torch::empty_like(x); long n = x.numel();
    cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    scale_add<<<(n + 255) / 256, 256, 0, s>>>(x.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}""",
        "static_rejected",
        "stream",
    ),
    # (c) a non-blocking stream from the CUDA driver, reached by name: no stream creation in sight
    "driver-stream": (
        "scale-add",
        "pure_cuda",
        HEAD
        + ELEMENTWISE
        + r"""
torch::Tensor forward(torch::Tensor x, torch::Tensor b) {
    auto y = torch::empty_like(x); long n = x.numel();
    void *create = nullptr; cudaDriverEntryPointQueryResult found;
    cudaGetDriverEntryPointByVersion("cuStreamCreate", &create, 12000, cudaEnableDefault, &found);
    cudaStream_t s; ((int (*)(cudaStream_t*, unsigned))create)(&s, 1);  // 1: CU_STREAM_NON_BLOCKING
    scale_add<<<(n + 255) / 256, 256, 0, s>>>(x.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}""",
        "static_rejected",
        "by name",
    ),
    # (d) finish the work in a thread
    "thread": (
        "scale-add",
        "pure_cuda",
        HEAD
        + "#include <thread>\n"
        + ELEMENTWISE
        + r"""
torch::Tensor forward(torch::Tensor x, torch::Tensor b) {
    auto y = torch::empty_like(x); long n = x.numel();
    std::thread([=]() mutable { """
        + LAUNCH
        + r""" cudaDeviceSynchronize(); }).detach();
    return y;
}""",
        "static_rejected",
        "thread",
    ),
    # (f) return an input
    "returns-input": (
        "scale-add",
        "pure_cuda",
        HEAD
        + r"""
torch::Tensor forward(torch::Tensor x, torch::Tensor b) { return x; }""",
        "incorrect",
        "max abs error",
    ),
    # (g) FP32 matmul computed in FP16
    "fp16-matmul": (
        "matmul",
        "pure_cuda",
        HEAD
        + "#include <cuda_fp16.h>\n"
        + r"""
__global__ void mm(const float* a, const float* b, float* c, int m, int k, int n) {
    int row = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x;
    if (row >= m || col >= n) return;
    __half acc = __float2half(0.0f);
    for (int i = 0; i < k; i++) acc = __hadd(acc, __hmul(__float2half(a[row * k + i]), __float2half(b[i * n + col])));
    c[row * n + col] = __half2float(acc);
}
torch::Tensor forward(torch::Tensor a, torch::Tensor b) {
    int m = a.size(0), k = a.size(1), n = b.size(1);
    auto c = torch::empty({m, n}, a.options());
    mm<<<dim3((n + 15) / 16, (m + 15) / 16), dim3(16, 16)>>>(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), m, k, n);
    return c;
}""",
        "static_rejected",
        "below float32",
    ),
    # (g) FP32 inputs rounded to TF32 precision by masking mantissa bits: no half type in sight
    "tf32-truncation": (
        "matmul",
        "pure_cuda",
        HEAD
        + r"""
__device__ float tf32(float v) { return __uint_as_float(__float_as_uint(v) & 0xffffe000u); }
__global__ void mm(const float* a, const float* b, float* c, int m, int k, int n) {
    int row = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x;
    if (row >= m || col >= n) return;
    float acc = 0.0f;
    for (int i = 0; i < k; i++) acc += tf32(a[row * k + i]) * tf32(b[i * n + col]);
    c[row * n + col] = acc;
}
torch::Tensor forward(torch::Tensor a, torch::Tensor b) {
    int m = a.size(0), k = a.size(1), n = b.size(1);
    auto c = torch::empty({m, n}, a.options());
    mm<<<dim3((n + 15) / 16, (m + 15) / 16), dim3(16, 16)>>>(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), m, k, n);
    return c;
}""",
        "incorrect",
        "max abs error",
    ),
    # (i) ATen through the dispatcher, past the source scan and the symbol check: the runtime log sees it
    "dispatcher-in-pure": (
        "matmul",
        "pure_cuda",
        HEAD
        + r"""
torch::Tensor forward(torch::Tensor a, torch::Tensor b) {
    static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::mm", "")
        .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
    return op.call(a, b);
}""",
        "static_rejected",
        "ran ATen operators mm",
    ),
    # (h) fall back to the reference in try/catch
    "try-fallback": (
        "matmul",
        "libraries_pytorch",
        HEAD
        + r"""
torch::Tensor forward(torch::Tensor a, torch::Tensor b) {
    try { throw std::runtime_error("not implemented"); }
    catch (...) { return torch::matmul(a, b); }
}""",
        "static_rejected",
        "catches exceptions",
    ),
    # (i) ATen compute from a pure_cuda candidate (the source scan, the symbols and the dispatcher all see it)
    "aten-in-pure": (
        "matmul",
        "pure_cuda",
        HEAD
        + r"""
torch::Tensor forward(torch::Tensor a, torch::Tensor b) { return torch::mm(a, b); }""",
        "static_rejected",
        "PyTorch/ATen",
    ),
    # (j) patch the timer through the Python interpreter
    "timer-patch": (
        "scale-add",
        "pure_cuda",
        HEAD
        + ELEMENTWISE
        + r"""
torch::Tensor forward(torch::Tensor x, torch::Tensor b) {
    py::module_::import("time").attr("perf_counter") = py::cpp_function([]() { return 0.0; });
    auto y = torch::empty_like(x); long n = x.numel();
    """
        + LAUNCH
        + r"""
    return y;
}""",
        "static_rejected",
        "Python interpreter",
    ),
    # (k) special-case the benchmark shape: right there, wrong elsewhere
    "benchmark-shape-only": (
        "scale-add",
        "pure_cuda",
        HEAD
        + ELEMENTWISE
        + r"""
torch::Tensor forward(torch::Tensor x, torch::Tensor b) {
    auto y = torch::empty_like(x); long n = x.numel();
    if (n == (1 << 20)) { """
        + LAUNCH
        + r""" }
    return y;
}""",
        "incorrect",
        "",
    ),
    # (l) crash: an illegal address leaves a sticky CUDA error
    "illegal-address": (
        "scale-add",
        "pure_cuda",
        HEAD
        + r"""
__global__ void bad(float* y) { y[threadIdx.x + (1L << 40)] = 1.0f; }
torch::Tensor forward(torch::Tensor x, torch::Tensor b) {
    auto y = torch::empty_like(x); bad<<<1, 32>>>(y.data_ptr<float>()); cudaDeviceSynchronize();
    return y;
}""",
        "crashed",
        "illegal",
    ),
    # (l) hang
    "hang": (
        "scale-add",
        "pure_cuda",
        HEAD
        + r"""
__global__ void spin(volatile int* flag) { while (*flag == 0) {} }
torch::Tensor forward(torch::Tensor x, torch::Tensor b) {
    auto f = torch::zeros({1}, x.options().dtype(torch::kInt32));
    spin<<<1, 1>>>(f.data_ptr<int>()); cudaDeviceSynchronize();
    return torch::empty_like(x);
}""",
        "timed_out",
        "",
    ),
}

FORGE = r"""
#include <unistd.h>
#include <cstring>
static void forge(const char *line) {  // every descriptor the runner might answer on
    for (int fd = 1; fd < 64; fd++) { ssize_t ignored = write(fd, line, strlen(line)); (void)ignored; }
}
"""
CANDIDATES.update(
    {
        # a forged verdict: the answer line hiera once took from the candidate's own process
        "forged-verdict": (
            "scale-add",
            "pure_cuda",
            HEAD
            + FORGE
            + r"""
torch::Tensor forward(torch::Tensor x, torch::Tensor b) {
    forge("{\"kind\": \"measured\", \"latency_ms\": 0.001, \"reference_latency_ms\": 1.0}\n");
    _exit(0);
}""",
            "crashed",
            "protocol",
        ),
        # a result cache keyed by the input's address and 64 sampled values, returning the cached tensor
        "cache-by-address-and-samples": (
            "scale-add",
            "libraries_pytorch",
            HEAD
            + ELEMENTWISE
            + r"""
#include <map>
#include <vector>
std::map<std::pair<const void*, std::vector<float>>, torch::Tensor> cache;  // not `static`: past the source scan
torch::Tensor forward(torch::Tensor x, torch::Tensor b) {
    long n = x.numel();
    auto samples = x.flatten().index({torch::arange(0, n, std::max(1L, n / 64), x.options().dtype(torch::kLong))}).cpu();
    std::vector<float> key(samples.data_ptr<float>(), samples.data_ptr<float>() + samples.numel());
    auto found = cache.find({x.data_ptr(), key});
    if (found != cache.end()) return found->second;
    auto y = torch::empty_like(x);
    """
            + LAUNCH
            + r"""
    cache[{x.data_ptr(), key}] = y;
    return y;
}""",
            "measured",
            "",
        ),
        # a cache keyed by the address alone, every address it has seen: the judge's places recur, their values never
        "cache-by-address": (
            "scale-add",
            "pure_cuda",
            HEAD
            + ELEMENTWISE
            + r"""
#include <map>
std::map<const void*, torch::Tensor> saved;  // not `static`: past the source scan
torch::Tensor forward(torch::Tensor x, torch::Tensor b) {
    auto found = saved.find(x.data_ptr());
    if (found != saved.end() && found->second.numel() == x.numel()) return found->second;
    auto y = torch::empty_like(x); long n = x.numel();
    """
            + LAUNCH
            + r"""
    saved[x.data_ptr()] = y; return y;
}""",
            "incorrect",
            "max abs error",
        ),
    }
)

SECRETS = (
    HEAD
    + ELEMENTWISE
    + r"""
#include <cstdio>
#include <cstring>
torch::Tensor forward(torch::Tensor x, torch::Tensor b) {
    char path[64], buf[1 << 16];
    bool found = getenv("OPENAI_API_KEY") != nullptr;
    for (int pid = 1; pid < (1 << 16) && !found; pid++) {
        snprintf(path, sizeof path, "/proc/%d/environ", pid);
        FILE *f = fopen(path, "r"); if (!f) continue;
        size_t got = fread(buf, 1, sizeof buf, f); fclose(f);
        for (size_t i = 0; i + 8 < got; i++) if (memcmp(buf + i, "sk-hiera", 8) == 0) { found = true; break; }
    }
    auto y = torch::empty_like(x); long n = x.numel();
    """
    + LAUNCH
    + r"""
    return found ? y.fill_(7.0f) : y;
}"""
)
"""Looks for the API key in its environment and every process it can see; right only if it finds none."""

SURVIVOR = (
    HEAD
    + ELEMENTWISE
    + r"""
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
torch::Tensor forward(torch::Tensor x, torch::Tensor b) {
    static bool forked = false;  // a raw system call: past the source scan's spawn rule
    if (!forked) { forked = true; if (syscall(SYS_fork) == 0) { setsid(); prctl(PR_SET_NAME, "hiera-survivor"); for (;;) pause(); } }
    auto y = torch::empty_like(x); long n = x.numel();
    """
    + LAUNCH
    + r"""
    return y;
}"""
)
"""Leaves a process behind in a session of its own, holding the runner's descriptors."""

DRIVER_STREAM_HIDDEN = (
    HEAD
    + ELEMENTWISE
    + r"""
#define ENTRY(how) cudaGetDriver##how
torch::Tensor forward(torch::Tensor x, torch::Tensor b) {
    auto y = torch::empty_like(x); long n = x.numel();
    void *create = nullptr; cudaDriverEntryPointQueryResult found;
    ENTRY(EntryPointByVersion)("cuStream" "Create", &create, 12000, cudaEnableDefault, &found);
    cudaStream_t s; ((int (*)(cudaStream_t*, unsigned))create)(&s, 1);
    scale_add<<<(n + 255) / 256, 256, 0, s>>>(x.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}"""
)
"""(c) the driver's non-blocking stream, its entry point's name pasted by a macro past the source scan: with the
timer's cover (0.5 ms) the GPU would run it before the start event. The built library's imports show it."""

CUBLAS_HIDDEN = (
    HEAD
    + r"""
#define HEADER <cublas_v2.h>
#include HEADER
#define LIB(name) cublas##name
__global__ void keep(float* c) { c[threadIdx.x] *= 1.0f; }
torch::Tensor forward(torch::Tensor a, torch::Tensor b) {
    int m = a.size(0), k = a.size(1), n = b.size(1);
    auto c = torch::empty({m, n}, a.options());
    cublasHandle_t handle; float one = 1.0f, zero = 0.0f;
    LIB(Create)(&handle);
    LIB(Sgemm)(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b.data_ptr<float>(), n, a.data_ptr<float>(), k, &zero,
               c.data_ptr<float>(), n);
    LIB(Destroy)(handle);
    keep<<<1, 1>>>(c.data_ptr<float>());
    return c;
}"""
)
"""(i) cuBLAS from a pure_cuda candidate, with macros that hide the calls from a source scan: the
built library's symbols and the launched kernels still show them."""

# The runner's own timer, scaled from the candidate's code through the interpreter that hosts it (names pasted, so
# no scan sees them): the figure is the judge's clock around batches, so the lie changes nothing but the diagnostic.
IN_PYTHON = r"""
#define PASTE(a, b) a##b
static void in_python(const char *code) { static bool done = false; if (!done) { done = true; PASTE(PyRun_, SimpleString)(code); } }
"""
SCALED_EVENTS = (
    HEAD
    + ELEMENTWISE
    + IN_PYTHON
    + r"""
torch::Tensor forward(torch::Tensor x, torch::Tensor b) {
    in_python("import torch\n_e = torch.cuda.Event.elapsed_time\ntorch.cuda.Event.elapsed_time = lambda s, o: _e(s, o) * 0.5\n");
    auto y = torch::empty_like(x); long n = x.numel();
    """
    + LAUNCH
    + r"""
    return y;
}"""
)
# The runner's device-wide synchronize made a no-op: it replies while the kernels still run (the judge's idle probe
# sees the GPU busy at the reply, and outputs read early are wrong).
EARLY_REPLY = (
    HEAD
    + ELEMENTWISE
    + IN_PYTHON
    + r"""
torch::Tensor forward(torch::Tensor x, torch::Tensor b) {
    in_python("import torch\ntorch.cuda.synchronize = lambda *a, **k: None\n");
    auto y = torch::empty_like(x); long n = x.numel();
    for (int k = 0; k < 200; k++)  // long enough to be still running when the runner replies
        """
    + LAUNCH
    + r"""
    return y;
}"""
)
