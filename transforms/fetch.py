"""Fetch one shard and stream it into records: the ``fetch`` stage.

Opening failures become one shard-level reject (``missing shard``, ``permission denied``,
``fetch failed``); the stream itself goes to :func:`transforms.tar_records.iter_records`,
which turns damage into ``tar`` rejects, and a read the store fails mid-object (retries
spent, the object changed) into ``fetch`` ones.  Transient network faults are retried
inside the store, which resumes from the last good byte, so a retried shard never
repeats or drops a record.
"""

from __future__ import annotations

from typing import Iterator, Optional, Union

from transforms.local_read import NotRegularFileError
from transforms.records import Record, Reject
from transforms.stores import StoreConfig, get_store
from transforms.tar_records import DEFAULT_MAX_MEMBER_SIZE, TarStats, iter_records


def read_shard(url: str, config: Optional[StoreConfig] = None,
               max_member_size: int = DEFAULT_MAX_MEMBER_SIZE,
               stats: Optional[TarStats] = None) -> Iterator[Union[Record, Reject]]:
    try:
        stream = get_store(url, config).open_read(url)
    except FileNotFoundError:
        yield Reject(url, None, "fetch", f"missing shard: {url} does not exist", counts_record=False)
        return
    except PermissionError as e:
        yield Reject(url, None, "fetch", f"permission denied: {url}: {e}", counts_record=False)
        return
    except NotRegularFileError as e:
        yield Reject(url, None, "fetch", f"not a regular file: {url} is {e.kind}", counts_record=False)
        return
    except Exception as e:  # noqa: BLE001 - unreachable server etc.: a clear reject, job goes on
        yield Reject(url, None, "fetch", f"fetch failed: {url}: {e.__class__.__name__}: {e}",
                     counts_record=False)
        return
    with stream:
        yield from iter_records(stream, url, max_member_size, stats)
