"""The job's global steps over every record, in bounded memory, against the all-in-memory
rules they replace: the streamed plan (``pipelines.job.kinds.tfrecord.plan``), the bucketed duplicate-key
check (``pipelines.job.kinds.tfrecord.duplicates``) and the bucketed grouping (``pipelines.job.external``)."""

import threading

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support.shard_stream_fixtures import piece_summary

from pipelines.job import external, inflight
from pipelines.job.kinds.tfrecord import piecefiles
from pipelines.job.kinds.tfrecord.duplicates import duplicate_keys
from pipelines.job.kinds.tfrecord.plan import stream_plan
from pipelines.job.names import shard_names
from transforms.tfrecord.framing import pack


def reference_plan(pieces, sizes, output, max_bytes, max_records):
    """The plan as it was: every record's size in one list, packed at once."""
    pieces = sorted(pieces, key=lambda p: p.index)
    flat = [(pi, s) for pi, p in enumerate(pieces) for s in sizes[p.index]]
    spans = pack([s for _, s in flat], max_bytes, max_records)
    names = shard_names(output, len(spans))
    offsets = [0] * len(pieces)
    tasks = []
    for n, ((a, b), path) in enumerate(zip(spans, names)):
        ranges = []
        for pi, size in flat[a:b]:
            url = pieces[pi].piece
            if ranges and ranges[-1][0] == url:
                ranges[-1] = (url, ranges[-1][1], ranges[-1][2] + size)
            else:
                ranges.append((url, offsets[pi], size))
            offsets[pi] += size
        tasks.append(
            {"index": n, "path": path, "ranges": ranges, "sizes": [s for _, s in flat[a:b]]}
        )
    return tasks


def _pieces(layout):
    return [
        piece_summary(i, f"w/piece-{i:06d}.tfrecord", len(sizes), bytes=sum(sizes))
        for i, sizes in enumerate(layout)
    ]


@settings(max_examples=300, deadline=None)
@given(
    # small sizes and bounds, so that shards often end exactly at the byte bound
    layout=st.lists(st.lists(st.integers(0, 40), max_size=12), max_size=8),
    max_bytes=st.one_of(st.none(), st.integers(1, 150)),
    max_records=st.one_of(st.none(), st.integers(1, 7)),
    template=st.booleans(),
)
@example(layout=[[5, 5], [0, 11]], max_bytes=10, max_records=None, template=True)
def test_the_streamed_plan_is_the_plan_of_all_sizes_at_once(
    layout, max_bytes, max_records, template
):
    pieces = _pieces(layout)
    output = "o/t-{}.rec" if template else "o/t.rec"
    got = list(
        stream_plan(
            pieces,
            output,
            max_bytes,
            max_records,
            dali_index=True,
            sizes_of=lambda p: layout[p.index],
        )
    )
    want = reference_plan(pieces, layout, output, max_bytes, max_records)
    assert [
        {"index": t.index, "path": t.path, "ranges": t.ranges, "sizes": t.sizes.tolist()}
        for t in got
    ] == want
    for t in got:
        assert t.records == len(t.sizes) and t.bytes == sum(t.sizes)


