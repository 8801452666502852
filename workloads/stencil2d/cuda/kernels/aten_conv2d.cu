#include <ATen/ops/conv2d.h>
// ATen's conv2d (cuDNN underneath) in FP64, once per step.
at::Tensor stencil2d(at::Tensor field, at::Tensor weights, int64_t steps) {
    check_arguments(field, weights, steps);
    const int64_t n = field.size(0);
    const auto w = weights.view({1, 1, K, K});
    auto x = field.view({1, 1, n, n});
    for (int64_t s = 0; s < steps; ++s) x = at::conv2d(x, w, /*bias=*/{}, /*stride=*/{1, 1}, /*padding=*/{R, R});
    return x.view({n, n});
}
