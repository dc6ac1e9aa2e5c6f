"""What a job leaves on disk when it ends: after a failure, only work ``--resume`` can
use; after success, nothing -- and a clean-up that fails then is a warning.

A job that fails (a full disk, a killed worker, Ctrl-C) may leave partial files: a piece
or unit blob still under its temporary name (``.piece-000003.tfrecord.tmp-<hex>``), a
piece whose sidecar was never written (it cannot be verified, so ``--resume`` would
redo it anyway), a final shard's temporary file.  On a full disk these are what keeps it
full.  :func:`after_failure` deletes them and keeps the verified work (data files with
their sidecars, the journal of durable final shards, ``job.json``); it then says how
many bytes stay held and where, as part of the failure's one line.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Optional

from pipelines.job import job_file, names, workfiles
from pipelines.job.kinds.tfrecord import piecefiles
from transforms.stores import LOCAL_TEMP, StoreConfig, get_store, split_url

log = logging.getLogger("tar2tf")


def _human(n: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} bytes"


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _sidecar_names(path: str) -> bool:
    """Whether the unit's sidecar describes the data file ``path``: it is the finished
    work of the attempt a resume reuses (another attempt's, or one cut short, is not)."""
    try:
        with open(workfiles.sidecar_of(path), "rb") as f:
            info = json.loads(f.read())
    except (OSError, ValueError):
        return False
    named = [info.get(k) for k in workfiles.DATA_KEYS] if isinstance(info, dict) else []
    return os.path.basename(path) in {os.path.basename(u) for u in named if isinstance(u, str)}


def after_failure(
    exc: Optional[BaseException],
    work: str,
    output: Optional[str] = None,
    config: Optional[StoreConfig] = None,
) -> int:
    """Delete a failed job's partial files (local work directory and output directory;
    object stores publish objects whole, or not at all) and return the bytes of verified
    work kept.  When some are kept, ``exc`` carries a note saying how much and where
    (``tar2tf_held``: the CLI adds it to the failure's line, with the option that uses it)."""
    held = 0
    try:
        if output is not None:
            for tmp in names.stale_temporaries(output, config):
                _unlink(tmp)
        if split_url(work)[0] != "" or not os.path.isdir(work):
            return 0
        for dirpath, _, files in os.walk(work):
            for fn in files:
                path = os.path.join(dirpath, fn)
                # a record file stays whole: a piece the in-process driver held in memory
                # has no sidecar, and the journaled shards' pieces are read at the end
                if LOCAL_TEMP.match(fn) or (
                    not fn.endswith((".json", piecefiles.SUFFIX)) and not _sidecar_names(path)
                ):
                    _unlink(path)
                    continue
                if fn == job_file.JOB_FILE:
                    continue  # the job's description, not work
                try:
                    held += os.path.getsize(path)
                except OSError:
                    pass
    except OSError as e:  # the failure stays the one the user is told about
        log.warning("could not clear the partial files of %s: %s", work, e)
        return held
    if held and exc is not None:
        try:
            # the option that uses it is the caller's to name (launch.job_exit)
            exc.tar2tf_held = f"{_human(held)} of verified work kept in {work}"
        except (AttributeError, TypeError):  # an exception type without a __dict__
            pass
    return held


def remove_work(work: str, config: Optional[StoreConfig] = None) -> None:
    """Delete a finished job's work directory; the output is complete and its manifest
    written, so a failure here is a warning, not the job's failure."""
    try:
        workfiles.delete_tree(get_store(work, config), work)
    except OSError as e:
        where = getattr(e, "filename", None) or work
        log.warning(
            "the output is complete, but its work directory could not be removed: %s (%s); "
            "delete it by hand",
            e.strerror or e,
            where,
        )
