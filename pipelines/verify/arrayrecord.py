"""One ArrayRecord shard (``--format array_record``) as ``tar2tf verify`` checks it."""

from __future__ import annotations

import os
import tempfile
from typing import Any, Dict

from pipelines.verify.examples import check_record
from pipelines.verify.hashing import HashingReader, check_bytes
from pipelines.verify.report import VerifyReport, adder
from transforms.stores import StoreConfig, get_store, split_url


def verify_array_record_shard(
    row: Dict[str, Any],
    path: str,
    schema,
    report: VerifyReport,
    config: StoreConfig,
    decode_images: bool = False,
) -> int:
    """Check one ArrayRecord shard: size and CRC32C of the file against its row, then every
    record read (in order) and checked as :func:`pipelines.verify.tfrecord.verify_shard`
    checks a TFRecord's, and their count.  A shard in a bucket is copied to a local
    temporary file first (``array_record`` reads local paths); returns the records read."""
    from transforms.arrayrecord import format as arf
    from transforms.tfrecord import example_wire_pb2 as example_pb2

    store = get_store(path, config)
    add = adder(report, path)
    if not store.exists(path):
        add("file", "shard is missing")
        return 0
    local = split_url(path)[0] == ""
    tmp = None
    try:
        with store.open_read(path) as raw:
            f = HashingReader(raw, row)
            if local:
                f.drain()
                where = split_url(path)[2]
            else:
                fd, tmp = tempfile.mkstemp(prefix="tar2tf-verify-", suffix=".array_record")
                with os.fdopen(fd, "wb") as out:
                    for chunk in iter(lambda: f.read(4 << 20), b""):
                        out.write(chunk)
                where = tmp
        report.shards_checked += 1
        report.bytes_checked += f.n
        check_bytes(f, row, add)
        n = 0
        try:
            for payload in arf.iter_file(where):
                check_record(n, payload, schema, example_pb2, decode_images, report, add)
                n += 1
        except arf.ArrayRecordError as e:
            add("format", str(e), e.record)
    finally:
        if tmp is not None:
            os.unlink(tmp)
    report.records_checked += n
    if n != row["records"]:
        add("count", f"{n} readable records, manifest says {row['records']}")
    return n
