"""What both drivers share: the job's options, the per-shard work, its work directory and
journal, finalization, the report and verification."""
