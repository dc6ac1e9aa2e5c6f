"""Templates to shard URLs, the tar member reader and WebDataset grouping into records (with their rejects)."""
