"""Memory is bounded by the limits, whatever the input (docs/bad-input.md, "Memory"): a
record over --max-record-size is a reject, the grouping window holds at most that many
bytes, and the peak of a job on hostile shards stays within the documented bound."""

import functools
import gzip
import io
import json
import os
import subprocess
import sys
import tarfile

import pytest
from support import shardgen
from support.cli_fixtures import ROOT

from transforms.record_types import KEY, is_reject
from transforms.tar.grouping import TarStats, iter_records

MB = 1000 * 1000
MEMBER = 4 * MB  # --max-member-size of the job tests
RECORD = 16 * MB  # --max-record-size of the job tests
# docs/bad-input.md: per converting worker, about 3 x --max-record-size + 100 MB above the
# process's own footprint (the reader's window, the record converting and its frame, and
# the output pieces held in memory before they spill to disk)
BOUND = 3 * RECORD + 100 * MB


def _tar(members):
    """``members``: (name, size or bytes); a size becomes that many zeros."""
    return shardgen.tar_bytes(
        (name, bytes(data) if isinstance(data, int) else data) for name, data in members
    )


@functools.lru_cache(maxsize=None)
def _gz_zeros(n: int) -> bytes:
    return gzip.compress(bytes(n), 9, mtime=0)


def _tgz(members) -> bytes:
    """A .tar.gz of ``members`` (name, size) full of zeros, as a multi-member gzip stream
    (what ``cat a.gz b.gz`` makes, and every gzip reader reads): each member's zeros are
    compressed once, so hundreds of MB of members cost no time to make."""
    parts = []
    for name, size in members:
        ti = tarfile.TarInfo(name)
        ti.size, ti.mtime = size, 0
        parts.append(gzip.compress(ti.tobuf(tarfile.GNU_FORMAT), 9, mtime=0))
        parts.append(_gz_zeros(size + -size % 512))
    parts.append(_gz_zeros(2 * 512))  # the end-of-archive marker
    return b"".join(parts)


def _read(members, **kw):
    stats = TarStats()
    out = list(iter_records(io.BytesIO(_tar(members)), "s.tar", stats=stats, **kw))
    return out, stats


def _summary(out):
    return [f"reject {o.key}: {o.reason}" if is_reject(o) else o[KEY] for o in out]


def test_record_over_the_limit_is_rejected_without_reading_the_rest():
    members = [("a.x", 10), ("r.1", 40), ("r.2", 40), ("r.3", 40), ("r.4", 40), ("z.x", 10)]
    out, stats = _read(members, max_record_size=100)
    assert _summary(out) == [
        "a",
        "reject r: record too large: 'r' is over max-record-size 100 bytes with member r.3 "
        "(80 + 40 bytes)",
        "z",
    ]
    # r.3 and r.4 are skipped, not read: the bytes read are a, r.1, r.2 and z
    assert stats.member_bytes == 10 + 40 + 40 + 10
    # a record exactly at the limit is kept
    out, _ = _read([("r.1", 60), ("r.2", 40)], max_record_size=100)
    assert _summary(out) == ["r"] and len(out[0]["1"]) + len(out[0]["2"]) == 100


def test_window_is_bounded_in_bytes():
    """Members of open records that would hold more than max_record_size together make the
    oldest other records leave the window (a later member of theirs is then a duplicate),
    while a window of small records still groups an unsorted directory."""
    interleaved = [(f"r{i}.a", 30) for i in range(4)] + [(f"r{i}.b", 1) for i in range(4)]
    out, _ = _read(interleaved, max_record_size=1000)
    assert _summary(out) == ["r0", "r1", "r2", "r3"] and all(len(o) == 4 for o in out)
    out, _ = _read(interleaved, max_record_size=70)
    # r0.a + r1.a hold 60 bytes: r2.a (30) would go over 70, so r0 leaves, then r1 for r3.a;
    # r0.b and r1.b come after their records left
    assert _summary(out) == [
        "r0",
        "r1",
        "reject r0: duplicate key: 'r0' appears again, not with its first members",
        "reject r1: duplicate key: 'r1' appears again, not with its first members",
        "r2",
        "r3",
    ]
    assert [sorted(k for k in o if not k.startswith("__")) for o in out if not is_reject(o)] == [
        ["a"],
        ["a"],
        ["a", "b"],
        ["a", "b"],
    ]


