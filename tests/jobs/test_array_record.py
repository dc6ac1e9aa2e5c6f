"""``--format array_record``: ArrayRecord shards of the same serialized Examples as the
TFRecord job, read back with ``array_record``'s ``ArrayRecordDataSource`` and with Grain,
the same bytes on both drivers and across reruns, verified by ``tar2tf verify``, with the
job's rejects and counts unchanged (docs/arrayrecord.md)."""

from __future__ import annotations

import glob
import json
import os
import re
import tarfile

import pytest
from support import shardgen
from support.cli_fixtures import cli, crc32c_file

from transforms.arrayrecord import format as arf
from transforms.tfrecord.framing import read_records

SIZE = "12KB"


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """4 shards of 7 records each: small JPEGs, labels, and a JSON member in some."""
    d = tmp_path_factory.mktemp("ar-src")
    for s in range(4):
        members = shardgen.sample_members(s * 7, 7, size=(48, 32))
        members += [(f"{s * 7 + i:06d}.json", b'{"i": %d}' % i) for i in range(0, 7, 3)]
        shardgen.write_tar(str(d / f"train-{s}.tar"), members)
    return str(d / "train-{0..3}.tar")


def convert(*args, ok=True, **kw):
    r = cli("convert", *args, "--no-progress", **kw)
    if ok:
        assert r.returncode == 0, r.stderr[-3000:]
    return r


def shards(directory, ext):
    """The shard files of one job in shard order (both naming styles sort in order)."""
    found = glob.glob(os.path.join(directory, f"*{ext}"))
    return sorted(found, key=lambda p: (len(p), p))


def manifest(path):
    with open(path) as f:
        return json.load(f)


@pytest.mark.slow
def test_same_records_as_tfrecord_on_both_drivers_and_reruns(sources, tmp_path):
    """Record i of the ArrayRecord output is record i of the TFRecord output, shard by
    shard; the files are byte-identical on the in-process driver (planned and ``{}``
    names), on Beam's local runner, and when the job runs again."""
    from array_record.python.array_record_data_source import ArrayRecordDataSource

    common = [sources, "--max-shard-size", SIZE, "--type-map", "cls:int64"]
    convert(*common, "-o", str(tmp_path / "tf" / "t.tfrecord"))
    runs = [convert(*common, "-o", str(tmp_path / "ar" / "t.array_record"))]  # format from the name
    convert(*common, "-o", str(tmp_path / "again" / "t.array_record"), "--processes", "2")
    runs += [
        convert(
            *common,
            "-o",
            str(tmp_path / "beam" / "t.array_record"),
            "--runner",
            "beam",
            "--processes",
            "2",
        )
    ]
    convert(
        *common,
        "-o",
        str(tmp_path / "tmpl" / "t-{}.ar"),
        "--format",
        "array_record",
        "--processes",
        "2",
    )

    # the Beam counters (and the in-process driver's) count the pieces' TFRecord bytes:
    # no disagreement with the manifest's ArrayRecord bytes is reported
    for r in runs:
        assert "counters disagree" not in r.stderr and "bytes_written" not in r.stderr

    tf_files = shards(tmp_path / "tf", ".tfrecord")
    ar_files = shards(tmp_path / "ar", ".array_record")
    assert len(tf_files) >= 3 and len(ar_files) == len(tf_files)
    tf_shards = [list(read_records(p)) for p in tf_files]
    # the same cut: shard k holds the same records in both formats
    for tf_path, ar_path, records in zip(tf_files, ar_files, tf_shards):
        assert list(arf.iter_file(ar_path)) == records, (tf_path, ar_path)
    tf_records = [r for s in tf_shards for r in s]
    assert len(tf_records) == 28

    data = [open(p, "rb").read() for p in ar_files]
    for other, ext in (("again", ".array_record"), ("beam", ".array_record"), ("tmpl", ".ar")):
        assert [open(p, "rb").read() for p in shards(tmp_path / other, ext)] == data, other

    # the manifest: every file's CRC32C, size and count; its format among the options
    m = manifest(tmp_path / "ar" / "t.array_record.manifest.json")
    assert m["options"]["format"] == "array_record"
    assert [r["path"] for r in m["shards"]] == ar_files
    for row in m["shards"]:
        assert row["crc32c"] == crc32c_file(row["path"])
        assert row["bytes"] == os.path.getsize(row["path"])
        assert row["records"] == arf.num_records(row["path"])
    assert m["totals"]["records_written"] == 28
    assert m["totals"]["bytes_written"] == sum(len(d) for d in data)
    assert m["schema"] == manifest(tmp_path / "tf" / "t.tfrecord.manifest.json")["schema"]
    # a TFRecord job's manifest stays as it was: no format option
    assert "format" not in manifest(tmp_path / "tf" / "t.tfrecord.manifest.json")["options"]
    # the writer options docs/arrayrecord.md names
    opts = arf.writer_options(ar_files[0])
    assert "group_size:1," in opts and "zstd:3" in opts and "max_parallelism:1" in opts

    # array_record's own random-access reader, over all shards as one sequence
    source = ArrayRecordDataSource(ar_files)
    assert len(source) == len(tf_records)
    assert [source[i] for i in range(len(source))] == tf_records
    assert source[17] == tf_records[17] and source[3] == tf_records[3]


