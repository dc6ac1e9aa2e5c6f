"""The writer of a dataset directory's TFDS metadata: a finished job's split added to (or
replaced in) ``dataset_info.json`` and ``features.json``, under the directory's lock.

Its steps: the job's output and shards checked (:mod:`pipelines.export.tfds_names`), its
features typed from the manifest's schema (:mod:`pipelines.export.tfds_features`); then,
under the lock, the dataset as the metadata there describes it, the split's features
fitted to it (:mod:`pipelines.export.tfds_compat`), the splits merged
(:mod:`pipelines.export.tfds_splits`), and the files written
(:mod:`pipelines.export.tfds_files`).  TensorFlow and TFDS are imported only here and
in what it calls, never when the module is imported.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, Mapping, NamedTuple, Optional, Sequence, Union

from pipelines.export import tfds_splits
from pipelines.export.tfds_compat import misfits
from pipelines.export.tfds_features import TfdsError, feature_specs, nest, to_tfds
from pipelines.export.tfds_files import INFO_NAME, existing, locked, write_files
from pipelines.export.tfds_names import (
    check_output,
    check_shards,
    file_format,
    identity,
    local_path,
)

log = logging.getLogger("tar2tf")

_FORMAT_NAMES = {"tfrecord": "TFRecord", "array_record": "ArrayRecord"}


def write_metadata(
    output: Any,
    manifest: Mapping[str, Any],
    image: Union[None, str, Sequence[str]] = None,
) -> Dict[str, Any]:
    """Add (or replace) the split of this job's output in its directory's TFDS metadata;
    returns ``{"path": dataset_info.json, "split": name, "examples": n, "splits": [...],
    "formats": [file format, alternatives...]}``.  A split may be in both formats (two jobs
    with the same sources and options): the dataset's format is then TFRecord, read by
    ``as_dataset``, with ArrayRecord as the alternative ``as_data_source`` reads, as long
    as every split has both."""
    if isinstance(output, os.PathLike):
        output = os.fspath(output)
    split = check_output(output, image)
    directory = os.path.abspath(os.path.dirname(local_path(output)) or ".")
    shards = manifest["shards"]
    check_shards(output, split, shards)
    features = to_tfds(nest(feature_specs(manifest["schema"], image)))
    with locked(directory):
        dataset = _dataset(directory, split, features)
        found = tfds_splits.merged(
            directory,
            split,
            file_format(output),
            shards,
            manifest["schema"],
            dataset.splits,
            dataset.file_format,
        )
        primary, others = tfds_splits.common_formats(found, directory)
        splits = tfds_splits.split_dict(found, primary, directory, dataset.name)
        write_files(_dataset_info(directory, dataset, splits, primary, others), directory)
    return {
        "path": os.path.join(directory, INFO_NAME),
        "split": split,
        "examples": splits[split].num_examples,
        "splits": sorted(found),
        "formats": [primary, *others],
    }


class _Dataset(NamedTuple):
    """The dataset a split joins, as the metadata in its directory describes it (or a new
    one): its ``name`` and ``version``, the ``features`` its splits are read with, its
    other ``splits`` (SplitInfo protos) and their ``file_format`` (None: no metadata)."""

    name: str
    version: str
    features: Any
    splits: Sequence[Any]
    file_format: Optional[str]


def _dataset(directory: str, split: str, features) -> _Dataset:
    """The dataset in ``directory`` that ``split``, of ``features``, joins (under the lock)."""
    name, version = identity(directory)
    if not os.path.exists(os.path.join(directory, INFO_NAME)):
        return _Dataset(name, version, features, [], None)
    old, old_features = existing(directory)
    return _Dataset(
        # the name and version the other splits' templates were written with
        old.name or name,
        old.version or version,
        _joined_features(features, old_features, directory, split),
        [p for p in old.splits if p.name != split],
        getattr(old.file_format, "value", old.file_format) or None,
    )


def _joined_features(features, dataset_features: Mapping[str, Any], directory: str, split: str):
    """The features ``split`` is declared with: its own, the dataset's when they are a
    compatible subset of them, else a :class:`TfdsError` listing the misfits."""
    from google.protobuf import json_format

    own = json_format.MessageToDict(features.to_proto())
    if dataset_features == own:
        return features
    problems = misfits(dataset_features, own)
    if problems:
        raise TfdsError(
            f"--tfds: the features of split {split!r} differ from those of the "
            f"splits already in {directory} ({'; '.join(problems)}); every split "
            "of a TFDS dataset has the same features: convert this split with "
            "the --type-map, --tfds-image and --ops selections of the others "
            "(it may lack a feature they have as a vector), or into another "
            "directory"
        )
    # a compatible subset (a split without an optional member...): declared, and read,
    # with the dataset's features
    from tensorflow_datasets.core.features import FeatureConnector

    log.info("--tfds: split %r is declared with the features of the splits in %s", split, directory)
    return FeatureConnector.from_config(directory)


def _dataset_info(directory: str, dataset: _Dataset, splits, primary: str, others: Sequence[str]):
    """TFDS's ``DatasetInfo`` of the dataset with its merged ``splits``, read in the
    ``primary`` file format and the alternative ``others``."""
    from tensorflow_datasets.core import dataset_info
    from tensorflow_datasets.core.utils.version import Version

    info = dataset_info.DatasetInfo(
        builder=dataset_info.DatasetIdentity(
            name=dataset.name,
            version=Version(dataset.version),
            data_dir=directory,
            module_name="",
        ),
        features=dataset.features,
        description=" and ".join(_FORMAT_NAMES[f] for f in (primary, *others))
        + " shards written by tar2tf; each split's manifest is "
        "<split>.<format>.manifest.json.",
    )
    info.set_file_format(primary)
    for f in others:  # as_data_source reads ArrayRecord where as_dataset reads TFRecord
        info.add_alternative_file_format(f)
    info.set_splits(splits)
    return info


def summary_line(written: Mapping[str, Any], output: str) -> str:
    """What the CLI says after writing the metadata (paths as the user gave them)."""
    d = os.path.dirname(local_path(output)) or "."
    formats = written.get("formats") or []
    return (
        f"tfds: {os.path.join(d, INFO_NAME)}: split {written['split']} "
        f"({written['examples']} examples); splits: {', '.join(written['splits'])}"
        + (f"; file formats: {', '.join(formats)}" if len(formats) > 1 else "")
    )
