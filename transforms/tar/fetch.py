"""Fetch one shard and stream it into records: the ``fetch`` stage.

Opening failures become one shard-level reject (``missing shard``, ``permission denied``,
``fetch failed``); the stream itself goes to :func:`transforms.tar.grouping.iter_records`,
which turns damage into ``tar`` rejects, and a read the store fails mid-object (retries
spent, the object changed) into ``fetch`` ones.  Transient network faults are retried
inside the store, which resumes from the last good byte, so a retried shard never
repeats or drops a record.
"""

from __future__ import annotations

from typing import Iterator, Optional, Union

from transforms.record_types import Record, Reject
from transforms.stores import StoreConfig, get_store
from transforms.stores.local_read import NotRegularFileError
from transforms.tar.grouping import DEFAULT_MAX_MEMBER_SIZE, TarStats, iter_records


def read_shard(
    url: str,
    config: Optional[StoreConfig] = None,
    max_member_size: int = DEFAULT_MAX_MEMBER_SIZE,
    stats: Optional[TarStats] = None,
    max_record_size: Optional[int] = None,
) -> Iterator[Union[Record, Reject]]:
    try:
        stream = get_store(url, config).open_read(url)
    except FileNotFoundError:
        yield Reject(
            url, None, "fetch", f"missing shard: {url} does not exist", counts_record=False
        )
        return
    except PermissionError as e:
        yield Reject(url, None, "fetch", f"permission denied: {url}: {e}", counts_record=False)
        return
    except NotRegularFileError as e:
        yield Reject(
            url, None, "fetch", f"not a regular file: {url} is {e.kind}", counts_record=False
        )
        return
    except Exception as e:
        yield Reject(
            url,
            None,
            "fetch",
            f"fetch failed: {url}: {e.__class__.__name__}: {e}",
            counts_record=False,
        )
        return
    with stream:
        if _html_page(stream):
            yield Reject(
                url,
                None,
                "tar",
                f"not a tar archive: {url} is an HTML page (an error or login "
                "page served in place of the shard?)",
                counts_record=False,
            )
            return
        yield from iter_records(
            stream, url, max_member_size, stats, max_record_size=max_record_size
        )


def _html_page(stream) -> bool:
    """Whether the shard's first bytes are an HTML document: a web server's error or login
    page where a tar was expected says so in its reject, not as a bad tar header.  (A tar
    starts with a member name; no usable one starts with "<!doctype" or "<html".)"""
    peek = getattr(stream, "peek", None)
    if peek is None:
        return False
    try:
        head = peek(512)[:512]
    except Exception:
        return False
    head = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    return head.startswith((b"<!doctype html", b"<html"))
