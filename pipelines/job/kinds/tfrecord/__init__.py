"""The TFRecord kind of job: its config, pieces, plan, shard writers and finish."""
