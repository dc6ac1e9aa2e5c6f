"""transforms.tar.reader against Python's tarfile and GNU tar: same members, same bytes."""

import glob
import io
import os
import shutil
import subprocess
import tarfile

import pytest

from transforms.tar.reader import TarFormatError, TarStream, _number

COMPAT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "testdata", "compat")
NAMES = [
    "a.jpg",
    "dir/b.cls",
    "ünïcödé/ç.txt",
    "x" * 150 + "/long.jpg",
    "y/" + "z" * 120 + ".seg.png",
    "n01/" + "q" * 90 + ".jpg",
]


def _ours(data: bytes, gz: bool = False):
    stream = io.BufferedReader(io.BytesIO(data))
    if gz:
        import gzip

        stream = gzip.GzipFile(fileobj=stream)
    tar, out = TarStream(stream), []
    while True:
        m = tar.next()
        if m is None:
            return out, tar.ended
        out.append((m.name, m.type if m.isreg() else b"-", tar.read(m) if m.isreg() else None))


def _theirs(data: bytes):
    out = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tf:
        for m in tf:
            out.append(
                (
                    m.name,
                    m.type if m.isreg() else b"-",
                    tf.extractfile(m).read() if m.isreg() else None,
                )
            )
    return out


def _build(fmt, members, dirs=("dir", "x" * 150)):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        for d in dirs:
            ti = tarfile.TarInfo(d)
            ti.type = tarfile.DIRTYPE
            tf.addfile(ti)
        for name, payload in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(payload)
            tf.addfile(ti, io.BytesIO(payload))
        ln = tarfile.TarInfo("link.jpg")
        ln.type, ln.linkname = tarfile.SYMTYPE, "a.jpg"
        tf.addfile(ln)
    return buf.getvalue()


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_same_members_as_tarfile(fmt):
    members = [(n, os.urandom(i * 700 + 1)) for i, n in enumerate(NAMES)] + [("empty.cls", b"")]
    data = _build(fmt, members)
    ours, ended = _ours(data)
    assert ended and ours == _theirs(data)
    assert [m for m in ours if m[2] is not None] == [(n, b"0", p) for n, p in members]


def test_ustar_prefix_field():
    name = "d" * 80 + "/" + "e" * 60 + "/f.jpg"  # > 100 chars: ustar splits it into prefix + name
    data = _build(tarfile.USTAR_FORMAT, [(name, b"abc")], dirs=())
    ours, _ = _ours(data)
    assert ours[0] == (name, b"0", b"abc") and ours == _theirs(data)


def test_pax_global_header_and_size_override():
    buf = io.BytesIO()
    with tarfile.open(
        fileobj=buf, mode="w", format=tarfile.PAX_FORMAT, pax_headers={"comment": "hi"}
    ) as tf:
        ti = tarfile.TarInfo("k.jpg")
        ti.size = 5
        ti.pax_headers = {"path": "renamed/k.jpg", "size": "5"}
        tf.addfile(ti, io.BytesIO(b"12345"))
    ours, _ = _ours(buf.getvalue())
    assert ours == [("renamed/k.jpg", b"0", b"12345")] == _theirs(buf.getvalue())


@pytest.mark.skipif(shutil.which("tar") is None, reason="GNU tar not installed")
def test_gnu_tar_with_sparse_and_long_names(tmp_path):
    src = tmp_path / "src"
    (src / ("L" * 120)).mkdir(parents=True)
    (src / ("L" * 120) / "a.jpg").write_bytes(b"A" * 3000)
    with open(src / "sparse.bin", "wb") as f:
        f.seek(1 << 20)
        f.write(b"end")
    (src / "z.cls").write_bytes(b"7")
    out = tmp_path / "t.tar"
    subprocess.run(
        ["tar", "--sparse", "--format=gnu", "-cf", str(out), "-C", str(src), "."], check=True
    )
    ours, ended = _ours(out.read_bytes())
    got = {n: p for n, t, p in ours if t != b"-"}
    assert ended
    assert got["./" + "L" * 120 + "/a.jpg"] == b"A" * 3000 and got["./z.cls"] == b"7"
    assert [
        n for n, t, _ in ours if n.endswith("sparse.bin")
    ] and "./sparse.bin" not in got  # skipped


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(COMPAT, "*.tar*"))) or ["none"])
def test_compat_vectors(path):
    if path == "none":
        pytest.skip("no compat vectors beside the checkout")
    data = open(path, "rb").read()
    ours, ended = _ours(data, gz=path.endswith(".gz"))
    assert ended and ours and ours == _theirs(data)


