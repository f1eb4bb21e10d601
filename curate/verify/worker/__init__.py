"""The worker side of verify: runs only inside sandboxed verify workers (candidate and judge)."""
