"""Selection after verify: `curate select` and the `select` step (core.py has the rules)."""
