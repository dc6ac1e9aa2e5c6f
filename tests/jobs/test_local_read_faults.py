"""Local input files that fail while they are read: real OS faults, never fakes.

* An I/O error (EIO) part way through a file: a child process maps the first pages of a
  tar at address 0 and the shard is ``/proc/<child>/mem`` (through a ``.tar`` symlink),
  whose reads return those pages and then fail with EIO where the mapping ends -- what a
  disk with a bad sector does.  Mapping page 0 needs CAP_SYS_RAWIO (root); elsewhere
  those tests skip.  ``/proc/self/mem`` itself fails its first read (offset 0) for anyone.
* A file truncated, rewritten or deleted while it is read: done to a real file between
  two records of the reader.
* The same EIO in PCR inputs: a tar shard, and a file of an ImageFolder.

The OS faults are ``fetch`` rejects naming the file, the byte and the OS error; the
records before the break are kept, the record being read is rejected.  A file already
short when it is opened stays a ``tar`` reject (a truncated archive)."""

import os
import subprocess
import sys
import tarfile

import pytest
from support import shardgen
from support.pcr_fixtures import make_image_folder, requires_jpegtran

from transforms.pcr.convert import convert_unit, list_image_folder
from transforms.record_types import Reject
from transforms.stores.local_read import BUFFER
from transforms.tar.fetch import read_shard

PAGE = os.sysconf("SC_PAGE_SIZE")

# Maps the bytes it reads from stdin at address 0, says "ready", and holds them until its
# stdin closes.  Reading /proc/<pid>/mem from offset 0 then returns them, and EIO at the
# first unmapped page.
_HOLDER = r"""
import ctypes, mmap, sys
n = int.from_bytes(sys.stdin.buffer.read(8), "big")
data = sys.stdin.buffer.read(n)
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
addr = libc.mmap(None, n, mmap.PROT_READ | mmap.PROT_WRITE,
                 mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x10, -1, 0)  # 0x10: MAP_FIXED
if addr:  # NULL means address 0 (a failure is MAP_FAILED, -1)
    print("no", ctypes.get_errno(), flush=True)
    sys.exit(0)
ctypes.memmove(0, data, n)
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def eio_after(tmp_path):
    """``make(data, name)``: a path whose reads give ``data`` (a whole number of pages)
    and then fail with EIO."""
    children = []

    def make(data: bytes, name: str = "s.tar") -> str:
        assert data and len(data) % PAGE == 0
        child = subprocess.Popen(
            [sys.executable, "-c", _HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        children.append(child)
        child.stdin.write(len(data).to_bytes(8, "big") + data)
        child.stdin.flush()
        answer = child.stdout.readline().decode().split()
        if answer != ["ready"]:
            pytest.skip(f"cannot map page 0 for a real EIO (needs CAP_SYS_RAWIO): {answer}")
        path = str(tmp_path / name)
        os.symlink(f"/proc/{child.pid}/mem", path)
        return path

    yield make
    for child in children:
        child.stdin.close()
        child.wait(timeout=30)


def _split(items):
    good = [r["__key__"] for r in items if not isinstance(r, Reject)]
    return good, [r for r in items if isinstance(r, Reject)]


def _tar(members) -> bytes:
    import io

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.size, ti.mtime, ti.mode = len(data), 0, 0o644
            tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


# Record 000000 fills blocks 0-7 (header, 2560 bytes of .jpg, header, .cls) = page 0;
# 000001 likewise page 1 (header case) or, with a 4000-byte .jpg, data across byte 8192.
@pytest.mark.parametrize("where", ["header", "data"])
def test_eio_mid_file_is_a_fetch_reject_naming_file_offset_and_error(eio_after, where):
    jpg1 = 2560 if where == "header" else 4000
    tar = _tar(
        [
            ("000000.jpg", b"a" * 2560),
            ("000000.cls", b"0"),
            ("000001.jpg", b"b" * jpg1),
            ("000001.cls", b"1"),
            ("000002.jpg", b"c" * 2560),
            ("000002.cls", b"2"),
        ]
    )
    cut = 2 * PAGE
    path = eio_after(tar[:cut])
    good, rej = _split(list(read_shard(path)))
    broke = f"read error on local file {path} at byte {cut}: [Errno 5] Input/output error (EIO)"
    if where == "header":  # the record read last may have lost members after it
        assert good == ["000000"]
        assert [(r.key, r.reason) for r in rej] == [
            ("000001", f"{broke}; the read broke after this record"),
            (None, f"{broke}; the read broke after 4 members, the records before them are kept"),
        ]
    else:
        assert good == ["000000"]
        assert [(r.key, r.reason) for r in rej] == [
            ("000001", f"{broke}; member 000001.jpg is incomplete"),
            (
                None,
                f"{broke}; the read broke inside member 000001.jpg, the records before it are kept",
            ),
        ]
    assert [(r.stage, r.counts_record) for r in rej] == [("fetch", True), ("fetch", False)]


def test_eio_inside_a_gzip_stream_is_a_fetch_reject(eio_after):
    import gzip
    import random

    rnd = random.Random(7)
    members = [(f"{i:06d}.jpg", rnd.randbytes(3000)) for i in range(8)]
    data = gzip.compress(_tar(members), compresslevel=1, mtime=0)
    path = eio_after(data[: 3 * PAGE])
    good, rej = _split(list(read_shard(path)))
    assert 0 < len(good) < 7 and good == [f"{i:06d}" for i in range(len(good))]
    assert [(r.key, r.stage) for r in rej] == [(f"{len(good):06d}", "fetch"), (None, "fetch")]
    assert rej[1].reason.startswith(
        f"read error on local file {path} at byte {3 * PAGE}: [Errno 5] "
    )


def test_eio_on_the_first_read_is_one_fetch_reject():
    """/proc/self/mem fails a read at offset 0 (page 0 is not mapped), for any user."""
    assert [(r.key, r.stage, r.reason, r.counts_record) for r in read_shard("/proc/self/mem")] == [
        (
            None,
            "fetch",
            "read error on local file /proc/self/mem at byte 0: [Errno 5] Input/output error (EIO)",
            False,
        )
    ]


@pytest.fixture
def big_shard(tmp_path):
    """15 records of 200 kB, one directory each (so the reader hands each out as soon as
    the next begins); the file's mtime is set in the past so a write is seen."""
    members = []
    for i in range(15):
        members += [(f"{i:03d}/s.jpg", bytes([i]) * 200_000), (f"{i:03d}/s.cls", str(i).encode())]
    path = shardgen.write_tar(str(tmp_path / "big.tar"), members)
    os.utime(path, ns=(10**18, 10**18))
    with tarfile.open(path) as tf:  # the member being read when the reader needs byte BUFFER
        at = [m.name for m in tf.getmembers() if m.offset_data <= BUFFER < m.offset_data + m.size]
    assert len(at) == 1 and at[0].endswith(".jpg")
    return path, os.path.getsize(path), at[0]