def test_grain_reads_every_record(sources, tmp_path):
    """Grain (MapDataset and DataLoader over ArrayRecordDataSource) reads the records the
    TFRecord job wrote, in order, and all of them when it shuffles."""
    import grain
    import grain.python as gp
    from array_record.python.array_record_data_source import ArrayRecordDataSource

    common = [sources, "--records-per-shard", "5", "--type-map", "cls:int64"]
    convert(*common, "-o", str(tmp_path / "tf" / "t.tfrecord"))
    convert(*common, "-o", str(tmp_path / "ar" / "t.array_record"))
    expected = [r for p in shards(tmp_path / "tf", ".tfrecord") for r in read_records(p)]
    source = ArrayRecordDataSource(shards(tmp_path / "ar", ".array_record"))

    ds = grain.MapDataset.source(source)
    assert len(ds) == len(expected) == 28
    assert [ds[i] for i in range(len(ds))] == expected
    assert list(ds.to_iter_dataset()) == expected

    def loader(shuffle):
        sampler = gp.IndexSampler(
            num_records=len(source),
            num_epochs=1,
            shard_options=gp.NoSharding(),
            shuffle=shuffle,
            seed=7,
        )
        return list(gp.DataLoader(data_source=source, sampler=sampler, worker_count=0))

    assert loader(False) == expected
    shuffled = loader(True)
    assert shuffled != expected and sorted(shuffled) == sorted(expected)

    # the Examples parse as tf.train.Example with the labels of their sources
    from transforms.tfrecord import example_wire_pb2

    ex = example_wire_pb2.Example.FromString(ds[9])
    key = ex.features.feature["__key__"].bytes_list.value[0].decode()
    assert ex.features.feature["cls"].int64_list.value == [int(key) % 10]


