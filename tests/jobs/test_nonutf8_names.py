"""Tar member names that are not valid UTF-8 (legacy Latin-1 ustar / GNU names, pax
``hdrcharset=BINARY``) convert like any other: ``__key__`` holds the name's bytes as in the
tar, rejects JSON escapes them, and the written files, the in-memory stream and
WebDataset's own reader agree on the records -- on Beam's local runner, in-process and
after ``--resume``."""

import glob
import io
import json
import os
import tarfile

import pytest
from support import background, shardgen
from support.cli_fixtures import cli, output_digest

# name bytes per shard: (tar format, names); b"\xe9" is Latin-1 e-acute, b"\xff" no UTF-8 at all
SHARDS = [
    (tarfile.GNU_FORMAT, [b"caf\xe9", b"plain-0", b"d\xe9j\xe0/vu"]),
    (tarfile.PAX_FORMAT, [b"b\xffz", b"plain-1"]),  # pax: hdrcharset=BINARY
    (tarfile.USTAR_FORMAT, [b"na\xefve", b"\xc3\xa9t\xc3\xa9"]),  # the second is valid UTF-8
    (tarfile.GNU_FORMAT, [b"x\x80y", b"plain-3"]),
]
LINKED = b"lnk\xe9"  # a record with a hard link: rejected, its name in the rejects JSON


def _write(path, fmt, names, link=False):
    with tarfile.open(path, "w", format=fmt, encoding="utf-8", errors="surrogateescape") as t:
        for i, raw in enumerate(names):
            name = raw.decode("utf-8", "surrogateescape")
            for ext, data in (("jpg", shardgen.jpeg(i, (16, 12))), ("cls", str(i).encode())):
                ti = tarfile.TarInfo(f"{name}.{ext}")
                ti.size, ti.mtime = len(data), 0
                t.addfile(ti, io.BytesIO(data))
        if link:
            name = LINKED.decode("utf-8", "surrogateescape")
            ti = tarfile.TarInfo(f"{name}.cls")
            ti.size, ti.mtime = 1, 0
            t.addfile(ti, io.BytesIO(b"7"))
            ti = tarfile.TarInfo(f"{name}.jpg")
            ti.type, ti.linkname = tarfile.LNKTYPE, f"{name}.cls"
            t.addfile(ti)