@pytest.mark.parametrize("action", ["truncate", "rewrite"])
def test_file_changed_while_read_is_a_fetch_reject(big_shard, action):
    """Truncated (or rewritten in place) after the reader's first 1 MB: the rest could be
    of another version, or end early like a truncated archive when the file on disk may be
    whole again a moment later, so the break is a `fetch` reject, not a `tar` one."""
    path, size, member = big_shard
    it = read_shard(path)
    assert next(it)["__key__"] == "000/s"
    if action == "truncate":
        os.truncate(path, 1_500_000)
        what = f"the file was {size} bytes when opened and is now 1500000 bytes"
    else:
        with open(path, "r+b") as f:
            f.seek(2_000_000)
            f.write(b"other version")
        what = "the file was modified (its modification time changed)"
    good, rej = _split(list(it))
    key = member.rsplit(".", 1)[0]
    assert good == [f"{i:03d}/s" for i in range(1, int(key[:3]))]
    broke = f"file changed while being read: {path} (at byte {BUFFER}: {what})"
    assert [(r.key, r.stage, r.reason) for r in rej] == [
        (key, "fetch", f"{broke}; member {member} is incomplete"),
        (
            None,
            "fetch",
            f"{broke}; the read broke inside member {member}, the records before it are kept",
        ),
    ]


def test_file_deleted_while_read_converts_whole(big_shard):
    """Deleting (or renaming over) a file does not change what an open descriptor reads."""
    path, _, _ = big_shard
    it = read_shard(path)
    first = next(it)
    os.unlink(path)
    good, rej = _split([first] + list(it))
    assert good == [f"{i:03d}/s" for i in range(15)] and rej == []


def test_file_short_before_it_is_opened_is_a_truncated_archive(big_shard):
    path, _, member = big_shard
    os.truncate(path, BUFFER)
    good, rej = _split(list(read_shard(path)))
    assert [(r.key, r.stage) for r in rej] == [(member.rsplit(".", 1)[0], "tar"), (None, "tar")]
    assert rej[1].reason.startswith(f"truncated or corrupt archive inside member {member}")


def _first_page_boundary_in_a_jpg(tar: bytes):
    import io

    with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
        for m in tf.getmembers():
            cut = (m.offset_data // PAGE + 1) * PAGE
            if m.name.endswith(".jpg") and cut < m.offset_data + m.size:
                return cut, m.name
    raise AssertionError("no .jpg spans a page boundary")


@requires_jpegtran
def test_pcr_tar_input_eio_is_a_fetch_reject(eio_after, tmp_path):
    tar = _tar(shardgen.sample_members(0, 8, size=(96, 72)))
    cut, member = _first_page_boundary_in_a_jpg(tar)
    key = member[:-4]
    path = eio_after(tar[:cut])
    info = convert_unit(("tar", 0, path, path), str(tmp_path / "work"))
    before = [f"{i:06d}" for i in range(int(key))]
    assert [im["key"] for im in info["images"]] == before and info["records_read"] == len(
        before
    ) + 1
    broke = f"read error on local file {path} at byte {cut}: [Errno 5] Input/output error (EIO)"
    assert [(r["key"], r["stage"], r["reason"]) for r in info["rejects"]] == [
        (key, "fetch", f"{broke}; member {member} is incomplete"),
        (
            None,
            "fetch",
            f"{broke}; the read broke inside member {member}, the records before it are kept",
        ),
    ]


@requires_jpegtran
def test_pcr_image_folder_file_eio_names_file_and_offset(eio_after, tmp_path):
    root = make_image_folder(
        str(tmp_path / "folder"), {"cat/a.jpg": shardgen.jpeg(1), "dog/c.jpg": shardgen.jpeg(2)}
    )
    big = shardgen.jpeg(3, size=(256, 192))
    assert len(big) > PAGE
    bad = eio_after(big[:PAGE], "folder/dog/b.jpg")
    (unit,), classes, _ = list_image_folder(root)
    info = convert_unit(unit, str(tmp_path / "work"))
    assert [im["key"] for im in info["images"]] == ["cat/a.jpg", "dog/c.jpg"] and info[
        "records_read"
    ] == 3
    assert [(r["key"], r["stage"], r["reason"]) for r in info["rejects"]] == [
        (
            "dog/b.jpg",
            "fetch",
            f"unreadable file: read error on local file {bad} at byte {PAGE}: "
            "[Errno 5] Input/output error (EIO)",
        )
    ]
