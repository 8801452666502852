import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        # roll has no translation node by node, and the value read on the host (.item()) stops the lowering
        # to ATen operators on the meta device: the task gets no seed
        x = x.roll(1, dims=0) * x.abs().max().item()
        return torch.softmax(x, dim=self.dim)


def get_inputs():
    return [torch.randn(3, 9)]


def get_init_inputs():
    return [1]
