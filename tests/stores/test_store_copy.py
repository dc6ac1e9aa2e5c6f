"""Final shards assembled by the store: the same bytes and CRC-32C as a copy through
tar2tf, with fewer bytes through tar2tf (counted by ``transforms.stores.traffic``).

* local: a whole piece's CRC-32C comes from its sidecar; with ``TAR2TF_KERNEL_COPY=1``
  ``copy_file_range`` copies the ranges, and a whole piece is neither read nor written
  by the process;
* S3 (moto): ``UploadPartCopy`` parts; a whole piece of >= 5 MiB is never downloaded;
* GCS (fake-gcs-server): ``compose``; a whole piece is never downloaded nor uploaded,
  a part of one goes through a temporary object that is deleted after.
"""

from __future__ import annotations

import base64
import random

import google_crc32c
import pytest

from pipelines.job.kinds.tfrecord import piecefiles
from pipelines.job.kinds.tfrecord.plan import ShardTask
from pipelines.job.kinds.tfrecord.shardfile import write_shard
from pipelines.job.workfiles import write_sidecar
from transforms.stores import StoreConfig, get_store, traffic
from transforms.stores.copy import plan_parts

MIB = 1 << 20


def _crc(data: bytes) -> str:
    return f"{google_crc32c.value(data):08x}"


@pytest.fixture()
def counted(tmp_path, monkeypatch):
    """Traffic counting on, into a fresh directory; returns a reader of the sums."""
    d = tmp_path / "traffic"
    monkeypatch.setenv(traffic.ENV, str(d))
    monkeypatch.delenv("TAR2TF_STORE_COPY", raising=False)
    traffic.reset()

    def read():
        traffic.flush()
        out = traffic.collect(str(d))
        traffic.reset()
        for f in d.iterdir():
            f.unlink()
        return out

    yield read
    traffic.reset()


def _record_sizes(n: int, record: int):
    """A piece of ``n`` bytes cut into records of ``record`` bytes (the last one shorter)."""
    return [min(record, n - at) for at in range(0, n, record)]


def _make_pieces(root: str, sizes, config=None, sidecars=True, record=None):
    """Pieces of random bytes under ``root`` (a directory URL), each with the sidecar a
    piece writer leaves (its bytes and CRC-32C); their URLs and bytes.  With ``record``
    (bytes), the piece is records of that size, and its record file holds each one's
    size and the piece's CRC-32C at its end, as the piece writer leaves them."""
    rng = random.Random(7)
    out = []
    for i, n in enumerate(sizes):
        url = f"{root.rstrip('/')}/piece-{i:06d}.tfrecord"
        data = rng.randbytes(n)
        get_store(url, config).write_bytes(url, data)
        records = 1
        if record:
            rec_sizes = _record_sizes(n, record)
            ends, running, at = [], google_crc32c.Checksum(), 0
            for size in rec_sizes:
                running.update(data[at : at + size])
                at += size
                ends.append(running.digest())
            keys = [f"k{r}" for r in range(len(rec_sizes))]
            piecefiles.write(url, piecefiles.encode(rec_sizes, keys, [], None, ends), config)
            records = len(rec_sizes)
        if sidecars:
            info = {"piece": url, "bytes": n, "crc32c": _crc(data), "records": records}
            write_sidecar(url, info, config)
        out.append((url, data))
    return out


def _task(path, pieces, spec):
    """A shard task over ``spec``: (piece index, offset, length or None = to the end)."""
    ranges, expect = [], b""
    for i, off, n in spec:
        url, data = pieces[i]
        n = len(data) - off if n is None else n
        ranges.append((url, off, n))
        expect += data[off : off + n]
    return ShardTask(0, path, ranges, len(ranges), len(expect)), expect


# piece sizes and a shard of: the tail of a piece (6 MiB, not whole), a whole 6 MiB piece,
# a whole small piece, the head of a piece (2 MiB, last)
SIZES = [6 * MIB, 100_000, 7 * MIB, 3 * MIB]
SPEC = [(2, MIB, None), (0, 0, None), (1, 0, None), (3, 0, 2 * MIB)]
WHOLE = 6 * MIB + 100_000  # bytes of the ranges that are whole pieces
PARTIAL = 6 * MIB + 2 * MIB
SIDECARS = 4096  # bytes of sidecar reads allowed


