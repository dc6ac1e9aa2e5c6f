"""``tar2tf verify`` and ``tar2tf inspect`` on real converted output, intact and damaged."""

import io
import json
import os
import shutil

import numpy as np
from PIL import Image
from support.cli_fixtures import cli, copy_dataset

from pipelines.verify import verify
from transforms.tfrecord.framing import frame, read_records, record_index


def _checks(report):
    return sorted({(p.check, os.path.basename(p.shard or "manifest")) for p in report.problems})


def test_intact_output_verifies_with_images(demo_output):
    out, manifest = demo_output
    p = cli("verify", manifest, "--decode-images", "--json", "-")
    assert p.returncode == 0, p.stdout + p.stderr
    rep = json.loads(p.stdout)
    m = json.load(open(manifest))
    assert rep["ok"] and rep["problems"] == []
    assert rep["records_checked"] == m["totals"]["records_written"] == 96
    assert rep["images_decoded"] == 96 and rep["shards_checked"] == len(m["shards"])
    # the output template works as well as the manifest path
    assert cli("verify", os.path.join(out, "demo-{}.record")).returncode == 0


def test_flipped_byte_is_caught(demo_output, tmp_path):
    d = copy_dataset(demo_output[0], str(tmp_path / "d"))
    target = os.path.join(d, "demo-2.record")
    data = bytearray(open(target, "rb").read())
    data[len(data) // 2] ^= 0x01
    open(target, "wb").write(bytes(data))
    p = cli("verify", os.path.join(d, "demo.record.manifest.json"))
    assert p.returncode == 5, p.stdout + p.stderr
    assert "MISMATCH" in p.stdout and "CRC mismatch" in p.stdout
    rep = verify(os.path.join(d, "demo.record.manifest.json"))
    checks = _checks(rep)
    assert ("crc", "demo-2.record") in checks and ("crc32c", "demo-2.record") in checks
    assert all(shard == "demo-2.record" for _, shard in checks)  # the other shards are fine


def test_truncated_shard_is_caught(demo_output, tmp_path):
    d = copy_dataset(demo_output[0], str(tmp_path / "d"))
    target = os.path.join(d, "demo-3.record")
    size = os.path.getsize(target)
    with open(target, "r+b") as f:
        f.truncate(size - 100)
    rep = verify(os.path.join(d, "demo.record.manifest.json"))
    checks = _checks(rep)
    assert {
        ("crc", "demo-3.record"),
        ("size", "demo-3.record"),
        ("count", "demo-3.record"),
        ("index", "demo-3.record"),
    } <= set(checks)
    assert any("truncated" in p.detail for p in rep.problems)


def test_count_mismatch_is_caught(demo_output, tmp_path):
    d = copy_dataset(demo_output[0], str(tmp_path / "d"))
    mpath = os.path.join(d, "demo.record.manifest.json")
    m = json.load(open(mpath))
    m["shards"][0]["records"] += 1
    json.dump(m, open(mpath, "w"))
    rep = verify(mpath)
    assert ("count", "demo-1.record") in _checks(rep)
    assert any(p.check == "totals" and "records_written" in p.detail for p in rep.problems)


def test_missing_shard_and_rejects_mismatch(demo_output, tmp_path):
    d = copy_dataset(demo_output[0], str(tmp_path / "d"))
    os.remove(os.path.join(d, "demo-1.record"))
    with open(os.path.join(d, "demo.record.rejects.jsonl"), "a") as f:
        f.write('{"shard": "x", "key": null, "stage": "fetch", "reason": "gone"}\n')
    checks = _checks(verify(os.path.join(d, "demo.record.manifest.json")))
    assert ("file", "demo-1.record") in checks and ("rejects", "manifest") in checks
    shutil.copy(
        os.path.join(d, "demo-2.record"), os.path.join(d, "demo-7.record")
    )  # not the manifest's
    rep = verify(os.path.join(d, "demo.record.manifest.json"))
    assert [
        (p.check, os.path.basename(p.shard))
        for p in rep.problems
        if "not in the manifest" in p.detail
    ] == [("file", "demo-7.record")]
    from launch.cli import main

    assert main(["verify", str(tmp_path / "nowhere.manifest.json")]) == 2
    assert main(["verify", os.path.join(d, "demo.record.manifest.json")]) == 5


def _rewrite_first_record(d, change):
    """Re-frame shard 1 with record 0 changed (valid CRCs), update manifest + DALI index."""
    from support.cli_fixtures import crc32c_file
    from tensorflow.core.example import example_pb2

    path = os.path.join(d, "demo-1.record")
    recs = list(read_records(path))
    ex = example_pb2.Example.FromString(recs[0])
    change(ex.features.feature)
    recs[0] = ex.SerializeToString(deterministic=True)
    open(path, "wb").write(b"".join(frame(r) for r in recs))
    with open(path, "rb") as f:
        idx = record_index(f)
    open(path + ".idx", "w").write("".join(f"{o} {s}\n" for o, s in idx))
    mpath = os.path.join(d, "demo.record.manifest.json")
    m = json.load(open(mpath))
    old = m["shards"][0]["bytes"]
    m["shards"][0].update(bytes=os.path.getsize(path), crc32c=crc32c_file(path))
    m["totals"]["bytes_written"] += os.path.getsize(path) - old
    json.dump(m, open(mpath, "w"))
    return mpath


def test_undecodable_image_needs_decode_images(demo_output, tmp_path):
    d = copy_dataset(demo_output[0], str(tmp_path / "d"))

    def damage(feats):
        jpg = feats["jpg"].bytes_list.value[0]
        feats["jpg"].bytes_list.value[0] = jpg[: len(jpg) // 3]  # a cut-off JPEG

    mpath = _rewrite_first_record(d, damage)
    assert verify(mpath).ok  # framing, sums and schema are all consistent
    rep = verify(mpath, decode_images=True)
    assert [(p.check, p.record, p.key) for p in rep.problems] == [("image", 0, "class0/img0000")]
    from launch.cli import main

    assert main(["verify", mpath, "--decode-images", "--json", str(tmp_path / "r.json")]) == 5
    assert "does not decode" in json.load(open(tmp_path / "r.json"))["problems"][0]["detail"]


def test_schema_mismatch_is_caught(demo_output, tmp_path):
    d = copy_dataset(demo_output[0], str(tmp_path / "d"))

    def retype(feats):
        feats["cls"].ClearField("int64_list")
        feats["cls"].bytes_list.value.append(b"zero")
        feats["bogus"].float_list.value.append(1.0)

    rep = verify(_rewrite_first_record(d, retype))
    details = sorted(p.detail for p in rep.problems)
    assert [p.check for p in rep.problems] == ["schema", "schema"]
    assert "'bogus'" in details[0] and "not in the manifest schema" in details[0]
    assert "'cls' is bytes, schema says int64" in details[1]


def test_inspect_prints_schema_records_and_writes_contact_sheet(demo_output, tmp_path):
    from launch.cmd_inspect import inspect
    from transforms.tfrecord.example import parse_example

    shard = os.path.join(demo_output[0], "demo-1.record")
    sheet = str(tmp_path / "sheet.png")
    p = cli("inspect", shard, "-n", "2", "--images", "10", "--sheet", sheet)
    assert p.returncode == 0, p.stderr
    first = [parse_example(r) for r, _ in zip(read_records(shard), range(10))]
    n = len(list(read_records(shard)))
    assert f"{shard}: {n} records" in p.stdout
    for line in ("__key__", "cls                      int64", "jpg                      bytes"):
        assert line in p.stdout
    # the Arrow view TFX gets through tfx-bsl, with the same types as the manifest schema
    assert "arrow schema (tfx-bsl" in p.stdout
    assert "cls                      large_list<item: int64>" in p.stdout
    assert "jpg                      large_list<item: large_binary>" in p.stdout
    assert f"'{first[0]['__key__']}'" in p.stdout and f"'{first[1]['__key__']}'" in p.stdout
    assert f"'{first[2]['__key__']}'" not in p.stdout  # only -n records are printed
    im = Image.open(sheet)
    assert im.format == "PNG" and im.size == (
        8 * 132 + 4,
        2 * 148 + 4,
    )  # 10 thumbs: 8 columns, 2 rows
    # the first thumbnail is the first record's image (scaled), not a blank tile
    thumb = np.asarray(im.convert("RGB"))[4 : 4 + 128, 4 : 4 + 128].astype(float)
    ref = Image.open(io.BytesIO(first[0]["jpg"])).convert("RGB")
    ref.thumbnail((128, 128))
    ref = np.asarray(ref).astype(float)
    y0 = (128 - ref.shape[0]) // 2
    x0 = (128 - ref.shape[1]) // 2
    assert np.abs(thumb[y0 : y0 + ref.shape[0], x0 : x0 + ref.shape[1]] - ref).mean() < 2
    assert thumb.std() > 10
    # captions carry the labels
    items = inspect(shard, records=0, images=3, out=io.StringIO())
    assert [c for _, c in items] == [f"{r['cls']} {r['__key__']}" for r in first[:3]]
    # kept as thumbnails (160x120 here), not whole images: --images up to 1024 stays small
    assert [im.size for im, _ in items] == [(128, 96)] * 3
    bad = tmp_path / "bad.record"
    bad.write_bytes(b"not a tfrecord at all")
    assert cli("inspect", str(bad), "--no-sheet").returncode == 1


def test_verify_pcr_dataset_through_the_cli(tmp_path):
    """``tar2tf verify DIR`` on a PCR output directory: the record files against the
    manifest and, through the PCR verifier, against the index."""
    from support.pcr_fixtures import sample_output

    from launch.cli import main

    out, res = sample_output(tmp_path)
    assert res.manifest["kind"] == "pcr"
    rep = verify(out)
    assert rep.ok and rep.kind == "pcr" and rep.shards_checked == 2, rep.text()
    assert main(["verify", out]) == 0
    rec = os.path.join(out, "PCR_0.db")
    data = bytearray(open(rec, "rb").read())
    data[len(data) // 2] ^= 0x55
    open(rec, "wb").write(bytes(data))
    rep = verify(out)
    assert {p.check for p in rep.problems} == {"sha256", "pcr"}
    assert any("CRC-32C mismatch" in p.detail for p in rep.problems if p.check == "pcr")
    assert main(["verify", os.path.join(out, "PCR.manifest.json")]) == 5


def test_verify_pcr_index_edits_are_caught(tmp_path):
    """The index's int32 ``offsets`` (what readers of the reference schema use) must agree
    with ``offsets64``, and the index must be the one the manifest recorded."""
    from support.pcr_fixtures import sample_images, sample_output

    from transforms.pcr import pcr_pb2
    from transforms.pcr.format import INDEX_NAME

    out, _ = sample_output(tmp_path)
    rep = verify(out)
    assert rep.ok and rep.records_checked == len(sample_images()), rep.text()
    path = os.path.join(out, INDEX_NAME)
    original = open(path, "rb").read()
    idx = pcr_pb2.DatasetOffsetsIndex.FromString(original)
    o = list(idx.records[0].offsets)
    o[1], o[2] = o[1] + 7, o[2] - 7  # same total: file sizes still agree
    del idx.records[0].offsets[:]
    idx.records[0].offsets.extend(o)
    open(path, "wb").write(idx.SerializeToString())
    problems = verify(out).problems
    assert any(p.check == "pcr" and "differ from offsets64" in p.detail for p in problems)
    assert any(
        p.check == "index" and "sha256 differs from the manifest" in p.detail for p in problems
    )
    # an index that still parses but no longer describes the scan maps the images name
    idx = pcr_pb2.DatasetOffsetsIndex.FromString(original)
    del idx.scan_maps[:]
    open(path, "wb").write(idx.SerializeToString())
    assert any("scan maps" in p.detail for p in verify(out).problems)


def test_feature_appearing_late_is_in_the_schema(tmp_path):
    """The manifest schema covers every record, so verify does not flag a feature that
    only the 20th record of a shard has."""
    from support import shardgen

    from pipelines.beam.convert import convert
    from pipelines.job.kinds.tfrecord.config import ConvertConfig

    members = shardgen.sample_members(0, 20, size=(16, 12))
    members.append(("000019.txt", b"a late caption"))
    shardgen.write_tar(str(tmp_path / "late.tar"), members)
    res = convert(
        ConvertConfig(
            sources=str(tmp_path / "late.tar"),
            output=str(tmp_path / "o/x-{}.record"),
            type_map={"cls": "int64"},
        )
    )
    assert res.manifest["schema"]["txt"] == {"dtype": "bytes", "shape": [1], "optional": True}
    rep = verify(res.manifest_path)
    assert rep.ok and rep.records_checked == 20, rep.text()


def test_manifests_with_sha256_rows_still_verify(demo_output, tmp_path):
    """Manifests written before shards carried crc32c (sha256 rows) verify as before."""
    from support.cli_fixtures import sha256_file

    d = copy_dataset(demo_output[0], str(tmp_path / "d"))
    mpath = os.path.join(d, "demo.record.manifest.json")
    m = json.load(open(mpath))
    for row in m["shards"]:
        del row["crc32c"]
        row["sha256"] = sha256_file(os.path.join(d, os.path.basename(row["path"])))
    json.dump(m, open(mpath, "w"))
    assert verify(mpath).ok
    m["shards"][1]["sha256"] = "0" * 64
    json.dump(m, open(mpath, "w"))
    assert _checks(verify(mpath)) == [("sha256", os.path.basename(m["shards"][1]["path"]))]


def test_decode_images_checks_pixel_arrays_as_arrays(tmp_path):
    """A conversion without selections stores the resized pixels under ``jpg`` as an array
    (``jpg``, ``jpg/dtype``, ``jpg/shape``): --decode-images checks it as one, not as a
    JPEG; an array whose bytes do not fill its shape is still caught."""
    from support import shardgen

    from transforms.tfrecord.example import parse_example

    shardgen.make_shards(str(tmp_path / "in"), 2, 3, size=(40, 30))
    out = str(tmp_path / "o" / "t-{}.record")
    p = cli(
        "convert",
        str(tmp_path / "in" / "train-{0000..0001}.tar"),
        "-o",
        out,
        "--no-progress",
        "--ops",
        '{conversions: [Decode(jpg), "Resize(jpg, (32, 32))"]}',
    )
    assert p.returncode == 0, p.stderr
    manifest = str(tmp_path / "o" / "t.manifest.json")
    manifest = (
        manifest if os.path.exists(manifest) else str(tmp_path / "o" / "t.record.manifest.json")
    )
    p = cli("verify", manifest, "--decode-images", "--json", "-")
    assert p.returncode == 0, p.stdout + p.stderr
    rep = json.loads(p.stdout)
    assert rep["images_decoded"] == 6 and rep["problems"] == []
    shard = json.load(open(manifest))["shards"][0]["path"]
    ex = parse_example(next(iter(read_records(shard))))
    assert ex["jpg"].shape == (32, 32, 3)

    # an array cut short: its bytes no longer fill the shape it states
    from transforms.tfrecord.example import record_to_example

    rec = {"__key__": "cut", "cls": b"1", "jpg": np.zeros((32, 32, 3), np.uint8)}
    payload = bytearray(record_to_example(rec).SerializeToString())
    ex_pb = __import__("transforms.tfrecord.example_wire_pb2", fromlist=["x"]).Example.FromString(
        bytes(payload)
    )
    ex_pb.features.feature["jpg"].bytes_list.value[0] = b"\0" * 100
    from pipelines.verify.examples import decode_image_features

    done, bad = decode_image_features(ex_pb.features.feature)
    assert done == 0 and bad == [
        "array feature 'jpg' (uint8, shape [32, 32, 3]) holds 100 bytes, its shape needs 3072"
    ]


def test_mixed_schema_fails_verify(demo_output, tmp_path):
    out = copy_dataset(demo_output[0], str(tmp_path / "copy"))
    mpath = os.path.join(out, os.path.basename(demo_output[1]))
    m = json.load(open(mpath))
    m["schema"]["cls"]["dtype"] = "mixed"
    json.dump(m, open(mpath, "w"))
    rep = verify(mpath)
    assert not rep.ok and [p.detail for p in rep.problems if p.check == "schema"] == [
        "feature 'cls' has mixed types across records (schema dtype 'mixed'): no parser reads them all"
    ]
