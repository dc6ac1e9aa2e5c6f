"""A split taken out of a directory's TFDS metadata while a job replaces its shards.

A job that replaces a split's shards (with ``--tfds`` or without) first takes the split out
of ``DIR/dataset_info.json`` (:func:`retracted`, from the job's start in
``pipelines.job.kinds.tfrecord.kind``), so that the metadata never names shards or counts
that are not on disk, whatever becomes of the job; a ``--tfds`` job that succeeds writes it
again (:func:`pipelines.export.tfds_metadata.write_metadata`).  No TensorFlow import: the
metadata is JSON.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from typing import Any, Dict, Iterator, Optional

from pipelines.export.tfds_features import TfdsError
from pipelines.export.tfds_files import INFO_NAME, json_file, locked, replace_file, sync_dir
from pipelines.export.tfds_names import file_format, split_of

log = logging.getLogger("tar2tf")


def _retractable(info_path: str, split: str, fmt: str) -> Optional[Dict[str, Any]]:
    """The metadata at ``info_path`` without ``split``, when it describes ``split`` in a
    format that may be ``fmt`` (its file format or an alternative); else None."""
    if not os.path.lexists(info_path):
        return None
    try:
        # read as the metadata's merge reads it: a link to a device is no metadata
        info = json_file(info_path)
        splits = info.get("splits", [])
        formats = {info.get("fileFormat") or "tfrecord", *info.get("alternativeFileFormats", [])}
        kept = [s for s in splits if s.get("name") != split]
    except (TfdsError, OSError, ValueError, TypeError, AttributeError) as e:
        # a file this cannot read names no shards that tar2tf could take out
        log.warning("tfds: %s is not metadata tar2tf can update (%s): left as it is", info_path, e)
        return None
    if len(kept) == len(splits) or fmt not in formats:
        return None
    return dict(info, splits=kept)


@contextlib.contextmanager
def retracted(output: Any) -> Iterator[bool]:
    """The block in which a job starts replacing the shards of ``output``
    (``DIR/<split>.tfrecord``, with ``--tfds`` or without), after the split left
    ``DIR/dataset_info.json`` where the metadata could name those shards: whatever becomes
    of the job -- rejects, a failure, a kill -- the metadata never names shards or counts
    that are not on disk.  A job that succeeds with ``--tfds`` adds the split back; the
    other splits stay, and the file goes when no split is left.  The metadata lock is held
    for the block (the earlier manifest's removal), so that a job describing the split's
    other format does not read that manifest in between.  A split the metadata does not
    describe takes no lock.  Yields whether the split was taken out."""
    directory, split = split_of(output)
    info_path = os.path.join(directory, INFO_NAME)
    if not split or not os.path.exists(info_path):
        yield False
        return
    fmt = file_format(output)
    # renames only: a read without the lock sees a whole file
    if _retractable(info_path, split, fmt) is None:
        yield False
        return
    with locked(directory):
        info = _retractable(info_path, split, fmt)  # again: another job may have written it
        if info is not None:
            if info["splits"]:
                data = json.dumps(info, indent=2, sort_keys=True) + "\n"
                replace_file(info_path, data.encode())
            else:
                os.unlink(info_path)
                sync_dir(directory)
            log.info(
                "tfds: split %s left %s while its shards are replaced; a job with --tfds "
                "that succeeds describes it again",
                split,
                info_path,
            )
        yield info is not None
