# KernelBench level 1 kind: 2-d max pooling (square window, stride 1, padding kernel_size // 2, so the
# output keeps the input's height and width; kernel_size odd).
import torch
import torch.nn as nn

batch_size = 8
channels = 32
height = 128
width = 128
kernel_size = 3


class Model(nn.Module):
    """y = max_pool2d(x, kernel_size, stride=1, padding=kernel_size // 2)."""

    def __init__(self, kernel_size):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size, stride=1, padding=kernel_size // 2)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [kernel_size]
