"""TensorFlow Datasets metadata for a finished job (``--tfds``, ``load(..., tfds=True)``):
the names the CLI, ``load()`` and the job use, each defined in the module of its concept.

A job that writes ``DIR/<split>.tfrecord`` (or ``DIR/<split>.array_record``) leaves shards
``<split>-00000-of-0000N.tfrecord`` (``pipelines.job.names.shard_names``).  ``--tfds``
writes TFDS's ``dataset_info.json`` and ``features.json`` into ``DIR``, so that
``tfds.builder_from_directory(DIR)`` reads the split: its split info carries tar2tf's
file-name template (:data:`FILE_TEMPLATE`) and the record count of every shard from the
manifest, and its features are typed from the manifest's schema (the mapping and its
reasons are in docs/tfds.md).

- :mod:`~pipelines.export.tfds_names`: which outputs TFDS can describe
  (:func:`check_output`, before the job runs), the split and dataset names;
- :mod:`~pipelines.export.tfds_features`: the features typed from the schema;
- :mod:`~pipelines.export.tfds_files`: the metadata files, their lock and atomic writes
  (local directories only: object stores offer no such lock);
- :mod:`~pipelines.export.tfds_retract`: a split taken out of the metadata while a job
  replaces its shards (:func:`retracted`);
- :mod:`~pipelines.export.tfds_compat`: whether a split's features fit the dataset's;
- :mod:`~pipelines.export.tfds_splits`: the split merge, the formats every split has;
- :mod:`~pipelines.export.tfds_metadata`: the writer (:func:`write_metadata`).

TensorFlow and TFDS are imported only when metadata is written: ``--tfds`` is optional,
and a job without it never pays their import (importing this module imports neither).
"""

from __future__ import annotations

from pipelines.export.tfds_features import TfdsError
from pipelines.export.tfds_files import LOCK_NAME
from pipelines.export.tfds_metadata import summary_line, write_metadata
from pipelines.export.tfds_names import FILE_TEMPLATE, check_output, identity
from pipelines.export.tfds_retract import retracted

__all__ = [
    "FILE_TEMPLATE",
    "LOCK_NAME",
    "TfdsError",
    "check_output",
    "identity",
    "retracted",
    "summary_line",
    "write_metadata",
]
