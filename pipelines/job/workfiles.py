"""Work files of a running job and their JSON sidecars: what ``--resume`` trusts.

A worker writes its data file (a TFRecord piece, a PCR unit blob) atomically, then a
sidecar beside it holding the description it returned, including a digest of the data
(:mod:`transforms.tfrecord.digests`: ``crc32c`` for TFRecord pieces, ``sha256`` for PCR units,
whose digest is also the final file's).  The sidecar is written last, so its presence
means the data is complete; on resume the data is re-hashed and reused only if it still
matches (a damaged file is redone, never trusted).  Also: whether a work directory holds
anything, and its removal once the job is over.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional

from transforms.stores import Store, StoreConfig, get_store, join, split_url
from transforms.tfrecord import digests

HASH_CHUNK = 4 << 20


def sidecar_of(data_url: str) -> str:
    """``.../piece-000001.tfrecord`` -> ``.../piece-000001.json``."""
    head, dot, ext = data_url.rpartition(".")
    return (head if dot and "/" not in ext else data_url) + ".json"


def write_sidecar(
    data_url: str, info: Dict[str, Any], config: Optional[StoreConfig] = None
) -> None:
    get_store(data_url, config).write_bytes(
        sidecar_of(data_url), json.dumps(info, sort_keys=True).encode()
    )


def load_verified(data_url: str, config: Optional[StoreConfig] = None) -> Optional[Dict[str, Any]]:
    """The sidecar of a finished data file whose bytes still match its digest (``crc32c``
    or ``sha256``), else None."""
    store = get_store(data_url, config)
    try:
        info = json.loads(store.read_bytes(sidecar_of(data_url)))
        if not isinstance(info, dict):
            return None
        kind = digests.kind_of(info)
        if not kind:
            return None
        digest = digests.new(kind)
        with store.open_read(data_url) as f:
            for chunk in iter(lambda: f.read(HASH_CHUNK), b""):
                digest.update(chunk)
    except (FileNotFoundError, ValueError, KeyError):
        return None
    if digests.hexdigest(digest) != info[kind]:
        return None
    return info


# -- the work directory ------------------------------------------------------------------


def journal_entry(work: str, n: int) -> str:
    """The journal entry of final shard ``n`` (1-based), which the in-process driver
    writes as it streams final shards (``pipelines.inprocess.journal``); named here
    because a job's output checks ask whether one exists."""
    return join(work, f"journal-{n:06d}.json")


def has_files(store: Store, prefix: str) -> bool:
    """Whether anything is stored under the directory ``prefix`` (a job's work directory)."""
    return next(iter(store.list(prefix.rstrip("/") + "/")), None) is not None


def delete_tree(store: Store, prefix: str) -> None:
    """Remove a work directory (and its parent, when that is left empty)."""
    if split_url(prefix)[0] == "":
        store.delete(prefix)
        parent = os.path.dirname(prefix.rstrip(os.sep))
        if os.path.isdir(parent) and not os.listdir(parent):
            os.rmdir(parent)
        return
    for url in list(store.list(prefix.rstrip("/") + "/")):
        store.delete(url)
