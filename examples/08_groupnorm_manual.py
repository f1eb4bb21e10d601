import torch
import torch.nn as nn


class Model(nn.Module):
    """GroupNorm computed manually via reshape, per-group mean/var and a per-channel affine; many eager reductions and broadcasts that fuse well."""

    def __init__(self, num_channels, num_groups, eps):
        super().__init__()
        self.num_groups = num_groups
        self.eps = eps
        self.weight = nn.Parameter(torch.rand(num_channels) + 0.5)
        self.bias = nn.Parameter(torch.randn(num_channels) * 0.1)

    def forward(self, x):
        n, c, h, w = x.shape
        g = x.reshape(n, self.num_groups, -1)
        mean = g.mean(dim=-1, keepdim=True)
        var = ((g - mean) ** 2).mean(dim=-1, keepdim=True)
        g = (g - mean) / torch.sqrt(var + self.eps)
        out = g.reshape(n, c, h, w)
        return out * self.weight.view(1, c, 1, 1) + self.bias.view(1, c, 1, 1)


batch_size = 16 * (256 if torch.cuda.is_available() else 1)  # a GPU: sizes past its L2 cache
num_channels = 64
num_groups = 8
height = 16
width = 16


def get_inputs():
    return [torch.randn(batch_size, num_channels, height, width) * 1.5 + 0.3]


def get_init_inputs():
    return [num_channels, num_groups, 1e-5]
