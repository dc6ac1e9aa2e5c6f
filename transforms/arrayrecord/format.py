"""Write and read one ArrayRecord file, with the writer options tar2tf always uses.

ArrayRecord is a Riegeli file whose records sit in chunks with an index of chunk offsets at
the end, so a reader seeks to any record without reading what comes before it: the random
access that Grain's samplers need and TFRecord lacks.  ``array_record``'s writer takes a
path, not a Python file object, so a shard is written to a local file (the caller renames
or uploads it).

:data:`WRITER_OPTIONS`, chosen once for every shard (docs/arrayrecord.md says why):

* ``group_size:1`` -- one record per chunk: reading record ``i`` reads and decompresses
  only that record.  Grain asks for it and logs an error for any other group size.
* ``zstd:3`` -- ArrayRecord's (and TFDS's) default codec: raw pixel arrays, JSON and text
  shrink; encoded images do not, and zstd then stores their blocks as they are, so
  reading them costs a copy.
* ``max_parallelism:1`` -- chunks encoded on the writing thread: the job already writes
  several shards at once, and the bytes must not depend on threads (they do not in
  0.8.6, but one encoder makes that hold by construction).
* ``pad_to_block_boundary:false`` -- no padding between chunks (smaller files).

The same records and options give the same bytes: the output is deterministic (tested
on both drivers and across reruns).
"""

from __future__ import annotations

from typing import Iterable, Iterator, Optional

WRITER_OPTIONS = "group_size:1,zstd:3,max_parallelism:1,pad_to_block_boundary:false"
#: the reader reads one record per call; no read-ahead threads for a sequential check
READER_OPTIONS = "readahead_buffer_size:0,max_parallelism:0"


class ArrayRecordError(ValueError):
    """An ArrayRecord file that cannot be read (damaged, truncated, not ArrayRecord);
    ``record``: the number of the record that failed (None: the file does not open)."""

    def __init__(self, reason: str, record: Optional[int] = None):
        super().__init__(reason)
        self.record = record


def _module():
    try:
        from array_record.python import array_record_module
    except ImportError as e:  # the extra is optional: one line that says what to install
        raise RuntimeError(
            "--format array_record needs the array-record package: "
            "pip install 'tar2tf[array-record]'"
        ) from e
    return array_record_module


def available() -> bool:
    """Whether the ``array_record`` package can be imported."""
    try:
        _module()
    except RuntimeError:
        return False
    return True


def write_file(path: str, payloads: Iterable[bytes]) -> int:
    """Write ``payloads`` in order into a new ArrayRecord file at the local ``path``;
    returns the number of records.  A failure leaves a partial file at ``path`` for the
    caller to remove (it never writes under a final name).  The writer reports errors
    only through ``ok()``, not by raising: it is asked after opening and before closing,
    and the caller reads the finished file's record count back."""
    try:
        writer = _module().ArrayRecordWriter(path, WRITER_OPTIONS)
    except (ValueError, OSError, RuntimeError) as e:
        raise OSError(f"cannot write an ArrayRecord file at {path}: {_short(e)}") from None
    n = 0
    try:
        if not writer.ok():
            raise OSError(f"cannot write an ArrayRecord file at {path}")
        for p in payloads:
            writer.write(p)
            n += 1
        if not writer.ok():
            raise OSError(f"writing the ArrayRecord file {path} failed after {n} records")
    except BaseException:
        try:
            writer.close()
        except (ValueError, OSError, RuntimeError):
            pass  # the error being raised says more
        raise
    try:
        writer.close()  # writes the chunk index and footer
    except (ValueError, OSError, RuntimeError) as e:
        raise OSError(f"writing the ArrayRecord file {path} failed: {_short(e)}") from None
    return n


def _open(path: str):
    """A reader of the local file ``path``, or :class:`ArrayRecordError`.  The bindings
    report a damaged file through ``ok()`` (and raise its error from ``close()``), or
    raise ``RuntimeError`` at once, depending on where the damage is."""
    try:
        reader = _module().ArrayRecordReader(path, READER_OPTIONS)
    except (ValueError, OSError, RuntimeError) as e:
        raise ArrayRecordError(f"not a readable ArrayRecord file: {_short(e)}") from None
    if not reader.ok():
        try:
            reader.close()
            why = "unknown error"
        except (ValueError, OSError, RuntimeError) as e:
            why = _short(e)
        raise ArrayRecordError(f"not a readable ArrayRecord file: {why}")
    return reader


def _close(reader) -> None:
    try:
        reader.close()
    except (ValueError, OSError, RuntimeError) as e:
        raise ArrayRecordError(_short(e)) from None


def iter_file(path: str) -> Iterator[bytes]:
    """Every record of the local ArrayRecord file ``path``, in order.  Raises
    :class:`ArrayRecordError` when the file cannot be opened or a record cannot be read."""
    reader = _open(path)
    try:
        n = reader.num_records()
        batch = 256  # one call per record costs more in the bindings
        for start in range(0, n, batch):
            stop = min(n, start + batch)
            try:
                records = reader.read(list(range(start, stop)))
            except (ValueError, OSError, RuntimeError, IndexError):
                records = None  # one of them is damaged: read them one by one below
            if records is not None:
                yield from records
                continue
            for i in range(start, stop):  # the good ones before it, then which one
                try:
                    record = reader.read([i])[0]
                except (ValueError, OSError, RuntimeError, IndexError) as e:
                    raise ArrayRecordError(_short(e), i) from None
                yield record
    except BaseException:
        try:
            reader.close()
        except (ValueError, OSError, RuntimeError):
            pass  # the error being raised says more
        raise
    _close(reader)


def num_records(path: str) -> int:
    """The record count the file's index gives (no record is read)."""
    reader = _open(path)
    try:
        n = reader.num_records()
    except BaseException:
        try:
            reader.close()
        except (ValueError, OSError, RuntimeError):
            pass
        raise
    _close(reader)
    return n


def writer_options(path: str) -> str:
    """The options the file was written with, as its header records them."""
    reader = _open(path)
    opts = reader.writer_options_string()
    _close(reader)
    return opts


def _short(e: BaseException) -> str:
    """An exception's first line, bounded (Riegeli's messages carry long contexts)."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:300]
