"""The original ``Dataset`` API (docs/api.md): ``Dataset(source, ...).load(template, ...)``.

``load`` without ``path`` (or with ``path=""``) returns a streaming ``tf.data.Dataset``; with ``path`` it writes
TFRecord shards through the conversion pipeline and returns their paths.  Ops run as
sample stages in both modes, through the same :class:`transforms.ops.stages.Stages` code.
``remote_exec`` chooses where they run -- see ``docs/ops.md`` ("executed in the cluster"
means: by Beam workers of the configured runner)::

    remote_exec   in-memory load                         load(path=...)
    False         threads in this process                 the in-process driver (no Beam)
    True          Beam job, then a dataset over its       Beam job on the configured runner
                  TFRecords (parsed back to the same      (local FnApiRunner unless --runner
                  elements)                               is given)
    None          Beam job if a cluster runner is         Beam job if beam_args hold a Beam
                  configured (beam_args --runner=...),    option or runner, or shuffle=True;
                  else threads in this process            else the in-process driver

``beam_args=["--runner=inprocess"]`` names the in-process driver, as on the CLI.

An op that cannot be pickled (so cannot be shipped to Beam workers, e.g. a ``Func``
closing over a generator) makes True/None run in this process, with a warning saying why.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional, Sequence

from pipelines.tfdata import arguments, remote_load, runner_choice, streamed_load
from pipelines.tfdata import tfrecord_writing as writing
from pipelines.tfdata.arguments import DEFAULT_LABEL, DEFAULT_VALUE, location
from pipelines.tfdata.streamed_load import LoadStats
from transforms import argcheck
from transforms.ops.gostages import as_stage
from transforms.stores import StoreConfig
from transforms.tar.grouping import DEFAULT_MAX_MEMBER_SIZE

__all__ = ["AisDataset", "Dataset", "LoadStats", "location"]

_UNSET = object()


class Dataset:
    """Tar shards under ``bucket_or_source`` -> tf.data / TFRecords (see the module doc).

    ``conversions``: ops applied to each record (``[Decode("jpg"), Resize("jpg", (32, 32))]``).
    ``selections``: ``[value, label]`` (or ``[value]``); default ``["jpg", "cls"]`` when
    conversions are given, else the original API's 224x224x3 float32 image and int32 ``cls``.
    ``sample_stages`` / ``example_stages``: go-tfdata-style stages (callables or Beam
    DoFns) run before the conversions / after encoding (path mode).  ``seed`` seeds random
    ops; ``beam_args`` configure the Beam runner; ``remote_output`` is where a remote
    in-memory load writes its TFRecords (default: a local temp directory).
    """

    def __init__(
        self,
        bucket_or_source: str,
        proxy_url: Optional[str] = None,
        conversions: Sequence[Any] = (),
        selections: Optional[Sequence[Any]] = None,
        remote_exec: Optional[bool] = None,
        *,
        seed: int = 0,
        beam_args: Sequence[str] = (),
        sample_stages: Sequence[Any] = (),
        example_stages: Sequence[Any] = (),
        max_member_size=DEFAULT_MAX_MEMBER_SIZE,
        remote_output: Optional[str] = None,
        store: Optional[StoreConfig] = None,
    ):
        # checked here, each naming the argument, not where a job first trips over them
        bucket_or_source = arguments.source(bucket_or_source)
        if proxy_url is not None:
            argcheck.text("proxy_url", proxy_url, "an AIStore URL")
        arguments.dataset_options(
            remote_exec, seed, beam_args, max_member_size, remote_output, store
        )
        self.base = location(bucket_or_source, proxy_url)
        self.store = store or StoreConfig(ais_endpoint=proxy_url)
        self.conversions = arguments.conversions(conversions, seed)
        self.defaulted = selections is None
        self.selections = arguments.selections(selections, bool(self.conversions), seed)
        self.remote_exec, self.seed, self.beam_args = remote_exec, seed, list(beam_args)
        self.sample_stages = [as_stage(s) for s in sample_stages]
        self.example_stages = [as_stage(s) for s in example_stages]
        self.max_member_size, self.remote_output = max_member_size, remote_output
        self.stats: Optional[LoadStats] = None
        self.element_spec = None
        self.last_result = None  # ConvertResult of the last path= / remote load

    # -- where the ops run ----------------------------------------------------------------
    def unshippable(self, extra: Sequence[Any] = ()) -> Optional[str]:
        """Why the stages cannot be pickled for Beam workers, or None if they can."""
        return runner_choice.unshippable(
            list(self.sample_stages)
            + list(self.conversions)
            + list(self.selections)
            + list(self.example_stages)
            + [x for x in extra if x is not None]
        )

    # -- load -------------------------------------------------------------------------------
    def load(
        self,
        template,
        num_workers: int = 1,
        output_types=None,
        output_shapes=None,
        output_signature=None,
        path=None,
        record_to_example: Optional[Callable] = None,
        max_shard_size=None,
        remote_exec=_UNSET,
        prefetch: int = 64,
        tfds: bool = False,
        tfds_image=None,
        **convert_options,
    ):
        """See the module docstring.  ``convert_options`` go to ``ConvertConfig``
        (``records_per_shard``, ``type_map``, ``overwrite``, ``max_rejects``, ``shuffle``...).
        ``tfds=True`` with ``path="DIR/<split>.tfrecord"`` also writes TensorFlow Datasets
        metadata into DIR; ``tfds_image`` names features read as images (docs/tfds.md)."""
        arguments.num_workers(num_workers)
        template = arguments.template(template)
        path = writing.as_path(path)  # bytes and path objects are file names
        remote_exec = self.remote_exec if remote_exec is _UNSET else remote_exec
        write = writing.WriteRequest(
            template,
            path,
            num_workers,
            record_to_example,
            max_shard_size,
            remote_exec,
            convert_options,
        )
        if tfds or tfds_image:
            return writing.to_tfds(self, write, tfds, tfds_image)
        if path is not None and path != "":  # as in the original API, an empty path means in memory
            return writing.to_tfrecords(self, write)
        shaped = (output_types, output_shapes, output_signature)
        if runner_choice.use_beam(remote_exec, self.beam_args, self.unshippable, in_memory=True):
            return remote_load.remote_dataset(self, template, num_workers, *shaped)
        return streamed_load.stream_dataset(self, template, num_workers, *shaped, prefetch)

    def elements(
        self,
        template,
        num_workers: int = 1,
        spec=None,
        prefetch: int = 64,
        stats: Optional[LoadStats] = None,
        report: bool = True,
    ) -> Iterator[Any]:
        """The datapoints, as numpy, in source order (what the tf.data dataset yields).

        With ops that do real work per record (decode, resize...) and more than one
        worker and shard, the shards convert in local worker processes (as for
        ``load(path=...)``: ``pipelines.inprocess.pool``) and their elements cross back in
        chunks; otherwise, or if an op cannot be pickled, on this process's threads.

        Rejects are logged once the stream ends (or is closed), grouped: one line per
        reason with its count and an example (``report=False``: not logged)."""
        template = arguments.template(template)
        return streamed_load.elements(self, template, num_workers, spec, prefetch, stats, report)


# -- the original AisDataset API ----------------------------------------------------------


class AisDataset(Dataset):
    """The original ``AisDataset(bucket, proxy_url, val_op, label_op, num_workers)``."""

    def __init__(
        self,
        bucket_name: str,
        proxy_url: Optional[str] = None,
        val_op: Any = None,
        label_op: Any = None,
        num_workers: int = 1,
        **kwargs,
    ):
        selections = None
        if val_op is not None or label_op is not None:
            selections = [
                val_op if val_op is not None else DEFAULT_VALUE,
                label_op if label_op is not None else DEFAULT_LABEL,
            ]
        super().__init__(bucket_name, proxy_url, selections=selections, **kwargs)
        self.num_workers = num_workers

    def load_from_tar(self, template, path=None, **kwargs):
        kwargs.setdefault("num_workers", self.num_workers)
        return self.load(template, path=path, **kwargs)
