"""Which outputs TFDS can describe, and the names it reads them under: an output
``DIR/<split>.tfrecord`` (or ``.array_record``) is split ``<split>`` of the dataset in
``DIR``, its shards ``<split>-00000-of-0000N.<suffix>`` (``pipelines.job.names.shard_names``)
in TFDS's template :data:`FILE_TEMPLATE`, and the dataset's name and version come from
``DIR``'s path.
"""

from __future__ import annotations

import importlib.util
import os
import re
from typing import Any, Mapping, Sequence, Tuple, Union

from pipelines.export.tfds_features import TfdsError, parse_image
from transforms.stores import split_url
from transforms.tfrecord.schema import BYTES, parse_type_map

#: output suffix -> TFDS file format (TFDS picks its reader by the suffix): TFRecord, read by
#: ``as_dataset``, or ArrayRecord (``--format array_record``), read by ``as_data_source``
FILE_FORMATS = {"tfrecord": "tfrecord", "array_record": "array_record"}
#: tar2tf's shard names (train-00000-of-00004.tfrecord) in TFDS's template language
FILE_TEMPLATE = "{SPLIT}-{SHARD_X_OF_Y}.{FILEFORMAT}"
DEFAULT_VERSION = "1.0.0"
# a TFDS split name ((\w|-)+ in its file-name regex), ASCII so that it is also a valid part
# of a split expression such as "train[:10%]"; "all" is TFDS's name for every split together
_SPLIT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*\Z")


def local_path(output: str) -> str:
    """``output``'s path, without a ``file://`` scheme."""
    return split_url(output)[2]


def file_format(output: str) -> str:
    """The TFDS file format of an output TFDS can describe (by its suffix)."""
    return FILE_FORMATS[output.rpartition(".")[2]]


def check_output(
    output: Any,
    image: Union[None, str, Sequence[str]] = None,
    type_map: Union[None, str, Mapping[str, str]] = None,
) -> str:
    """The split name of an output TFDS can load, or :class:`TfdsError` (before the job runs)."""
    if isinstance(output, os.PathLike):
        output = os.fspath(output)
    if not isinstance(output, str):
        raise TfdsError(
            "tfds needs the output as one file name such as out/train.tfrecord, "
            f"not {type(output).__name__}"
        )
    scheme = split_url(output)[0]
    if scheme:
        raise TfdsError(
            f"--tfds writes its metadata to a local directory only, not to {scheme}:// "
            "(the update of a split needs a lock that object stores do not offer); "
            "convert to a local directory and copy it"
        )
    name = os.path.basename(local_path(output))
    stem, dot, suffix = name.rpartition(".")
    # a brace: a shard template ({}, {:05d}), whose names TFDS's pattern never matches
    if "{" in name or not dot or suffix not in FILE_FORMATS:
        raise TfdsError(
            f"--tfds needs an output named <split>.tfrecord (or <split>.array_record), whose "
            f"shards <split>-00000-of-0000N.tfrecord TFDS reads, not {name!r}"
        )
    if not _SPLIT.match(stem) or stem == "all":
        raise TfdsError(
            f"--tfds: {stem!r} cannot be a TFDS split name (letters, digits, '_' and '-', "
            "starting with a letter or digit; not 'all')"
        )
    images = parse_image(image)
    types = parse_type_map(type_map)
    for n in images:
        if types.get(n, BYTES) != BYTES:
            raise TfdsError(f"--tfds-image {n}: --type-map types it {types[n]}, not bytes")
    if importlib.util.find_spec("tensorflow_datasets") is None:
        raise TfdsError("--tfds needs the tensorflow-datasets package: pip install 'tar2tf[tfds]'")
    return stem


def split_of(output: Any) -> Tuple[str, str]:
    """``(directory, split)`` of a local output TFDS could describe (``DIR/<split>.tfrecord``
    or ``.array_record``), else ``("", "")``."""
    if not isinstance(output, str) or split_url(output)[0]:
        return "", ""
    name = os.path.basename(output)
    stem, dot, suffix = name.rpartition(".")
    if "{}" in name or not dot or suffix not in FILE_FORMATS or not _SPLIT.match(stem):
        return "", ""
    return os.path.dirname(output) or ".", stem


def check_shards(output: str, split: str, shards: Sequence[Mapping[str, Any]]) -> None:
    """A :class:`TfdsError` unless ``shards`` (manifest rows) are named as TFDS reads the
    shards of ``split`` written to ``output``."""
    suffix = output.rpartition(".")[2]
    n = len(shards)
    if not n:
        raise TfdsError("--tfds: the job wrote no shards, so there is no split to describe")
    want = [f"{split}-{i:05d}-of-{n:05d}.{suffix}" for i in range(n)]
    got = [os.path.basename(local_path(s["path"])) for s in shards]
    if got != want:
        raise TfdsError(
            f"--tfds: shard names {got[0]!r}... do not follow {FILE_TEMPLATE} (expected {want[0]!r})"
        )


def identity(directory: str) -> Tuple[str, str]:
    """``(name, version)`` for a dataset directory: TFDS's own layout ``<name>/<version>``
    when the directory is named as a version, else its name and :data:`DEFAULT_VERSION`."""
    from tensorflow_datasets.core.utils.version import Version

    base = os.path.basename(directory)
    version = DEFAULT_VERSION
    if Version.is_valid(base):
        version, base = base, os.path.basename(os.path.dirname(directory))
    name = re.sub(r"\W", "_", base.lower(), flags=re.ASCII)
    if not re.match(r"[a-z]", name):  # TFDS names start with a letter
        name = "tar2tf_" + name
    return name, version