def test_end_without_marker_and_damage():
    data = _build(tarfile.GNU_FORMAT, [("a.jpg", b"x" * 600), ("b.jpg", b"y" * 10)], dirs=())
    first_end = 512 + 1024
    ours, ended = _ours(data[:first_end])  # cut at a member boundary
    assert ours == [("a.jpg", b"0", b"x" * 600)] and not ended
    with pytest.raises(TarFormatError, match="inside a tar header"):
        _ours(data[: first_end + 100])
    with pytest.raises(EOFError):
        _ours(data[:700])  # inside a member's data
    bad = bytearray(data)
    bad[first_end + 10] ^= 0xFF  # a name byte of the 2nd header
    with pytest.raises(TarFormatError, match="checksum"):
        _ours(bytes(bad))
    with pytest.raises(TarFormatError, match="empty file"):
        _ours(b"")
    assert _ours(bytes(10240)) == ([], True)  # an empty archive is valid


def test_number_fields():
    assert _number(b"0000644\x00") == 0o644
    assert _number(b"       12 \x00") == 0o12
    assert _number(b"\x80" + (10**12).to_bytes(11, "big")) == 10**12  # GNU base-256
    assert _number(b"\xff" * 12) == -1
    with pytest.raises(TarFormatError):
        _number(b"12z\x00")


@pytest.mark.parametrize("kind", [b"L", b"K", b"x", b"g"])
def test_metadata_header_size_is_bounded(kind):
    """A long-name / pax header is read into memory: a size over MAX_META_SIZE (here a
    base-256 2^50) is a format error, not an attempt to allocate it."""
    from transforms.tar.reader import MAX_META_SIZE

    ti = tarfile.TarInfo("././@LongLink")
    ti.type = kind
    head = bytearray(ti.tobuf(tarfile.GNU_FORMAT)[:512])
    for size in (1 << 50, MAX_META_SIZE + 1):
        head[124:136] = b"\x80" + size.to_bytes(11, "big")
        head[148:156] = b" " * 8
        head[148:156] = b"%06o\0 " % sum(head)
        with pytest.raises(TarFormatError, match=f"oversized metadata header .*: {size} bytes"):
            _ours(bytes(head) + b"x" * 4096)


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_link_targets(fmt):
    """Links report their target: the ustar field, or a GNU 'K' / pax linkpath when long."""
    long_target = "t" * 90 + "/" + "u" * 30 + ".jpg"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        for name, kind, target in [
            ("h.jpg", tarfile.LNKTYPE, "a.jpg"),
            ("s.jpg", tarfile.SYMTYPE, "../b.jpg"),
            ("long.jpg", tarfile.LNKTYPE, long_target),
        ]:
            if fmt == tarfile.USTAR_FORMAT and len(target) > 100:
                continue
            ti = tarfile.TarInfo(name)
            ti.type, ti.linkname = kind, target
            tf.addfile(ti)
    tar, got = TarStream(io.BufferedReader(io.BytesIO(buf.getvalue()))), []
    while (m := tar.next()) is not None:
        got.append((m.name, m.type, m.linkname, m.islink(), m.isreg()))
    expect = [
        ("h.jpg", b"1", "a.jpg", True, False),
        ("s.jpg", b"2", "../b.jpg", True, False),
        ("long.jpg", b"1", long_target, True, False),
    ]
    assert got == expect[: len(got)] and len(got) == (2 if fmt == tarfile.USTAR_FORMAT else 3)
