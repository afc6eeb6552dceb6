# KernelBench level 1 kind: a norm with affine parameters, LayerNorm over the hidden dimension.
import torch
import torch.nn as nn

batch_size = 16
seq_len = 128
hidden = 1024


class Model(nn.Module):
    """y = (x - mean) / sqrt(var + 1e-5) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, hidden):
        super().__init__()
        self.ln = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, x):
        return self.ln(x)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return [hidden]
