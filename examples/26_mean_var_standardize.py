import torch
import torch.nn as nn


class Model(nn.Module):
    """Per-feature standardization over the batch dim (mean and unbiased var over dim 0) then tanh; column reductions plus elementwise ops fuse."""

    def __init__(self, eps):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        mean = x.mean(dim=0, keepdim=True)
        var = x.var(dim=0, keepdim=True, unbiased=True)
        return torch.tanh((x - mean) / torch.sqrt(var + self.eps))


batch_size = 1024 * (256 if torch.cuda.is_available() else 1)  # a GPU: sizes past its L2 cache
features = 512


def get_inputs():
    return [torch.randn(batch_size, features) * 2.0 + torch.randn(1, features)]


def get_init_inputs():
    return [1e-5]
