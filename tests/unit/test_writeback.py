"""Writeback started while a final shard fills (transforms/stores/writeback.py): the calls the
shard writers make, and what the kernel call accepts."""

import os
import sys

import pytest

from pipelines.job.kinds.tfrecord import shardfile
from transforms.stores import writeback
from transforms.tfrecord import digests


@pytest.fixture
def calls(monkeypatch):
    """Every ``writeback.start`` call, as (path, offset, length, accepted), passed on to
    the real call."""
    seen = []
    real = writeback.start

    def spy(fd, offset, length):
        ok = real(fd, offset, length)
        seen.append(
            (
                os.readlink(f"/proc/self/fd/{fd}") if sys.platform.startswith("linux") else fd,
                offset,
                length,
                ok,
            )
        )
        return ok

    monkeypatch.setattr(writeback, "start", spy)
    return seen


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux's")
def test_the_kernel_accepts_a_range_of_a_regular_file_and_the_bytes_stay(tmp_path):
    path = tmp_path / "f.bin"
    data = os.urandom(3 << 20)
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        assert writeback.start(f.fileno(), 0, len(data)) is True
        assert writeback.start(f.fileno(), 1 << 20, 1 << 20) is True
    assert path.read_bytes() == data


def test_what_cannot_be_written_back_is_refused_quietly(tmp_path):
    r, w = os.pipe()
    try:
        assert writeback.start(w, 0, 100) is False  # a pipe: ESPIPE, no exception
    finally:
        os.close(r), os.close(w)
    with open(tmp_path / "g.bin", "wb") as f:
        assert writeback.start(f.fileno(), 0, 0) is False  # nothing to write


def test_elsewhere_than_linux_nothing_is_called(tmp_path, monkeypatch):
    monkeypatch.setattr(writeback, "_call", None)  # loaded again, as on a fresh import
    monkeypatch.setattr(sys, "platform", "darwin")
    with open(tmp_path / "h.bin", "wb") as f:
        f.write(b"x" * 10)
        f.flush()
        assert writeback.start(f.fileno(), 0, 10) is False
    assert writeback._call is False


def _frames(n, size):
    return [bytes([i % 251]) * size for i in range(n)]


def test_a_local_shard_starts_writeback_of_each_chunk_it_appends(tmp_path, monkeypatch, calls):
    """Appended and copied bytes reach the kernel in consecutive ranges of at least the
    chunk size; the shard's bytes and CRC are those of a plain write."""
    monkeypatch.setattr(shardfile, "WRITEBACK_CHUNK", 10_000)
    out = str(tmp_path / "shard-1.record")
    frames = _frames(40, 1_000)
    src = tmp_path / "piece.bin"
    src.write_bytes(b"".join(frames))
    shard = shardfile.ShardFile(out)
    for i in range(0, 21, 3):  # runs of 3 frames, as the stream writes a piece's run
        shard.write(frames[i : i + 3], [1_000] * 3)
    with open(src, "rb") as f:
        shard.copy(f, 21_000, 19_000, [1_000] * 19)
    temp = shard.local_path
    row = shard.close()
    assert open(out, "rb").read() == src.read_bytes()
    assert row["crc32c"] == digests.hexdigest(_crc(open(out, "rb").read()))
    mine = [(o, n) for p, o, n, _ in calls if p == temp]
    assert len(mine) == len(calls) >= 2
    assert mine[0][0] == 0
    assert all(a[0] + a[1] == b[0] for a, b in zip(mine, mine[1:])), mine  # consecutive
    assert all(n >= 10_000 for _, n in mine)
    assert mine[-1][0] + mine[-1][1] > row["bytes"] - 10_000  # less than a chunk left to fsync
    if sys.platform.startswith("linux"):
        assert all(ok for *_, ok in calls)


@pytest.mark.slow
def test_a_worker_starts_writeback_of_every_run_it_writes(tmp_path, calls):
    from support.shard_stream_fixtures import piece_summary

    from pipelines.inprocess.worker import write_runs
    from pipelines.job.kinds.tfrecord.piece import ConvertedPiece

    frames = _frames(6, 500)
    path = tmp_path / "shard.tmp"
    path.write_bytes(b"\0" * 4_000)
    piece = ConvertedPiece(piece_summary(0, str(tmp_path / "unused"), 6), [500] * 6, frames)
    crcs = write_runs([(str(path), 1_000, 0, 2), (str(path), 3_000, 4, 6)], piece)
    assert [(o, n) for _, o, n, _ in calls] == [(1_000, 1_000), (3_000, 1_000)]
    assert crcs == [
        digests.crc32c_of(_crc(b"".join(frames[0:2]))),
        digests.crc32c_of(_crc(b"".join(frames[4:6]))),
    ]
    assert path.read_bytes()[1_000:2_000] == b"".join(frames[0:2])


def _crc(data):
    d = digests.new("crc32c")
    d.update(data)
    return d
