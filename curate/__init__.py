"""curate: verified PyTorch -> CUDA/Triton training pairs for kernel-writing language models."""

__version__ = "0.1.0"