@pytest.fixture
def shards(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    for i, (fmt, names) in enumerate(SHARDS):
        _write(str(d / f"s-{i}.tar"), fmt, names, link=i == 1)
    return str(d / "s-{0..3}.tar")


def _written(out_dir):
    """``(key bytes, cls)`` of every Example in the output, in order."""
    from transforms.tfrecord.example import parse_example
    from transforms.tfrecord.framing import read_records

    got = []
    for p in sorted(glob.glob(os.path.join(out_dir, "*.record"))):
        for r in read_records(p):
            ex = parse_example(r)
            got.append((ex["__key__"].encode("utf-8", "surrogateescape"), int(ex["cls"])))
    return got


def _expected():
    return [(raw, i) for _, names in SHARDS for i, raw in enumerate(names)]


def _webdataset(src_dir):
    import webdataset as wds

    urls = [os.path.join(src_dir, f"s-{i}.tar") for i in range(len(SHARDS))]
    out = []
    for s in wds.WebDataset(urls, shardshuffle=False, empty_check=False):
        out.append((s["__key__"].encode("utf-8", "surrogateescape"), int(s["cls"])))
    return out


def _check(out_dir, src_dir):
    want = _expected()
    assert _written(out_dir) == want
    # WebDataset's reader sees the same records (it does not refuse the hard-linked one,
    # whose member it skips; tar2tf rejects that record, below)
    assert [r for r in _webdataset(src_dir) if r[0] != LINKED] == want
    rejects = [
        json.loads(line) for line in open(glob.glob(os.path.join(out_dir, "*.rejects.jsonl"))[0])
    ]
    assert [r["key"].encode("utf-8", "surrogateescape") for r in rejects] == [LINKED]
    raw = open(glob.glob(os.path.join(out_dir, "*.rejects.jsonl"))[0], "rb").read()
    assert raw.isascii() and b"lnk\\udce9" in raw  # escaped in the JSON text, never raw bytes


# the labels typed, and the one record whose member is a link rejected
TYPED = ("--type-map", "cls:int64", "--max-rejects", "1", "--no-progress")


def test_beam_and_in_process(shards, tmp_path):
    out = str(tmp_path / "o" / "t-{}.record")
    p = cli("convert", shards, "-o", out, *TYPED, "--runner", "beam")
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    _check(str(tmp_path / "o"), str(tmp_path / "in"))
    m = json.load(open(str(tmp_path / "o" / "t.record.manifest.json")))
    assert (
        m["totals"]["records_written"] == len(_expected()) and m["totals"]["records_rejected"] == 1
    )

    # the in-process driver writes the same bytes; the in-memory stream gives the same records
    from pipelines.inprocess.driver import convert_in_process
    from pipelines.job.kinds.tfrecord.config import ConvertConfig

    res = convert_in_process(
        ConvertConfig(
            sources=shards,
            output=str(tmp_path / "p" / "t-{}.record"),
            type_map={"cls": "int64"},
            max_rejects=1,
            progress=False,
        ),
        2,
    )
    assert res.exit_code == 0
    got, want = output_digest(str(tmp_path / "p")), output_digest(str(tmp_path / "o"))
    assert {k: v for k, v in got.items() if not k.endswith(".json")} == {
        k: v for k, v in want.items() if not k.endswith(".json")
    }
    from pipelines import Dataset

    labels = [
        int(x) for x in Dataset(str(tmp_path / "in"), selections=["cls"]).elements("s-{0..3}.tar")
    ]
    assert labels == [c for _, c in _expected()]


@pytest.mark.slow
def test_shuffled(shards, tmp_path):
    out = str(tmp_path / "o" / "t-{}.record")
    p = cli(
        "convert", shards, "-o", out, *TYPED, "--shuffle", "--seed", "3", "--records-per-shard", "4"
    )
    assert p.returncode == 0, p.stderr
    assert sorted(_written(str(tmp_path / "o"))) == sorted(_expected())


@pytest.mark.slow
def test_resume_after_kill(shards, tmp_path):
    env = background.slow_env("0.4")
    out, work = str(tmp_path / "o" / "t-{}.record"), str(tmp_path / "work")
    args = [
        "convert",
        shards,
        "-o",
        out,
        "--work-dir",
        work,
        "--records-per-shard",
        "2",
        *TYPED,
        "--ops",
        "support.slow_ops:slow_ops",
        "--runner",  # the in-process driver journals its final shards: where --resume goes on
        "local",
        "--processes",
        "0",
    ]
    proc = background.start(*args, env=env)
    background.wait_until(proc, lambda: glob.glob(f"{work}/*/journal-*.json"), "a journaled shard")
    background.kill(proc)
    assert glob.glob(f"{work}/*/journal-*.json")
    p = cli(*args, "--resume", env=env)
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    _check(str(tmp_path / "o"), str(tmp_path / "in"))


@pytest.mark.slow
def test_pcr_rejects_keys_its_index_cannot_hold(shards, tmp_path):
    """A PCR index stores keys as protobuf strings (UTF-8 only): such records are encode
    rejects naming why, the others convert; the job never crashes on a name."""
    out = str(tmp_path / "pcr")
    p = cli("pcr", shards, "--output", out, "--max-rejects", "9")
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    m = json.load(open(os.path.join(out, "PCR.manifest.json")))
    non_utf8 = [raw for _, names in SHARDS for raw in names if not _is_utf8(raw)]
    rejects = [json.loads(x) for x in open(os.path.join(out, "PCR.rejects.jsonl"))]
    assert sorted(
        r["key"].encode("utf-8", "surrogateescape")
        for r in rejects
        if r["reason"].startswith("key is not UTF-8")
    ) == sorted(non_utf8)
    assert m["totals"]["records_written"] == len(_expected()) - len(non_utf8)


def _is_utf8(raw):
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False
