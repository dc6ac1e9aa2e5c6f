"""Hostile and broken inputs (issue 30): what the user sees for each (docs/bad-input.md).

Non-UTF-8 member names: tests/jobs/test_nonutf8_names.py; mixed value types: test_value_types.py;
verify of pixel arrays: test_verify.py; dotted extensions in --ops: test_opsspec.py."""

import io
import json
import logging
import os
import tarfile

import pytest
from support import shardgen
from support.cli_fixtures import cli


def _tar(path, members, links=()):
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as t:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.size, ti.mtime = len(data), 0
            t.addfile(ti, io.BytesIO(data))
    return path


# -- non-regular local inputs ----------------------------------------------------------------


def test_fifo_and_device_inputs_are_fetch_rejects(tmp_path):
    """A FIFO would block the open forever (no writer), /dev/zero never ends: both are
    refused before a byte is read, and the job's good shard converts."""
    good = shardgen.write_tar(str(tmp_path / "good.tar"), shardgen.sample_members(0, 2))
    fifo = str(tmp_path / "pipe.tar")
    os.mkfifo(fifo)
    out = str(tmp_path / "o" / "t-{}.record")
    p = cli(
        "convert",
        good,
        fifo,
        "/dev/zero",
        "-o",
        out,
        "--max-rejects",
        "2",
        "--no-progress",
        timeout=180,
    )
    assert p.returncode == 0, p.stderr
    rejects = [json.loads(x) for x in open(str(tmp_path / "o" / "t.record.rejects.jsonl"))]
    assert [(r["shard"], r["stage"], r["reason"]) for r in rejects] == [
        (fifo, "fetch", f"not a regular file: {fifo} is a FIFO"),
        ("/dev/zero", "fetch", "not a regular file: /dev/zero is a character device"),
    ]
    m = json.load(open(str(tmp_path / "o" / "t.record.manifest.json")))
    assert m["totals"]["records_written"] == 2 and m["totals"]["shards_rejected"] == 2


# -- accounting -------------------------------------------------------------------------------


def test_duplicates_are_counted_as_duplicates(tmp_path):
    img = shardgen.jpeg(0, (8, 8))
    a = _tar(
        str(tmp_path / "a.tar"),
        [
            ("k0.jpg", img),
            ("k0.cls", b"0"),
            ("k0.jpg", img),  # repeated member
            ("k1.jpg", img),
            ("k1.cls", b"1"),
            ("dir/noext", b"x"),
        ],
    )
    b = _tar(
        str(tmp_path / "b.tar"),
        [("k1.jpg", img), ("k1.cls", b"1"), ("k2.jpg", img), ("k2.cls", b"2")],
    )
    out = str(tmp_path / "o" / "t-{}.record")
    summary = str(tmp_path / "s.json")
    p = cli(
        "convert", a, b, "-o", out, "--max-rejects", "1", "--no-progress", "--summary-json", summary
    )
    assert p.returncode == 0, p.stderr
    m = json.load(open(str(tmp_path / "o" / "t.record.manifest.json")))
    t = m["totals"]
    assert (t["members_skipped"], t["members_duplicate"]) == (
        1,
        1,
    )  # noext skipped; k0.jpg again a duplicate
    assert (t["records_read"], t["records_written"], t["records_rejected"]) == (5, 4, 1)
    # k1 of b.tar repeats a key of a.tar: both written, counted and warned about
    assert m["duplicate_keys"] == {"count": 1, "examples": [{"key": "k1", "first": a, "again": b}]}
    assert (
        "1 duplicate members" in p.stderr and "1 non-file/extensionless members skipped" in p.stderr
    )
    assert "WARNING 1 records have a key an earlier input shard had (e.g. 'k1'" in p.stderr
    rep = json.load(open(summary))
    assert rep["duplicate_keys"]["count"] == 1 and rep["counter_mismatches"] == []


@pytest.mark.parametrize("runner", ["beam", "in-process"])
def test_a_job_that_writes_nothing_is_exit_3(tmp_path, runner):
    """Every record rejected (zero-length members) within --max-rejects: no output is no success."""
    bad = _tar(
        str(tmp_path / "bad.tar"), [(f"k{i}.{e}", b"") for i in range(3) for e in ("jpg", "cls")]
    )
    out = str(tmp_path / "o" / "t-{}.record")
    if runner == "beam":
        p = cli("convert", bad, "-o", out, "--max-rejects", "100", "--no-progress")
        assert p.returncode == 3, p.stderr
        assert (
            "tar2tf convert: nothing written: every record read was rejected (3 rejects)"
            in p.stderr
        )
    else:
        from pipelines.inprocess.driver import convert_in_process
        from pipelines.job.kinds.tfrecord.config import ConvertConfig

        res = convert_in_process(
            ConvertConfig(sources=bad, output=out, max_rejects=100, progress=False)
        )
        assert res.exit_code == 3 and res.totals["records_written"] == 0


