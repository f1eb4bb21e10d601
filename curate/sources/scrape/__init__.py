"""`scrape`: nn.Module classes from repositories made into runnable KernelBench programs."""

from .source import ScrapeSource

__all__ = ["ScrapeSource"]