def test_verify_reads_every_record_and_finds_damage(sources, tmp_path):
    out = tmp_path / "t.array_record"
    convert(sources, "-o", str(out), "--max-shard-size", SIZE)
    mpath = str(tmp_path / "t.array_record.manifest.json")
    r = cli("verify", mpath)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "(array_record): " in r.stdout and ", 28 records," in r.stdout
    r = cli("verify", mpath, "--decode-images")
    assert r.returncode == 0 and "28 images decoded" in r.stdout, r.stdout + r.stderr

    files = shards(tmp_path, ".array_record")
    good = open(files[1], "rb").read()
    # one bit of record 2 flipped (its JPEG's bytes are stored as they are: zstd gains
    # nothing on them), so the records before it still read
    pos = good.find(list(arf.iter_file(files[1]))[2][-300:-200])
    assert pos > 0
    bad = bytearray(good)
    bad[pos] ^= 0x40
    open(files[1], "wb").write(bytes(bad))
    r = cli("verify", mpath)
    assert r.returncode == 5, r.stdout + r.stderr
    assert "crc32c" in r.stdout and "format" in r.stdout
    assert "array_record record 2: " in r.stdout and "2 readable records" in r.stdout
    assert "Traceback" not in r.stdout + r.stderr

    open(files[1], "wb").write(good[:1000])  # truncated: not an ArrayRecord file any more
    r = cli("verify", mpath, "--json", str(tmp_path / "v.json"))
    assert r.returncode == 5
    checks = {p["check"] for p in json.load(open(tmp_path / "v.json"))["problems"]}
    assert {"size", "crc32c", "format", "count"} <= checks

    open(files[1], "wb").write(good)
    os.unlink(files[0])
    r = cli("verify", mpath)
    assert r.returncode == 5 and "shard is missing" in r.stdout
    assert "Traceback" not in r.stdout + r.stderr


