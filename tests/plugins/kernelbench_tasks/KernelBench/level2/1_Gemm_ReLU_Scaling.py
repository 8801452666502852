import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear, ReLU, then a scaling factor and a learned bias."""

    def __init__(self, in_features, out_features, scaling_factor, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = self.gemm(x)
        x = torch.relu(x)
        return x * self.scaling_factor + self.bias


batch_size, in_features, out_features = 4, 12, 10


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, 0.5, (out_features,)]
