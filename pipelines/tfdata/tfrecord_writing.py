"""``Dataset.load(path=...)``: the conversion job that writes a load's TFRecords (and,
with ``tfds=True``, their TensorFlow Datasets metadata), on Beam or the in-process driver
(:mod:`pipelines.tfdata.runner_choice`).

A written load stores its selections as the ``value``/``label`` entries the record parsers
read back; the default image is stored as uint8 (:mod:`pipelines.tfdata.arguments`).
``path`` is a file name, a template, or the original API's iterable (or generator
function) of names (:mod:`pipelines.tfdata.pathgen`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import tempfile
from typing import Any, Callable, Mapping, Optional

from pipelines.beam import options as opts
from pipelines.tfdata import arguments, runner_choice
from pipelines.tfdata.pathgen import run_with_path_generator
from transforms.ops import leaves
from transforms.ops.selection_names import through_selections

log = logging.getLogger("tar2tf")


@dataclasses.dataclass(frozen=True)
class WriteRequest:
    """What a load writes, as ``Dataset.load`` was given it: the ``template`` of its
    sources; ``path``, where it writes (a file name or template, as :func:`as_path` gives
    it, or the original API's iterable of names); the ``num_workers``; the original API's
    ``record_to_example``; ``max_shard_size`` (None: one file); ``remote_exec`` (True,
    False or None: :mod:`pipelines.tfdata.runner_choice`); and the ``ConvertConfig``
    ``options``."""

    template: Any
    path: Any
    num_workers: int
    record_to_example: Optional[Callable]
    max_shard_size: Any
    remote_exec: Optional[bool]
    options: Mapping[str, Any]


def config(ds, write: WriteRequest, stored=True, checks=()):
    """The ``ConvertConfig`` of a load of ``ds`` written to ``write.path`` (a file name or
    template); ``stored=False``: the selections as the streamed load gives them (the remote
    load reads them back); ``checks``: stages run after all others (``tfds_image``'s)."""
    from pipelines.job.kinds.tfrecord.config import ConvertConfig

    sels = arguments.stored_selections(ds) if stored else ds.selections
    # read back by the remote load (stored=False), a single bool must say it is one
    stages = (
        list(ds.sample_stages) + list(ds.conversions) + [leaves.selection_stage(sels, not stored)]
    )
    options = write.options
    if write.record_to_example is not None:
        # as in the original API, record_to_example sees the raw converted record
        stages = stages[:-1]
    elif options.get("type_map"):
        # type_map names the record's entries; the selections store them as value/label
        options = dict(options, type_map=through_selections(options["type_map"], sels))
    stages += list(checks)
    return ConvertConfig(
        sources=write.template,
        output=write.path,
        base=ds.base,
        max_shard_size=write.max_shard_size,
        sample_stages=tuple(stages),
        record_to_example=write.record_to_example,
        example_stages=tuple(ds.example_stages),
        max_member_size=ds.max_member_size,
        store=ds.store,
        seed=ds.seed,
        progress=False,
        **options,
    )


def convert(ds, write: WriteRequest, cfg):
    """Run the job of ``cfg`` (:func:`config`) where ``write.remote_exec`` and ``ds``'s
    ``beam_args`` choose; its ``ConvertResult``, also kept as ``ds.last_result``."""
    num_workers = write.num_workers
    # record_to_example too must pickle to go to Beam
    why_not = functools.partial(ds.unshippable, [write.record_to_example])
    if runner_choice.use_beam(write.remote_exec, ds.beam_args, why_not, shuffle=cfg.shuffle):
        from pipelines.beam.convert import convert as beam_convert

        args = list(ds.beam_args)
        if opts.is_local(opts.effective_args(args)) and not any(
            a.startswith("--direct_num_workers") for a in args
        ):
            args.append(f"--direct_num_workers={max(1, int(num_workers))}")
        res = beam_convert(cfg, args)
    else:
        from pipelines.inprocess.driver import convert_in_process

        res = convert_in_process(cfg, num_workers)
    if res.totals["records_rejected"] or res.totals["shards_rejected"]:
        log.warning(
            "%d records and %d shards rejected; see %s",
            res.totals["records_rejected"],
            res.totals["shards_rejected"],
            res.rejects_path,
        )
    ds.last_result = res
    return res


def as_path(path):
    """``path`` as ``load`` takes it: a path-like object or bytes is a file name (decoded
    as the file system does, ``os.fsdecode``), never an iterable of names -- the bytes
    ``b"out/x-{}.record"`` iterated are the numbers 111, 117, ...  Anything else as is."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if isinstance(path, (bytes, bytearray, memoryview)):
        path = os.fsdecode(bytes(path))
    return path


def to_tfrecords(ds, write: WriteRequest, checks=()):
    """``load(path=...)``: the paths of the TFRecord shards written; ``checks``: see
    :func:`config`."""
    path = write.path
    if isinstance(path, str):
        return list(convert(ds, write, config(ds, write, checks=checks)).paths)
    if callable(path):  # the original client took a generator function as well
        path = path()
    try:
        names = iter(path)
    except TypeError:
        raise TypeError(
            f"path must be a file name, a template or an iterable (generator) of names, "
            f"not {type(path).__name__}"
        ) from None
    tmp = tempfile.mkdtemp(prefix="tar2tf-paths-")
    parts = dataclasses.replace(write, path=os.path.join(tmp, "part-{}.tfrecord"))
    res = convert(ds, parts, config(ds, parts))
    return run_with_path_generator(res, names, ds.store, bool(write.options.get("overwrite")))


def to_tfds(ds, write: WriteRequest, tfds_flag, image):
    """``load(path=..., tfds=True)``: the TFRecords, then their TFDS metadata
    (pipelines/export/tfds.py), written only for a complete output."""
    from pipelines.export import tfds
    from pipelines.export.tfds_features import image_checks

    if not tfds_flag:
        raise ValueError("tfds_image needs tfds=True")
    tfds.check_output(write.path, image, write.options.get("type_map"))
    # each record's image checked as TFDS will decode it: a reject, not a split that fails
    paths = to_tfrecords(ds, write, checks=image_checks(image))
    res = ds.last_result
    if res.exit_code != 0:
        count = res.manifest["rejects"]["count"]
        raise ValueError(
            f"tfds: metadata not written: {count} rejects, more than max_rejects "
            f"{write.options.get('max_rejects', 0)} or every record (see {res.rejects_path})"
        )
    tfds.write_metadata(write.path, res.manifest, image)
    return paths
