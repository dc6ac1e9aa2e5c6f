"""A piece's summary (``pipelines.job.kinds.tfrecord.summary.PieceSummary``) is its sidecar, key for key,
and what a converted piece holds besides (sizes, frames) never enters it."""

import json

import pytest
from support.shard_stream_fixtures import piece_summary

from pipelines.job import workfiles
from pipelines.job.kinds.tfrecord.config import ConvertConfig
from pipelines.job.kinds.tfrecord.piece import convert_to_piece, load_verified_piece
from pipelines.job.kinds.tfrecord.summary import PieceSummary

DEMO = "launch/demo/shards/demo-0.tar"


def _convert(tmp_path, hold=0):
    cfg = ConvertConfig(
        sources=DEMO, output=str(tmp_path / "o" / "d-{}.record"), type_map={"cls": "int64"}
    )
    return convert_to_piece(0, DEMO, str(tmp_path), cfg, cfg.stages(), hold), cfg


def test_the_sidecar_is_the_summarys_json_and_resume_reads_it_back(tmp_path):
    got, cfg = _convert(tmp_path)
    s = got.summary
    assert got.frames is None and len(got.sizes) == s.records == 24 and sum(got.sizes) == s.bytes
    sidecar = tmp_path / "piece-000000.json"
    assert sidecar.read_bytes() == json.dumps(s.to_json(), sort_keys=True).encode()
    # the keys a sidecar has always had: nothing per record, nothing held for a writer
    assert sorted(json.loads(sidecar.read_bytes())) == sorted(
        [
            "index", "shard", "piece", "records", "bytes", "records_read", "filtered",
            "records_rejected", "shards_rejected", "reject_counts", "members",
            "skipped_members", "duplicate_members", "member_bytes", "schema", "first_types",
            "recs_crc32c", "crc32c",
        ]
    )  # fmt: skip
    assert load_verified_piece(0, str(tmp_path), cfg.store) == s


def test_a_piece_held_in_memory_has_no_sidecar_and_no_piece_digest(tmp_path):
    got, _ = _convert(tmp_path, hold=1 << 30)
    assert b"".join(got.frames) and len(got.frames) == len(got.sizes) == got.summary.records
    assert got.summary.crc32c is None and "crc32c" not in got.summary.to_json()
    assert not (tmp_path / "piece-000000.json").exists()
    assert PieceSummary.from_json(got.summary.to_json()) == got.summary


def test_a_sidecar_that_is_not_a_pieces_summary_is_not_trusted(tmp_path):
    got, cfg = _convert(tmp_path)
    url = str(tmp_path / "piece-000000.tfrecord")
    info = got.summary.to_json()
    del info["schema"]
    workfiles.write_sidecar(url, info, cfg.store)
    assert load_verified_piece(0, str(tmp_path), cfg.store) is None
    with pytest.raises(ValueError, match="without schema"):
        PieceSummary.from_json(info)
    with pytest.raises(ValueError):
        PieceSummary.from_json([1, 2])


def test_summaries_share_their_schema_and_are_small_once_unpickled():
    """At a million pieces the global steps hold a million summaries: equal schemas,
    first types and reject counts are one object, also after pickling (a Beam side
    input), and a summary costs well under 1 KB."""
    import pickle
    import tracemalloc

    def make(i):
        return piece_summary(
            i,
            f"gs://bucket/work/0123456789abcdef/piece-{i:06d}~1a2b3c4d.tfrecord",
            1000,
            shard=f"gs://bucket/inputs/shard-{i:07d}.tar",
            bytes=110_000_000,
            members=2000,
            member_bytes=110_000_000,
            schema={"jpg": {"dtype": "bytes", "shape": []}, "cls": {"dtype": "int64", "shape": []}},
            first_types={"jpg": "bytes", "cls": "int64"},
            recs_crc32c="01234567",
            crc32c="89abcdef",
        )

    blobs = [pickle.dumps(make(i)) for i in range(10_000)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        got = [pickle.loads(b) for b in blobs]
        each = (tracemalloc.get_traced_memory()[0] - before) / len(got)
    finally:
        tracemalloc.stop()
    assert got[3] == make(3) and got[3].schema is got[9000].schema
    assert got[3].first_types is got[4].first_types
    assert each < 1000, each
