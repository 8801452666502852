// ${origin}
// next[i][j] = sum over |a|, |b| <= R of w[a + R][b + R] * cur[i + a][j + b], zero outside the n x n grid.
// ATen's and c10's own headers rather than <torch/extension.h>: the file builds about 4x faster.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

constexpr int R = ${radius};  // the task's radius, fixed at compile time
constexpr int K = 2 * R + 1;

void check_arguments(const at::Tensor& field, const at::Tensor& weights, int64_t steps) {
    TORCH_CHECK(field.is_cuda() && field.scalar_type() == at::kDouble && field.dim() == 2 &&
                    field.size(0) == field.size(1) && field.size(0) >= 1 && field.is_contiguous(),
                "field must be a contiguous square float64 CUDA tensor");
    TORCH_CHECK(weights.is_cuda() && weights.scalar_type() == at::kDouble && weights.dim() == 2 &&
                    weights.size(0) == K && weights.size(1) == K && weights.is_contiguous() &&
                    weights.device() == field.device(),
                "weights must be a contiguous ", K, "x", K, " float64 tensor on the field's device");
    TORCH_CHECK(steps >= 1, "steps must be >= 1, got ", steps);
}
