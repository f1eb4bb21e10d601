import torch
import torch.nn as nn


class Model(nn.Module):
    """Cross entropy written by hand: logsumexp over classes minus the gathered target logit, averaged; eager materializes log-probs, fused does not."""

    def __init__(self, label_smoothing):
        super().__init__()
        self.label_smoothing = label_smoothing

    def forward(self, logits, targets):
        m = logits.amax(dim=-1, keepdim=True)
        lse = torch.log(torch.exp(logits - m).sum(dim=-1, keepdim=True)) + m
        logp = logits - lse
        nll = -logp.gather(1, targets.unsqueeze(1)).squeeze(1)
        smooth = -logp.mean(dim=-1)
        loss = (1.0 - self.label_smoothing) * nll + self.label_smoothing * smooth
        return loss.mean()


batch_size = 512 * (256 if torch.cuda.is_available() else 1)  # a GPU: sizes past its L2 cache
num_classes = 1000


def get_inputs():
    return [
        torch.randn(batch_size, num_classes) * 2.0,
        torch.randint(0, num_classes, (batch_size,)),
    ]


def get_init_inputs():
    return [0.1]
