import torch
import torch.nn as nn


class Model(nn.Module):
    """Row-wise L2 normalization (sum of squares, sqrt, clamp, divide) followed by a learned per-feature scale; fuses into one row kernel."""

    def __init__(self, features, eps):
        super().__init__()
        self.scale = nn.Parameter(torch.rand(features) + 0.5)
        self.eps = eps

    def forward(self, x):
        norm = torch.sqrt((x * x).sum(dim=-1, keepdim=True))
        return x / torch.clamp(norm, min=self.eps) * self.scale


batch_size = 2048 * (256 if torch.cuda.is_available() else 1)  # a GPU: sizes past its L2 cache
features = 256


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features, 1e-12]
