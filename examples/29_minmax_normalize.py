import torch
import torch.nn as nn


class Model(nn.Module):
    """Per-row min-max normalization (amin, amax, subtract, divide) followed by a sqrt squash; two reductions and an elementwise chain fuse."""

    def __init__(self, eps):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        lo = x.amin(dim=-1, keepdim=True)
        hi = x.amax(dim=-1, keepdim=True)
        y = (x - lo) / (hi - lo + self.eps)
        return torch.sqrt(y + self.eps) * 2.0 - 1.0


batch_size = 512 * (256 if torch.cuda.is_available() else 1)  # a GPU: sizes past its L2 cache
features = 1024


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [1e-6]
