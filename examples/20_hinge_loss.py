import torch
import torch.nn as nn


class Model(nn.Module):
    """Multi-class squared hinge loss vs +/-1 labels: mean(clamp(margin - y*pred, 0)^2); elementwise chain plus a reduction fuse into one kernel."""

    def __init__(self, margin):
        super().__init__()
        self.margin = margin

    def forward(self, pred, labels):
        h = torch.clamp(self.margin - labels * pred, min=0.0)
        return (h * h).sum(dim=-1).mean()


batch_size = 512 * (256 if torch.cuda.is_available() else 1)  # a GPU: sizes past its L2 cache
num_outputs = 512


def get_inputs():
    pred = torch.randn(batch_size, num_outputs)
    labels = torch.randint(0, 2, (batch_size, num_outputs)).float() * 2.0 - 1.0
    return [pred, labels]


def get_init_inputs():
    return [1.0]
