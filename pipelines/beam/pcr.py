"""The Progressive Compressed Records Beam graph and its ``convert_pcr()`` entry point.

The graph is the lifecycle's (``pipelines.beam.job``) with the PCR kind
(``pipelines.job.kinds.pcr.kind``: the config, units, plan, writer and manifest)::

    Units -> SpreadUnits -> ConvertUnit (read, jpegtran, split scans: one work blob +
    sidecar per unit -> its summary) -> GatherUnits -> PlanRecords (input order or seeded
    shuffle, N images each, the last one partial; streamed from the sidecars) ->
    SpreadRecords -> WriteRecord (PCR_<i>.db, atomic) -> GatherRecords -> Finish
    (PCR_index.pb, each record once; manifest + rejects)
"""

from __future__ import annotations

from typing import Optional, Sequence

from pipelines.beam import job as beam_job
from pipelines.job.kinds.pcr.kind import PCR, PcrConfig, PcrResult

__all__ = ["ConvertPcr", "PcrConfig", "PcrResult", "convert_pcr"]


class ConvertPcr(beam_job.ConvertJob):
    """The PCR job's graph (the module docstring)."""


def convert_pcr(cfg: PcrConfig, beam_args: Optional[Sequence[str]] = None) -> PcrResult:
    """Run the conversion; raises a refusal (``pipelines.job.refused``) for an output it may
    not replace, ValueError, RuntimeError (no jpegtran).  The output's lock is held from
    before its files are looked at to the end of the job (``pipelines.job.output_lock``)."""
    return beam_job.run(PCR, cfg, beam_args, ConvertPcr)
