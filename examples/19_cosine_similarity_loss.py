import torch
import torch.nn as nn


class Model(nn.Module):
    """Cosine similarity loss 1 - <a,b>/(|a||b|) per row, averaged; three row reductions and the combine fuse into one pass over a and b."""

    def __init__(self, eps):
        super().__init__()
        self.eps = eps

    def forward(self, a, b):
        dot = (a * b).sum(dim=-1)
        na = torch.sqrt((a * a).sum(dim=-1))
        nb = torch.sqrt((b * b).sum(dim=-1))
        cos = dot / torch.clamp(na * nb, min=self.eps)
        return (1.0 - cos).mean()


batch_size = 1024 * (256 if torch.cuda.is_available() else 1)  # a GPU: sizes past its L2 cache
features = 512


def get_inputs():
    a = torch.randn(batch_size, features)
    b = a * 0.5 + torch.randn(batch_size, features)
    return [a, b]


def get_init_inputs():
    return [1e-8]
