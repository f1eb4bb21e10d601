import torch
import torch.nn as nn


class Model(nn.Module):
    """LayerNorm written out by hand (mean, centered variance, rsqrt, affine); eager launches ~8 kernels, a fused kernel does one pass per row."""

    def __init__(self, hidden_size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(hidden_size) + 0.5)
        self.bias = nn.Parameter(torch.randn(hidden_size) * 0.1)
        self.eps = eps

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        centered = x - mean
        var = (centered * centered).mean(dim=-1, keepdim=True)
        return centered * torch.rsqrt(var + self.eps) * self.weight + self.bias


batch_size = 64 * (256 if torch.cuda.is_available() else 1)  # a GPU: sizes past its L2 cache
seq_len = 32
hidden_size = 256


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_size) * 2.0 + 0.5]


def get_init_inputs():
    return [hidden_size, 1e-5]
