# KernelBench level 1 kind: an elementwise activation, GELU (the exact one, with erf).
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 64
dim = 16384


class Model(nn.Module):
    """y = gelu(x) = x * Phi(x), Phi the standard normal CDF."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
