"""The formats a job writes, each a ``pipelines.job.lifecycle.Kind``: ``tfrecord``, ``pcr``."""
