# KernelBench level 1 kind: softmax over the rows of a matrix.
import torch
import torch.nn as nn

batch_size = 64
dim = 16384


class Model(nn.Module):
    """y = softmax(x, dim=1) for x of shape (batch_size, dim)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
