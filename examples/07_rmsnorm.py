import torch
import torch.nn as nn


class Model(nn.Module):
    """RMSNorm: x * rsqrt(mean(x^2) + eps) * weight; square, reduce, rsqrt and two muls fuse into one row-wise kernel."""

    def __init__(self, hidden_size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(hidden_size) + 0.5)
        self.eps = eps

    def forward(self, x):
        ms = x.pow(2).mean(dim=-1, keepdim=True)
        return x * torch.rsqrt(ms + self.eps) * self.weight


batch_size = 32 * (256 if torch.cuda.is_available() else 1)  # a GPU: sizes past its L2 cache
seq_len = 64
hidden_size = 512


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_size)]


def get_init_inputs():
    return [hidden_size, 1e-6]
