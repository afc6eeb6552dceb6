# KernelBench level 1 kind: a reduction, the sum over the middle dimension of a 3-d tensor (keepdim).
import torch
import torch.nn as nn

batch_size = 32
dim1 = 256
dim2 = 512
reduce_dim = 1


class Model(nn.Module):
    """y = x.sum(dim, keepdim=True): (batch_size, dim1, dim2) -> (batch_size, 1, dim2) for dim 1."""

    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.sum(x, dim=self.dim, keepdim=True)


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return [reduce_dim]