def test_bad_input_keeps_its_rejects_and_counts(tmp_path):
    """A missing shard, a damaged tar and an oversized member are counted rejects, as in
    the TFRecord job; read = written + rejected + filtered, and the files hold exactly
    the written records."""
    d = tmp_path / "in"
    d.mkdir()
    shardgen.write_tar(str(d / "s-0.tar"), shardgen.sample_members(0, 6, size=(32, 24)))
    members = shardgen.sample_members(6, 6, size=(32, 24))
    members.append(("000007.big", b"x" * 40000))  # over --max-member-size
    shardgen.write_tar(str(d / "s-1.tar"), members)
    whole = shardgen.tar_bytes(shardgen.sample_members(12, 6, size=(32, 24)))
    with open(d / "s-2.tar", "wb") as f:
        f.write(whole[: len(whole) // 2 + 100])  # damaged: cut in a member
    src = str(d / "s-{0..3}.tar")  # s-3.tar does not exist
    args = [src, "--max-member-size", "20KB", "--max-rejects", "100", "--records-per-shard", "4"]
    convert(*args, "-o", str(tmp_path / "tf" / "t.tfrecord"))
    convert(*args, "-o", str(tmp_path / "ar" / "t.array_record"))
    tf_m = manifest(tmp_path / "tf" / "t.tfrecord.manifest.json")
    ar_m = manifest(tmp_path / "ar" / "t.array_record.manifest.json")
    t = ar_m["totals"]
    assert t["records_rejected"] >= 2 and t["shards_rejected"] >= 1
    assert t["records_read"] == t["records_written"] + t["records_rejected"] + t["records_filtered"]
    for k in (
        "records_read",
        "records_written",
        "records_rejected",
        "records_filtered",
        "shards_rejected",
    ):
        assert t[k] == tf_m["totals"][k], k
    assert ar_m["rejects"] == {**tf_m["rejects"], "path": ar_m["rejects"]["path"]}
    with open(tmp_path / "ar" / "t.array_record.rejects.jsonl") as f:
        assert len(f.read().splitlines()) == ar_m["rejects"]["count"]
    written = [r for p in shards(tmp_path / "ar", ".array_record") for r in arf.iter_file(p)]
    assert len(written) == t["records_written"]
    assert written == [r for p in shards(tmp_path / "tf", ".tfrecord") for r in read_records(p)]
    assert cli("verify", str(tmp_path / "ar" / "t.array_record.manifest.json")).returncode == 0


@pytest.mark.parametrize(
    "output, flags, said",
    [
        ("t.array_record", ["--format", "tfrecord"], "--format tfrecord with an output named"),
        ("t.array_record", ["--shuffle"], "--format array_record takes no --shuffle"),
        ("t-{}.ar", ["--format", "array_record", "--dali-index"], "takes no --dali-index"),
        ("t.ar", ["--format", "arrayrecord"], "invalid choice"),
    ],
)
def test_refused_before_the_job(sources, tmp_path, output, flags, said):
    r = convert(sources, "-o", str(tmp_path / "out" / output), *flags, ok=False)
    assert r.returncode == 2, r.stderr
    assert said in r.stderr and "Traceback" not in r.stderr
    assert not os.path.exists(tmp_path / "out") or not os.listdir(tmp_path / "out")


def test_config_refuses_what_the_format_cannot_do(tmp_path):
    from pipelines.job.kinds.tfrecord.config import ConvertConfig

    assert ConvertConfig(sources="x", output="o/t-{}.array_record").format == "array_record"
    assert ConvertConfig(sources="x", output="o/t-{}.record").format == "tfrecord"

    with pytest.raises(ValueError, match="format must be one of"):
        ConvertConfig(sources="x", output="y", format="parquet")
    with pytest.raises(ValueError, match="neither shuffle"):
        ConvertConfig(sources="x", output="y", format="array_record", shuffle=True)


def test_tfds_reads_two_splits(sources, tmp_path):
    """``--tfds`` with ArrayRecord: TFDS's random-access reader (``as_data_source``, the
    one TFDS offers for ArrayRecord) gives every record of both splits, bytes and labels
    exact, and the split sizes from the manifests."""
    import tensorflow_datasets as tfds

    d = tmp_path / "ds"
    train = sources.replace("{0..3}", "{0..2}")
    r = convert(
        train, "-o", str(d / "train.array_record"), "--records-per-shard", "6",
        "--type-map", "cls:int64", "--tfds", "--tfds-image", "jpg",
    )  # fmt: skip
    assert "split train (21 examples)" in r.stderr
    convert(
        sources.replace("{0..3}", "3"), "-o", str(d / "validation.array_record"),
        "--type-map", "cls:int64", "--tfds", "--tfds-image", "jpg",
    )  # fmt: skip
    b = tfds.builder_from_directory(str(d))
    assert b.info.file_format.value == "array_record"
    assert {s: b.info.splits[s].num_examples for s in b.info.splits} == {
        "train": 21,
        "validation": 7,
    }
    assert b.info.splits["train"].num_shards == 4
    for split, tars in (("train", range(3)), ("validation", [3])):
        expected = {}
        for s in tars:
            with tarfile.open(sources.replace("{0..3}", str(s))) as t:
                for m in t.getmembers():
                    key, ext = m.name.split(".", 1)
                    expected.setdefault(key, {})[ext] = t.extractfile(m).read()
        source = b.as_data_source(split=split, decoders={"jpg": tfds.decode.SkipDecoding()})
        assert len(source) == len(expected)
        got = {}
        for i in range(len(source)):
            ex = source[i]
            got[ex["__key__"].decode()] = ex
        assert sorted(got) == sorted(expected)
        for key, src in expected.items():
            assert got[key]["jpg"] == src["jpg"]
            assert int(got[key]["cls"]) == int(src["cls"])
    # a decoded image, as TFDS's Image feature gives it
    img = b.as_data_source(split="validation")[0]["jpg"]
    assert img.shape == (32, 48, 3) and img.dtype.name == "uint8"
    # a split in TFRecord only, beside splits in ArrayRecord only: no format that TFDS
    # could read for every split; refused in one line, the metadata left as it was
    before = (d / "dataset_info.json").read_bytes()
    r = convert(
        sources.replace("{0..3}", "3"), "-o", str(d / "test.tfrecord"),
        "--type-map", "cls:int64", "--tfds", "--tfds-image", "jpg", ok=False,
    )  # fmt: skip
    assert r.returncode == 1 and "have no file format in common" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert (d / "dataset_info.json").read_bytes() == before


@pytest.mark.slow
def test_tfds_both_formats_in_one_directory(sources, tmp_path):
    """The same splits in TFRecord and ArrayRecord (same options) in one directory: TFDS's
    ``as_dataset`` reads the TFRecord shards, ``as_data_source`` the ArrayRecord ones, and
    both give the same records; a split whose two formats were cut differently is refused."""
    import tensorflow_datasets as tfds

    d = tmp_path / "ds"
    train, val = sources.replace("{0..3}", "{0..2}"), sources.replace("{0..3}", "3")
    common = ["--records-per-shard", "6", "--type-map", "cls:int64", "--tfds"]
    convert(train, "-o", str(d / "train.array_record"), *common)
    convert(val, "-o", str(d / "validation.array_record"), *common)
    convert(train, "-o", str(d / "train.tfrecord"), *common)
    b = tfds.builder_from_directory(str(d))  # train in both, validation in ArrayRecord only
    assert b.info.file_format.value == "array_record" and not b.info.alternative_file_formats
    r = convert(val, "-o", str(d / "validation.tfrecord"), *common)
    assert "file formats: tfrecord, array_record" in r.stderr, r.stderr
    b = tfds.builder_from_directory(str(d))
    assert b.info.file_format.value == "tfrecord"
    assert [f.value for f in b.info.alternative_file_formats] == ["array_record"]
    assert {s: b.info.splits[s].num_examples for s in b.info.splits} == {
        "train": 21,
        "validation": 7,
    }
    for split in ("train", "validation"):
        from_tf = [
            (ex["__key__"], ex["jpg"], int(ex["cls"]))
            for ex in tfds.as_numpy(b.as_dataset(split=split, shuffle_files=False))
        ]
        source = tfds.builder_from_directory(str(d)).as_data_source(split=split)
        from_ar = [(ex["__key__"], ex["jpg"], int(ex["cls"])) for ex in source]
        assert len(from_tf) == len(from_ar) == b.info.splits[split].num_examples
        assert sorted(from_tf) == sorted(from_ar)
    # ArrayRecord cut at other records than the TFRecord shards of the same split
    r = convert(
        val, "-o", str(d / "validation.array_record"), "--records-per-shard", "4",
        "--type-map", "cls:int64", "--tfds", "--overwrite", ok=False,
    )  # fmt: skip
    assert r.returncode == 1 and "hold different records" in r.stderr, r.stderr


def test_output_in_a_bucket(sources, tmp_path, moto_server, s3_env):
    """To s3:// (moto's server): the shards are uploaded whole, with the bytes of a local
    run, and ``tar2tf verify`` checks them there."""
    bucket = moto_server.new_bucket()
    common = [sources, "--max-shard-size", SIZE, "--type-map", "cls:int64"]
    convert(*common, "-o", str(tmp_path / "t.array_record"))
    out = f"s3://{bucket}/out/t.array_record"
    convert(*common, "-o", out, "--s3-endpoint", moto_server.url)
    keys = [k for k in moto_server.keys(bucket) if k.endswith(".array_record")]
    local = shards(tmp_path, ".array_record")
    assert [os.path.basename(k) for k in keys] == [os.path.basename(p) for p in local]
    assert [moto_server.get(bucket, k) for k in keys] == [open(p, "rb").read() for p in local]
    assert not [k for k in moto_server.keys(bucket) if ".tmp" in k or ".tar2tf-work" in k]
    r = cli("verify", out + ".manifest.json", "--s3-endpoint", moto_server.url)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "(array_record): " in r.stdout


def test_python_api_writes_array_record(sources, tmp_path):
    """``Dataset.load(path=...)``: an output named ``*.array_record`` gives ArrayRecord
    shards, with TFDS's metadata when asked."""
    import tensorflow_datasets as tfds

    from pipelines import Dataset
    from transforms.ops import Select

    d = tmp_path / "ds"
    paths = Dataset(os.path.dirname(sources), selections=[Select("jpg"), Select("cls")]).load(
        os.path.basename(sources),
        path=str(d / "train.array_record"),
        records_per_shard=10,
        type_map={"label": "int64"},
        tfds=True,
        tfds_image=["value"],
    )
    assert [os.path.basename(p) for p in paths] == [
        f"train-0000{i}-of-00003.array_record" for i in range(3)
    ]
    assert sum(arf.num_records(p) for p in paths) == 28
    source = tfds.builder_from_directory(str(d)).as_data_source(split="train")
    assert len(source) == 28 and int(source[27]["label"]) == 27 % 10
    assert source[27]["value"].shape == (32, 48, 3)


@pytest.mark.slow
def test_resume_after_kill_is_byte_identical(tmp_path):
    """``kill -9`` midway, then ``--resume``: the finished pieces are kept, and the shards
    are those of an uninterrupted run; no temporary file is left."""
    from support import background

    shardgen.make_shards(str(tmp_path / "in"), 8, 3, size=(32, 24))
    src = str(tmp_path / "in" / "train-{0000..0007}.tar")
    work = str(tmp_path / "work")
    args = [
        src, "--records-per-shard", "5", "--type-map", "cls:int64", "--ops",
        "support.slow_ops:slow_ops", "--processes", "0", "--work-dir", work, "--no-progress",
    ]  # fmt: skip
    env = background.slow_env("0.15")
    convert(*args, "-o", str(tmp_path / "ref" / "t.array_record"), env=env)
    out = str(tmp_path / "o" / "t.array_record")
    proc = background.start("convert", *args, "-o", out, env=env)
    background.wait_until(
        proc, lambda: len(glob.glob(f"{work}/*/piece-*.json")) >= 3, "three converted pieces"
    )
    background.kill(proc)
    assert not glob.glob(str(tmp_path / "o" / "*.manifest.json"))
    r = convert(*args, "-o", out, "--resume", env=env)
    resumed = re.search(r"(\d+) resumed", r.stderr)
    assert resumed and int(resumed.group(1)) >= 3, r.stderr  # the pieces it finished
    ref = shards(tmp_path / "ref", ".array_record")
    got = shards(tmp_path / "o", ".array_record")
    assert [os.path.basename(p) for p in got] == [os.path.basename(p) for p in ref]
    assert [open(p, "rb").read() for p in got] == [open(p, "rb").read() for p in ref]
    assert not [n for n in os.listdir(tmp_path / "o") if ".tmp-" in n]
    assert cli("verify", out + ".manifest.json").returncode == 0


@pytest.mark.slow
def test_benchmark_runs_at_quick_size(tmp_path):
    """``benchmarks.arrayrecord`` at the quick size: it checks the two outputs hold the same
    records and reports every read it times (structure only, never speed)."""
    import subprocess
    import sys

    from support.cli_fixtures import ROOT

    out = tmp_path / "ar.json"
    r = subprocess.run(
        [sys.executable, "-m", "benchmarks.arrayrecord", "--size", "quick", "--random", "300",
         "--repeat", "1", "--work-dir", str(tmp_path), "--json", str(out)],
        cwd=ROOT,
        env=dict(os.environ, TAR2TF_CACHE=str(tmp_path / "cache"), TF_CPP_MIN_LOG_LEVEL="3"),
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["records"] == 96 and res["random_reads"] == 300
    for cache in ("warm", "cold"):
        assert len(res[cache]) == 7
        assert all(v["records_per_s"] > 0 and v["mb_per_s"] > 0 for v in res[cache].values())
    assert "| ArrayRecord, random (`source[i]`) |" in r.stdout
    assert not [n for n in os.listdir(tmp_path) if n.startswith("tar2tf-arbench-")]


def test_inspect_reads_an_array_record_shard(sources, tmp_path):
    convert(sources, "-o", str(tmp_path / "t.array_record"), "--type-map", "cls:int64")
    shard = shards(tmp_path, ".array_record")[0]
    r = cli("inspect", shard, "-n", "1", "--no-sheet")
    assert r.returncode == 0, r.stderr
    assert f"{shard}: 28 records" in r.stdout and "cls                      0" in r.stdout
    open(shard, "wb").write(b"not an ArrayRecord file")
    r = cli("inspect", shard, "--no-sheet")
    assert r.returncode == 1 and "is not a readable ArrayRecord file" in r.stderr
    assert "Traceback" not in r.stderr
