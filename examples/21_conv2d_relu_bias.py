import torch
import torch.nn as nn


class Model(nn.Module):
    """Small 3x3 Conv2d followed by ReLU, extra bias add and scaling; the post-conv epilogue is three eager kernels that fuse into one."""

    def __init__(self, in_channels, out_channels, kernel_size, scale):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=1)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.1)
        self.scale = scale

    def forward(self, x):
        y = self.conv(x)
        y = torch.relu(y)
        return (y + self.bias) * self.scale


batch_size = 32 * (256 if torch.cuda.is_available() else 1)  # a GPU: sizes past its L2 cache
in_channels = 3
out_channels = 16
height = 32
width = 32


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, 3, 0.5]
