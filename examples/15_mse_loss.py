import torch
import torch.nn as nn


class Model(nn.Module):
    """Weighted MSE loss: mean(w * (pred - target)^2); subtract, square, weight and reduce fuse into a single reduction kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, pred, target, weight):
        diff = pred - target
        return (weight * diff * diff).mean()


batch_size = 256 * (256 if torch.cuda.is_available() else 1)  # a GPU: sizes past its L2 cache
features = 1024


def get_inputs():
    return [
        torch.randn(batch_size, features),
        torch.randn(batch_size, features),
        torch.rand(batch_size, features),
    ]


def get_init_inputs():
    return []
