"""Tar reading of bad input: truncation, damaged headers and gzip, data after the end
marker, huge metadata headers, links, and reads that break mid-object (stage fetch)."""

import gzip
import io
import os
import shutil
import subprocess
import tarfile

import pytest
from support import shardgen

from transforms.record_types import Reject
from transforms.tar.damage import ShardCorrupt
from transforms.tar.grouping import TarStats, iter_records


def _records(path, **kw):
    with open(path, "rb") as f:
        return list(iter_records(f, path, **kw))


def test_duplicate_zero_length_and_oversize(tmp_path):
    members = [
        ("a.jpg", b"1"),
        ("a.cls", b"1"),
        ("b.jpg", b""),
        ("b.cls", b"2"),
        ("c.jpg", b"x" * 50),
        ("c.cls", b"3"),
        ("d.jpg", b"4"),
        ("a.jpg", b"again"),
        ("e.cls", b"5"),
    ]
    members += [(f"f{i:03d}.cls", b"6") for i in range(70)] + [("e.cls", b"far again")]
    p = shardgen.write_tar(str(tmp_path / "bad.tar"), members)
    recs = _records(p, max_member_size=10)
    good = [r["__key__"] for r in recs if not isinstance(r, Reject)]
    bad = {r.key: r.reason for r in recs if isinstance(r, Reject)}
    assert good == ["a", "d", "e"] + [f"f{i:03d}" for i in range(70)]
    assert bad["b"].startswith("zero-length member")
    assert bad["c"].startswith("member too large")
    assert bad["a"].startswith("duplicate key")  # within the window: a repeated member
    assert bad["e"].startswith("duplicate key")  # beyond the window: a key seen again
    assert len([r for r in recs if isinstance(r, Reject)]) == 4
    assert all(r.stage == "tar" and r.counts_record for r in recs if isinstance(r, Reject))


