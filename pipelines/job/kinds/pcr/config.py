"""The options of a PCR job (``tar2tf pcr``, ``convert_pcr``): what the PCR kind
(:mod:`pipelines.job.kinds.pcr.kind`) and its records (:mod:`pipelines.job.kinds.pcr.records`)
both read, so that neither imports the other for it."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional, Sequence, Union

from transforms.pcr.image import DEFAULT_QUALITY
from transforms.pcr.jpeg_scans import SCAN_GROUPS
from transforms.stores import StoreConfig, join


@dataclasses.dataclass
class PcrConfig:
    sources: Union[str, Sequence[str]]
    output: str  # a directory (local, gs://bucket/dir, ais://bucket/dir)
    images_per_record: int = 1024
    seed: Optional[int] = None  # None: input order; an int: seeded shuffle
    input_format: str = "auto"  # auto | imagefolder | tar
    label_field: str = "cls"
    image_field: Optional[str] = None  # default: the record's first image extension
    quality: int = DEFAULT_QUALITY  # for non-JPEG inputs (and un-rotatable JPEGs)
    scans: Optional[str] = None  # a jpegtran -scans file for 3-component images (local/gs/ais)
    scan_script: Optional[str] = None  # or the script's text (what the job carries to workers)
    files_per_unit: int = 64  # ImageFolder files per work unit
    base: Optional[str] = None
    max_rejects: int = 0
    overwrite: bool = False
    resume: bool = False  # reuse verified unit blobs of an interrupted run
    # None or True: a bar when stderr is a terminal, else a line every progress_every
    # seconds (local runs; pipelines.job.progress); False: none
    progress: Optional[bool] = None
    progress_every: Optional[float] = None
    # converting units at once: Beam's local runner's worker processes, the in-process
    # driver's threads (None: one per core).  Not an output option: not in describe()
    processes: Optional[int] = None
    store: StoreConfig = dataclasses.field(default_factory=StoreConfig)

    # the job's identity (pipelines.job.lifecycle.job_of) leaves the output out: the work
    # directory is inside it
    output_in_identity = False

    def work_root(self) -> str:
        return join(self.output, ".tar2tf-work")

    def describe(self) -> Dict[str, Any]:
        return {
            "images_per_record": self.images_per_record,
            "seed": self.seed,
            "shuffle": self.seed is not None,
            "input_format": self.input_format,
            "label_field": self.label_field,
            "image_field": self.image_field,
            "quality": self.quality,
            "scan_groups": SCAN_GROUPS,
            "max_rejects": self.max_rejects,
            "scan_script": self.scan_script,
        }
