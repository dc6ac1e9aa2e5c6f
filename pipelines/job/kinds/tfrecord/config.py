"""The options of a TFRecord job (:class:`ConvertConfig`), as both drivers take them."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Dict, Optional, Sequence, Union

from pipelines.job.kinds.tfrecord import file_formats
from transforms import argcheck
from transforms.ops import codec_choice, image_limits
from transforms.ops.stages import Stages, stage_name
from transforms.sizes import parse_size
from transforms.stores import StoreConfig, dirname, join
from transforms.tar.grouping import DEFAULT_MAX_MEMBER_SIZE
from transforms.tfrecord import schema as exs

#: the most worker processes a job may ask for (``--processes``, ``processes=``): each is a
#: Python interpreter of some 40 MB or more that takes its time to start, so a count far
#: beyond any machine's cores only starts processes that wait (and a typo such as 100000
#: would fork until memory runs out).  A job never starts more than it has input shards.
MAX_PROCESSES = 256


@dataclasses.dataclass
class ConvertConfig:
    sources: Union[str, Sequence[str]]
    output: str
    base: Optional[str] = None
    max_shard_size: Union[None, int, str] = None
    records_per_shard: Optional[int] = None
    type_map: Optional[Dict[str, str]] = None
    sample_stages: Sequence[Callable] = ()
    record_to_example: Optional[Callable] = None
    example_stages: Sequence[Callable] = ()
    max_member_size: Union[int, str] = DEFAULT_MAX_MEMBER_SIZE
    # records whose members add up to more than this are rejected; it also bounds the bytes
    # the tar reader's grouping window holds (docs/bad-input.md: the memory bound).  None:
    # transforms.tar.grouping.DEFAULT_MAX_RECORD_SIZE, or max_member_size if larger
    max_record_size: Union[None, int, str] = None
    max_rejects: int = 0
    overwrite: bool = False
    resume: bool = False
    store: StoreConfig = dataclasses.field(default_factory=StoreConfig)
    dali_index: bool = False
    shuffle: bool = False
    seed: int = 0
    # None or True: a progress bar on a terminal, else a line every progress_every seconds
    # (None: pipelines.job.progress.DEFAULT_EVERY); False: none
    progress: Optional[bool] = None
    progress_every: Optional[float] = None
    work_dir: Optional[str] = None
    # how many workers convert: Beam's local runner's worker processes
    # (--direct_num_workers), or the in-process driver's worker processes
    # (pipelines.inprocess.pool; 0: its threads).  None: automatic (one per core on Beam's
    # local runner; pipelines.inprocess.driver.auto_processes in-process).  Not an output
    # option: the bytes are the same either way.
    processes: Optional[int] = None
    # outputs in a bucket (streamed shards, pipelines.inprocess.stream): bytes of finished
    # shards that may wait in local spool files for their upload before the writer waits
    # (a size: "500MB"); None: $TAR2TF_SPOOL_LIMIT, else 1 GB.  Not an output option either.
    spool_limit: Union[None, int, str] = None
    # images over this many pixels (from their header) are op rejects before decoding;
    # None: transforms.ops.image_limits.DEFAULT_MAX_IMAGE_PIXELS
    max_image_pixels: Optional[int] = None
    # "numpy" or "pillow": what the image ops' bytes are (transforms.ops.codec_choice);
    # its default, $TAR2TF_IMAGE_CODEC, is read here, where the job is configured
    image_codec: str = dataclasses.field(default_factory=codec_choice.default_codec)
    # the final shards' file format: "tfrecord", or "array_record" (ArrayRecord files
    # holding the same serialized Examples, planned as the TFRecord job: docs/arrayrecord.md).
    # None: array_record for an output named *.array_record, else tfrecord
    format: Optional[str] = None

    def __post_init__(self):
        self._check()
        if self.format is None:
            named = isinstance(self.output, str) and self.output.endswith(".array_record")
            self.format = "array_record" if named else "tfrecord"
        file_formats.checked(self.format, self.shuffle, self.dali_index)

    def _check(self) -> None:
        """The options, checked when the config is built, with the CLI's rules
        (``transforms.argcheck``): a ``TypeError`` or ``ValueError`` naming the option,
        not a job that fails late (or rejects every record) because of it."""
        from transforms.ops.gostages import as_stage  # user stages may be Beam DoFns

        if isinstance(self.sources, os.PathLike):
            self.sources = os.fspath(self.sources)
        if isinstance(self.output, os.PathLike):
            self.output = os.fspath(self.output)
        srcs = self.sources
        if not isinstance(srcs, str) and not (
            isinstance(srcs, (list, tuple)) and all(isinstance(t, str) for t in srcs)
        ):
            raise TypeError(
                f"sources must be a shard template (str) or a list of them, not {srcs!r}"
            )
        argcheck.text("output", self.output, "a file name or template")
        if self.base is not None:
            argcheck.text("base", self.base, "a directory or bucket URL")
        argcheck.count("records_per_shard", self.records_per_shard, 1)
        argcheck.count("max_rejects", self.max_rejects, 0, optional=False)
        argcheck.count("processes", self.processes, 0, MAX_PROCESSES)
        argcheck.count("max_image_pixels", self.max_image_pixels, 1)
        argcheck.count("seed", self.seed, -(2**63), 2**64 - 1, optional=False)
        for name in ("max_shard_size", "max_member_size", "max_record_size", "spool_limit"):
            argcheck.size(name, getattr(self, name))
        if self.max_member_size is None:
            raise TypeError("max_member_size must be a byte size, not None")
        exs.parse_type_map(self.type_map)  # its own ValueError names the entry
        for name in ("sample_stages", "example_stages"):
            stages = getattr(self, name)
            if isinstance(stages, (str, bytes)) or not isinstance(stages, (list, tuple)):
                raise TypeError(f"{name} must be a list of callables, not {stages!r}")
            for i, st in enumerate(stages):
                try:
                    as_stage(st)
                except TypeError as e:
                    raise TypeError(f"{name}[{i}]: {e}") from None
        argcheck.callable_or_none("record_to_example", self.record_to_example)
        if not isinstance(self.store, StoreConfig):
            raise TypeError(f"store must be a StoreConfig, not {self.store!r}")

    def stages(self) -> Stages:
        from transforms.ops.gostages import as_stage  # user stages may be Beam DoFns

        # in every process that runs the stages: the job's limits and codec, not the
        # process's environment
        image_limits.set_max_pixels(self.max_image_pixels)
        from transforms.ops import images

        images.set_codec(self.image_codec)
        return Stages(
            tuple(as_stage(s) for s in self.sample_stages),
            self.record_to_example,
            tuple(as_stage(s) for s in self.example_stages),
            exs.parse_type_map(self.type_map),
        )

    def has_heavy_ops(self) -> bool:
        """Whether records go through ops that do real work per record (decode, resize,
        user functions...), not only light ones that pick entries (``Op.light``)."""
        stages = list(self.sample_stages) + [self.record_to_example] + list(self.example_stages)
        return any(s is not None and not getattr(s, "light", False) for s in stages)

    # the job's identity (pipelines.job.lifecycle.job_of) names the output: two outputs of
    # the same inputs are two jobs, with two work directories
    output_in_identity = True

    def work_root(self) -> str:
        """Where the job's work directories are: ``work_dir``, else beside the output."""
        return self.work_dir or join(dirname(self.output), ".tar2tf-work")

    def describe(self) -> Dict[str, Any]:
        """The options as they enter the manifest (callables by name)."""
        return {
            "max_shard_size": parse_size(self.max_shard_size),
            "image_codec": self.image_codec,
            "records_per_shard": self.records_per_shard,
            "type_map": exs.parse_type_map(self.type_map),
            "sample_stages": [stage_name(s) for s in self.sample_stages],
            "record_to_example": stage_name(self.record_to_example)
            if self.record_to_example
            else None,
            "example_stages": [stage_name(s) for s in self.example_stages],
            "max_member_size": parse_size(self.max_member_size),
            "max_rejects": self.max_rejects,
            "dali_index": self.dali_index,
            "shuffle": self.shuffle,
            "seed": self.seed if self.shuffle else None,
            # only when set: the manifests (and work directories) of jobs at the default stay as they were
            **(
                {"max_record_size": parse_size(self.max_record_size)}
                if self.max_record_size is not None
                else {}
            ),
            **({"format": self.format} if self.format != "tfrecord" else {}),
            **(
                {"max_image_pixels": self.max_image_pixels}
                if self.max_image_pixels not in (None, image_limits.DEFAULT_MAX_IMAGE_PIXELS)
                else {}
            ),
        }
