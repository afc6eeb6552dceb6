# KernelBench level 1 kind: a standard 2-d convolution with its weight and bias (square kernel, stride 1,
# "same" zero padding so the output keeps the input's height and width).
import torch
import torch.nn as nn

# fp32 means fp32: cuDNN would otherwise round a convolution's inputs to TF32 on a GPU.
torch.backends.cudnn.allow_tf32 = False

batch_size = 2
in_channels = 16
out_channels = 32
kernel_size = 3
height = 64
width = 64


class Model(nn.Module):
    """y = conv2d(x, weight, bias, stride=1, padding=kernel_size // 2) for an odd kernel_size."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=1, padding=kernel_size // 2, bias=True)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
