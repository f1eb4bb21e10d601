import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Residual add, then LayerNorm, then GELU: the add, normalization statistics, affine and activation fuse into one row-wise kernel."""

    def __init__(self, hidden_size):
        super().__init__()
        self.norm = nn.LayerNorm(hidden_size)
        with torch.no_grad():
            self.norm.weight.copy_(torch.rand(hidden_size) + 0.5)
            self.norm.bias.copy_(torch.randn(hidden_size) * 0.1)

    def forward(self, x, residual):
        return F.gelu(self.norm(x + residual))


batch_size = 64 * (256 if torch.cuda.is_available() else 1)  # a GPU: sizes past its L2 cache
seq_len = 64
hidden_size = 128


def get_inputs():
    return [
        torch.randn(batch_size, seq_len, hidden_size),
        torch.randn(batch_size, seq_len, hidden_size),
    ]


def get_init_inputs():
    return [hidden_size]