def test_truncated_tar_keeps_earlier_records(tmp_path):
    p = shardgen.write_tar(str(tmp_path / "t.tar"), shardgen.sample_members(0, 6))
    data = open(p, "rb").read()
    cut = tmp_path / "cut.tar"
    # cut in the middle of the 5th record's jpg data
    with tarfile.open(p) as tf:
        m = [x for x in tf.getmembers() if x.name == "000004.jpg"][0]
    cut.write_bytes(data[: m.offset_data + m.size // 2])
    recs = _records(str(cut))
    good = [r["__key__"] for r in recs if not isinstance(r, Reject)]
    rej = [r for r in recs if isinstance(r, Reject)]
    assert good == ["000000", "000001", "000002", "000003"]
    assert [(r.key, r.counts_record) for r in rej] == [("000004", True), (None, False)]
    assert "truncated" in rej[0].reason


@pytest.mark.parametrize("gz", [False, True])
def test_tar_cut_at_a_member_boundary_is_reported(tmp_path, gz):
    """A shard that ends exactly after a member (no end-of-archive blocks) is a truncated
    download: the last record may be incomplete and is rejected, the rest is kept."""
    import gzip as gzip_mod

    p = shardgen.write_tar(str(tmp_path / "t.tar"), shardgen.sample_members(0, 6))
    with tarfile.open(p) as tf:
        m = [x for x in tf.getmembers() if x.name == "000004.jpg"][0]
    end = m.offset_data + -(-m.size // 512) * 512  # just after 000004.jpg's padded data
    data = open(p, "rb").read()[:end]
    cut = tmp_path / ("cut.tar.gz" if gz else "cut.tar")
    cut.write_bytes(gzip_mod.compress(data, mtime=0) if gz else data)
    recs = _records(str(cut))
    good = [r["__key__"] for r in recs if not isinstance(r, Reject)]
    rej = [r for r in recs if isinstance(r, Reject)]
    assert good == ["000000", "000001", "000002", "000003"]
    assert [(r.key, r.counts_record) for r in rej] == [("000004", True), (None, False)]
    assert "end-of-archive marker" in rej[1].reason
    # the intact shard has its marker: no reject
    assert not [r for r in _records(p) if isinstance(r, Reject)]


def test_corrupt_gzip_keeps_earlier_records(tmp_path):
    """A gzip stream that ends early: records before the damage survive intact."""
    p = shardgen.write_tar(str(tmp_path / "t.tar.gz"), shardgen.sample_members(0, 40), gz=True)
    data = open(p, "rb").read()
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(data[: len(data) * 2 // 3])
    recs = _records(str(bad))
    good = [r for r in recs if not isinstance(r, Reject)]
    rej = [r for r in recs if isinstance(r, Reject)]
    assert 5 < len(good) < 40
    assert rej and rej[-1].key is None and not rej[-1].counts_record
    expect = dict(shardgen.sample_members(0, 40))
    for r in good:
        assert r["jpg"] == expect[r["__key__"] + ".jpg"]


def test_gzip_crc_mismatch_is_reported(tmp_path):
    """Damage deflate decodes without error is still caught by the gzip CRC trailer."""
    from transforms.tar.damage import ShardCorrupt

    p = shardgen.write_tar(str(tmp_path / "t.tar.gz"), shardgen.sample_members(0, 10), gz=True)
    data = bytearray(open(p, "rb").read())
    start = len(data) * 2 // 3
    data[start : start + 4096] = bytes(4096)  # decodes without a deflate error...
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(bytes(data))
    recs = _records(str(bad))
    assert isinstance(recs[-1], ShardCorrupt) and "CRC" in recs[-1].reason  # ...but not the CRC


@pytest.mark.parametrize(
    "content", [b"", b"this is not a tar file at all" * 40, b"\x1f\x8b\x08garbage" * 10]
)
def test_not_a_tar(tmp_path, content):
    p = tmp_path / "x.tar"
    p.write_bytes(content)
    recs = _records(str(p))
    assert len(recs) == 1 and isinstance(recs[0], Reject)
    assert recs[0].key is None and not recs[0].counts_record
    assert recs[0].reason.startswith(("not a tar archive", "truncated"))


def test_streaming_reads_members_incrementally(tmp_path):
    """The reader never needs the whole shard: it works from a non-seekable pipe."""
    p = shardgen.write_tar(str(tmp_path / "t.tar"), shardgen.sample_members(0, 20))

    class Pipe(io.RawIOBase):
        def __init__(self, data):
            self.data, self.pos, self.max_read = data, 0, 0

        def readable(self):
            return True

        def readinto(self, b):
            n = min(len(b), len(self.data) - self.pos, 65536)
            b[:n] = self.data[self.pos : self.pos + n]
            self.pos += n
            self.max_read = max(self.max_read, n)
            return n

    pipe = Pipe(open(p, "rb").read())
    recs = list(iter_records(io.BufferedReader(pipe), p))
    assert len(recs) == 20 and pipe.max_read <= 65536


def test_damaged_header_keeps_earlier_records(tmp_path):
    """A header whose checksum fails mid-archive: earlier records survive, the record read
    last is rejected (it may have lost members), and a shard-level reject says where."""
    p = shardgen.write_tar(str(tmp_path / "t.tar"), shardgen.sample_members(0, 6))
    with tarfile.open(p) as tf:
        m = [x for x in tf.getmembers() if x.name == "000003.jpg"][0]
    data = bytearray(open(p, "rb").read())
    data[m.offset + 5] ^= 0x5A  # a byte of 000003.jpg's name: its header checksum fails
    bad = tmp_path / "bad.tar"
    bad.write_bytes(bytes(data))
    recs = _records(str(bad))
    good = [r["__key__"] for r in recs if not isinstance(r, Reject)]
    rej = [r for r in recs if isinstance(r, Reject)]
    assert good == ["000000", "000001"]
    assert [(r.key, r.counts_record) for r in rej] == [("000002", True), (None, False)]
    assert "checksum" in rej[1].reason and "after 6 members" in rej[1].reason


def test_archive_without_members_is_empty_not_an_error(tmp_path):
    p = tmp_path / "empty.tar"
    with tarfile.open(p, "w"):
        pass
    assert _records(str(p)) == []


def _member_offsets(data: bytes):
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        return {m.name: (m.offset, m.offset_data) for m in tf}


def _tar_bytes(members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def _split(items):
    return (
        [r["__key__"] for r in items if not isinstance(r, Reject)],
        [r for r in items if isinstance(r, Reject)],
    )


def test_multimember_gzip_crc_failure_inside_a_member_is_shard_corrupt(tmp_path):
    """A multi-member gzip (bgzip, cat a.gz b.gz) whose first gzip member ends inside a tar
    member's data and fails its CRC there: found while reading that tar member, and, as
    when found at a header, the whole shard is unreliable (ShardCorrupt)."""
    tar = open(
        shardgen.write_tar(str(tmp_path / "t.tar"), shardgen.sample_members(0, 4)), "rb"
    ).read()
    offs = _member_offsets(tar)
    split = offs["000002.jpg"][1] + 300  # inside 000002.jpg's data
    first = bytearray(
        gzip.compress(tar[:split], compresslevel=0, mtime=0)
    )  # stored blocks: bytes as is
    first[10 + 5 + offs["000000.jpg"][1] + 200] ^= 0xFF  # damage 000000.jpg; deflate cannot notice
    recs = list(
        iter_records(io.BytesIO(bytes(first) + gzip.compress(tar[split:], mtime=0)), "s.tar.gz")
    )
    good, rej = _split(recs)
    assert good == ["000000", "000001"]  # taken back by the consumer (ShardCorrupt)
    assert [(r.key, r.counts_record) for r in rej] == [("000002", True), (None, False)]
    assert "CRC check failed" in rej[0].reason
    assert isinstance(rej[1], ShardCorrupt)
    assert rej[1].reason.startswith("corrupt gzip: ") and "CRC check failed" in rej[1].reason


@pytest.mark.parametrize("gz", [False, True])
def test_data_after_the_end_of_archive_is_reported(gz):
    """cat a.tar b.tar: like GNU tar, reading stops at a's end-of-archive marker, but b's
    bytes are reported by a shard-level reject instead of vanishing; zero padding is not."""
    bufs = [_tar_bytes(shardgen.sample_members(start, 2)) for start in (0, 2)]
    pack = (lambda d: gzip.compress(d, mtime=0)) if gz else (lambda d: d)
    good, rej = _split(list(iter_records(io.BytesIO(pack(bufs[0]) + pack(bufs[1])), "c.tar")))
    assert good == ["000000", "000001"]
    assert [(r.key, r.counts_record) for r in rej] == [(None, False)]
    assert f"ignored {len(bufs[1])} bytes of data after the end-of-archive marker" in rej[0].reason
    assert f"from offset {len(bufs[0])}" in rej[0].reason
    # zero padding after the marker (tar's records, a block-aligned copy) is normal
    good, rej = _split(list(iter_records(io.BytesIO(pack(bufs[0] + bytes(100_000))), "p.tar")))
    assert good == ["000000", "000001"] and rej == []


def test_gzip_trailing_garbage_keeps_crc_checked_records(tmp_path):
    """gzip -d: "decompression OK, trailing garbage ignored".  The records' gzip member
    passed its CRC check before the garbage was found: they are kept, a shard-level reject
    notes the garbage.  A CRC mismatch before the same garbage still condemns the shard."""
    tar = open(
        shardgen.write_tar(str(tmp_path / "t.tar"), shardgen.sample_members(0, 3)), "rb"
    ).read()
    gz = gzip.compress(tar, mtime=0)
    recs = list(iter_records(io.BytesIO(gz + b"junk\n"), "g.tar.gz"))
    good, rej = _split(recs)
    assert good == ["000000", "000001", "000002"]
    assert [(r.key, r.counts_record, type(r)) for r in rej] == [(None, False, Reject)]
    assert rej[0].reason.startswith("trailing garbage after the gzip stream ignored")
    assert "b'ju'" in rej[0].reason
    bad_crc = bytearray(gz)
    bad_crc[-8] ^= 0xFF  # the CRC32 field of the trailer
    rej = [
        r
        for r in iter_records(io.BytesIO(bytes(bad_crc) + b"junk\n"), "g.tar.gz")
        if isinstance(r, Reject)
    ]
    assert (
        len(rej) == 1 and isinstance(rej[0], ShardCorrupt) and "CRC check failed" in rej[0].reason
    )


def _meta_header(kind: bytes, size: int) -> bytes:
    """A GNU long-name / pax header block whose (base-256) size field claims ``size`` bytes."""
    ti = tarfile.TarInfo("././@LongLink")
    ti.type = kind
    head = bytearray(ti.tobuf(tarfile.GNU_FORMAT)[:512])
    head[124:136] = b"\x80" + size.to_bytes(11, "big")
    head[148:156] = b" " * 8
    head[148:156] = b"%06o\0 " % sum(head)
    return bytes(head)


@pytest.mark.parametrize(
    "kind", [tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE]
)
def test_huge_metadata_header_is_a_shard_reject_not_a_crash(tmp_path, kind):
    """A 2^50-byte long name / pax header would be read into memory (MemoryError ends the
    job): it is a damaged archive like any other, records before it are kept."""
    tar = open(
        shardgen.write_tar(str(tmp_path / "t.tar"), shardgen.sample_members(0, 3)), "rb"
    ).read()
    end = _member_offsets(tar)["000002.cls"][1] + 512  # after the last member's one data block
    data = tar[:end] + _meta_header(kind, 1 << 50) + b"x" * 4096
    good, rej = _split(list(iter_records(io.BytesIO(data), "h.tar")))
    assert good == ["000000", "000001"]
    assert [(r.key, r.counts_record) for r in rej] == [("000002", True), (None, False)]
    assert rej[1].reason.startswith(
        "truncated or corrupt archive after 6 members: TarFormatError: oversized metadata header"
    )


def test_hard_link_member_rejects_its_record():
    """GNU tar stores a hard link's second name as a link entry without data: the record
    would lack that member, so it is rejected with the link named; others are kept."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for name, data in [
            ("x/0.jpg", b"jpeg bytes"),
            ("x/0.cls", b"0"),
            ("x/1.jpg", None),
            ("x/1.cls", b"1"),
            ("x/2.jpg", b"more jpeg"),
            ("x/2.cls", b"2"),
            ("x/" + "L" * 120 + ".jpg", None),
        ]:
            ti = tarfile.TarInfo(name)
            if data is None:  # as GNU tar writes the second name of a hard link
                ti.type, ti.linkname = (
                    tarfile.LNKTYPE,
                    "x/0.jpg" if "1" in name else "x/2" + "/" * 100 + "2.jpg",
                )
            else:
                ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data or b""))
    stats = TarStats()
    good, rej = _split(list(iter_records(io.BytesIO(buf.getvalue()), "l.tar", stats=stats)))
    assert good == ["x/0", "x/2"]
    assert [(r.key, r.counts_record) for r in rej] == [("x/1", True), ("x/" + "L" * 120, True)]
    assert rej[0].reason == "hard link member x/1.jpg -> x/0.jpg: links are not followed"
    assert rej[1].reason.endswith(
        " -> x/2" + "/" * 100 + "2.jpg: links are not followed"
    )  # GNU 'K' long link
    assert stats.members == 7 and stats.skipped_members == 0


@pytest.mark.skipif(shutil.which("tar") is None, reason="GNU tar not installed")
def test_hard_link_written_by_gnu_tar(tmp_path):
    src = tmp_path / "src" / "x"
    src.mkdir(parents=True)
    for i in range(3):
        (src / f"{i}.cls").write_bytes(str(i).encode())
    (src / "0.jpg").write_bytes(shardgen.jpeg(0))
    os.link(src / "0.jpg", src / "1.jpg")  # the same image under two records
    (src / "2.jpg").write_bytes(shardgen.jpeg(2))
    p = str(tmp_path / "gnu.tar")
    subprocess.run(
        ["tar", "--sort=name", "--format=gnu", "-cf", p, "-C", str(tmp_path / "src"), "x"],
        check=True,
    )
    good, rej = _split(_records(p))
    assert good == ["x/0", "x/2"]
    assert [(r.key, r.reason) for r in rej] == [
        ("x/1", "hard link member x/1.jpg -> x/0.jpg: links are not followed")
    ]


class _ChangesAt(io.RawIOBase):
    """``data`` up to byte ``cut``, then what a store raises when the object changed
    between two requests of the read (transforms.stores.ais's version check)."""

    def __init__(self, data: bytes, cut: int):
        self.data, self.cut, self.pos = data, cut, 0

    def readable(self):
        return True

    def readinto(self, b):
        from transforms.stores.retry import ObjectChangedError

        if self.pos >= self.cut:
            raise ObjectChangedError("ais://b/s.tar", f"at byte {self.pos}: Ais-Version 1 -> 2")
        n = min(len(b), self.cut - self.pos)
        b[:n] = self.data[self.pos : self.pos + n]
        self.pos += n
        return n


@pytest.mark.parametrize("where", ["start", "header", "data"])
def test_object_changed_mid_read_is_a_fetch_reject(where):
    """The store failing a read (the object changed) is no damage in the archive: the
    record being read and the shard are `fetch` rejects naming the object, never `tar`
    ones ("not a tar archive", "truncated shard"); the records before the break stand."""
    tar = _tar_bytes(shardgen.sample_members(0, 4))
    offs = _member_offsets(tar)
    cut = {"start": 0, "header": offs["000002.jpg"][0] + 100, "data": offs["000002.jpg"][1] + 100}[
        where
    ]
    good, rej = _split(list(iter_records(_ChangesAt(tar, cut), "ais://b/s.tar")))
    # at a header, the record read last may have lost members that came after it
    lost = {"start": [], "header": ["000001"], "data": ["000002"]}[where]
    assert good == ["000000", "000001"][: {"start": 0, "header": 1, "data": 2}[where]]
    assert [r.stage for r in rej] == ["fetch"] * len(rej)
    assert [(r.key, r.counts_record) for r in rej] == [(k, True) for k in lost] + [(None, False)]
    for r in rej:
        assert r.reason.startswith("object changed while being read: ais://b/s.tar (at byte "), (
            r.reason
        )
        assert "Ais-Version 1 -> 2" in r.reason
    if where == "data":
        assert rej[0].reason.endswith("member 000002.jpg is incomplete")


@pytest.mark.parametrize("gz", [False, True])
def test_object_changed_after_the_end_marker(gz):
    """Broken while reading the padding after the end-of-archive marker: a plain tar's
    records are complete and kept (a `fetch` note); a gzip's trailer, whose CRC vouches for
    them, was not reached, so the shard is unverified (ShardCorrupt, stage `fetch`)."""
    tar = _tar_bytes(shardgen.sample_members(0, 2)) + bytes(100_000)
    data = gzip.compress(tar, compresslevel=0, mtime=0) if gz else tar
    good, rej = _split(list(iter_records(_ChangesAt(data, len(data) - 1000), "ais://b/s.tar")))
    assert good == ["000000", "000001"]
    assert [(r.key, r.stage, type(r)) for r in rej] == [
        (None, "fetch", ShardCorrupt if gz else Reject)
    ]
    assert rej[0].reason.startswith("object changed while being read: ais://b/s.tar (at byte ")