def test_plan_parts_follow_s3_rules_and_keep_the_bytes():
    rng = random.Random(3)
    lo, hi = 50, 400
    for _ in range(300):
        ranges = [
            (f"u{i}", rng.randrange(0, 100), rng.choice([1, 20, 49, 50, 60, 399, 401, 1000]))
            for i in range(rng.randrange(1, 8))
        ]
        parts = plan_parts(ranges, lo, hi)
        flat = []
        for p in parts:
            segs = [p.copy] if p.copy else p.ranges
            for u, o, n in segs:
                if flat and flat[-1][0] == u and flat[-1][1] + flat[-1][2] == o:
                    flat[-1] = (u, flat[-1][1], flat[-1][2] + n)  # a range split in two
                else:
                    flat.append((u, o, n))
        assert flat == [r for r in ranges if r[2]]
        for p in parts[:-1]:
            assert lo <= p.length <= max(hi, 2 * lo), parts
        assert all(p.length <= hi for p in parts if p.copy)
        # a range is copied by the server but for what it lends to a small part before it
        # (< lo bytes) and a rest too small to be a part of its own (< lo bytes)
        copied = sum(p.length for p in parts if p.copy)
        assert copied >= sum(max(0, n - 2 * lo) for _, _, n in ranges)


def test_local_copy_takes_whole_pieces_crc_from_sidecars(tmp_path, counted, monkeypatch):
    """The default local copy goes through the process (faster than the kernel's on ext4),
    but does not hash a whole piece: a sidecar that lies shows in the shard's CRC."""
    pieces = _make_pieces(str(tmp_path / "work"), SIZES)
    task, expect = _task(str(tmp_path / "a.record"), pieces, SPEC)
    row = write_shard(task)
    assert (tmp_path / "a.record").read_bytes() == expect and row["crc32c"] == _crc(expect)
    got = counted()
    assert got.get("local.write", 0) >= len(expect) and "local.copy" not in got

    url, data = pieces[0]  # a sidecar whose CRC-32C is not its piece's: taken as it is
    write_sidecar(url, {"piece": url, "bytes": len(data), "crc32c": "00000000", "records": 1})
    task, _ = _task(str(tmp_path / "b.record"), pieces, SPEC)
    assert write_shard(task)["crc32c"] != _crc(expect)
    monkeypatch.setenv("TAR2TF_STORE_COPY", "0")  # the copy through tar2tf hashes every byte
    task, _ = _task(str(tmp_path / "c.record"), pieces, SPEC)
    assert write_shard(task)["crc32c"] == _crc(expect)


def test_local_kernel_copy_same_bytes_no_userspace_write(tmp_path, counted, monkeypatch):
    monkeypatch.setenv("TAR2TF_KERNEL_COPY", "1")
    pieces = _make_pieces(str(tmp_path / "work"), SIZES)
    counted()
    task, expect = _task(str(tmp_path / "out" / "a.record"), pieces, SPEC)
    row = write_shard(task)
    got = counted()
    assert (tmp_path / "out" / "a.record").read_bytes() == expect
    assert row["crc32c"] == _crc(expect) and row["bytes"] == len(expect)
    # every byte copied by the kernel; whole pieces not even read (their sidecar's CRC)
    assert got.get("local.copy") == len(expect)
    assert got.get("local.write", 0) == 0
    assert got.get("local.read", 0) <= PARTIAL + SIDECARS

    # the copy through the process: the same file and row
    monkeypatch.setenv("TAR2TF_STORE_COPY", "0")
    task2, _ = _task(str(tmp_path / "out" / "b.record"), pieces, SPEC)
    row2 = write_shard(task2)
    off = counted()
    assert (tmp_path / "out" / "b.record").read_bytes() == expect
    assert {**row2, "path": None} == {**row, "path": None}
    assert off.get("local.write") == len(expect) and "local.copy" not in off


