import torch
import torch.nn as nn


class Model(nn.Module):
    """Bias add followed by a manual log-softmax (x - max - log(sum(exp(x - max)))); the reductions and elementwise ops fuse into per-row kernels."""

    def __init__(self, num_classes):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(num_classes) * 0.5)

    def forward(self, x):
        z = x + self.bias
        m = z.amax(dim=-1, keepdim=True)
        shifted = z - m
        return shifted - torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))


batch_size = 256 * (256 if torch.cuda.is_available() else 1)  # a GPU: sizes past its L2 cache
num_classes = 2048


def get_inputs():
    return [torch.randn(batch_size, num_classes) * 2.0]


def get_init_inputs():
    return [num_classes]