def test_a_rejected_record_drops_its_bytes():
    """A record found bad (here a zero-length member after a large one) stops holding its
    bytes at once: the window has room for the next record without evicting anything."""
    out, _ = _read(
        [("r.big", 60), ("r.empty", b""), ("s.a", 60), ("r.more", 10), ("s.b", 1)],
        max_record_size=100,
    )
    assert _summary(out) == ["reject r: zero-length member: r.empty", "s"]
    assert sorted(out[1]) == ["__key__", "__shard__", "a", "b"]


def _peak_rss(tmp_path, src, *flags):
    """Peak RSS (bytes) of a CLI job on ``src`` in a process of its own, on one thread."""
    out = tmp_path / f"o-{os.path.basename(src)}" / "t-{}.record"
    p = subprocess.Popen(
        [sys.executable, "-m", "launch.cli", "convert", src, "-o", str(out), "--no-progress"]
        + ["--runner", "local", "--processes", "0", "--max-rejects", "1000000", *flags],
        cwd=ROOT,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _, status, usage = os.wait4(p.pid, 0)
    finally:
        err = p.stderr.read().decode()
        p.stderr.close()
    assert os.waitstatus_to_exitcode(status) in (0, 3), err
    manifest = json.loads((out.parent / "t.record.manifest.json").read_text())
    return usage.ru_maxrss * 1024, manifest["totals"]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """Small .tar.gz files that hold hundreds of MB of members at the member limit."""
    d = tmp_path_factory.mktemp("hostile")
    shards = {
        # the report's case: one record of many zero members, each within the member limit
        "one-record": [(f"r.{i:03d}", MEMBER) for i in range(40)],
        # many records, each at the record limit
        "full-records": [(f"r{r:02d}.{i}", MEMBER) for r in range(8) for i in range(4)],
        # a directory written unsorted: every record is open when its second member comes
        "open-records": [(f"r{r:02d}.a", MEMBER) for r in range(45)]
        + [(f"r{r:02d}.b", 1) for r in range(45)],
        "tiny": [("r.x", 1)],
    }
    paths = {}
    for name, members in shards.items():
        paths[name] = str(d / f"{name}.tar.gz")
        with open(paths[name], "wb") as f:
            f.write(_tgz(members))
        assert os.path.getsize(paths[name]) < 400 * 1000  # hundreds of MB of members
    return paths


@pytest.mark.slow
def test_peak_memory_of_hostile_shards_is_within_the_documented_bound(tmp_path, hostile):
    """Before, the one-record shard (0.2 MB of gzip) took ~300 MB above the footprint of a
    job on a one-byte shard, the open records ~180 MB (the grouping window's 64 records)."""
    limits = ("--max-member-size", str(MEMBER), "--max-record-size", str(RECORD))
    base, _ = _peak_rss(tmp_path, hostile["tiny"], *limits)
    peaks = {}
    for name in ("one-record", "full-records", "open-records"):
        peak, totals = _peak_rss(tmp_path, hostile[name], *limits)
        peaks[name] = (peak - base) / MB
        assert totals["records_read"] == totals["records_written"] + totals["records_rejected"]
        if name == "one-record":
            assert totals["records_written"] == 0 and totals["records_rejected"] == 1
        if name == "full-records":
            assert totals["records_written"] == 8
    assert all(p <= BOUND / MB for p in peaks.values()), (peaks, base / MB)


def test_default_record_limit_is_at_least_the_member_limit(monkeypatch):
    """With no record limit given, a job that allows large members allows a record of one."""
    from transforms.tar import grouping

    monkeypatch.setattr(grouping, "DEFAULT_MAX_RECORD_SIZE", 100)
    out, _ = _read([("r.1", 600), ("r.2", 300), ("s.1", 600), ("s.2", 600)], max_member_size=1000)
    assert _summary(out) == [
        "r",
        "reject s: record too large: 's' is over max-record-size 1000 bytes with member s.2 "
        "(600 + 600 bytes)",
    ]
    out, _ = _read([("r.1", 60), ("r.2", 60)], max_member_size=50)
    assert _summary(out) == ["reject r: member too large: r.1 is 60 bytes > max-member-size 50"]
    out, _ = _read([("r.1", 40), ("r.2", 40), ("r.3", 40)], max_member_size=50)
    assert _summary(out)[0].startswith(
        "reject r: record too large: 'r' is over max-record-size 100"
    )
