"""The in-process driver: the same per-shard work in this process or in its own worker
processes, final shards written in input order."""
