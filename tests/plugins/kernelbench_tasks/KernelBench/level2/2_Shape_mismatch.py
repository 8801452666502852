import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gemm = nn.Linear(7, 3)

    def forward(self, x):
        return self.gemm(x)


def get_inputs():
    return [torch.rand(2, 5)]  # 5 features into a Linear of 7: the reference cannot run


def get_init_inputs():
    return []
