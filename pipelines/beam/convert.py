"""The tar -> TFRecord Beam graph and its ``convert()`` entry point.

The graph is the lifecycle's (``pipelines.beam.job``) with the TFRecord kind
(``pipelines.job.kinds.tfrecord.kind``); its steps, the same on every runner::

    Shards:        Create[(index, url)]                 one element per input shard
    SpreadShards:  (index, url) by index                names, not bytes, cross the shuffle
    ConvertShard:  (index, url) -> piece summary        fetch, tar, ops, encode; the piece's
                                                        frames, record file and sidecar in
                                                        the work directory
    GatherPieces:  [piece summary]                      counts, never one entry per record
    Plan:          [piece summary] -> shard tasks       greedy packing, streamed over each
                                                        piece's sizes (pipelines.job.kinds.tfrecord.plan)
    SpreadWrites:  shard task by index
    WriteShard:    shard task -> shard row              copy byte ranges, atomic rename
    GatherShards + Manifest                             stale outputs gone, manifest + rejects

With ``shuffle=True`` the plan and write steps are the shuffled variant: the records
travel through a GroupByKey keyed by final shard (``pipelines.beam.shuffle``).
"""

from __future__ import annotations

from typing import Optional, Sequence

from pipelines.beam import job as beam_job
from pipelines.beam.job import counters_of
from pipelines.job.kinds.tfrecord.config import ConvertConfig
from pipelines.job.kinds.tfrecord.kind import TFRECORD
from pipelines.job.lifecycle import ConvertResult

__all__ = ["ConvertResult", "ConvertTFRecords", "convert", "counters_of"]


class ConvertTFRecords(beam_job.ConvertJob):
    """The TFRecord job's graph (the module docstring)."""

    def finish_inputs(self, summaries):
        # the duplicate-key check over the workers, bucket by bucket
        from pipelines.beam import duplicates

        return {"duplicates": duplicates.found(summaries, self.cfg.store)}

    def plan_and_write(self, summaries, all_summaries):
        if not self.cfg.shuffle:
            return super().plan_and_write(summaries, all_summaries)
        from pipelines.beam.shuffle import shuffled_shards

        return shuffled_shards(summaries, all_summaries, self.cfg)


def convert(cfg: ConvertConfig, beam_args: Optional[Sequence[str]] = None) -> ConvertResult:
    """Run the conversion as a Beam job (see the module docstring); ``beam_args`` choose
    the runner (default: Beam's local runner, one worker process per core,
    ``pipelines.beam.options``).  Raises a refusal (``pipelines.job.refused``:
    an ``OutputExistsError`` or ``ValueError``) for outputs it may not replace."""
    return beam_job.run(TFRECORD, cfg, beam_args, ConvertTFRecords)
