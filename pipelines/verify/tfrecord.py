"""One TFRecord shard as ``tar2tf verify`` checks it, read once, streaming: size and digest
against its manifest row, the length and data CRCs of every frame
(``tfrecord.iter_frames``), every record against the schema, the record count, and the
DALI ``.idx`` file, when the job wrote one, against the real record offsets."""

from __future__ import annotations

from typing import Any, Dict, List

from pipelines.verify.examples import check_record
from pipelines.verify.hashing import HashingReader, check_bytes
from pipelines.verify.report import VerifyReport, adder
from transforms.stores import StoreConfig, get_store
from transforms.tfrecord.framing import FRAME_OVERHEAD, CorruptRecordError, iter_frames


def verify_shard(
    row: Dict[str, Any],
    path: str,
    schema,
    report: VerifyReport,
    config: StoreConfig,
    decode_images: bool = False,
    dali_index: bool = False,
) -> int:
    """Check one shard; append problems to the report; return the records read."""
    from transforms.tfrecord import (
        example_wire_pb2 as example_pb2,
    )  # tf.train.Example's wire format, no TF import

    store = get_store(path, config)
    add = adder(report, path)
    if not store.exists(path):
        add("file", "shard is missing")
        return 0
    offsets: List[tuple] = []
    with store.open_read(path) as raw:
        f = HashingReader(raw, row)
        try:
            for n, (offset, payload) in enumerate(iter_frames(f)):
                offsets.append((offset, len(payload) + FRAME_OVERHEAD))
                check_record(n, payload, schema, example_pb2, decode_images, report, add)
        except CorruptRecordError as e:
            add("crc", f"{e} (after {len(offsets)} good records)", len(offsets))
            f.drain()
    report.shards_checked += 1
    report.records_checked += len(offsets)
    report.bytes_checked += f.n
    check_bytes(f, row, add)
    if len(offsets) != row["records"]:
        add("count", f"{len(offsets)} readable records, manifest says {row['records']}")
    if dali_index:
        _check_index(path, offsets, store, add)
    return len(offsets)


def _check_index(path: str, offsets, store, add) -> None:
    idx = path + ".idx"
    if not store.exists(idx):
        add("index", "DALI index file is missing")
        return
    try:
        rows = [
            tuple(int(x) for x in line.split())
            for line in store.read_bytes(idx).decode().splitlines()
            if line.strip()
        ]
    except ValueError as e:
        add("index", f"DALI index is not 'offset size' lines: {e}")
        return
    if rows != [tuple(o) for o in offsets]:
        first = next(
            (i for i, (a, b) in enumerate(zip(rows, offsets)) if tuple(a) != tuple(b)),
            min(len(rows), len(offsets)),
        )
        add(
            "index",
            f"DALI index differs from the records from entry {first} "
            f"({len(rows)} entries, {len(offsets)} records)",
        )
