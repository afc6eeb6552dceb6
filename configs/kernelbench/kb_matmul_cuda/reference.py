# KernelBench level 1 kind: a square-ish matrix multiplication, C = A @ B.
import torch
import torch.nn as nn

M = 256
K = 512
N = 256


class Model(nn.Module):
    """C = A @ B for A of shape (M, K) and B of shape (K, N), fp32."""

    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
