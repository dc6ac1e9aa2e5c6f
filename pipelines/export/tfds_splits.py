"""The splits a dataset's TFDS metadata describes once a job's split joins them: for each
split, the file formats its shards are in and, per format, the records of each shard and
their bytes (:data:`Found`), gathered from the job's manifest, the manifests of the other
splits and formats beside it, and the earlier metadata; then the format every split is
read in (:func:`common_formats`) and the split infos TFDS reads (:func:`split_dict`).
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from pipelines.export.tfds_features import TfdsError
from pipelines.export.tfds_names import FILE_FORMATS, FILE_TEMPLATE, check_shards

#: split -> file format -> (records of each shard, bytes)
Found = Dict[str, Dict[str, Tuple[List[int], int]]]


def merged(
    directory: str,
    split: str,
    fmt: str,
    shards: Sequence[Mapping[str, Any]],
    schema: Mapping[str, Any],
    kept: Sequence[Any] = (),
    kept_format: Optional[str] = None,
) -> Found:
    """The splits of the dataset in ``directory`` once ``split`` (this job's ``shards`` in
    ``fmt``, of ``schema``) joins the splits ``kept`` from its earlier metadata (SplitInfo
    protos, in ``kept_format``).  A split whose manifests are gone stays as the metadata
    describes it."""
    names = sorted({p.name for p in kept} | {split})
    found = _split_formats(directory, names, split, fmt, shards, schema)
    for p in kept:
        if p.name not in found and kept_format:
            found[p.name] = {kept_format: ([int(n) for n in p.shard_lengths], p.num_bytes)}
    return found


def _split_formats(
    directory: str,
    names: Sequence[str],
    split: str,
    fmt: str,
    shards: Sequence[Mapping[str, Any]],
    schema: Mapping[str, Any],
) -> Found:
    """split -> file format -> (records of each shard, bytes), for the formats each split's
    shards are in: this job's, and those whose manifest ``DIR/<split>.<format>.manifest.json``
    is there with shards TFDS can name and this job's schema (a job that wrote the same
    records in the other format)."""
    out: Found = {}
    for s in names:
        for f in sorted(set(FILE_FORMATS.values())):
            if (s, f) == (split, fmt):
                rows = shards
            else:
                path = os.path.join(directory, f"{s}.{f}.manifest.json")
                try:
                    with open(path, encoding="utf-8") as fh:
                        m = json.load(fh)
                    rows = m["shards"]
                    check_shards(os.path.join(directory, f"{s}.{f}"), s, rows)
                    if m.get("schema") != schema:
                        continue
                    for r in rows:
                        if not os.path.exists(os.path.join(directory, os.path.basename(r["path"]))):
                            raise FileNotFoundError(r["path"])
                except (OSError, ValueError, KeyError, TypeError, TfdsError):
                    continue  # not there, or not shards of this dataset
            out.setdefault(s, {})[f] = (
                [int(r["records"]) for r in rows],
                sum(int(r["bytes"]) for r in rows),
            )
    return out


def common_formats(found: Found, directory: str) -> Tuple[str, List[str]]:
    """The dataset's file format (TFRecord when every split has it: ``as_dataset`` reads
    it) and the alternative formats every split also has; a split whose formats hold
    different records, or no format every split has, is a :class:`TfdsError`."""
    for s, by in sorted(found.items()):
        if len({tuple(lengths) for lengths, _ in by.values()}) > 1:
            raise TfdsError(
                f"--tfds: split {s!r} is in {' and '.join(sorted(by))} shards that hold "
                "different records: convert both with the same sources and options"
            )
    common = set.intersection(*(set(by) for by in found.values()))
    if not common:
        have = "; ".join(f"{s}: {', '.join(sorted(by))}" for s, by in sorted(found.items()))
        raise TfdsError(
            f"--tfds: the splits in {directory} have no file format in common ({have}); "
            "TFDS reads one format (and alternatives) for every split"
        )
    primary = "tfrecord" if "tfrecord" in common else sorted(common)[0]
    return primary, sorted(common - {primary})


def split_dict(found: Found, primary: str, directory: str, name: str):
    """TFDS's ``SplitDict`` of the splits ``found``, in name order, each as its shards in
    the ``primary`` format describe it, under tar2tf's file-name template."""
    from tensorflow_datasets.core import naming
    from tensorflow_datasets.core import splits as split_lib

    template = naming.ShardedFileTemplate(
        data_dir=directory,
        template=FILE_TEMPLATE,
        dataset_name=name,
        filetype_suffix=primary,
    )
    protos = []
    for s in sorted(found):
        lengths, nbytes = found[s][primary]
        info = split_lib.SplitInfo(
            name=s,
            shard_lengths=lengths,
            num_bytes=nbytes,
            filename_template=template.replace(split=s),
        )
        protos.append(info.to_proto())
    return split_lib.SplitDict.from_proto(protos, template)
