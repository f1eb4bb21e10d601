"""Hub layout and publishing: parquet shards with Hub names, and the push to the Hub."""
