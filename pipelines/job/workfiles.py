"""Work files of a running job and their JSON sidecars: what ``--resume`` trusts.

A worker writes its data file (a TFRecord piece, a PCR unit blob) atomically, then a
sidecar beside it holding the description it returned, including a digest of the data
(:mod:`transforms.tfrecord.digests`: ``crc32c`` for TFRecord pieces, ``sha256`` for PCR units,
whose digest is also the final file's).  The sidecar is written last, so its presence
means the data is complete; on resume the data is re-hashed and reused only if it still
matches (a damaged file is redone, never trusted).  Also: whether a work directory holds
anything, and its removal once the job is over.

Attempts.  A runner may run a unit twice -- a retried bundle, Dataflow's backup tasks,
Flink's region failover -- and two attempts may differ (a transient fetch failure becomes
a reject).  So each attempt writes its data files under names of its own
(:func:`attempt_url`: ``piece-000001~<8 hex>.tfrecord``), and the later steps read only
the files the summary the runner committed names.  The unit's sidecar keeps its fixed
name (``piece-000001.json``, :func:`sidecar_of`): every attempt writes it whole, last, so
it always describes one finished attempt -- the last to finish -- which is what a
resume reuses; it is never what the later steps of a running job trust.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional

from transforms.stores import Store, StoreConfig, get_store, join, split_url
from transforms.tfrecord import digests

HASH_CHUNK = 4 << 20
ATTEMPT = "~"  # between a work file's unit name and its attempt's token
# the sidecar fields that name a unit's data file: a TFRecord piece's, a PCR unit's blob
DATA_KEYS = ("piece", "blob")


def attempt_url(stem: str, ext: str) -> str:
    """A data file of one attempt of a unit: ``<stem>~<8 hex digits><ext>``; the token is
    random, so two attempts, on any workers, never share a name."""
    # os.urandom, not secrets: secrets imports hashlib (via hmac), whose OpenSSL start-up
    # a shard worker process would pay
    return f"{stem}{ATTEMPT}{os.urandom(4).hex()}{ext}"


def unit_stem(data_url: str) -> str:
    """``.../piece-000001~1a2b3c4d.tfrecord`` (or ``.../piece-000001.tfrecord``) ->
    ``.../piece-000001``: the unit's name, without extension and attempt."""
    head, dot, ext = data_url.rpartition(".")
    head = head if dot and "/" not in ext else data_url
    base = head.rfind("/") + 1
    cut = head.find(ATTEMPT, base)
    return head if cut < 0 else head[:cut]


def sidecar_of(data_url: str) -> str:
    """``.../piece-000001~1a2b3c4d.tfrecord`` -> ``.../piece-000001.json``: one per unit,
    describing the attempt that finished last (the module docstring)."""
    return unit_stem(data_url) + ".json"


def describes(info: Any, data_url: str, key: str) -> bool:
    """Whether a sidecar's ``info`` is that of the attempt that wrote ``data_url`` (its
    ``key`` field names it): another attempt may have finished after it."""
    return isinstance(info, dict) and info.get(key) == data_url


def write_sidecar(
    data_url: str, info: Dict[str, Any], config: Optional[StoreConfig] = None
) -> None:
    get_store(data_url, config).write_bytes(
        sidecar_of(data_url), json.dumps(info, sort_keys=True).encode()
    )


def load_verified(
    stem: str, key: str, config: Optional[StoreConfig] = None
) -> Optional[Dict[str, Any]]:
    """The sidecar of unit ``stem`` (:func:`unit_stem`) when the data file its ``key``
    field names is one of that unit's and its bytes still match the digest (``crc32c`` or
    ``sha256``), else None."""
    side = stem + ".json"
    store = get_store(side, config)
    try:
        info = json.loads(store.read_bytes(side))
        if not isinstance(info, dict):
            return None
        data_url = info.get(key)
        if not isinstance(data_url, str) or unit_stem(data_url) != stem:
            return None  # another unit's, or no data file of this work directory
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
    # batches of a multi-object delete where the store has one, many batches at once: a
    # million-shard job leaves three objects a shard (pipelines.job.inflight)
    from pipelines.job import inflight

    urls = store.list(prefix.rstrip("/") + "/")
    inflight.each(store.delete_many, _batches(urls, DELETE_BATCH))


DELETE_BATCH = 1000  # S3's DeleteObjects limit


def _batches(items, n: int):
    batch = []
    for x in items:
        batch.append(x)
        if len(batch) == n:
            yield batch
            batch = []
    if batch:
        yield batch
