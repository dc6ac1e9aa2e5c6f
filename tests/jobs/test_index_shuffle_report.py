"""Long-job operations on the local runner: DALI index, seeded global shuffle, the final
report (counters vs manifest), and the live progress bar (TTY only)."""

import collections
import hashlib
import json
import os
import pty
import subprocess
import sys

import pytest
from support import shardgen
from support.cli_fixtures import DEMO_SOURCES, ROOT, cli, output_digest

from pipelines.beam.convert import convert
from pipelines.job import counts, report
from pipelines.job.kinds.tfrecord.config import ConvertConfig
from pipelines.verify import verify
from transforms.tfrecord.example import parse_example
from transforms.tfrecord.framing import FRAME_OVERHEAD, masked_crc32c, read_records, record_index


def test_dali_index_offsets_read_back_records(demo_output):
    out, manifest = demo_output
    m = json.load(open(manifest))
    assert m["options"]["dali_index"] is True
    for row in m["shards"]:
        lines = open(row["path"] + ".idx").read().splitlines()
        assert len(lines) == row["records"]
        data = open(row["path"], "rb").read()
        expect_offset = 0
        keys = []
        for line in lines:
            offset, size = (int(x) for x in line.split())
            assert offset == expect_offset  # contiguous, in file order
            rec = data[offset : offset + size]
            length = int.from_bytes(rec[:8], "little")
            assert size == length + FRAME_OVERHEAD
            assert int.from_bytes(rec[8:12], "little") == masked_crc32c(rec[:8])
            payload = rec[12 : 12 + length]
            assert int.from_bytes(rec[12 + length : 16 + length], "little") == masked_crc32c(
                payload
            )
            keys.append(parse_example(payload)["__key__"])
            expect_offset += size
        assert expect_offset == len(data) == row["bytes"]
        assert keys == [parse_example(p)["__key__"] for p in read_records(row["path"])]


@pytest.fixture(scope="module")
def small_shards(tmp_path_factory):
    d = tmp_path_factory.mktemp("shuffle-in")
    shardgen.make_shards(str(d), 4, 6, size=(32, 24))
    return str(d / "train-{0000..0003}.tar")


def _payloads(out_dir):
    m = json.load(open(os.path.join(out_dir, "t.record.manifest.json")))
    return [[p for p in read_records(s["path"])] for s in m["shards"]]


def _keys(shards):
    return [parse_example(p)["__key__"] for shard in shards for p in shard]


@pytest.mark.slow
def test_shuffle_is_a_deterministic_permutation(small_shards, tmp_path):
    common = [
        "--records-per-shard",
        "5",
        "--type-map",
        "cls:int64",
        "--dali-index",
        "--no-progress",
    ]
    plain = tmp_path / "plain"
    convert(
        ConvertConfig(
            sources=small_shards,
            output=str(plain / "t-{}.record"),
            records_per_shard=5,
            type_map={"cls": "int64"},
        )
    )
    runs = {}
    for name, seed, extra in [
        ("a", 1, ["--direct_running_mode=in_memory", "--direct_num_workers=1"]),
        ("b", 1, ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]),
        ("c", 2, []),
    ]:
        p = cli(
            "convert",
            small_shards,
            "--output",
            str(tmp_path / name / "t-{}.record"),
            "--shuffle",
            "--seed",
            str(seed),
            *common,
            *extra,
        )
        assert p.returncode == 0, p.stderr
        runs[name] = _payloads(str(tmp_path / name))
    base = _payloads(str(plain))
    # same seed: byte-identical whatever the worker count and running mode
    da, db = output_digest(str(tmp_path / "a")), output_digest(str(tmp_path / "b"))
    assert da == db and any(k.endswith(".idx") for k in da)
    # a permutation: the same serialized records, none lost, none duplicated
    flat = lambda shards: collections.Counter(
        hashlib.sha256(p).hexdigest() for s in shards for p in s
    )
    assert flat(runs["a"]) == flat(base) == flat(runs["c"])
    assert sum(flat(base).values()) == 24 and len(flat(base)) == 24
    # ... in a different order, and a different one for another seed
    assert _keys(runs["a"]) != _keys(base) and _keys(runs["c"]) != _keys(runs["a"])
    assert sorted(_keys(runs["a"])) == _keys(base)
    # global, not per shard: records of the first input shard end up in several output shards
    first_input = set(_keys(base)[:6])
    assert sum(1 for s in runs["a"] if first_input & set(_keys([s]))) >= 2
    assert [len(s) for s in runs["a"]] == [5, 5, 5, 5, 4]
    # shuffled output verifies, DALI index included
    rep = verify(str(tmp_path / "a" / "t.record.manifest.json"))
    assert rep.ok, rep.text()
    m = json.load(open(tmp_path / "a" / "t.record.manifest.json"))
    for s in m["shards"]:
        with open(s["path"], "rb") as f:
            assert [f"{o} {n}" for o, n in record_index(f)] == open(
                s["path"] + ".idx"
            ).read().split("\n")[:-1]


