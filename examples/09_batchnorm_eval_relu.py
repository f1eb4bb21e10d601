import torch
import torch.nn as nn


class Model(nn.Module):
    """Inference-mode BatchNorm as an explicit formula ((x - mean) / sqrt(var + eps) * gamma + beta) then ReLU; fuses to one elementwise pass."""

    def __init__(self, num_channels, eps):
        super().__init__()
        self.eps = eps
        self.register_buffer("running_mean", torch.randn(num_channels) * 0.1)
        self.register_buffer("running_var", torch.rand(num_channels) + 0.5)
        self.gamma = nn.Parameter(torch.rand(num_channels) + 0.5)
        self.beta = nn.Parameter(torch.randn(num_channels) * 0.1)

    def forward(self, x):
        c = x.shape[1]
        mean = self.running_mean.view(1, c, 1, 1)
        var = self.running_var.view(1, c, 1, 1)
        y = (x - mean) / torch.sqrt(var + self.eps)
        y = y * self.gamma.view(1, c, 1, 1) + self.beta.view(1, c, 1, 1)
        return torch.relu(y)


batch_size = 16 * (256 if torch.cuda.is_available() else 1)  # a GPU: sizes past its L2 cache
num_channels = 64
height = 32
width = 32


def get_inputs():
    return [torch.randn(batch_size, num_channels, height, width)]


def get_init_inputs():
    return [num_channels, 1e-5]
