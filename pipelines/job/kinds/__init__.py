"""The formats a job writes, each a ``pipelines.job.lifecycle.Kind``: ``tfrecord``, ``pcr``."""

from __future__ import annotations


def of(cfg):
    """The kind whose config ``cfg`` is: what a driver's entry point runs a config with."""
    # imported here: a caller that never runs a PCR job never imports its modules
    from pipelines.job.kinds.pcr.config import PcrConfig
    from pipelines.job.kinds.tfrecord.config import ConvertConfig

    if isinstance(cfg, ConvertConfig):
        from pipelines.job.kinds.tfrecord.kind import TFRECORD

        return TFRECORD
    if isinstance(cfg, PcrConfig):
        from pipelines.job.kinds.pcr.kind import PCR

        return PCR
    raise TypeError(f"no kind of job has a config of type {type(cfg).__name__}")
