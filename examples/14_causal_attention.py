import math

import torch
import torch.nn as nn


class Model(nn.Module):
    """Causal self-attention with a lower-triangular mask built in forward; mask construction, masked_fill and softmax fuse between the two matmuls."""

    def __init__(self, head_dim):
        super().__init__()
        self.scale = 1.0 / math.sqrt(head_dim)

    def forward(self, q, k, v):
        t = q.shape[-2]
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        p = torch.softmax(scores, dim=-1)
        return torch.matmul(p, v)


batch_size = 4 * (256 if torch.cuda.is_available() else 1)  # a GPU: sizes past its L2 cache
num_heads = 4
seq_len = 128
head_dim = 64


def get_inputs():
    shape = (batch_size, num_heads, seq_len, head_dim)
    return [torch.randn(shape), torch.randn(shape), torch.randn(shape)]


def get_init_inputs():
    return [head_dim]