def test_local_kernel_copy_reads_no_run_of_records(tmp_path, counted, monkeypatch):
    """Parts of pieces get their CRC-32C from the record files: nothing of the pieces is
    read, only the small record files; a record file that disagrees with its sidecar is
    not trusted (the part is read and hashed, and the CRC-32C stays right)."""
    monkeypatch.setenv("TAR2TF_KERNEL_COPY", "1")
    pieces = _make_pieces(str(tmp_path / "work"), SIZES, record=MIB)
    counted()
    task, expect = _task(str(tmp_path / "out" / "a.record"), pieces, SPEC)
    row = write_shard(task)
    got = counted()
    assert (tmp_path / "out" / "a.record").read_bytes() == expect
    assert row["crc32c"] == _crc(expect) and got.get("local.copy") == len(expect)
    assert got.get("local.read", 0) <= 4 * SIDECARS

    url, data = pieces[2]  # its record file now says another CRC-32C at each record's end
    sizes = _record_sizes(len(data), MIB)
    n = len(sizes)
    piecefiles.write(url, piecefiles.encode(sizes, ["k"] * n, [], None, [b"\0" * 4] * n))
    task, _ = _task(str(tmp_path / "out" / "b.record"), pieces, SPEC)
    assert write_shard(task)["crc32c"] == _crc(expect)
    assert counted().get("local.read", 0) >= len(data) - MIB


def test_local_kernel_copy_without_sidecars_hashes_the_bytes(tmp_path, counted, monkeypatch):
    monkeypatch.setenv("TAR2TF_KERNEL_COPY", "1")
    pieces = _make_pieces(str(tmp_path / "work"), SIZES, sidecars=False)
    task, expect = _task(str(tmp_path / "a.record"), pieces, SPEC)
    row = write_shard(task)
    assert row["crc32c"] == _crc(expect)
    assert (tmp_path / "a.record").read_bytes() == expect
    assert counted().get("local.copy") == len(expect)


@pytest.fixture()
def s3(moto_server, s3_env):
    bucket = moto_server.new_bucket()
    return moto_server, bucket, StoreConfig(s3_endpoint=moto_server.url)


def test_s3_part_copies_download_no_whole_piece(s3, counted, monkeypatch):
    server, bucket, cfg = s3
    pieces = _make_pieces(f"s3://{bucket}/work", SIZES, cfg)
    counted()
    task, expect = _task(f"s3://{bucket}/out/a.record", pieces, SPEC)
    row = write_shard(task, cfg)
    got = counted()
    assert server.get(bucket, "out/a.record") == expect
    assert row["crc32c"] == _crc(expect) and row["bytes"] == len(expect)
    # the tail and the whole 6 MiB piece are copied by the server; the tail is downloaded
    # to hash it (not a whole piece: no sidecar CRC), the whole piece is not; the last two
    # small ranges are downloaded and go up as one ordinary (last) part
    assert got.get("s3.copy") == 12 * MIB
    assert got.get("s3.read", 0) <= 6 * MIB + 100_000 + 2 * MIB + SIDECARS
    assert got.get("s3.write") == 100_000 + 2 * MIB
    assert server.uploads_in_progress(bucket) == []

    monkeypatch.setenv("TAR2TF_STORE_COPY", "0")
    task2, _ = _task(f"s3://{bucket}/out/b.record", pieces, SPEC)
    row2 = write_shard(task2, cfg)
    off = counted()
    assert server.get(bucket, "out/b.record") == expect
    assert {**row2, "path": None} == {**row, "path": None}
    assert off.get("s3.read") == len(expect) and off.get("s3.write") == len(expect)


def test_s3_part_copies_download_no_run_of_records(s3, counted):
    """With record files, the 6 MiB tail of a piece is copied by the server and its
    CRC-32C computed from the record file: only the two small ranges that go up as an
    ordinary part are downloaded."""
    server, bucket, cfg = s3
    pieces = _make_pieces(f"s3://{bucket}/work", SIZES, cfg, record=MIB)
    counted()
    task, expect = _task(f"s3://{bucket}/out/a.record", pieces, SPEC)
    row = write_shard(task, cfg)
    got = counted()
    assert server.get(bucket, "out/a.record") == expect and row["crc32c"] == _crc(expect)
    assert got.get("s3.copy") == 12 * MIB
    assert got.get("s3.read", 0) <= 100_000 + 2 * MIB + 4 * SIDECARS


