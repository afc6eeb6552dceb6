# The same op as PyTorch users run it (a transpose materialized): the torch_eager baseline
# (reference.cu stays the reference).
import torch
import torch.nn as nn

R = 8192
C = 8192


class Model(nn.Module):
    def forward(self, x):
        return x.t().contiguous()


def get_inputs():
    return [torch.randn(R, C)]


def get_init_inputs():
    return []
