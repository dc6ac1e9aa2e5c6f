"""What both drivers share: the job's options, the per-shard work, its work directory and
journal, finalization and the report (``tar2tf verify`` is ``pipelines/verify``)."""