@pytest.mark.parametrize("output", ["o/t-{}.rec", "o/t.rec"])  # streamed names, -of- names
def test_the_plan_reads_each_record_file_once_and_ahead_by_a_bounded_window(output):
    """Each piece's sizes are asked for once -- also when the names need the shard count
    first -- many at a time but at most ``2 x inflight.REQUESTS`` pieces ahead of the
    plan, and with streamed names the first task is out before the last piece is read."""
    n = 6 * inflight.REQUESTS
    layout = [[10] * 5 for _ in range(n)]
    pieces = _pieces(layout)
    asked = []
    lock = threading.Lock()

    def sizes_of(p):
        with lock:
            asked.append(p.index)
        return np.asarray(layout[p.index])

    plan = stream_plan(pieces, output, 25, None, sizes_of=sizes_of)
    first = next(plan)
    assert first.ranges == [("w/piece-000000.tfrecord", 0, 20)]
    if "{}" in output:
        assert len(asked) <= 2 * inflight.REQUESTS + 1
    rest = list(plan)
    assert sorted(asked) == list(range(n)) and len(rest) + 1 == -(-5 * n // 2)  # 2 a shard


def test_a_record_file_that_disagrees_with_its_summary_stops_the_plan():
    pieces = _pieces([[10, 10], [10]])
    with pytest.raises(IOError, match="disagrees with its summary"):
        list(stream_plan(pieces, "o/t-{}.rec", 25, None, sizes_of=lambda p: [10, 10]))


def reference_duplicates(pieces, keys):
    first, count, examples = {}, 0, []
    for p in sorted(pieces, key=lambda p: p.index):
        for k in keys[p.index]:
            seen = first.setdefault(k, p.shard)
            if seen != p.shard:
                count += 1
                if len(examples) < 5:
                    examples.append({"key": k, "first": seen, "again": p.shard})
    return {"count": count, "examples": examples}


@settings(max_examples=200, deadline=None)
@given(
    keys=st.lists(
        st.lists(st.sampled_from(["a", "b", "c", "d", "e", "f", "g", "\udcff"]), unique=True),
        max_size=7,
    ),
    shards=st.lists(st.integers(0, 4), min_size=7, max_size=7),
    per_bucket=st.integers(1, 6),
)
def test_bucketed_duplicate_keys_are_the_old_count_and_examples(keys, shards, per_bucket):
    """Also in many buckets (``per_bucket`` rows each), and with an input listed twice
    (two pieces of one shard URL are no duplicates of each other)."""
    pieces = [
        piece_summary(i, records=len(k), shard=f"s{shards[i]}.tar") for i, k in enumerate(keys)
    ]

    def hashes_of(p):
        raw = b"".join(piecefiles.key_hash(piecefiles.key_bytes(k)) for k in keys[p.index])
        return np.frombuffer(raw, dtype=piecefiles.HASH)

    got = duplicate_keys(
        pieces,
        hashes_of=hashes_of,
        key_of=lambda p, r: keys[p.index][r],
        per_bucket=per_bucket,
    )
    assert got == reference_duplicates(pieces, keys)


def test_buckets_come_in_key_order_and_hold_every_row_once():
    rnd = np.random.default_rng(1)
    dtype = np.dtype([("k", ">u8"), ("i", "<i8")])
    chunks = []
    for c in range(20):
        rows = np.empty(500, dtype=dtype)
        rows["k"] = rnd.integers(0, 2**63, 500, dtype=np.uint64) * 2
        rows["i"] = np.arange(500) + 500 * c
        chunks.append(rows)
    got = list(external.buckets(iter(chunks), dtype, 10_000, per_bucket=700))
    assert len(got) == 16  # 2^4 buckets of about 700 rows
    assert sorted(np.concatenate(got)["i"].tolist()) == list(range(10_000))
    for a, b in zip(got, got[1:]):
        if len(a) and len(b):
            assert a["k"].max() < b["k"].min()


def test_a_record_file_round_trips_its_sizes_keys_and_rejects(tmp_path):
    piece = str(tmp_path / "piece-000003.tfrecord")
    rejects = [{"stage": "tar", "reason": "x", "key": "k\udcff", "url": "u"}]
    crc = piecefiles.write(piece, piecefiles.encode([5, 7], ["a", "b\udcff"], rejects))
    summary = piece_summary(3, piece, 2, recs_crc32c=crc)
    recs = piecefiles.load(summary)
    assert recs["sizes"].tolist() == [5, 7] and recs.key(1) == "b\udcff"
    assert recs.rejects() == rejects
    assert piecefiles.verified(summary)
    (tmp_path / "piece-000003.recs").write_bytes(b"damaged")
    assert not piecefiles.verified(summary)
