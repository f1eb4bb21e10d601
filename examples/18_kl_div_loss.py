import torch
import torch.nn as nn


class Model(nn.Module):
    """KL(P || Q) between row softmaxes of two logit tensors, batch-mean; two log-softmaxes, exp, sub, mul and sum fuse into row reductions."""

    def __init__(self, temperature):
        super().__init__()
        self.temperature = temperature

    def forward(self, student_logits, teacher_logits):
        log_q = torch.log_softmax(student_logits / self.temperature, dim=-1)
        log_p = torch.log_softmax(teacher_logits / self.temperature, dim=-1)
        kl = (torch.exp(log_p) * (log_p - log_q)).sum(dim=-1)
        return kl.mean() * (self.temperature ** 2)


batch_size = 256 * (256 if torch.cuda.is_available() else 1)  # a GPU: sizes past its L2 cache
num_classes = 1024


def get_inputs():
    return [torch.randn(batch_size, num_classes), torch.randn(batch_size, num_classes)]


def get_init_inputs():
    return [2.0]