def test_report_counters_agree_with_manifest(tmp_path):
    d = tmp_path / "in"
    paths = shardgen.make_shards(str(d), 3, 5, size=(32, 24))
    data = open(paths[1], "rb").read()
    open(paths[1], "wb").write(data[: len(data) // 2 + 700])  # truncated inside a member
    open(d / "train-0003.tar", "wb").write(b"this is not a tar")  # a shard-level reject
    summary = tmp_path / "summary.json"
    p = cli(
        "convert",
        str(d / "train-{0000..0004}.tar"),
        "--output",
        str(tmp_path / "o/t-{}.record"),
        "--records-per-shard",
        "4",
        "--type-map",
        "cls:int64",
        "--max-rejects",
        "100",
        "--summary-json",
        str(summary),
    )
    assert p.returncode == 0, p.stderr
    assert "%|" not in p.stderr  # no bar: stderr is not a TTY
    rep = json.load(open(summary))
    t, c = rep["totals"], rep["counters"]
    assert rep["counters_reported"] and rep["counter_mismatches"] == []
    for k in counts.COMPARED:
        assert c.get(k, 0) == t[k], k
    assert (
        t["records_rejected"] >= 1 and t["shards_rejected"] >= 2
    )  # truncated record + missing + not-a-tar
    assert t["records_read"] == t["records_written"] + t["records_rejected"] + t["records_filtered"]
    assert (
        sum(v for k, v in c.items() if k.startswith("reject:")) + 1
        == json.load(open(rep["manifest"]))["rejects"]["count"]
    )  # + the listing reject (missing shard)
    line = (
        f"records: {t['records_read']} read, {t['records_written']} written, "
        f"{t['records_rejected']} rejected, {t['records_filtered']} filtered"
    )
    assert line in p.stderr and f"-> {t['shards']} output" in p.stderr
    # the report's cross-check does fire when they differ
    assert report.mismatches(dict(c, records_written=c["records_written"] + 1), t) == [
        f"records_written: counters say {t['records_written'] + 1}, manifest says {t['records_written']}"
    ]


@pytest.mark.slow
def test_progress_bar_on_a_tty(tmp_path):
    """Multi-threaded local run under a pseudo-terminal that reports 0 columns: the bar
    shows shards done/total, records and MB/s, and ends at 100%."""
    master, slave = pty.openpty()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "launch.cli",
            "convert",
            DEMO_SOURCES,
            "--output",
            str(tmp_path / "o/d-{}.record"),
            "--direct_num_workers=2",
        ],
        stdout=subprocess.PIPE,
        stderr=slave,
        cwd=ROOT,
        env=env,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert proc.wait(timeout=300) == 0
    os.close(master)
    text = b"".join(chunks).decode("utf-8", "replace")
    assert "tar2tf:   0%|" in text and "0/4" in text
    assert "tar2tf: 100%|" in text and "4/4" in text and "records=96" in text and "MBps=" in text