def test_s3_whole_piece_after_a_small_range_is_not_downloaded(s3, counted):
    server, bucket, cfg = s3
    pieces = _make_pieces(f"s3://{bucket}/work", [100_000, 12 * MIB], cfg)
    counted()
    # the small piece's 100 KB take the 12 MiB piece's head into an uploaded part of 5 MiB;
    # the rest of that piece is copied, and its CRC-32C follows from the piece's (sidecar)
    # and the head's, which was downloaded anyway
    task, expect = _task(f"s3://{bucket}/out/w.record", pieces, [(0, 0, None), (1, 0, None)])
    row = write_shard(task, cfg)
    got = counted()
    assert server.get(bucket, "out/w.record") == expect and row["crc32c"] == _crc(expect)
    assert got.get("s3.copy") == len(expect) - 5 * MIB
    assert got.get("s3.read", 0) <= 5 * MIB + SIDECARS
    assert got.get("s3.write") == 5 * MIB


def test_s3_small_shard_goes_the_old_way(s3, counted):
    server, bucket, cfg = s3
    pieces = _make_pieces(f"s3://{bucket}/work", [1000, 2000], cfg)
    counted()
    task, expect = _task(f"s3://{bucket}/out/s.record", pieces, [(0, 0, None), (1, 10, 500)])
    row = write_shard(task, cfg)
    got = counted()
    assert server.get(bucket, "out/s.record") == expect and row["crc32c"] == _crc(expect)
    assert "s3.copy" not in got and got.get("s3.write") == len(expect)


def test_s3_failed_assembly_leaves_no_object_and_no_upload(s3, counted):
    server, bucket, cfg = s3
    pieces = _make_pieces(f"s3://{bucket}/work", SIZES, cfg)
    task, _ = _task(f"s3://{bucket}/out/f.record", pieces, SPEC)
    server.client().delete_object(Bucket=bucket, Key="work/piece-000002.tfrecord")
    with pytest.raises(FileNotFoundError):
        write_shard(task, cfg)
    assert "out/f.record" not in server.keys(bucket)
    assert server.uploads_in_progress(bucket) == []


def test_gcs_compose_moves_no_whole_piece(gcs, counted, monkeypatch):
    bucket = gcs.new_bucket()
    pieces = _make_pieces(f"gs://{bucket}/work", SIZES)
    counted()
    task, expect = _task(f"gs://{bucket}/out/a.record", pieces, SPEC)
    row = write_shard(task)
    got = counted()
    assert gcs.get(bucket, "out/a.record") == expect
    assert row["crc32c"] == _crc(expect) and row["bytes"] == len(expect)
    # whole pieces composed as they are; parts of pieces down and up once
    assert got.get("gs.copy") == WHOLE
    assert got.get("gs.read", 0) <= PARTIAL + SIDECARS
    assert got.get("gs.write", 0) == PARTIAL
    # no temporary object left; the composite's own CRC-32C is the manifest's
    names = sorted(b.name for b in gcs.client().list_blobs(bucket))
    assert [n for n in names if not n.startswith("work/")] == ["out/a.record"]
    blob = gcs.client().bucket(bucket).get_blob("out/a.record")
    assert blob.crc32c and base64.b64decode(blob.crc32c).hex() == row["crc32c"]

    monkeypatch.setenv("TAR2TF_STORE_COPY", "0")
    task2, _ = _task(f"gs://{bucket}/out/b.record", pieces, SPEC)
    row2 = write_shard(task2)
    off = counted()
    assert gcs.get(bucket, "out/b.record") == expect
    assert {**row2, "path": None} == {**row, "path": None}
    # (a read of a piece downloads its first 8 MiB chunk before it seeks: more than 1x)
    assert off.get("gs.read") >= len(expect) and off.get("gs.write") == len(expect)


def test_gcs_compose_of_more_than_32_sources(gcs, counted):
    bucket = gcs.new_bucket()
    pieces = _make_pieces(f"gs://{bucket}/work", [300 + i for i in range(40)])
    counted()
    task, expect = _task(
        f"gs://{bucket}/out/many.record", pieces, [(i, 0, None) for i in range(40)]
    )
    row = write_shard(task)
    assert gcs.get(bucket, "out/many.record") == expect and row["crc32c"] == _crc(expect)
    got = counted()
    assert got.get("gs.copy") == len(expect) and got.get("gs.write", 0) == 0
    names = [b.name for b in gcs.client().list_blobs(bucket) if not b.name.startswith("work/")]
    assert names == ["out/many.record"]