# -- in-memory rejects ---------------------------------------------------------------------------


@pytest.mark.slow
def test_in_memory_rejects_are_grouped(tmp_path, caplog):
    shardgen.make_shards(str(tmp_path / "in"), 3, 10)
    from pipelines import Dataset
    from transforms.ops import Decode

    ds = Dataset(str(tmp_path / "in"), conversions=[Decode("png")], selections=["png", "cls"])
    with caplog.at_level(logging.WARNING, logger="tar2tf"):
        with pytest.raises(ValueError, match="no record .* could be converted"):
            ds.load("train-{0000..0002}.tar")
    lines = [r.getMessage() for r in caplog.records if "rejected" in r.getMessage()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("30 rejected: op: ") and "(e.g. reject " in lines[0]

    # a stream with some rejects: one line per reason, when the stream ends
    bad = _tar(
        str(tmp_path / "in" / "train-0003.tar"),
        [("z0.jpg", b""), ("z0.cls", b"1"), ("z1.jpg", b""), ("z1.cls", b"1")],
    )
    assert bad
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tar2tf"):
        got = list(
            Dataset(str(tmp_path / "in"), selections=["cls"]).elements("train-{0000..0003}.tar")
        )
    assert len(got) == 30
    lines = [r.getMessage() for r in caplog.records if "rejected" in r.getMessage()]
    assert lines == [lines[0]] and lines[0].startswith(
        "2 rejected: tar: zero-length member (e.g. reject "
    )


# -- image size limit ------------------------------------------------------------------------------


def _jpeg_claiming(w, h):
    """A small JPEG whose frame header claims ``w x h``: Pillow reads the size from it
    without decoding, so a rejection by size never touches the (absent) pixels."""
    data = bytearray(shardgen.jpeg(1, (16, 16)))
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = h.to_bytes(2, "big") + w.to_bytes(2, "big")
    return bytes(data)


def test_max_image_pixels_rejects_from_the_header(tmp_path):
    src = _tar(
        str(tmp_path / "big.tar"),
        [
            ("a.jpg", shardgen.jpeg(0, (64, 48))),
            ("a.cls", b"0"),
            ("b.jpg", _jpeg_claiming(10000, 10000)),
            ("b.cls", b"1"),  # between Pillow's warning and error sizes
            ("c.jpg", _jpeg_claiming(30000, 30000)),
            ("c.cls", b"2"),
        ],
    )  # over Pillow's error size
    out = str(tmp_path / "o" / "t-{}.record")
    p = cli(
        "convert", src, "-o", out, "--ops", "[Decode(jpg)]", "--max-rejects", "2", "--no-progress"
    )
    assert p.returncode == 0, p.stderr
    assert "DecompressionBomb" not in p.stderr
    rejects = {
        r["key"]: r for r in map(json.loads, open(str(tmp_path / "o" / "t.record.rejects.jsonl")))
    }
    assert sorted(rejects) == ["b", "c"] and {r["stage"] for r in rejects.values()} == {"op"}
    assert (
        "image too large: 10000x10000 = 100000000 pixels > max-image-pixels 64000000"
        in rejects["b"]["reason"]
    )
    assert "image too large" in rejects["c"]["reason"] and "900000000" in rejects["c"]["reason"]

    out2 = str(tmp_path / "o2" / "t-{}.record")
    p = cli(
        "convert",
        src,
        "-o",
        out2,
        "--ops",
        "[Decode(jpg)]",
        "--max-rejects",
        "3",
        "--no-progress",
        "--max-image-pixels",
        "1000",
    )
    assert p.returncode == 3, p.stderr  # every record rejected: nothing written
    rejects = [json.loads(x) for x in open(str(tmp_path / "o2" / "t.record.rejects.jsonl"))]
    assert "image too large: 64x48 = 3072 pixels > max-image-pixels 1000" in rejects[0]["reason"]
    m = json.load(open(str(tmp_path / "o2" / "t.record.manifest.json")))
    assert m["options"]["max_image_pixels"] == 1000
