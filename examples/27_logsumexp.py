import torch
import torch.nn as nn


class Model(nn.Module):
    """Scaled logsumexp over the last dim minus the row mean (a smooth-max margin); exp/sum/log and the mean fuse into one row pass."""

    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        z = x * self.scale
        m = z.amax(dim=-1, keepdim=True)
        lse = torch.log(torch.exp(z - m).sum(dim=-1)) + m.squeeze(-1)
        return lse / self.scale - x.mean(dim=-1)


batch_size = 1024 * (256 if torch.cuda.is_available() else 1)  # a GPU: sizes past its L2 cache
features = 1024


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [4.0]
