import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Gated MLP (SwiGLU): down(silu(gate(x)) * up(x)); the silu and gating multiply between small matmuls fuse into one elementwise kernel."""

    def __init__(self, hidden_size, ffn_size):
        super().__init__()
        self.gate = nn.Linear(hidden_size, ffn_size, bias=False)
        self.up = nn.Linear(hidden_size, ffn_size, bias=False)
        self.down = nn.Linear(ffn_size, hidden_size, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


batch_size = 2048 * (256 if torch.cuda.is_available() else 1)  # a GPU: sizes past its L2 cache
hidden_size = 64
ffn_size = 128


def get_inputs():
    return [torch.randn(batch_size, hidden_size)]


def get_init_inputs():
    return [hidden_size, ffn_size]
