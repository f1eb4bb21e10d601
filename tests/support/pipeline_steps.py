"""Steps used by the runner tests: deterministic, a little slow, and counting their work."""

import time

from curate.pipeline.step import Outcome, Step


class SlowTag(Step):
    """Tags each row with its line count; drops rows whose reference has an odd line count."""

    name = "slow-tag"
    batch_size = 8

    def __init__(self, delay: float = 0.03):
        self.delay = delay

    def config(self):
        return {"delay": self.delay}

    def process(self, rows):
        for i, row in enumerate(rows):
            time.sleep(self.delay)
            n = row["pytorch_code"].count("\n")
            row["n_lines"] = n
            yield i, (Outcome.keep(row) if n % 2 == 0 else Outcome.drop(row, "odd_lines"))
