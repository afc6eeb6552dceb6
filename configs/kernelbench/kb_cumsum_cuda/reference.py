# KernelBench level 1 kind: a scan, the cumulative sum along the rows of a matrix.
import torch
import torch.nn as nn

batch_size = 256
length = 4000
scan_dim = 1


class Model(nn.Module):
    """y = torch.cumsum(x, dim) for x of shape (batch_size, length) and dim 1."""

    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumsum(x, dim=self.dim)


def get_inputs():
    return [torch.randn(batch_size, length)]


def get_init_inputs():
    return [scan_dim]
