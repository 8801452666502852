#include <ATen/ops/empty.h>
#include <cudnn.h>

#define CHECK_CUDNN(call)                                                                            \
    do {                                                                                             \
        const cudnnStatus_t status_ = (call);                                                        \
        TORCH_CHECK(status_ == CUDNN_STATUS_SUCCESS, #call " failed: ", cudnnGetErrorString(status_)); \
    } while (0)

// cuDNN's convolution, called directly: single-channel FP64 cross-correlation with zero padding R. The
// fastest forward algorithm is found once per grid size with cudnnFindConvolutionForwardAlgorithmEx over
// every algorithm whose workspace fits in half of the free device memory; only that choice is kept.
struct Descriptors {
    cudnnTensorDescriptor_t grid = nullptr;
    cudnnFilterDescriptor_t filter = nullptr;
    cudnnConvolutionDescriptor_t conv = nullptr;

    explicit Descriptors(int n) {
        CHECK_CUDNN(cudnnCreateTensorDescriptor(&grid));
        CHECK_CUDNN(cudnnSetTensor4dDescriptor(grid, CUDNN_TENSOR_NCHW, CUDNN_DATA_DOUBLE, 1, 1, n, n));
        CHECK_CUDNN(cudnnCreateFilterDescriptor(&filter));
        CHECK_CUDNN(cudnnSetFilter4dDescriptor(filter, CUDNN_DATA_DOUBLE, CUDNN_TENSOR_NCHW, 1, 1, K, K));
        CHECK_CUDNN(cudnnCreateConvolutionDescriptor(&conv));
        CHECK_CUDNN(cudnnSetConvolution2dDescriptor(conv, R, R, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_DOUBLE));
        CHECK_CUDNN(cudnnSetConvolutionMathType(conv, CUDNN_DEFAULT_MATH));
    }
    ~Descriptors() {
        cudnnDestroyConvolutionDescriptor(conv);
        cudnnDestroyFilterDescriptor(filter);
        cudnnDestroyTensorDescriptor(grid);
    }
};

struct AlgorithmChoice {
    int device = -1, n = -1;
    cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
    size_t workspace_bytes = 0;
};

cudnnHandle_t cudnn_handle(int device) {
    static cudnnHandle_t handle = nullptr;  // created once; cuDNN handles are meant to be reused
    static int handle_device = -1;
    if (handle == nullptr || handle_device != device) {
        if (handle != nullptr) cudnnDestroy(handle);
        CHECK_CUDNN(cudnnCreate(&handle));
        handle_device = device;
    }
    return handle;
}

AlgorithmChoice find_algorithm(cudnnHandle_t handle, const Descriptors& d, const at::Tensor& field,
                               const at::Tensor& weights, at::Tensor& out, int device, int n) {
    size_t free_bytes = 0, total_bytes = 0;
    C10_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    size_t workspace_bytes = 0;
    for (int a = 0; a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; ++a) {
        size_t bytes = 0;
        const auto algo = static_cast<cudnnConvolutionFwdAlgo_t>(a);
        if (cudnnGetConvolutionForwardWorkspaceSize(handle, d.grid, d.filter, d.conv, d.grid, algo, &bytes) ==
                CUDNN_STATUS_SUCCESS && bytes <= free_bytes / 2)
            workspace_bytes = std::max(workspace_bytes, bytes);
    }
    auto workspace = at::empty({static_cast<int64_t>(std::max<size_t>(workspace_bytes, 1))},
                                  field.options().dtype(at::kByte));
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int returned = 0;
    CHECK_CUDNN(cudnnFindConvolutionForwardAlgorithmEx(
        handle, d.grid, field.data_ptr<double>(), d.filter, weights.data_ptr<double>(), d.conv, d.grid,
        out.data_ptr<double>(), CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf, workspace.data_ptr(), workspace_bytes));
    for (int i = 0; i < returned; ++i)  // sorted fastest first
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= workspace_bytes)
            return AlgorithmChoice{device, n, perf[i].algo, perf[i].memory};
    TORCH_CHECK(false, "cuDNN has no forward algorithm for this convolution");
    return AlgorithmChoice{};
}

at::Tensor stencil2d(at::Tensor field, at::Tensor weights, int64_t steps) {
    check_arguments(field, weights, steps);
    const c10::cuda::CUDAGuard guard(field.device());
    const int n = static_cast<int>(field.size(0));
    const int device = field.get_device();
    cudnnHandle_t handle = cudnn_handle(device);
    CHECK_CUDNN(cudnnSetStream(handle, c10::cuda::getCurrentCUDAStream()));
    const Descriptors d(n);
    auto out = at::empty_like(field);
    auto scratch = steps > 1 ? at::empty_like(field) : out;
    static AlgorithmChoice choice;  // the algorithm for the last grid size, never a result
    if (choice.device != device || choice.n != n) choice = find_algorithm(handle, d, field, weights, out, device, n);
    auto workspace = at::empty({static_cast<int64_t>(std::max<size_t>(choice.workspace_bytes, 1))},
                                  field.options().dtype(at::kByte));
    const double one = 1.0, zero = 0.0;
    // One convolution per step, ping-ponging so that the last step writes out; field is only read.
    const double* src = field.data_ptr<double>();
    for (int64_t s = 0; s < steps; ++s) {
        double* dst = (steps - s) % 2 == 1 ? out.data_ptr<double>() : scratch.data_ptr<double>();
        CHECK_CUDNN(cudnnConvolutionForward(handle, &one, d.grid, src, d.filter, weights.data_ptr<double>(), d.conv,
                                            choice.algo, workspace.data_ptr(), choice.workspace_bytes, &zero, d.grid, dst));
        src = dst;
    }
    return out;
}
