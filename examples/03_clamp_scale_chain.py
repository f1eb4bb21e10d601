import torch
import torch.nn as nn


class Model(nn.Module):
    """Scale, shift, clamp, rescale and square-add chain; each step is a separate eager kernel with a full memory round-trip."""

    def __init__(self, scale, shift, clamp_min, clamp_max):
        super().__init__()
        self.scale = scale
        self.shift = shift
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def forward(self, x, y):
        h = x * self.scale + self.shift
        h = torch.clamp(h, self.clamp_min, self.clamp_max)
        h = h * y
        return h + 0.5 * h * h


batch_size = 512 * (256 if torch.cuda.is_available() else 1)  # a GPU: sizes past its L2 cache
features = 1024


def get_inputs():
    return [torch.randn(batch_size, features), torch.randn(batch_size, features)]


def get_init_inputs():
    return [1.5, 0.25, -1.0, 1.0]
