import torch
import torch.nn as nn


class Model(nn.Module):
    """Conv1d producing 2C channels, split into value and gate, value * sigmoid(gate) (GLU) then residual; split/sigmoid/mul/add fuse after the conv."""

    def __init__(self, channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv1d(channels, 2 * channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x):
        y = self.conv(x)
        value, gate = y.chunk(2, dim=1)
        return value * torch.sigmoid(gate) + x


batch_size = 16 * (256 if torch.cuda.is_available() else 1)  # a GPU: sizes past its L2 cache
channels = 32
length = 512


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return [channels, 3]
