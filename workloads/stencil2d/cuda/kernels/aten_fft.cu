#include <ATen/ops/fft_irfft2.h>
#include <ATen/ops/fft_rfft2.h>
#include <ATen/ops/zeros.h>
// The stencil as a product in Fourier space, once per step: the field zero-padded to m >= n + 2R (so the
// cyclic convolution does not wrap), times the spectrum of the flipped weights, cropped back to n x n.
// m has only the factors 2, 3, 5 and 7, which cuFFT transforms fastest.
int64_t fft_size(int64_t at_least) {
    for (int64_t m = at_least;; ++m) {
        int64_t rest = m;
        for (int64_t p : {2, 3, 5, 7})
            while (rest % p == 0) rest /= p;
        if (rest == 1) return m;
    }
}

at::Tensor stencil2d(at::Tensor field, at::Tensor weights, int64_t steps) {
    check_arguments(field, weights, steps);
    const int64_t n = field.size(0), m = fft_size(n + 2 * R);
    const std::vector<int64_t> shape{m, m};
    auto kernel = at::zeros({m, m}, field.options());
    kernel.narrow(0, 0, K).narrow(1, 0, K).copy_(weights.flip({0, 1}));
    const auto spectrum = at::fft_rfft2(kernel);
    auto padded = at::zeros({m, m}, field.options());
    auto x = field;
    for (int64_t s = 0; s < steps; ++s) {
        padded.narrow(0, 0, n).narrow(1, 0, n).copy_(x);
        const auto full = at::fft_irfft2(at::fft_rfft2(padded).mul(spectrum), shape);
        x = full.narrow(0, R, n).narrow(1, R, n).contiguous();
    }
    return x;
}
